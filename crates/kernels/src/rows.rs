//! Fused per-row kernels of a decoding step, f32 throughout. Each is a plain loop over
//! contiguous slices that the compiler vectorises (attention also has an AVX2 version); none
//! allocates.

use crate::isa::Isa;

/// `out = x / √(mean(x²) + eps) · w` for one row (the sum of squares in f32, as candle's kernel
/// the trainer's sampler path used).
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let ss: f32 = dot(x, x);
    let inv = 1.0 / (ss / x.len() as f32 + eps).sqrt();
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
        *o = v * inv * g;
    }
}

/// Rotary embedding of one head in place, "rotate half" (GPT-NeoX) layout: element `i` pairs
/// with `i + hd/2`; `cos`, `sin` are the position's `hd/2` angles.
pub fn rope(x: &mut [f32], cos: &[f32], sin: &[f32]) {
    let half = x.len() / 2;
    let (a, b) = x.split_at_mut(half);
    for (((a, b), &c), &s) in a.iter_mut().zip(b.iter_mut()).zip(cos).zip(sin) {
        let (x0, x1) = (*a, *b);
        *a = x0 * c - x1 * s;
        *b = x1 * c + x0 * s;
    }
}

/// SwiGLU's gate in place: `g = silu(g) · u`.
pub fn silu_mul(g: &mut [f32], u: &[f32]) {
    for (g, &u) in g.iter_mut().zip(u) {
        *g = *g / (1.0 + exp(-*g)) * u;
    }
}

/// `x += y`, element by element (residual connections).
pub fn add(x: &mut [f32], y: &[f32]) {
    for (x, &y) in x.iter_mut().zip(y) {
        *x += y;
    }
}

/// `y += alpha · x`.
pub fn axpy(y: &mut [f32], x: &[f32], alpha: f32) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y += alpha * x;
    }
}

/// `x[r] += b` for each row `r` of `x` (biases).
pub fn add_rows(x: &mut [f32], b: &[f32]) {
    for row in x.chunks_exact_mut(b.len()) {
        add(row, b);
    }
}

/// One query head attending over `len` cached positions: `keys` and `values` are `[len, hd]`
/// (row `j` = position `j`), `scores` is scratch of at least `len`; writes `softmax(q·kᵀ·scale)·V`
/// into `out` `[hd]`.
///
/// # Panics
/// If the slices' lengths disagree.
pub fn attend(q: &[f32], keys: &[f32], values: &[f32], scale: f32, scores: &mut [f32], out: &mut [f32]) {
    attend_isa(crate::isa::current(), q, keys, values, scale, scores, out);
}

/// [`attend`] at a given instruction-set level (tests).
pub fn attend_isa(isa: Isa, q: &[f32], keys: &[f32], values: &[f32], scale: f32, scores: &mut [f32], out: &mut [f32]) {
    let hd = q.len();
    assert!(hd > 0 && keys.len() == values.len() && keys.len().is_multiple_of(hd) && scores.len() >= keys.len() / hd && out.len() == hd);
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 && hd.is_multiple_of(8) {
        // SAFETY: the level is at most the detected one (crate::isa); lengths checked above.
        return unsafe { x86::attend_avx2(q, keys, values, scale, scores, out) };
    }
    let _ = isa;
    let len = keys.len() / hd;
    let scores = &mut scores[..len];
    let mut max = f32::NEG_INFINITY;
    for (s, k) in scores.iter_mut().zip(keys.chunks_exact(hd)) {
        *s = dot(q, k) * scale;
        max = max.max(*s);
    }
    let inv = 1.0 / softmax_numerators(scores, max);
    out.fill(0.0);
    for (&p, v) in scores.iter().zip(values.chunks_exact(hd)) {
        let p = p * inv;
        for (o, &x) in out.iter_mut().zip(v) {
            *o += p * x;
        }
    }
}

/// `s = exp(s − max)` in place; returns their sum.
fn softmax_numerators(scores: &mut [f32], max: f32) -> f32 {
    let mut sum = 0f32;
    for s in scores.iter_mut() {
        *s = exp(*s - max);
        sum += *s;
    }
    sum
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// [`super::attend`] with 256-bit FMAs: the crate is compiled for baseline x86-64, where
    /// the portable loops run four lanes wide without FMA (attention was 8% of a one-sequence
    /// decoding profile). Values accumulate 64 outputs at a time in eight registers, over
    /// every position, and are scaled once at the end.
    ///
    /// # Safety
    /// AVX2 and FMA; `hd` a multiple of 8, lengths as [`super::attend_isa`] checks.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn attend_avx2(q: &[f32], keys: &[f32], values: &[f32], scale: f32, scores: &mut [f32], out: &mut [f32]) {
        let hd = q.len();
        let len = keys.len() / hd;
        let scores = &mut scores[..len];
        let mut max = f32::NEG_INFINITY;
        for (j, s) in scores.iter_mut().enumerate() {
            let (qp, kp) = (q.as_ptr(), keys.as_ptr().wrapping_add(j * hd));
            let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            let mut i = 0;
            while i + 16 <= hd {
                // SAFETY: i + 16 ≤ hd, within q and within key row j.
                unsafe {
                    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(i)), _mm256_loadu_ps(kp.add(i)), a0);
                    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(i + 8)), _mm256_loadu_ps(kp.add(i + 8)), a1);
                }
                i += 16;
            }
            if i < hd {
                // SAFETY: hd is a multiple of 8, so i + 8 ≤ hd.
                a0 = unsafe { _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(i)), _mm256_loadu_ps(kp.add(i)), a0) };
            }
            *s = hsum(_mm256_add_ps(a0, a1)) * scale;
            max = max.max(*s);
        }
        let inv = _mm256_set1_ps(1.0 / super::softmax_numerators(scores, max));
        let mut c = 0;
        while c + 64 <= hd {
            let mut acc = [_mm256_setzero_ps(); 8];
            for (j, &p) in scores.iter().enumerate() {
                let p = _mm256_set1_ps(p);
                for (r, a) in acc.iter_mut().enumerate() {
                    // SAFETY: c + 8r + 8 ≤ hd, within value row j.
                    *a = _mm256_fmadd_ps(p, unsafe { _mm256_loadu_ps(values.as_ptr().add(j * hd + c + 8 * r)) }, *a);
                }
            }
            for (r, a) in acc.iter().enumerate() {
                // SAFETY: c + 8r + 8 ≤ hd = out.len().
                unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(c + 8 * r), _mm256_mul_ps(*a, inv)) };
            }
            c += 64;
        }
        while c < hd {
            let mut a = _mm256_setzero_ps();
            for (j, &p) in scores.iter().enumerate() {
                // SAFETY: c + 8 ≤ hd, within value row j.
                a = _mm256_fmadd_ps(_mm256_set1_ps(p), unsafe { _mm256_loadu_ps(values.as_ptr().add(j * hd + c)) }, a);
            }
            // SAFETY: c + 8 ≤ hd = out.len().
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(c), _mm256_mul_ps(a, inv)) };
            c += 8;
        }
    }

    #[target_feature(enable = "avx2")]
    fn hsum(a: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
    }
}

/// `Σ a·b` with eight partial sums (so the loop vectorises without reassociation flags).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    (acc[0] + acc[4]) + (acc[1] + acc[5]) + (acc[2] + acc[6]) + (acc[3] + acc[7]) + tail
}

/// `out[r, c] += alpha · Σ_i x[r, i] · w[c, i]` for `x` `[m, k]`, `w` `[n, k]` row-major (LoRA
/// adapters: `k` or `n` is the rank, a few dozen at most).
pub fn matmul_t_acc(x: &[f32], w: &[f32], k: usize, alpha: f32, out: &mut [f32]) {
    let n = w.len() / k;
    for (xr, or) in x.chunks_exact(k).zip(out.chunks_exact_mut(n)) {
        for (o, wr) in or.iter_mut().zip(w.chunks_exact(k)) {
            *o += alpha * dot(xr, wr);
        }
    }
}

/// `e^x` in f32 without a libm call, so loops over slices vectorise: Cody-Waite reduction
/// `x = k·ln 2 + r` (`k` rounded with the 1.5·2²³ trick, SSE2 has no vector floor) and Cephes'
/// degree-6 polynomial for `e^r`; within 2 ulp of the true value (tested) over the whole range,
/// `0` below −87.3 and the largest finite power near 88.7. `libm`'s scalar `expf` was 5% of a
/// LoRA step (log-softmax over the vocabulary, SiLU, attention probabilities).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2^23
    // Not `clamp`: `max` maps a NaN to the floor (and so to 0) as before, without a branch.
    #[allow(clippy::manual_clamp)]
    let x = x.max(-87.3).min(88.7);
    let k = (x * LOG2E + ROUND) - ROUND;
    let r = x - k * 0.693_359_4 - k * -2.121_944_4e-4;
    let mut p = 1.987_569_1e-4;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5; // Cephes' 5.0000001e-1, which is 0.5 in f32
    let y = p * r * r + r + 1.0;
    // 2^k by building the exponent bits (k ∈ [-126, 128] after the clamp; 2^128 is folded in two).
    let ki = k as i32;
    let half = ki >> 1;
    let a = f32::from_bits(((half + 127) as u32) << 23);
    let b = f32::from_bits(((ki - half + 127) as u32) << 23);
    let out = y * a * b;
    if x <= -87.3 { 0.0 } else { out }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(seed: u64, n: usize) -> Vec<f32> {
        crate::quant::tests_support::normals(seed, n)
    }

    fn close(a: f32, b: f64, tol: f64, what: &str) {
        assert!((f64::from(a) - b).abs() <= tol * b.abs().max(1.0), "{what}: {a} vs {b}");
    }

    #[test]
    fn rms_norm_matches_the_definition() {
        let (x, w) = (data(1, 576), data(2, 576));
        let mut out = vec![0f32; 576];
        rms_norm(&x, &w, 1e-5, &mut out);
        let ms: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / 576.0;
        for i in 0..576 {
            close(out[i], f64::from(x[i]) / (ms + 1e-5).sqrt() * f64::from(w[i]), 1e-5, "rms_norm");
        }
    }

    /// Rotate-half against the complex-number form: pair (x_i, x_{i+h}) as x_i + i·x_{i+h},
    /// multiplied by e^{iθ}.
    #[test]
    fn rope_rotates_each_pair_by_its_angle() {
        let hd = 64;
        let x = data(3, hd);
        let theta: Vec<f64> = (0..hd / 2).map(|i| 17.0 / 10_000f64.powf(2.0 * i as f64 / hd as f64)).collect();
        let (cos, sin): (Vec<f32>, Vec<f32>) = theta.iter().map(|t| (t.cos() as f32, t.sin() as f32)).unzip();
        let mut y = x.clone();
        rope(&mut y, &cos, &sin);
        for i in 0..hd / 2 {
            let (re, im) = (f64::from(x[i]), f64::from(x[i + hd / 2]));
            close(y[i], re * theta[i].cos() - im * theta[i].sin(), 1e-6, "real part");
            close(y[i + hd / 2], im * theta[i].cos() + re * theta[i].sin(), 1e-6, "imaginary part");
        }
    }

    #[test]
    fn silu_mul_matches_the_definition() {
        let (g, u) = (data(4, 100), data(5, 100));
        let mut out = g.clone();
        silu_mul(&mut out, &u);
        for i in 0..100 {
            let gi = f64::from(g[i]);
            close(out[i], gi / (1.0 + (-gi).exp()) * f64::from(u[i]), 1e-6, "silu_mul");
        }
    }

    #[test]
    fn add_rows_adds_the_bias_to_every_row() {
        let mut x = vec![1f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        add_rows(&mut x, &[10.0, 20.0, 30.0]);
        assert_eq!(x, [11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
        axpy(&mut x, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 0.5);
        assert_eq!(x, [11.5, 23.0, 34.5, 16.0, 27.5, 39.0]);
    }

    #[test]
    fn attend_is_softmax_weighted_values() {
        let (hd, len) = (64, 37);
        let (q, k, v) = (data(6, hd), data(7, len * hd), data(8, len * hd));
        let mut scores = vec![0f32; 64];
        let mut out = vec![0f32; hd];
        for isa in Isa::available() {
            attend_isa(isa, &q, &k, &v, 0.125, &mut scores, &mut out);
            check_attend(&q, &k, &v, &out, hd, len);
        }
        // A head size that is not a multiple of 64 (the AVX2 tail of eight at a time).
        let (q, k, v) = (data(9, 24), data(10, len * 24), data(11, len * 24));
        for isa in Isa::available() {
            attend_isa(isa, &q, &k, &v, 0.125, &mut scores, &mut out[..24]);
            check_attend(&q, &k, &v, &out[..24], 24, len);
        }
    }

    fn check_attend(q: &[f32], k: &[f32], v: &[f32], out: &[f32], hd: usize, len: usize) {
        let s: Vec<f64> = (0..len).map(|j| (0..hd).map(|i| f64::from(q[i]) * f64::from(k[j * hd + i])).sum::<f64>() * 0.125).collect();
        let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = s.iter().map(|x| (x - max).exp()).sum();
        for i in 0..hd {
            let want: f64 = (0..len).map(|j| (s[j] - max).exp() / z * f64::from(v[j * hd + i])).sum();
            close(out[i], want, 1e-5, "attend");
        }
    }

    #[test]
    fn matmul_t_acc_adds_the_scaled_product() {
        let (m, k, n) = (3, 16, 10);
        let (x, w) = (data(9, m * k), data(10, n * k));
        let mut out = vec![1f32; m * n];
        matmul_t_acc(&x, &w, k, 0.5, &mut out);
        for r in 0..m {
            for c in 0..n {
                let p: f64 = (0..k).map(|i| f64::from(x[r * k + i]) * f64::from(w[c * k + i])).sum();
                close(out[r * n + c], 1.0 + 0.5 * p, 1e-5, "matmul_t_acc");
            }
        }
    }

    #[test]
    fn exp_is_within_two_ulp_of_the_true_value() {
        let mut x = -87.0f32;
        while x < 88.5 {
            let (got, want) = (f64::from(exp(x)), f64::from(x).exp());
            assert!(((got - want) / want).abs() < 2.5e-7, "exp({x}) = {got}, want {want}");
            x += 0.001_7;
        }
        assert_eq!(exp(-100.0), 0.0);
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(f32::NEG_INFINITY) == 0.0 && exp(200.0).is_finite());
    }
}
