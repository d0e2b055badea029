//! Block dot products of one weight row against up to [`ROWS`] quantised activation rows, at
//! each instruction-set level. Each row's sum runs over the blocks in order with its own
//! accumulator, so a row's result does not depend on which rows share the pass (a sample's
//! tokens do not depend on what else is in the batch).

use crate::isa::Isa;
use crate::quant::BLOCK;

/// Activation rows a pass over one weight row serves: each weight block is loaded once for all
/// of them (AVX2 has 16 vector registers: 4 accumulators, the weights and temporaries).
pub(crate) const ROWS: usize = 4;

/// Up to [`ROWS`] consecutive activation rows: int8 values `[rows, k]`, scales and scaled sums
/// `[rows, k / 32]`.
#[derive(Clone, Copy)]
pub(crate) struct XRows<'a> {
    pub(crate) q: &'a [i8],
    pub(crate) d: &'a [f32],
    pub(crate) s: &'a [f32],
    pub(crate) k: usize,
}

/// `out[r] = Σ_b wd[b]·xd[r,b]·(wq_b · xq_r,b)` (Q8_0 weights).
pub(crate) fn q8(isa: Isa, wq: &[i8], wd: &[f32], x: XRows, out: &mut [f32]) {
    let kb = x.k / BLOCK;
    assert!(out.len() <= ROWS && wq.len() >= x.k && wd.len() >= kb && x.q.len() >= out.len() * x.k && x.d.len() >= out.len() * kb);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa` is at most the detected level (crate::isa), and the slices were checked.
        Isa::Avx512 => unsafe { x86::q8_avx512(wq, wd, x, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Isa::Avx2 => unsafe { x86::q8_avx2(wq, wd, x, out) },
        _ => q8_scalar(wq, wd, x, out),
    }
}

/// `out[r] = Σ_b wd[b]·xd[r,b]·(wq_b · xq_r,b) + wm[b]·xs[r,b]` (4-bit weights `d·q + m`, two
/// per byte: element `j < 16` in the low nibble of byte `j`, element `16 + j` in its high one).
pub(crate) fn q4(isa: Isa, qs: &[u8], wd: &[f32], wm: &[f32], x: XRows, out: &mut [f32]) {
    let kb = x.k / BLOCK;
    assert!(out.len() <= ROWS && qs.len() >= x.k / 2 && wd.len() >= kb && wm.len() >= kb && x.q.len() >= out.len() * x.k && x.s.len() >= out.len() * kb);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa` is at most the detected level (crate::isa), and the slices were checked.
        Isa::Avx512 => unsafe { x86::q4_avx512(qs, wd, wm, x, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Isa::Avx2 => unsafe { x86::q4_avx2(qs, wd, wm, x, out) },
        _ => q4_scalar(qs, wd, wm, x, out),
    }
}

pub(crate) fn q8_scalar(wq: &[i8], wd: &[f32], x: XRows, out: &mut [f32]) {
    let (k, kb) = (x.k, x.k / BLOCK);
    for (r, o) in out.iter_mut().enumerate() {
        let mut acc = 0f32;
        for b in 0..kb {
            let w = &wq[b * BLOCK..(b + 1) * BLOCK];
            let xs = &x.q[r * k + b * BLOCK..r * k + (b + 1) * BLOCK];
            let s: i32 = w.iter().zip(xs).map(|(&a, &c)| i32::from(a) * i32::from(c)).sum();
            acc += wd[b] * x.d[r * kb + b] * s as f32;
        }
        *o = acc;
    }
}

pub(crate) fn q4_scalar(qs: &[u8], wd: &[f32], wm: &[f32], x: XRows, out: &mut [f32]) {
    let (k, kb) = (x.k, x.k / BLOCK);
    for (r, o) in out.iter_mut().enumerate() {
        let (mut acc, mut mins) = (0f32, 0f32);
        for b in 0..kb {
            let bytes = &qs[b * 16..(b + 1) * 16];
            let xs = &x.q[r * k + b * BLOCK..r * k + (b + 1) * BLOCK];
            let mut s = 0i32;
            for (j, &byte) in bytes.iter().enumerate() {
                s += i32::from(byte & 0x0F) * i32::from(xs[j]) + i32::from(byte >> 4) * i32::from(xs[16 + j]);
            }
            acc += wd[b] * x.d[r * kb + b] * s as f32;
            mins += wm[b] * x.s[r * kb + b];
        }
        *o = acc + mins;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::XRows;
    use crate::quant::BLOCK;

    #[target_feature(enable = "avx2")]
    fn hsum256(a: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
    }

    #[target_feature(enable = "avx512f")]
    fn hsum512(a: __m512) -> f32 {
        _mm512_reduce_add_ps(a)
    }

    /// ggml's int8 dot: `maddubs` needs one unsigned operand, so |w| multiplies x carrying w's
    /// sign; pairs widen to i32; one FMA per block applies both scales.
    ///
    /// # Safety
    /// AVX2 and FMA; slices sized as [`super::q8`] checks.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn q8_avx2(wq: &[i8], wd: &[f32], x: XRows, out: &mut [f32]) {
        let (k, kb, rows) = (x.k, x.k / BLOCK, out.len());
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); 4];
        for (b, &d) in wd[..kb].iter().enumerate() {
            // SAFETY: b·32 + 32 ≤ k ≤ wq.len(), and likewise within each row of x.q.
            let w = unsafe { _mm256_loadu_si256(wq.as_ptr().add(b * BLOCK).cast()) };
            let aw = _mm256_sign_epi8(w, w);
            for (r, a) in acc.iter_mut().enumerate().take(rows) {
                let xv = unsafe { _mm256_loadu_si256(x.q.as_ptr().add(r * k + b * BLOCK).cast()) };
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, w)), ones);
                *a = _mm256_fmadd_ps(_mm256_set1_ps(d * x.d[r * kb + b]), _mm256_cvtepi32_ps(p), *a);
            }
        }
        for (o, a) in out.iter_mut().zip(acc) {
            *o = hsum256(a);
        }
    }

    /// The 32 nibbles of one 4-bit block as bytes in element order.
    ///
    /// # Safety
    /// AVX2; 16 readable bytes at `p`.
    #[target_feature(enable = "avx2")]
    unsafe fn nibbles(p: *const u8) -> __m256i {
        // SAFETY: the caller guarantees 16 bytes.
        let t = unsafe { _mm_loadu_si128(p.cast()) };
        _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F))
    }

    /// 4-bit weights are unsigned (0..15), so `maddubs` takes them as they are; the `m` term is
    /// the block's scaled activation sum.
    ///
    /// # Safety
    /// AVX2 and FMA; slices sized as [`super::q4`] checks.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn q4_avx2(qs: &[u8], wd: &[f32], wm: &[f32], x: XRows, out: &mut [f32]) {
        let (k, kb, rows) = (x.k, x.k / BLOCK, out.len());
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut mins = [0f32; 4];
        for (b, (&d, &m)) in wd[..kb].iter().zip(&wm[..kb]).enumerate() {
            // SAFETY: b·16 + 16 ≤ k/2 ≤ qs.len().
            let w = unsafe { nibbles(qs.as_ptr().add(b * 16)) };
            for r in 0..rows {
                let xv = unsafe { _mm256_loadu_si256(x.q.as_ptr().add(r * k + b * BLOCK).cast()) };
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(w, xv), ones);
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * x.d[r * kb + b]), _mm256_cvtepi32_ps(p), acc[r]);
                mins[r] += m * x.s[r * kb + b];
            }
        }
        for r in 0..rows {
            out[r] = hsum256(acc[r]) + mins[r];
        }
    }

    /// Scales for a pair of blocks: `a` in the low eight lanes, `b` in the high eight.
    #[target_feature(enable = "avx512f")]
    fn pair(a: f32, b: f32) -> __m512 {
        _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(a), _mm512_set1_ps(b))
    }

    /// Two blocks per 512-bit register: `vpdpbusd` sums four u8·i8 products per int32 lane with
    /// no 16-bit intermediate. AVX-512 has no `sign_epi8`: x is negated under w's sign mask.
    /// An odd last block takes the AVX2 path's arithmetic.
    ///
    /// # Safety
    /// AVX-512 F/BW/VNNI, AVX2 and FMA; slices sized as [`super::q8`] checks.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma")]
    pub(super) unsafe fn q8_avx512(wq: &[i8], wd: &[f32], x: XRows, out: &mut [f32]) {
        let (k, kb, rows) = (x.k, x.k / BLOCK, out.len());
        let zero = _mm512_setzero_si512();
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut b = 0;
        while b + 2 <= kb {
            // SAFETY: (b + 2)·32 ≤ k ≤ wq.len(), and likewise within each row of x.q.
            let w = unsafe { _mm512_loadu_si512(wq.as_ptr().add(b * BLOCK).cast()) };
            let aw = _mm512_abs_epi8(w);
            let neg = _mm512_movepi8_mask(w);
            for (r, a) in acc.iter_mut().enumerate().take(rows) {
                let xv = unsafe { _mm512_loadu_si512(x.q.as_ptr().add(r * k + b * BLOCK).cast()) };
                let sx = _mm512_mask_sub_epi8(xv, neg, zero, xv);
                let p = _mm512_dpbusd_epi32(zero, aw, sx);
                let d = pair(wd[b] * x.d[r * kb + b], wd[b + 1] * x.d[r * kb + b + 1]);
                *a = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), *a);
            }
            b += 2;
        }
        for (r, o) in out.iter_mut().enumerate() {
            *o = hsum512(acc[r]);
        }
        if b < kb {
            let ones = _mm256_set1_epi16(1);
            // SAFETY: as above, for the last block.
            let w = unsafe { _mm256_loadu_si256(wq.as_ptr().add(b * BLOCK).cast()) };
            let aw = _mm256_sign_epi8(w, w);
            for (r, o) in out.iter_mut().enumerate() {
                let xv = unsafe { _mm256_loadu_si256(x.q.as_ptr().add(r * k + b * BLOCK).cast()) };
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, w)), ones);
                *o += wd[b] * x.d[r * kb + b] * hsum256(_mm256_cvtepi32_ps(p));
            }
        }
    }

    /// Two 4-bit blocks per register: 32 bytes of nibbles become 64 bytes in element order
    /// (low nibbles of block b, high of b, low of b+1, high of b+1), then as [`q8_avx512`]
    /// without the sign step (4-bit weights are unsigned).
    ///
    /// # Safety
    /// AVX-512 F/BW/VNNI, AVX2 and FMA; slices sized as [`super::q4`] checks.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma")]
    pub(super) unsafe fn q4_avx512(qs: &[u8], wd: &[f32], wm: &[f32], x: XRows, out: &mut [f32]) {
        let (k, kb, rows) = (x.k, x.k / BLOCK, out.len());
        let zero = _mm512_setzero_si512();
        let low = _mm256_set1_epi8(0x0F);
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut mins = [0f32; 4];
        let mut b = 0;
        while b + 2 <= kb {
            // SAFETY: (b + 2)·16 ≤ k/2 ≤ qs.len().
            let t = unsafe { _mm256_loadu_si256(qs.as_ptr().add(b * 16).cast()) };
            let (lo, hi) = (_mm256_and_si256(t, low), _mm256_and_si256(_mm256_srli_epi16(t, 4), low));
            // [lo b, lo b+1, hi b, hi b+1] -> [lo b, hi b, lo b+1, hi b+1]
            let v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            let w = _mm512_shuffle_i64x2(v, v, 0b11_01_10_00);
            for r in 0..rows {
                let xv = unsafe { _mm512_loadu_si512(x.q.as_ptr().add(r * k + b * BLOCK).cast()) };
                let p = _mm512_dpbusd_epi32(zero, w, xv);
                let d = pair(wd[b] * x.d[r * kb + b], wd[b + 1] * x.d[r * kb + b + 1]);
                acc[r] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc[r]);
                mins[r] += wm[b] * x.s[r * kb + b] + wm[b + 1] * x.s[r * kb + b + 1];
            }
            b += 2;
        }
        for r in 0..rows {
            out[r] = hsum512(acc[r]) + mins[r];
        }
        if b < kb {
            let ones = _mm256_set1_epi16(1);
            // SAFETY: as above, for the last block.
            let w = unsafe { nibbles(qs.as_ptr().add(b * 16)) };
            for (r, o) in out.iter_mut().enumerate() {
                let xv = unsafe { _mm256_loadu_si256(x.q.as_ptr().add(r * k + b * BLOCK).cast()) };
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(w, xv), ones);
                *o += wd[b] * x.d[r * kb + b] * hsum256(_mm256_cvtepi32_ps(p)) + wm[b] * x.s[r * kb + b];
            }
        }
    }
}
