//! The f32 CPU kernels of the training pass: GEMM through strides, RMSNorm, rotary embeddings,
//! SwiGLU, causal attention and the log-probability of targets, each forward with its backward.
//!
//! Matrices are row-major slices; a "token-major" activation `[n, heads · hd]` holds every head of
//! a token in one row, so a head is a strided view (row stride `heads · hd`) that the GEMM reads
//! in place instead of a transposed copy. Row-wise kernels split rows across rayon's pool in
//! fixed chunks; reductions over rows (norm-weight and bias gradients) sum per-chunk partials in
//! chunk order, so results do not depend on scheduling (bit-exact resume relies on it).

use rayon::prelude::*;

/// Rows per rayon task for row-wise kernels: large enough to amortise a task (~1 µs), small
/// enough that 256-token micro-batches still split across cores.
const ROW_CHUNK: usize = 16;

/// Below this many multiply-adds a GEMM runs on the calling thread (waking the pool costs more).
const PAR_MACS: usize = 1 << 18;

/// A strided matrix operand: element `(i, j)` is `data[i · rs + j · cs]`.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

impl<'a> Mat<'a> {
    /// A row-major matrix with `cols` columns.
    pub(crate) fn rows(data: &'a [f32], cols: usize) -> Self {
        Self { data, rs: cols, cs: 1 }
    }

    /// The transpose of a row-major matrix with `cols` columns.
    pub(crate) fn t(data: &'a [f32], cols: usize) -> Self {
        Self { data, rs: 1, cs: cols }
    }

    fn check(&self, rows: usize, cols: usize, what: &str) {
        if rows > 0 && cols > 0 {
            let last = (rows - 1) * self.rs + (cols - 1) * self.cs;
            assert!(last < self.data.len(), "gemm: {what} of {rows}x{cols} overruns its buffer");
        }
    }
}

/// Where a product goes: an `m×n` block of `buf`, rows `ld` apart.
pub(crate) struct Out<'a> {
    pub(crate) buf: &'a mut [f32],
    pub(crate) ld: usize,
}

/// [`Out`] by pointer, for tasks that write disjoint strided blocks of one buffer.
struct RawOut {
    ptr: *mut f32,
    ld: usize,
}

/// How a product is combined and run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct How {
    /// Added to the destination (else written over it).
    pub(crate) accumulate: bool,
    /// The factor on `A·B`.
    pub(crate) scale: f32,
    /// On rayon's pool when the product is large.
    pub(crate) parallel: bool,
}

/// `dst = (accumulate ? dst : 0) + scale · A·B` for `A` `m×k`, `B` `k×n`, `dst` `m×n` row-major
/// with row stride `out.ld`. Runs on rayon's pool when `how.parallel` and the product is large.
// The shape stays three plain numbers beside the operands, as BLAS writes them: folded into a
// struct it made each call harder to check against the formula in its comment.
pub(crate) fn gemm(m: usize, n: usize, k: usize, out: Out<'_>, a: Mat, b: Mat, how: How) {
    let Out { buf: dst, ld: ldd } = out;
    if m > 0 && n > 0 {
        assert!((m - 1) * ldd + n <= dst.len() && ldd >= n, "gemm: destination of {m}x{n} overruns its buffer");
    }
    // SAFETY: checked just above; `dst` is borrowed mutably, so nothing else aliases it.
    unsafe { gemm_raw(m, n, k, RawOut { ptr: dst.as_mut_ptr(), ld: ldd }, a, b, how) }
}

/// [`gemm`] into a destination given by pointer, for tasks that write disjoint strided blocks of
/// one buffer (attention heads) where overlapping `&mut` slices would alias.
///
/// # Safety
/// `dst` must be valid for writes at `i · ldd + j` for every `i < m`, `j < n`, and no other thread
/// may access those elements during the call.
unsafe fn gemm_raw(m: usize, n: usize, k: usize, out: RawOut, a: Mat, b: Mat, how: How) {
    let RawOut { ptr: dst, ld: ldd } = out;
    let How { accumulate, scale, parallel } = how;
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for r in 0..m {
                for c in 0..n {
                    // SAFETY: in the block the caller vouches for.
                    unsafe { *dst.add(r * ldd + c) = 0.0 };
                }
            }
        }
        return;
    }
    a.check(m, k, "lhs");
    b.check(k, n, "rhs");
    let par = if parallel && m * n * k >= PAR_MACS && rayon::current_num_threads() > 1 {
        gemm::Parallelism::Rayon(rayon::current_num_threads())
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: `a` and `b` were bounds-checked above, `dst` by the caller; the operands are
    // shared borrows and cannot be the destination.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            ldd as isize,
            accumulate,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            1.0,
            scale,
            false,
            false,
            false,
            par,
        );
    }
}

/// `e^x` without a libm call (shared with the sampler's kernels, whose crate holds its test).
pub(crate) use rlx_kernels::rows::exp;

/// Sums the partials `f(rows, part)` adds into `part` (width `width`) over fixed chunks of the
/// `n` rows, in chunk order.
fn chunked_sum(n: usize, width: usize, f: impl Fn(std::ops::Range<usize>, &mut [f32]) + Sync) -> Vec<f32> {
    let chunks: Vec<Vec<f32>> = (0..n.div_ceil(ROW_CHUNK * 4))
        .into_par_iter()
        .map(|c| {
            let mut part = vec![0f32; width];
            f(c * ROW_CHUNK * 4..((c + 1) * ROW_CHUNK * 4).min(n), &mut part);
            part
        })
        .collect();
    let mut out = vec![0f32; width];
    for p in chunks {
        for (o, x) in out.iter_mut().zip(p) {
            *o += x;
        }
    }
    out
}

/// RMSNorm over rows of width `d`: `y = x · rstd · w`, `rstd = 1/√(mean(x²) + eps)`. Returns
/// `(y, rstd)`.
pub(crate) fn rms_norm(x: &[f32], w: &[f32], eps: f32) -> (Vec<f32>, Vec<f32>) {
    let d = w.len();
    let n = x.len() / d;
    let mut y = vec![0f32; x.len()];
    let mut rstd = vec![0f32; n];
    y.par_chunks_mut(d * ROW_CHUNK).zip(rstd.par_chunks_mut(ROW_CHUNK)).zip(x.par_chunks(d * ROW_CHUNK)).for_each(|((y, r), x)| {
        for ((y, r), x) in y.chunks_exact_mut(d).zip(r.iter_mut()).zip(x.chunks_exact(d)) {
            let ms = x.iter().map(|v| v * v).sum::<f32>() / d as f32;
            *r = 1.0 / (ms + eps).sqrt();
            for ((y, x), w) in y.iter_mut().zip(x).zip(w) {
                *y = x * *r * w;
            }
        }
    });
    (y, rstd)
}

/// The RMSNorm backward: adds `dL/dx` to `dx` and returns `dL/dw` when `want_dw`.
///
/// With `x̂ = x · rstd` and `g = dy · w`: `dx = rstd · (g − x̂ · mean(g · x̂))`, `dw = Σ dy · x̂`.
pub(crate) fn rms_norm_backward(dy: &[f32], x: &[f32], rstd: &[f32], w: &[f32], dx: &mut [f32], want_dw: bool) -> Option<Vec<f32>> {
    let d = w.len();
    dx.par_chunks_mut(d * ROW_CHUNK).zip(dy.par_chunks(d * ROW_CHUNK)).zip(x.par_chunks(d * ROW_CHUNK)).zip(rstd.par_chunks(ROW_CHUNK)).for_each(
        |(((dx, dy), x), r)| {
            for (((dx, dy), x), &r) in dx.chunks_exact_mut(d).zip(dy.chunks_exact(d)).zip(x.chunks_exact(d)).zip(r) {
                let dot: f32 = dy.iter().zip(w).zip(x).map(|((g, w), x)| g * w * x * r).sum::<f32>() / d as f32;
                for (((dx, g), w), x) in dx.iter_mut().zip(dy).zip(w).zip(x) {
                    *dx += r * (g * w - x * r * dot);
                }
            }
        },
    );
    want_dw.then(|| {
        chunked_sum(rstd.len(), d, |rows, part| {
            for i in rows {
                let r = rstd[i];
                for ((p, g), x) in part.iter_mut().zip(&dy[i * d..(i + 1) * d]).zip(&x[i * d..(i + 1) * d]) {
                    *p += g * x * r;
                }
            }
        })
    })
}

/// Column sums of a row-major `[n, width]` matrix (bias gradients).
pub(crate) fn column_sums(x: &[f32], width: usize) -> Vec<f32> {
    chunked_sum(x.len() / width, width, |rows, part| {
        for i in rows {
            for (p, v) in part.iter_mut().zip(&x[i * width..(i + 1) * width]) {
                *p += v;
            }
        }
    })
}

/// Rotates every head of token-major `x` `[b·t, heads·hd]` in place ("rotate half" layout), token
/// `i` of each sequence at position `positions[i]`, or `i` mod `t` without them; `inverse` applies
/// the transpose (the backward).
pub(crate) fn rope(x: &mut [f32], t: usize, heads: usize, hd: usize, table: (&[f32], &[f32]), positions: Option<&[u32]>, inverse: bool) {
    let (cos, sin) = table;
    let half = hd / 2;
    let width = heads * hd;
    let sign = if inverse { -1.0 } else { 1.0 };
    x.par_chunks_mut(width * ROW_CHUNK).enumerate().for_each(|(c, rows)| {
        for (r, row) in rows.chunks_exact_mut(width).enumerate() {
            let i = c * ROW_CHUNK + r;
            let pos = positions.map_or(i % t, |p| p[i] as usize);
            let (cs, sn) = (&cos[pos * half..(pos + 1) * half], &sin[pos * half..(pos + 1) * half]);
            for head in row.chunks_exact_mut(hd) {
                let (x1, x2) = head.split_at_mut(half);
                for i in 0..half {
                    let (a, b, c, s) = (x1[i], x2[i], cs[i], sign * sn[i]);
                    x1[i] = a * c - b * s;
                    x2[i] = b * c + a * s;
                }
            }
        }
    });
}

fn silu(g: f32) -> (f32, f32) {
    let s = 1.0 / (1.0 + exp(-g));
    (g * s, s)
}

/// `silu(g) · u`, element-wise.
pub(crate) fn swiglu(g: &[f32], u: &[f32]) -> Vec<f32> {
    let mut out = vec![0f32; g.len()];
    out.par_chunks_mut(4096).zip(g.par_chunks(4096)).zip(u.par_chunks(4096)).for_each(|((o, g), u)| {
        for ((o, &g), &u) in o.iter_mut().zip(g).zip(u) {
            *o = silu(g).0 * u;
        }
    });
    out
}

/// The SwiGLU backward: overwrites `g` with `dL/dg` and `u` with `dL/du` given `da`.
pub(crate) fn swiglu_backward(da: &[f32], g: &mut [f32], u: &mut [f32]) {
    g.par_chunks_mut(4096).zip(u.par_chunks_mut(4096)).zip(da.par_chunks(4096)).for_each(|((g, u), da)| {
        for ((g, u), &da) in g.iter_mut().zip(u.iter_mut()).zip(da) {
            let (a, s) = silu(*g);
            let dg = da * *u * s * (1.0 + *g * (1.0 - s));
            *u = da * a;
            *g = dg;
        }
    });
}

/// Shapes of one causal self-attention: `b` sequences of `t` tokens, `heads` query heads
/// sharing `kv_heads` key/value heads, `hd` wide.
#[derive(Clone, Copy)]
pub(crate) struct AttnShape {
    pub b: usize,
    pub t: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub hd: usize,
}

/// A pointer that rayon tasks write through at disjoint offsets.
#[derive(Clone, Copy)]
struct Shared(*mut f32);
// SAFETY: every use below writes a region no other task touches (its own sequence and heads).
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    /// The element at `offset`, which must lie inside the buffer.
    ///
    /// # Safety
    /// `offset` must be within the allocation the pointer came from.
    unsafe fn at(self, offset: usize) -> *mut f32 {
        unsafe { self.0.add(offset) }
    }
}

/// Whether a `rows × cols` block with row stride `ld` starting at `offset` fits in `len`.
fn fits(offset: usize, rows: usize, cols: usize, ld: usize, len: usize) -> bool {
    rows == 0 || cols == 0 || offset + (rows - 1) * ld + cols <= len
}

/// Whether query `i` of a row sees key `j <= i`: always in a plain row; in a packed row (segment
/// ids `seg`, 0 for the shared prefix) when `j` is in the prefix or in `i`'s own segment.
#[inline]
fn sees(seg: &[u32], i: usize, j: usize) -> bool {
    seg[j] == 0 || seg[j] == seg[i]
}

/// Causal softmax of the scores of head rows `s` `[t, t]` in place; returns each row's
/// log-sum-exp. Entries above the diagonal become 0, and with `seg` (a packed row) the entries
/// [`sees`] rules out too.
fn causal_softmax(s: &mut [f32], t: usize, lse: &mut [f32], seg: Option<&[u32]>) {
    if let Some(seg) = seg {
        for (i, row) in s.chunks_exact_mut(t).enumerate() {
            let max = (0..=i).filter(|&j| sees(seg, i, j)).map(|j| row[j]).fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0f32;
            for (j, v) in row[..=i].iter_mut().enumerate() {
                *v = if sees(seg, i, j) { exp(*v - max) } else { 0.0 };
                sum += *v;
            }
            let inv = 1.0 / sum;
            for v in &mut row[..=i] {
                *v *= inv;
            }
            row[i + 1..].fill(0.0);
            lse[i] = max + sum.ln();
        }
        return;
    }
    for (i, row) in s.chunks_exact_mut(t).enumerate() {
        let max = row[..=i].iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f32;
        for v in &mut row[..=i] {
            *v = exp(*v - max);
            sum += *v;
        }
        let inv = 1.0 / sum;
        for v in &mut row[..=i] {
            *v *= inv;
        }
        row[i + 1..].fill(0.0);
        lse[i] = max + sum.ln();
    }
}

/// Causal grouped-query attention over token-major `q` `[b·t, heads·hd]`, `k`, `v`
/// `[b·t, kv_heads·hd]`: returns the output `[b·t, heads·hd]` and the log-sum-exp of every
/// score row `[b, heads, t]` (all the backward needs to rebuild the probabilities). With `seg`
/// `[b·t]`, rows are packed (see [`sees`]).
pub(crate) fn attention(q: &[f32], k: &[f32], v: &[f32], s: AttnShape, seg: Option<&[u32]>) -> (Vec<f32>, Vec<f32>) {
    let AttnShape { b, t, heads, kv_heads, hd } = s;
    let (qw, kw) = (heads * hd, kv_heads * hd);
    let rep = heads / kv_heads;
    let scale = 1.0 / (hd as f32).sqrt();
    let mut out = vec![0f32; b * t * qw];
    let olen = out.len();
    let po = Shared(out.as_mut_ptr());
    // Each task returns its rows' log-sum-exps; `out` it writes in place (its own head columns).
    let lse: Vec<Vec<f32>> = (0..b * heads)
        .into_par_iter()
        .map_init(
            || vec![0f32; t * t],
            |p, task| {
                let (bi, h) = (task / heads, task % heads);
                let g = h / rep;
                let qh = Mat { data: &q[bi * t * qw + h * hd..], rs: qw, cs: 1 };
                let kt = Mat { data: &k[bi * t * kw + g * hd..], rs: 1, cs: kw };
                gemm(t, t, hd, Out { buf: p, ld: t }, qh, kt, How { accumulate: false, scale, parallel: false });
                let mut l = vec![0f32; t];
                causal_softmax(p, t, &mut l, seg.map(|sg| &sg[bi * t..(bi + 1) * t]));
                let off = bi * t * qw + h * hd;
                assert!(fits(off, t, hd, qw, olen));
                let vh = Mat { data: &v[bi * t * kw + g * hd..], rs: kw, cs: 1 };
                // SAFETY: the block fits (asserted); task (bi, h) alone writes the head-h columns
                // of sequence bi's rows.
                unsafe { gemm_raw(t, hd, t, RawOut { ptr: po.at(off), ld: qw }, Mat::rows(p, t), vh, How { accumulate: false, scale: 1.0, parallel: false }) };
                l
            },
        )
        .collect();
    (out, lse.concat())
}

/// The attention backward: given `dout` `[b·t, heads·hd]`, the forward's inputs, output and
/// log-sum-exps (`[q, k, v, out, lse]`) and its segments, returns `(dq, dk, dv)` in the layouts of `q`, `k`, `v`.
///
/// Per head, with `P` rebuilt from the scores and `lse`: `dV += Pᵀ dO`, `dP = dO Vᵀ`,
/// `dS = P ⊙ (dP − rowsum(dO ⊙ O))`, `dQ = scale · dS K`, `dK += scale · dSᵀ Q`. The query heads
/// sharing a key/value head run in one task, so `dK`, `dV` sum in a fixed order.
pub(crate) fn attention_backward(dout: &[f32], fwd: [&[f32]; 5], s: AttnShape, seg: Option<&[u32]>) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let [q, k, v, out, lse] = fwd;
    let AttnShape { b, t, heads, kv_heads, hd } = s;
    let (qw, kw) = (heads * hd, kv_heads * hd);
    let rep = heads / kv_heads;
    let scale = 1.0 / (hd as f32).sqrt();
    let mut dq = vec![0f32; q.len()];
    let mut dk = vec![0f32; k.len()];
    let mut dv = vec![0f32; v.len()];
    let (pq, pk, pv) = (Shared(dq.as_mut_ptr()), Shared(dk.as_mut_ptr()), Shared(dv.as_mut_ptr()));
    let (lq, lk) = (dq.len(), dk.len());
    (0..b * kv_heads).into_par_iter().for_each_init(
        || (vec![0f32; t * t], vec![0f32; t * t], vec![0f32; t]),
        |(p, dp, dsum), task| {
            let (bi, g) = (task / kv_heads, task % kv_heads);
            let kg = bi * t * kw + g * hd;
            assert!(fits(kg, t, hd, kw, lk));
            // Task (bi, g) alone writes the head-g columns of sequence bi's rows of dk and dv,
            // and the columns of its `rep` query heads in dq (the SAFETY of every write below).
            let (dkg, dvg) = unsafe { (pk.at(kg), pv.at(kg)) };
            for h in g * rep..(g + 1) * rep {
                let qo = bi * t * qw + h * hd;
                let qh = Mat { data: &q[qo..], rs: qw, cs: 1 };
                let doh = Mat { data: &dout[qo..], rs: qw, cs: 1 };
                gemm(t, t, hd, Out { buf: p, ld: t }, qh, Mat { data: &k[kg..], rs: 1, cs: kw }, How { accumulate: false, scale, parallel: false });
                let l = &lse[(bi * heads + h) * t..(bi * heads + h + 1) * t];
                let sg = seg.map(|sg| &sg[bi * t..(bi + 1) * t]);
                for (i, row) in p.chunks_exact_mut(t).enumerate() {
                    match sg {
                        None => row[..=i].iter_mut().for_each(|v| *v = exp(*v - l[i])),
                        Some(sg) => row[..=i].iter_mut().enumerate().for_each(|(j, v)| *v = if sees(sg, i, j) { exp(*v - l[i]) } else { 0.0 }),
                    }
                    row[i + 1..].fill(0.0);
                }
                let acc = h > g * rep;
                unsafe { gemm_raw(t, hd, t, RawOut { ptr: dvg, ld: kw }, Mat::t(p, t), doh, How { accumulate: acc, scale: 1.0, parallel: false }) };
                gemm(t, t, hd, Out { buf: dp, ld: t }, doh, Mat { data: &v[kg..], rs: 1, cs: kw }, How { accumulate: false, scale: 1.0, parallel: false });
                for (i, d) in dsum.iter_mut().enumerate() {
                    *d = (0..hd).map(|c| dout[qo + i * qw + c] * out[qo + i * qw + c]).sum();
                }
                for ((prow, dprow), d) in p.chunks_exact(t).zip(dp.chunks_exact_mut(t)).zip(dsum.iter()) {
                    for (x, &pv) in dprow.iter_mut().zip(prow) {
                        *x = pv * (*x - d);
                    }
                }
                assert!(fits(qo, t, hd, qw, lq));
                unsafe {
                    gemm_raw(t, hd, t, RawOut { ptr: pq.at(qo), ld: qw }, Mat::rows(dp, t), Mat { data: &k[kg..], rs: kw, cs: 1 }, How { accumulate: false, scale, parallel: false });
                    gemm_raw(t, hd, t, RawOut { ptr: dkg, ld: kw }, Mat::t(dp, t), qh, How { accumulate: acc, scale, parallel: false });
                }
            }
        },
    );
    (dq, dk, dv)
}

/// Per row of `logits` `[n, vocab]`: the log-sum-exp, and the log-probability of `targets[row]`.
pub(crate) fn target_logprobs(logits: &[f32], vocab: usize, targets: &[u32]) -> (Vec<f32>, Vec<f32>) {
    let rows: Vec<(f32, f32)> = logits
        .par_chunks(vocab)
        .zip(targets.par_iter())
        .map(|(row, &t)| {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            // Sum in f64: 50k terms lose digits in f32.
            let z: f64 = row.iter().map(|&a| f64::from(exp(a - max))).sum();
            let lse = max + z.ln() as f32;
            (lse, row[t as usize] - lse)
        })
        .collect();
    rows.into_iter().unzip()
}

/// Overwrites `logits` with `dL/dlogits = dlogp · (onehot(target) − softmax)`.
pub(crate) fn target_logprobs_backward(logits: &mut [f32], vocab: usize, targets: &[u32], lse: &[f32], dlogp: &[f32]) {
    logits.par_chunks_mut(vocab).zip(targets.par_iter()).zip(lse.par_iter()).zip(dlogp.par_iter()).for_each(|(((row, &t), &l), &g)| {
        if g == 0.0 {
            row.fill(0.0);
            return;
        }
        for x in row.iter_mut() {
            *x = -g * exp(*x - l);
        }
        row[t as usize] += g;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(m: usize, n: usize, k: usize, a: impl Fn(usize, usize) -> f32, b: impl Fn(usize, usize) -> f32) -> Vec<f32> {
        let mut out = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k).map(|p| a(i, p) * b(p, j)).sum();
            }
        }
        out
    }

    #[test]
    fn gemm_reads_transposed_and_strided_operands_and_accumulates() {
        let (m, n, k) = (5, 7, 3);
        let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let bt: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.11).cos()).collect(); // [n, k]
        let want = naive(m, n, k, |i, p| a[i * k + p], |p, j| bt[j * k + p]);
        let mut dst = vec![1f32; m * n];
        gemm(m, n, k, Out { buf: &mut dst, ld: n }, Mat::rows(&a, k), Mat::t(&bt, k), How { accumulate: false, scale: 1.0, parallel: true });
        for (x, y) in dst.iter().zip(&want) {
            assert!((x - y).abs() < 1e-5);
        }
        gemm(m, n, k, Out { buf: &mut dst, ld: n }, Mat::rows(&a, k), Mat::t(&bt, k), How { accumulate: true, scale: 0.5, parallel: true });
        for (x, y) in dst.iter().zip(&want) {
            assert!((x - 1.5 * y).abs() < 1e-5);
        }
    }

    #[test]
    fn rope_inverse_undoes_rope() {
        let (t, heads, hd) = (3, 2, 4);
        let cos: Vec<f32> = (0..t * hd / 2).map(|i| (i as f32 * 0.3).cos()).collect();
        let sin: Vec<f32> = (0..t * hd / 2).map(|i| (i as f32 * 0.3).sin()).collect();
        let x: Vec<f32> = (0..2 * t * heads * hd).map(|i| (i as f32).sin()).collect();
        let mut y = x.clone();
        rope(&mut y, t, heads, hd, (&cos, &sin), None, false);
        assert!(y.iter().zip(&x).any(|(a, b)| (a - b).abs() > 1e-3));
        rope(&mut y, t, heads, hd, (&cos, &sin), None, true);
        for (a, b) in y.iter().zip(&x) {
            assert!((a - b).abs() < 1e-5);
        }
    }
}
