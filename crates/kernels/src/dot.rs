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
/// `[rows, k / 32]`, scales repeated eight times `[rows, k / 32, 8]`.
#[derive(Clone, Copy)]
pub(crate) struct XRows<'a> {
    pub(crate) q: &'a [i8],
    pub(crate) d: &'a [f32],
    pub(crate) dv: &'a [f32],
    pub(crate) s: &'a [f32],
    pub(crate) k: usize,
}

/// `out[r] = Σ_b wd[b]·xd[r,b]·(wq_b · xq_r,b)` (Q8_0 weights).
pub(crate) fn q8(isa: Isa, wq: &[i8], wd: &[f32], x: XRows, out: &mut [f32]) {
    let kb = x.k / BLOCK;
    assert!(out.len() <= ROWS && wq.len() >= x.k && wd.len() >= kb && x.q.len() >= out.len() * x.k && x.d.len() >= out.len() * kb && x.dv.len() >= out.len() * kb * 8);
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
    assert!(out.len() <= ROWS && qs.len() >= x.k / 2 && wd.len() >= kb && wm.len() >= kb && x.q.len() >= out.len() * x.k && x.s.len() >= out.len() * kb && x.dv.len() >= out.len() * kb * 8);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa` is at most the detected level (crate::isa), and the slices were checked.
        Isa::Avx512 => unsafe { x86::q4_avx512(qs, wd, x, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Isa::Avx2 => unsafe { x86::q4_avx2(qs, wd, x, out) },
        _ => return q4_scalar(qs, wd, wm, x, out),
    }
    // The `m` terms: one vectorised dot product per row over its blocks (scalar multiply-adds
    // inside the block loop cost a third of the kernel's instructions).
    for (r, o) in out.iter_mut().enumerate() {
        *o += crate::rows::dot(&wm[..kb], &x.s[r * kb..(r + 1) * kb]);
    }
}

/// f16 bits to f32 (4-bit blocks' scales, per column as used).
pub(crate) fn widen(isa: Isa, src: &[u16], dst: &mut [f32]) {
    assert!(dst.len() >= src.len());
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the AVX2 and AVX-512 levels include F16C (crate::isa).
        Isa::Avx2 | Isa::Avx512 => unsafe { x86::widen_f16c(src, dst) },
        _ => {
            for (d, &h) in dst.iter_mut().zip(src) {
                *d = crate::quant::f16_to_f32(h);
            }
        }
    }
}

/// [`q8`] for two weight rows (columns of the product) at once: at AVX-512 each activation
/// block and its scales are loaded once for both (a third fewer instructions per multiply-add
/// in the compute-bound case: prefill, many rows); elsewhere one column after the other.
pub(crate) fn q8x2(isa: Isa, wq: [&[i8]; 2], wd: [&[f32]; 2], x: XRows, out: [&mut [f32]; 2]) {
    let [o0, o1] = out;
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        let kb = x.k / BLOCK;
        assert!(o0.len() <= ROWS && o0.len() == o1.len() && wq.iter().all(|w| w.len() >= x.k) && wd.iter().all(|d| d.len() >= kb));
        assert!(x.q.len() >= o0.len() * x.k && x.d.len() >= o0.len() * kb && x.dv.len() >= o0.len() * kb * 8);
        // SAFETY: the level is at most the detected one (crate::isa); slices checked above.
        unsafe { x86::q8x2_avx512(wq, wd, x, [o0, o1]) };
        return;
    }
    q8(isa, wq[0], wd[0], x, o0);
    q8(isa, wq[1], wd[1], x, o1);
}

/// [`q4`] for two weight rows at once (see [`q8x2`]).
pub(crate) fn q4x2(isa: Isa, qs: [&[u8]; 2], wd: [&[f32]; 2], wm: [&[f32]; 2], x: XRows, out: [&mut [f32]; 2]) {
    let [o0, o1] = out;
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        let kb = x.k / BLOCK;
        assert!(o0.len() <= ROWS && o0.len() == o1.len() && qs.iter().all(|q| q.len() >= x.k / 2) && wd.iter().chain(&wm).all(|d| d.len() >= kb));
        assert!(x.q.len() >= o0.len() * x.k && x.s.len() >= o0.len() * kb && x.dv.len() >= o0.len() * kb * 8);
        // SAFETY: the level is at most the detected one (crate::isa); slices checked above.
        unsafe { x86::q4x2_avx512(qs, wd, x, [&mut *o0, &mut *o1]) };
        for (c, o) in [o0, o1].into_iter().enumerate() {
            for (r, v) in o.iter_mut().enumerate() {
                *v += crate::rows::dot(&wm[c][..kb], &x.s[r * kb..(r + 1) * kb]);
            }
        }
        return;
    }
    q4(isa, qs[0], wd[0], wm[0], x, o0);
    q4(isa, qs[1], wd[1], wm[1], x, o1);
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

    /// # Safety
    /// F16C; `dst` at least as long as `src`.
    #[target_feature(enable = "f16c,avx")]
    pub(super) unsafe fn widen_f16c(src: &[u16], dst: &mut [f32]) {
        let mut i = 0;
        while i + 8 <= src.len() {
            // SAFETY: i + 8 ≤ src.len() ≤ dst.len().
            unsafe { _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(_mm_loadu_si128(src.as_ptr().add(i).cast()))) };
            i += 8;
        }
        for (d, &h) in dst[i..src.len()].iter_mut().zip(&src[i..]) {
            *d = crate::quant::f16_to_f32(h);
        }
    }

    /// ggml's int8 dot: `maddubs` needs one unsigned operand, so |w| multiplies x carrying w's
    /// sign; pairs widen to i32; one FMA per block applies both scales (the activation's from
    /// its pre-broadcast vector).
    ///
    /// # Safety
    /// AVX2 and FMA; slices sized as [`super::q8`] checks.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn q8_avx2(wq: &[i8], wd: &[f32], x: XRows, out: &mut [f32]) {
        let (k, kb, rows) = (x.k, x.k / BLOCK, out.len());
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); 4];
        for (b, &d) in wd[..kb].iter().enumerate() {
            // SAFETY: b·32 + 32 ≤ k ≤ wq.len(), and likewise within each row of x.q and x.dv.
            let w = unsafe { _mm256_loadu_si256(wq.as_ptr().add(b * BLOCK).cast()) };
            let (aw, dw) = (_mm256_sign_epi8(w, w), _mm256_set1_ps(d));
            for (r, a) in acc.iter_mut().enumerate().take(rows) {
                let xv = unsafe { _mm256_loadu_si256(x.q.as_ptr().add(r * k + b * BLOCK).cast()) };
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, w)), ones);
                let dx = unsafe { _mm256_loadu_ps(x.dv.as_ptr().add((r * kb + b) * 8)) };
                *a = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(p), *a);
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

    /// The `d` part of a 4-bit product (the caller adds the `m` part): 4-bit weights are
    /// unsigned (0..15), so `maddubs` takes them as they are.
    ///
    /// # Safety
    /// AVX2 and FMA; slices sized as [`super::q4`] checks.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn q4_avx2(qs: &[u8], wd: &[f32], x: XRows, out: &mut [f32]) {
        let (k, kb, rows) = (x.k, x.k / BLOCK, out.len());
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); 4];
        for (b, &d) in wd[..kb].iter().enumerate() {
            // SAFETY: b·16 + 16 ≤ k/2 ≤ qs.len(), and as in `q8_avx2` for x.
            let w = unsafe { nibbles(qs.as_ptr().add(b * 16)) };
            let dw = _mm256_set1_ps(d);
            for (r, a) in acc.iter_mut().enumerate().take(rows) {
                let xv = unsafe { _mm256_loadu_si256(x.q.as_ptr().add(r * k + b * BLOCK).cast()) };
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(w, xv), ones);
                let dx = unsafe { _mm256_loadu_ps(x.dv.as_ptr().add((r * kb + b) * 8)) };
                *a = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(p), *a);
            }
        }
        for (o, a) in out.iter_mut().zip(acc) {
            *o = hsum256(a);
        }
    }

    /// Two blocks per 512-bit register: `vpdpbusd` sums four u8·i8 products per int32 lane with
    /// no 16-bit intermediate. AVX-512 has no `sign_epi8`: x is negated under w's sign mask.
    /// The weight scales of a pair go in one vector per pass, the activations' come
    /// pre-broadcast; an odd last block takes the AVX2 arithmetic.
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
            // SAFETY: (b + 2)·32 ≤ k ≤ wq.len(), and likewise within each row of x.q and x.dv.
            let w = unsafe { _mm512_loadu_si512(wq.as_ptr().add(b * BLOCK).cast()) };
            let (aw, neg) = (_mm512_abs_epi8(w), _mm512_movepi8_mask(w));
            let dw = pair(wd[b], wd[b + 1]);
            for (r, a) in acc.iter_mut().enumerate().take(rows) {
                let xv = unsafe { _mm512_loadu_si512(x.q.as_ptr().add(r * k + b * BLOCK).cast()) };
                let p = _mm512_dpbusd_epi32(zero, aw, _mm512_mask_sub_epi8(xv, neg, zero, xv));
                let dx = unsafe { _mm512_loadu_ps(x.dv.as_ptr().add((r * kb + b) * 8)) };
                *a = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(p), *a);
            }
            b += 2;
        }
        for (o, a) in out.iter_mut().zip(acc) {
            *o = hsum512(a);
        }
        if b < kb {
            // SAFETY: block b < kb, within the slices the caller sized.
            unsafe { q8_last_block(wq, wd, x, b, out) };
        }
    }

    /// Two 4-bit blocks per register: 32 bytes of nibbles become 64 bytes in element order
    /// (low nibbles of block b, high of b, low of b+1, high of b+1), then as [`q8_avx512`]
    /// without the sign step (4-bit weights are unsigned). The `d` part only.
    ///
    /// # Safety
    /// AVX-512 F/BW/VNNI, AVX2 and FMA; slices sized as [`super::q4`] checks.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma")]
    pub(super) unsafe fn q4_avx512(qs: &[u8], wd: &[f32], x: XRows, out: &mut [f32]) {
        let (k, kb, rows) = (x.k, x.k / BLOCK, out.len());
        let zero = _mm512_setzero_si512();
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut b = 0;
        while b + 2 <= kb {
            // SAFETY: (b + 2)·16 ≤ k/2 ≤ qs.len(), and as in `q8_avx512` for x.
            let w = unsafe { nibbles_pair(qs.as_ptr().add(b * 16)) };
            let dw = pair(wd[b], wd[b + 1]);
            for (r, a) in acc.iter_mut().enumerate().take(rows) {
                let xv = unsafe { _mm512_loadu_si512(x.q.as_ptr().add(r * k + b * BLOCK).cast()) };
                let p = _mm512_dpbusd_epi32(zero, w, xv);
                let dx = unsafe { _mm512_loadu_ps(x.dv.as_ptr().add((r * kb + b) * 8)) };
                *a = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(p), *a);
            }
            b += 2;
        }
        for (o, a) in out.iter_mut().zip(acc) {
            *o = hsum512(a);
        }
        if b < kb {
            // SAFETY: block b < kb, within the slices the caller sized.
            unsafe { q4_last_block(qs, wd, x, b, out) };
        }
    }

    /// The 64 nibbles of two consecutive 4-bit blocks as bytes in element order: low nibbles
    /// of block b, high of b, low of b+1, high of b+1.
    ///
    /// # Safety
    /// AVX-512 F and AVX2; 32 readable bytes at `p`.
    #[inline]
    #[target_feature(enable = "avx512f,avx2")]
    unsafe fn nibbles_pair(p: *const u8) -> __m512i {
        let low = _mm256_set1_epi8(0x0F);
        // SAFETY: the caller guarantees 32 bytes.
        let t = unsafe { _mm256_loadu_si256(p.cast()) };
        let (lo, hi) = (_mm256_and_si256(t, low), _mm256_and_si256(_mm256_srli_epi16(t, 4), low));
        // [lo b, lo b+1, hi b, hi b+1] -> [lo b, hi b, lo b+1, hi b+1]
        let v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        _mm512_shuffle_i64x2(v, v, 0b11_01_10_00)
    }

    /// Adds Q8_0 block `b` (the odd one after the 512-bit pairs) to each row's `out`, with
    /// [`q8_avx2`]'s arithmetic.
    ///
    /// # Safety
    /// AVX2 and FMA; block `b` within `wq`, `wd` and every row of `x`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn q8_last_block(wq: &[i8], wd: &[f32], x: XRows, b: usize, out: &mut [f32]) {
        let (k, kb) = (x.k, x.k / BLOCK);
        let ones = _mm256_set1_epi16(1);
        // SAFETY: as the caller guarantees.
        let w = unsafe { _mm256_loadu_si256(wq.as_ptr().add(b * BLOCK).cast()) };
        let aw = _mm256_sign_epi8(w, w);
        for (r, o) in out.iter_mut().enumerate() {
            let xv = unsafe { _mm256_loadu_si256(x.q.as_ptr().add(r * k + b * BLOCK).cast()) };
            let p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, w)), ones);
            *o += wd[b] * x.d[r * kb + b] * hsum256(_mm256_cvtepi32_ps(p));
        }
    }

    /// Adds 4-bit block `b`'s `d` part (the odd one after the 512-bit pairs) to each row's
    /// `out`, with [`q4_avx2`]'s arithmetic.
    ///
    /// # Safety
    /// AVX2 and FMA; block `b` within `qs`, `wd` and every row of `x`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn q4_last_block(qs: &[u8], wd: &[f32], x: XRows, b: usize, out: &mut [f32]) {
        let (k, kb) = (x.k, x.k / BLOCK);
        let ones = _mm256_set1_epi16(1);
        // SAFETY: as the caller guarantees.
        let w = unsafe { nibbles(qs.as_ptr().add(b * 16)) };
        for (r, o) in out.iter_mut().enumerate() {
            let xv = unsafe { _mm256_loadu_si256(x.q.as_ptr().add(r * k + b * BLOCK).cast()) };
            let p = _mm256_madd_epi16(_mm256_maddubs_epi16(w, xv), ones);
            *o += wd[b] * x.d[r * kb + b] * hsum256(_mm256_cvtepi32_ps(p));
        }
    }

    /// Scales for a pair of blocks: `a` in the low eight lanes, `b` in the high eight.
    #[target_feature(enable = "avx512f")]
    fn pair(a: f32, b: f32) -> __m512 {
        _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(a), _mm512_set1_ps(b))
    }

    /// [`q8_avx512`] for two weight rows: 8 accumulators, each activation block loaded once.
    ///
    /// # Safety
    /// As [`q8_avx512`], for both weight rows and both outputs (of equal length).
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma")]
    pub(super) unsafe fn q8x2_avx512(wq: [&[i8]; 2], wd: [&[f32]; 2], x: XRows, out: [&mut [f32]; 2]) {
        let (k, kb, rows) = (x.k, x.k / BLOCK, out[0].len());
        let zero = _mm512_setzero_si512();
        let mut acc = [[_mm512_setzero_ps(); 2]; 4];
        let mut b = 0;
        while b + 2 <= kb {
            // SAFETY: (b + 2)·32 ≤ k ≤ each wq's length, and likewise within each row of x.
            // No closures here: a closure does not inherit `target_feature`, and the intrinsics
            // in one become calls (this kernel ran slower than one column at a time).
            let w = unsafe { [_mm512_loadu_si512(wq[0].as_ptr().add(b * BLOCK).cast()), _mm512_loadu_si512(wq[1].as_ptr().add(b * BLOCK).cast())] };
            let aw = [_mm512_abs_epi8(w[0]), _mm512_abs_epi8(w[1])];
            let neg = [_mm512_movepi8_mask(w[0]), _mm512_movepi8_mask(w[1])];
            let dw = [pair(wd[0][b], wd[0][b + 1]), pair(wd[1][b], wd[1][b + 1])];
            for (r, a) in acc.iter_mut().enumerate().take(rows) {
                let xv = unsafe { _mm512_loadu_si512(x.q.as_ptr().add(r * k + b * BLOCK).cast()) };
                let dx = unsafe { _mm512_loadu_ps(x.dv.as_ptr().add((r * kb + b) * 8)) };
                for c in 0..2 {
                    let p = _mm512_dpbusd_epi32(zero, aw[c], _mm512_mask_sub_epi8(xv, neg[c], zero, xv));
                    a[c] = _mm512_fmadd_ps(_mm512_mul_ps(dw[c], dx), _mm512_cvtepi32_ps(p), a[c]);
                }
            }
            b += 2;
        }
        for (c, o) in out.into_iter().enumerate() {
            for (v, a) in o.iter_mut().zip(&acc) {
                *v = hsum512(a[c]);
            }
            if b < kb {
                // SAFETY: block b < kb of this weight row and of each row of x.
                unsafe { q8_last_block(wq[c], wd[c], x, b, o) };
            }
        }
    }

    /// [`q4_avx512`] for two weight rows: 8 accumulators, each activation block loaded once.
    ///
    /// # Safety
    /// As [`q4_avx512`], for both weight rows and both outputs (of equal length).
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma")]
    pub(super) unsafe fn q4x2_avx512(qs: [&[u8]; 2], wd: [&[f32]; 2], x: XRows, out: [&mut [f32]; 2]) {
        let (k, kb, rows) = (x.k, x.k / BLOCK, out[0].len());
        let zero = _mm512_setzero_si512();
        let mut acc = [[_mm512_setzero_ps(); 2]; 4];
        let mut b = 0;
        while b + 2 <= kb {
            // SAFETY: (b + 2)·16 ≤ k/2 ≤ each qs's length. (No closure: see `q8x2_avx512`.)
            let w = unsafe { [nibbles_pair(qs[0].as_ptr().add(b * 16)), nibbles_pair(qs[1].as_ptr().add(b * 16))] };
            let dw = [pair(wd[0][b], wd[0][b + 1]), pair(wd[1][b], wd[1][b + 1])];
            for (r, a) in acc.iter_mut().enumerate().take(rows) {
                // SAFETY: within each row of x, as the callers' checks cover.
                let xv = unsafe { _mm512_loadu_si512(x.q.as_ptr().add(r * k + b * BLOCK).cast()) };
                let dx = unsafe { _mm512_loadu_ps(x.dv.as_ptr().add((r * kb + b) * 8)) };
                for c in 0..2 {
                    let p = _mm512_dpbusd_epi32(zero, w[c], xv);
                    a[c] = _mm512_fmadd_ps(_mm512_mul_ps(dw[c], dx), _mm512_cvtepi32_ps(p), a[c]);
                }
            }
            b += 2;
        }
        for (c, o) in out.into_iter().enumerate() {
            for (v, a) in o.iter_mut().zip(&acc) {
                *v = hsum512(a[c]);
            }
            if b < kb {
                // SAFETY: block b < kb of this weight row and of each row of x.
                unsafe { q4_last_block(qs[c], wd[c], x, b, o) };
            }
        }
    }
}
