//! Q8_0 copies of the projection weights, and the product that decodes with them.
//!
//! Decoding reads every weight once per step for a handful of rows, so its speed is the speed of
//! streaming the weights: SmolLM2-135M is 540 MB in f32 and 152 MB here (blocks of 32 int8
//! values with one f32 scale, llama.cpp's Q8_0 with the scale widened). Activations are quantised
//! the same way per row, and each block's product is an AVX2 integer dot product, as in ggml.
//! Training never sees these copies: the trainer's forward and backward multiply by the f32
//! weights, and only the sampler's forward (no gradient) with few rows takes this path.
//!
//! Why not candle's `QMatMul`: it parallelises on candle's spinning barrier pool (see
//! [`super::cpu`]), which on 2 cores under load spent 43% of decoding in its spin-wait and ran
//! 2.6× slower than f32; and its Q8_0 kernel converts two f16 scales per block and dots one row
//! at a time. Here rayon splits the output columns, each weight block is loaded once for up to
//! four rows, and the scales are f32. Why not the GGUF's own Q4_1 blocks: Q8_0 works the same for
//! safetensors models of any dtype, and its error keeps the sampler's log-probabilities close to
//! the f32 model's (tests/cli/trainer.rs checks the tolerance).

use std::collections::HashMap;
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use rayon::prelude::*;

use crate::backend::Result;

/// Values per block (one scale each).
const BLOCK: usize = 32;

/// Row counts up to this take the quantised product; larger ones (prefill) are compute-bound,
/// where the f32 GEMM's register tiling wins.
pub const MAX_ROWS: usize = 64;

/// Which weights the sampler multiplies by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SampleWeights {
    /// The trainer's own f32 weights: sampler log-probabilities equal the trainer's exactly.
    #[default]
    F32,
    /// Q8_0 copies of the projection weights (including the LM head).
    Q8_0,
}

/// Rows of int8 blocks with one f32 scale per block.
#[derive(Debug, Clone)]
struct Blocks {
    /// `[rows, k]`.
    q: Vec<i8>,
    /// `[rows, k / 32]`.
    d: Vec<f32>,
}

impl Blocks {
    fn quantize(x: &[f32], rows: usize, k: usize) -> Self {
        let mut q = vec![0i8; rows * k];
        let mut d = vec![0f32; rows * k / BLOCK];
        let quantize_row = |(xr, (qr, dr)): (&[f32], (&mut [i8], &mut [f32]))| {
            for ((xb, qb), db) in xr.chunks_exact(BLOCK).zip(qr.chunks_exact_mut(BLOCK)).zip(dr.iter_mut()) {
                let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
                let scale = amax / 127.0;
                let inv = if scale == 0.0 { 0.0 } else { 1.0 / scale };
                for (qv, &xv) in qb.iter_mut().zip(xb) {
                    // Round to nearest (ties to even) by the 1.5·2²³ trick: `f32::round` is a
                    // libm call that was 7% of a decoding profile. |x·inv| <= 127 < 2²².
                    const MAGIC: f32 = 12_582_912.0;
                    *qv = ((xv * inv + MAGIC) - MAGIC) as i8;
                }
                *db = scale;
            }
        };
        let rows_iter = x.chunks_exact(k).zip(q.chunks_exact_mut(k).zip(d.chunks_exact_mut(k / BLOCK)));
        if rows * k >= 1 << 20 {
            // Whole weight matrices: quantised once per snapshot, worth both cores.
            rows_iter.par_bridge().for_each(quantize_row);
        } else {
            rows_iter.for_each(quantize_row);
        }
        Self { q, d }
    }
}

/// A weight `[n, k]` in Q8_0 for `x Wᵀ`.
#[derive(Debug, Clone)]
pub struct Q8Matrix {
    n: usize,
    k: usize,
    w: Blocks,
}

impl Q8Matrix {
    /// The Q8_0 copy of `w` `[n, k]`, or `None` where Q8_0 does not apply (`k` not a multiple
    /// of the 32-value block, or a dtype other than f32).
    ///
    /// # Errors
    /// Tensor failures.
    pub fn new(w: &Tensor) -> Result<Option<Self>> {
        let (n, k) = match w.dims() {
            &[n, k] => (n, k),
            _ => return Ok(None),
        };
        if w.dtype() != DType::F32 || !k.is_multiple_of(BLOCK) || k == 0 {
            return Ok(None);
        }
        let v = w.detach().flatten_all()?.to_vec1::<f32>()?;
        Ok(Some(Self { n, k, w: Blocks::quantize(&v, n, k) }))
    }

    /// `x Wᵀ` for `x` `[m, k]` f32 (activations quantised per row to Q8_0).
    ///
    /// # Errors
    /// A shape or dtype mismatch.
    pub fn matmul_t(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (m, k) = x.dims2()?;
        if k != self.k || x.dtype() != DType::F32 {
            candle_core::bail!("q8 matmul: input {:?} {:?} against weight [{}, {}]", x.dims(), x.dtype(), self.n, self.k);
        }
        let xv = x.flatten_all()?.to_vec1::<f32>()?;
        let xq = Blocks::quantize(&xv, m, k);
        let out = self.product(&xq, m);
        Tensor::from_vec(out, (m, self.n), &Device::Cpu)
    }

    /// `[m, n]` row-major. Work is split over columns: each task owns a column range and
    /// writes its `[cols, m]` slice of a column-major buffer, transposed at the end (m is small).
    fn product(&self, x: &Blocks, m: usize) -> Vec<f32> {
        if m == 0 {
            return Vec::new();
        }
        // Tasks of about 2^20 multiply-adds: a decoding step's small projections (576 × 576 for
        // one row is a few microseconds of work) run on the calling thread, since waking a second
        // thread costs more than it saves; the LM head and batched rows split across cores.
        let cols = ((1usize << 20) / (self.k * m).max(1)).max(16);
        let mut col_major = vec![0f32; self.n * m];
        let task = |(chunk, out): (usize, &mut [f32])| {
            let c0 = chunk * cols;
            for (j, col_out) in out.chunks_exact_mut(m).enumerate() {
                self.column(c0 + j, x, col_out);
            }
        };
        if self.n <= cols {
            col_major.chunks_mut(cols * m).enumerate().for_each(task);
        } else {
            col_major.par_chunks_mut(cols * m).enumerate().for_each(task);
        }
        if m == 1 {
            return col_major;
        }
        let mut out = vec![0f32; m * self.n];
        for (c, col) in col_major.chunks_exact(m).enumerate() {
            for (r, &v) in col.iter().enumerate() {
                out[r * self.n + c] = v;
            }
        }
        out
    }

    /// Column `c` against every row of `x`, four rows per pass over the column's blocks.
    fn column(&self, c: usize, x: &Blocks, out: &mut [f32]) {
        let kb = self.k / BLOCK;
        let wq = &self.w.q[c * self.k..(c + 1) * self.k];
        let wd = &self.w.d[c * kb..(c + 1) * kb];
        let mut r = 0;
        while r < out.len() {
            let rows = (out.len() - r).min(4);
            let xq = &x.q[r * self.k..(r + rows) * self.k];
            let xd = &x.d[r * kb..(r + rows) * kb];
            dot_rows(wq, wd, xq, xd, self.k, &mut out[r..r + rows]);
            r += rows;
        }
    }
}

/// `out[i] = Σ_blocks wd·xd_i · (wq · xq_i)` for the `out.len()` (≤ 4) rows of `xq`.
fn dot_rows(wq: &[i8], wd: &[f32], xq: &[i8], xd: &[f32], k: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: the CPU has AVX2 and FMA (checked at run time); slices are sized by the caller.
        unsafe { avx2::dot_rows(wq, wd, xq, xd, k, out) };
        return;
    }
    dot_rows_scalar(wq, wd, xq, xd, k, out);
}

/// The portable form of [`dot_rows`] (and the AVX2 kernel's reference in tests).
fn dot_rows_scalar(wq: &[i8], wd: &[f32], xq: &[i8], xd: &[f32], k: usize, out: &mut [f32]) {
    let kb = k / BLOCK;
    for (i, o) in out.iter_mut().enumerate() {
        let mut acc = 0f32;
        for b in 0..kb {
            let s: i32 = (0..BLOCK).map(|j| i32::from(wq[b * BLOCK + j]) * i32::from(xq[i * k + b * BLOCK + j])).sum();
            acc += wd[b] * xd[i * kb + b] * s as f32;
        }
        *o = acc;
    }
}

#[cfg(target_arch = "x86_64")]
fn avx2() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::BLOCK;

    /// ggml's int8 dot: `maddubs` needs one unsigned operand, so multiply |w| by x carrying w's
    /// sign, then widen pairs to i32 and convert; one FMA per block applies both scales.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_rows(wq: &[i8], wd: &[f32], xq: &[i8], xd: &[f32], k: usize, out: &mut [f32]) {
        let kb = k / BLOCK;
        let rows = out.len();
        debug_assert!(rows <= 4 && wq.len() >= k && xq.len() >= rows * k && xd.len() >= rows * kb);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); 4];
        for b in 0..kb {
            // SAFETY: b * BLOCK + 32 <= k <= wq.len(), and likewise for each row of xq.
            let w = unsafe { _mm256_loadu_si256(wq.as_ptr().add(b * BLOCK).cast()) };
            let aw = _mm256_sign_epi8(w, w);
            let dw = wd[b];
            for (r, a) in acc.iter_mut().enumerate().take(rows) {
                let x = unsafe { _mm256_loadu_si256(xq.as_ptr().add(r * k + b * BLOCK).cast()) };
                let sx = _mm256_sign_epi8(x, w);
                let p16 = _mm256_maddubs_epi16(aw, sx);
                let p32 = _mm256_madd_epi16(p16, ones);
                let d = _mm256_set1_ps(dw * xd[r * kb + b]);
                *a = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p32), *a);
            }
        }
        for (o, a) in out.iter_mut().zip(acc) {
            let hi = _mm256_extractf128_ps(a, 1);
            let s = _mm_add_ps(_mm256_castps256_ps128(a), hi);
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
            *o = _mm_cvtss_f32(s);
        }
    }
}

/// Q8_0 copies of weights that never change (a LoRA base), made once and shared by every
/// sampler snapshot.
#[derive(Default)]
pub struct Cache {
    by_name: HashMap<String, Option<Arc<Q8Matrix>>>,
}

impl Cache {
    /// The Q8_0 copy of the frozen weight `name`, quantising it on first use.
    ///
    /// # Errors
    /// Tensor failures.
    pub fn get(&mut self, name: &str, w: &Tensor) -> Result<Option<Arc<Q8Matrix>>> {
        if let Some(q) = self.by_name.get(name) {
            return Ok(q.clone());
        }
        let q = Q8Matrix::new(w)?.map(Arc::new);
        self.by_name.insert(name.to_string(), q.clone());
        Ok(q)
    }
}

/// A fresh Q8_0 copy of `w` (weights that change between snapshots).
///
/// # Errors
/// Tensor failures.
pub fn q8_0(w: &Tensor) -> Result<Option<Arc<Q8Matrix>>> {
    Ok(Q8Matrix::new(w)?.map(Arc::new))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The quantised product against f32 on random data: the error is bounded by the block
    /// quantisation (each operand within half a step of 1/127 of its block's largest value).
    #[test]
    fn close_to_the_f32_product_for_every_row_count() {
        let mut rng = crate::rng::SplitMix64::new(5);
        let (n, k) = (70, 96); // a partial last column chunk is not needed; odd n exercises the transpose
        let w: Vec<f32> = (0..n * k).map(|_| rng.normal() as f32).collect();
        let wt = Tensor::from_vec(w.clone(), (n, k), &Device::Cpu).unwrap();
        let q = Q8Matrix::new(&wt).unwrap().expect("k is a multiple of 32");
        for m in [1usize, 2, 3, 4, 5, 9] {
            let x: Vec<f32> = (0..m * k).map(|_| rng.normal() as f32).collect();
            let xt = Tensor::from_vec(x.clone(), (m, k), &Device::Cpu).unwrap();
            let got = q.matmul_t(&xt).unwrap().to_vec2::<f32>().unwrap();
            for r in 0..m {
                for c in 0..n {
                    let exact: f32 = (0..k).map(|i| x[r * k + i] * w[c * k + i]).sum();
                    // Rounding errs by up to half a step (max|block|/127) per operand: for
                    // unit-variance data about 0.08 standard deviations over k = 96 terms.
                    assert!((got[r][c] - exact).abs() < 0.5, "m={m} r={r} c={c}: {} vs {exact}", got[r][c]);
                }
            }
        }
    }

    /// The SIMD kernel computes the same integer sums as the portable loop.
    #[test]
    fn simd_kernel_matches_the_portable_loop() {
        let mut rng = crate::rng::SplitMix64::new(9);
        let k = 128;
        let w: Vec<f32> = (0..k).map(|_| rng.normal() as f32).collect();
        let x: Vec<f32> = (0..4 * k).map(|_| rng.normal() as f32 * 3.0).collect();
        let (wb, xb) = (Blocks::quantize(&w, 1, k), Blocks::quantize(&x, 4, k));
        for rows in 1..=4 {
            let (mut a, mut b) = (vec![0f32; rows], vec![0f32; rows]);
            dot_rows(&wb.q, &wb.d, &xb.q, &xb.d, k, &mut a);
            dot_rows_scalar(&wb.q, &wb.d, &xb.q, &xb.d, k, &mut b);
            for (p, q) in a.iter().zip(&b) {
                assert!((p - q).abs() <= 1e-4 * q.abs().max(1.0), "{rows} rows: {p} vs {q}");
            }
        }
    }

    #[test]
    fn declines_shapes_it_cannot_block() {
        let w = Tensor::zeros((4, 48), DType::F32, &Device::Cpu).unwrap();
        assert!(Q8Matrix::new(&w).unwrap().is_none());
        let w = Tensor::zeros((4, 64), DType::F64, &Device::Cpu).unwrap();
        assert!(Q8Matrix::new(&w).unwrap().is_none());
    }
}
