//! Block dot products of weight rows against up to [`ROWS`] quantised activation rows, at each
//! instruction-set level: at AVX-512 and AVX2, two weight rows per pass with each (row, column)
//! sum left in lanes ([`acc2`]) and sixteen columns' lanes summed at once ([`reduce_row`]); the
//! portable loops one weight row at a time. Each (row, column) sum runs over the blocks in order
//! with its own accumulator, so a row's result does not depend on which rows share the pass (a
//! sample's tokens do not depend on what else is in the batch).

use crate::isa::Isa;
use crate::block::BLOCK;

/// Activation rows a pass over the weight rows serves: each weight block is loaded once for all
/// of them (AVX2 has 16 vector registers: 8 accumulators for two weight rows, the weights and
/// temporaries).
pub(crate) const ROWS: usize = 4;

/// Up to [`ROWS`] consecutive activation rows: int8 values `[rows, k]`, scales `[rows, k / 32]`,
/// scales repeated eight times `[rows, k / 32, 8]`.
#[derive(Clone, Copy)]
pub(crate) struct XRows<'a> {
    pub(crate) q: &'a [i8],
    pub(crate) d: &'a [f32],
    pub(crate) dv: &'a [f32],
    pub(crate) k: usize,
}

/// The `m` part of a 4-bit product for sixteen columns and one row, portable:
/// `out[c] = Σ_b xs[b]·m[b, c]`, `m` the group's minimums `[blocks, 16]` (f16 bits) and `xs`
/// the row's scaled block sums. Summed across the columns, where one dot product per column over
/// its few blocks (18 for a 576-wide input) was a fifth of the 4-bit kernel's time; the SIMD
/// levels do the same inside [`reduce_row`].
pub(crate) fn mins_scalar(m: &[u16], xs: &[f32], out: &mut [f32; 16]) {
    assert!(m.len() >= xs.len() * 16);
    out.fill(0.0);
    for (mb, &x) in m.chunks_exact(16).zip(xs) {
        for (o, &h) in out.iter_mut().zip(mb) {
            *o += x * crate::block::f16_to_f32(h);
        }
    }
}

/// f16 bits to f32 (4-bit blocks' scales, per tile as used).
pub(crate) fn widen(isa: Isa, src: &[u16], dst: &mut [f32]) {
    assert!(dst.len() >= src.len());
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the AVX2 and AVX-512 levels include F16C (crate::isa).
        Isa::Avx2 | Isa::Avx512 => unsafe { x86::widen_f16c(src, dst) },
        _ => {
            for (d, &h) in dst.iter_mut().zip(src) {
                *d = crate::block::f16_to_f32(h);
            }
        }
    }
}

/// Two weight rows' blocks (columns of a product) for [`acc2`].
#[derive(Clone, Copy)]
pub(crate) enum Cols<'a> {
    Q8 { q: [&'a [i8]; 2], d: [&'a [f32]; 2] },
    /// Nibbles and widened `d` scales (the `m` part is added by [`reduce_row`]).
    Q4 { q: [&'a [u8]; 2], d: [&'a [f32]; 2] },
}

/// Lanes a SIMD level leaves each (row, column) sum in ([`acc2`]): 16 at AVX-512, 8 at AVX2.
pub(crate) fn lanes(isa: Isa) -> usize {
    if isa == Isa::Avx512 { 16 } else { 8 }
}

/// AVX-512 or AVX2: columns `cols` against the first `rows` rows of `x`, each (row, column)
/// sum left in its [`lanes`], `acc[(r · stride + j) · lanes..][..lanes]` for column `j` of the
/// two; [`reduce_row`] sums sixteen columns' lanes at once. (Summing each column's lanes on its
/// own, and adding the 4-bit `m` part per column, cost a third of the work of a 576-wide
/// product at AVX-512.)
///
/// # Panics
/// Below AVX2 (crate::isa), or slices shorter than the rows and blocks need.
#[cfg(target_arch = "x86_64")]
pub(crate) fn acc2(isa: Isa, cols: Cols, x: XRows, rows: usize, acc: &mut [f32], stride: usize) {
    let (kb, lanes) = (x.k / BLOCK, lanes(isa));
    assert!(isa >= Isa::Avx2 && (1..=ROWS).contains(&rows) && stride >= 2 && acc.len() >= ((rows - 1) * stride + 2) * lanes);
    assert!(x.q.len() >= rows * x.k && x.dv.len() >= rows * kb * 8);
    match cols {
        Cols::Q8 { q, d } => {
            assert!(q.iter().all(|w| w.len() >= x.k) && d.iter().all(|d| d.len() >= kb));
            // SAFETY: the level is the detected one or lower (crate::isa); slices checked above.
            unsafe {
                if isa == Isa::Avx512 {
                    x86::q8x2_acc(q, d, x, rows, acc, stride);
                } else {
                    x86::q8x2_acc_avx2(q, d, x, rows, acc, stride);
                }
            }
        }
        Cols::Q4 { q, d } => {
            assert!(q.iter().all(|w| w.len() >= x.k / 2) && d.iter().all(|d| d.len() >= kb));
            // SAFETY: as above.
            unsafe {
                if isa == Isa::Avx512 {
                    x86::q4x2_acc(q, d, x, rows, acc, stride);
                } else {
                    x86::q4x2_acc_avx2(q, d, x, rows, acc, stride);
                }
            }
        }
    }
}

/// AVX-512 or AVX2: `out[c] = Σ lanes of column c (+ mins(m, xs)[c])` for the first
/// `out.len()` ≤ 16 of sixteen columns' lanes (`acc[c · lanes..]`), each by the same tree of
/// additions (a column's result depends on nothing but its own lanes).
///
/// # Panics
/// Below AVX2, or `acc` shorter than sixteen columns' lanes, `out` longer than 16.
#[cfg(target_arch = "x86_64")]
pub(crate) fn reduce_row(isa: Isa, acc: &[f32], mins: Option<(&[u16], &[f32])>, out: &mut [f32]) {
    assert!(isa >= Isa::Avx2 && acc.len() >= 16 * lanes(isa) && out.len() <= 16 && mins.is_none_or(|(m, xs)| m.len() >= xs.len() * 16));
    // SAFETY: the level is the detected one or lower (crate::isa); lengths checked above.
    unsafe {
        if isa == Isa::Avx512 {
            x86::reduce_row(acc, mins, out);
        } else {
            x86::reduce_row_avx2(acc, mins, out);
        }
    }
}

/// `out[r] = Σ_b wd[b]·xd[r,b]·(wq_b · xq_r,b)` (Q8_0 weights), portable.
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

/// The `d` part of a 4-bit product, `out[r] = Σ_b wd[b]·xd[r,b]·(wq_b · xq_r,b)` (weights
/// `d·q + m`, two per byte: element `j < 16` in the low nibble of byte `j`, element `16 + j`
/// in its high one), portable; [`mins_scalar`] gives the `m` part.
pub(crate) fn q4_scalar(qs: &[u8], wd: &[f32], x: XRows, out: &mut [f32]) {
    let (k, kb) = (x.k, x.k / BLOCK);
    for (r, o) in out.iter_mut().enumerate() {
        let mut acc = 0f32;
        for b in 0..kb {
            let bytes = &qs[b * 16..(b + 1) * 16];
            let xs = &x.q[r * k + b * BLOCK..r * k + (b + 1) * BLOCK];
            let mut s = 0i32;
            for (j, &byte) in bytes.iter().enumerate() {
                s += i32::from(byte & 0x0F) * i32::from(xs[j]) + i32::from(byte >> 4) * i32::from(xs[16 + j]);
            }
            acc += wd[b] * x.d[r * kb + b] * s as f32;
        }
        *o = acc;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::XRows;
    use crate::block::BLOCK;

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
            *d = crate::block::f16_to_f32(h);
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

    /// The 64 nibbles of two consecutive 4-bit blocks as bytes in element order: low nibbles
    /// of block b, high of b, low of b+1, high of b+1. The 32 bytes go to both halves, the
    /// upper half shifted down a nibble: four instructions where masking and shifting 256 bits,
    /// then joining the halves, took six.
    ///
    /// # Safety
    /// AVX-512 F/BW and AVX2; 32 readable bytes at `p`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx2")]
    unsafe fn nibbles_pair(p: *const u8) -> __m512i {
        // SAFETY: the caller guarantees 32 bytes.
        let t = _mm512_broadcast_i64x4(unsafe { _mm256_loadu_si256(p.cast()) });
        let v = _mm512_and_si512(_mm512_mask_srli_epi16(t, 0xFFFF_0000, t, 4), _mm512_set1_epi8(0x0F));
        // [lo b, lo b+1, hi b, hi b+1] -> [lo b, hi b, lo b+1, hi b+1]
        _mm512_shuffle_i64x2(v, v, 0b11_01_10_00)
    }

    /// Bytes ahead of a product's loads to prefetch: the weight rows a few pairs of columns on.
    /// Measured on the Q8_0 LM head of SmolLM2 (49,152 × 576, 30 MB, one row): no prefetch
    /// 1,980 µs, the next pair 1,580, 3.4 KB ahead 980, 14 KB 606, 23 KB 684 (AVX2, one column
    /// at a time, 1,100): two interleaved streams of 576-byte rows defeat the hardware
    /// prefetcher, which keeps up with one. The 4-bit kernel's rows are half as long, and
    /// prefetching made it slower (a 49,152 × 576 Q4_1 matrix, one row: 603 → 770 µs).
    const PREFETCH_AHEAD: usize = 12 << 10;

    /// Prefetches offset `at` of the pair of weight rows (each `row` bytes) about
    /// [`PREFETCH_AHEAD`] bytes after the pair whose second row starts at `second`: an odd
    /// number of rows on, the same offset of both rows of a later pair.
    #[inline]
    #[target_feature(enable = "sse")]
    fn prefetch_pair(second: *const u8, row: usize, at: usize) {
        let d = (PREFETCH_AHEAD / row) | 1;
        // Prefetching is a hint: an address past the matrix does not fault (hence wrapping).
        _mm_prefetch::<_MM_HINT_T0>(second.wrapping_add(d * row + at).cast());
        _mm_prefetch::<_MM_HINT_T0>(second.wrapping_add((d + 1) * row + at).cast());
    }

    /// Scales for a pair of blocks: `a` in the low eight lanes, `b` in the high eight.
    #[target_feature(enable = "avx512f")]
    fn pair(a: f32, b: f32) -> __m512 {
        _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(a), _mm512_set1_ps(b))
    }

    /// Two 4-bit weight rows against up to four activation rows, two blocks per 512-bit
    /// register: `vpdpbusd` sums four u8·i8 products per int32 lane with no 16-bit
    /// intermediate (4-bit weights are unsigned, so they are the u8 side). One multiply-add per
    /// row, column and pair of blocks applies both scales; an odd last block adds into the low
    /// eight lanes. Lanes are stored unsummed (see [`super::acc2`]).
    ///
    /// # Safety
    /// AVX-512 F/BW/VL/VNNI, AVX2 and FMA; slices sized as [`super::acc2`] checks.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
    pub(super) unsafe fn q4x2_acc(qs: [&[u8]; 2], wd: [&[f32]; 2], x: XRows, rows: usize, out: &mut [f32], stride: usize) {
        let (k, kb) = (x.k, x.k / BLOCK);
        let zero = _mm512_setzero_si512();
        let mut acc = [[_mm512_setzero_ps(); 2]; 4];
        let mut b = 0;
        while b + 2 <= kb {
            // SAFETY: (b + 2)·16 ≤ k/2 ≤ each qs's length, and (b + 2)·32 ≤ k within each row of
            // x. No closures here: a closure does not inherit `target_feature`, and the
            // intrinsics in one become calls.
            let w = unsafe { [nibbles_pair(qs[0].as_ptr().add(b * 16)), nibbles_pair(qs[1].as_ptr().add(b * 16))] };
            let dw = [pair(wd[0][b], wd[0][b + 1]), pair(wd[1][b], wd[1][b + 1])];
            for (r, a) in acc.iter_mut().enumerate().take(rows) {
                let xv = unsafe { _mm512_loadu_si512(x.q.as_ptr().add(r * k + b * BLOCK).cast()) };
                let dx = unsafe { _mm512_loadu_ps(x.dv.as_ptr().add((r * kb + b) * 8)) };
                for c in 0..2 {
                    let p = _mm512_dpbusd_epi32(zero, w[c], xv);
                    a[c] = _mm512_fmadd_ps(_mm512_mul_ps(dw[c], dx), _mm512_cvtepi32_ps(p), a[c]);
                }
            }
            b += 2;
        }
        if b < kb {
            // SAFETY: block b < kb of both weight rows and of each row of x.
            let w = unsafe { [nibbles(qs[0].as_ptr().add(b * 16)), nibbles(qs[1].as_ptr().add(b * 16))] };
            for (r, a) in acc.iter_mut().enumerate().take(rows) {
                let xv = unsafe { _mm256_loadu_si256(x.q.as_ptr().add(r * k + b * BLOCK).cast()) };
                let dx = unsafe { _mm256_loadu_ps(x.dv.as_ptr().add((r * kb + b) * 8)) };
                for c in 0..2 {
                    let p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), w[c], xv);
                    let t = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(wd[c][b]), dx), _mm256_cvtepi32_ps(p));
                    a[c] = _mm512_add_ps(a[c], _mm512_zextps256_ps512(t));
                }
            }
        }
        // SAFETY: as the caller checked.
        unsafe { store_lanes(&acc, rows, out, stride) };
    }

    /// [`q4x2_acc`] for Q8_0 weights: signed, so `|w|` is the u8 side and x takes w's sign
    /// (AVX-512 has no `sign_epi8`: x is negated under w's sign mask).
    ///
    /// # Safety
    /// As [`q4x2_acc`].
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
    pub(super) unsafe fn q8x2_acc(wq: [&[i8]; 2], wd: [&[f32]; 2], x: XRows, rows: usize, out: &mut [f32], stride: usize) {
        let (k, kb) = (x.k, x.k / BLOCK);
        let zero = _mm512_setzero_si512();
        let mut acc = [[_mm512_setzero_ps(); 2]; 4];
        let mut b = 0;
        while b + 2 <= kb {
            // SAFETY: (b + 2)·32 ≤ k ≤ each wq's length, and likewise within each row of x.
            let w = unsafe { [_mm512_loadu_si512(wq[0].as_ptr().add(b * BLOCK).cast()), _mm512_loadu_si512(wq[1].as_ptr().add(b * BLOCK).cast())] };
            prefetch_pair(wq[1].as_ptr().cast(), k, b * BLOCK);
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
        if b < kb {
            // SAFETY: block b < kb of both weight rows and of each row of x.
            let w = unsafe { [_mm256_loadu_si256(wq[0].as_ptr().add(b * BLOCK).cast()), _mm256_loadu_si256(wq[1].as_ptr().add(b * BLOCK).cast())] };
            for (r, a) in acc.iter_mut().enumerate().take(rows) {
                let xv = unsafe { _mm256_loadu_si256(x.q.as_ptr().add(r * k + b * BLOCK).cast()) };
                let dx = unsafe { _mm256_loadu_ps(x.dv.as_ptr().add((r * kb + b) * 8)) };
                for c in 0..2 {
                    let p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w[c]), _mm256_sign_epi8(xv, w[c]));
                    let t = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(wd[c][b]), dx), _mm256_cvtepi32_ps(p));
                    a[c] = _mm512_add_ps(a[c], _mm512_zextps256_ps512(t));
                }
            }
        }
        // SAFETY: as the caller checked.
        unsafe { store_lanes(&acc, rows, out, stride) };
    }

    /// Stores the first `rows` rows of two columns' lanes at `out[(r · stride + c) · 16..]`.
    ///
    /// # Safety
    /// AVX-512 F; `out` holds `((rows − 1) · stride + 2) · 16` values.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn store_lanes(acc: &[[__m512; 2]; 4], rows: usize, out: &mut [f32], stride: usize) {
        for (r, a) in acc.iter().enumerate().take(rows) {
            for (c, v) in a.iter().enumerate() {
                // SAFETY: (r·stride + c)·16 + 16 ≤ out.len(), as the caller guarantees.
                unsafe { _mm512_storeu_ps(out.as_mut_ptr().add((r * stride + c) * 16), *v) };
            }
        }
    }

    /// Sixteen vectors' lane sums as one vector, by a transposing tree: pairs of vectors
    /// interleave and add until each lane holds one vector's total (45 shuffles and additions
    /// for 16 sums, where one `reduce_add` per vector takes about 8 each).
    ///
    /// # Safety
    /// AVX-512 F/BW and F16C, AVX2, FMA; `acc` holds 256 values, `mins` as [`super::reduce_row`]
    /// checks, `out` at most 16 long.
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
    pub(super) unsafe fn reduce_row(acc: &[f32], mins: Option<(&[u16], &[f32])>, out: &mut [f32]) {
        let mut t = [_mm512_setzero_ps(); 8];
        for (i, t) in t.iter_mut().enumerate() {
            // SAFETY: vectors 2i and 2i + 1 lie within the 256 values.
            let (a, b) = unsafe { (_mm512_loadu_ps(acc.as_ptr().add(32 * i)), _mm512_loadu_ps(acc.as_ptr().add(32 * i + 16))) };
            // Per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3].
            *t = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
        }
        let mut u = [_mm512_setzero_ps(); 4];
        for (i, u) in u.iter_mut().enumerate() {
            let (a, b) = (_mm512_castps_pd(t[2 * i]), _mm512_castps_pd(t[2 * i + 1]));
            // Per 128-bit lane: the lane's sums of vectors 4i..4i+4.
            *u = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
        }
        // [vectors 4i..4i+4 over 128-bit lanes 0+1, the same over lanes 2+3, then 4i+4..4i+8].
        let g0 = _mm512_add_ps(_mm512_shuffle_f32x4::<0b10_00_10_00>(u[0], u[1]), _mm512_shuffle_f32x4::<0b11_01_11_01>(u[0], u[1]));
        let g1 = _mm512_add_ps(_mm512_shuffle_f32x4::<0b10_00_10_00>(u[2], u[3]), _mm512_shuffle_f32x4::<0b11_01_11_01>(u[2], u[3]));
        let mut s = _mm512_add_ps(_mm512_shuffle_f32x4::<0b10_00_10_00>(g0, g1), _mm512_shuffle_f32x4::<0b11_01_11_01>(g0, g1));
        if let Some((m, xs)) = mins {
            let mut ms = _mm512_setzero_ps();
            for (b, &x) in xs.iter().enumerate() {
                // SAFETY: m holds 16 values per block of xs.
                let mv = _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(m.as_ptr().add(b * 16).cast()) });
                ms = _mm512_fmadd_ps(_mm512_set1_ps(x), mv, ms);
            }
            s = _mm512_add_ps(s, ms);
        }
        let mask = ((1u32 << out.len()) - 1) as u16;
        // SAFETY: the mask covers out.len() ≤ 16 values.
        unsafe { _mm512_mask_storeu_ps(out.as_mut_ptr(), mask, s) };
    }

    /// [`super::mins_scalar`] at AVX2: two halves of eight columns.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `m` holds 16 values per block of `xs`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn mins_avx2(m: &[u16], xs: &[f32], out: &mut [f32; 16]) {
        let mut h = [_mm256_setzero_ps(); 2];
        for (b, &x) in xs.iter().enumerate() {
            let xv = _mm256_set1_ps(x);
            for (j, h) in h.iter_mut().enumerate() {
                // SAFETY: b·16 + 8j + 8 ≤ m.len().
                let mv = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(m.as_ptr().add(b * 16 + 8 * j).cast()) });
                *h = _mm256_fmadd_ps(xv, mv, *h);
            }
        }
        for (j, h) in h.iter().enumerate() {
            // SAFETY: out holds 16 values.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(8 * j), *h) };
        }
    }

    /// [`q4x2_acc`] at AVX2: one block per register, `maddubs` then `madd` to int32, eight
    /// lanes per (row, column), each activation block loaded once for both columns.
    ///
    /// # Safety
    /// AVX2 and FMA; slices sized as [`super::acc2`] checks.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn q4x2_acc_avx2(qs: [&[u8]; 2], wd: [&[f32]; 2], x: XRows, rows: usize, out: &mut [f32], stride: usize) {
        let (k, kb) = (x.k, x.k / BLOCK);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); 2]; 4];
        for (b, (&d0, &d1)) in wd[0][..kb].iter().zip(&wd[1][..kb]).enumerate() {
            // SAFETY: b·16 + 16 ≤ k/2 ≤ each qs's length, and b·32 + 32 ≤ k within each row of x.
            let w = unsafe { [nibbles(qs[0].as_ptr().add(b * 16)), nibbles(qs[1].as_ptr().add(b * 16))] };
            let dw = [_mm256_set1_ps(d0), _mm256_set1_ps(d1)];
            for (r, a) in acc.iter_mut().enumerate().take(rows) {
                let xv = unsafe { _mm256_loadu_si256(x.q.as_ptr().add(r * k + b * BLOCK).cast()) };
                let dx = unsafe { _mm256_loadu_ps(x.dv.as_ptr().add((r * kb + b) * 8)) };
                for c in 0..2 {
                    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(w[c], xv), ones);
                    a[c] = _mm256_fmadd_ps(_mm256_mul_ps(dw[c], dx), _mm256_cvtepi32_ps(p), a[c]);
                }
            }
        }
        for (r, a) in acc.iter().enumerate().take(rows) {
            for (c, v) in a.iter().enumerate() {
                // SAFETY: (r·stride + c)·8 + 8 ≤ out.len(), as the caller checked.
                unsafe { _mm256_storeu_ps(out.as_mut_ptr().add((r * stride + c) * 8), *v) };
            }
        }
    }

    /// [`q4x2_acc_avx2`] for Q8_0 weights, one column after the other: `|w|` is the unsigned
    /// side and x takes w's sign. (Both columns in one pass ran out of AVX2's sixteen registers:
    /// the LM head against 64 rows took 32.9 ms against 29.1.)
    ///
    /// # Safety
    /// As [`q4x2_acc_avx2`].
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn q8x2_acc_avx2(wq: [&[i8]; 2], wd: [&[f32]; 2], x: XRows, rows: usize, out: &mut [f32], stride: usize) {
        let (k, kb) = (x.k, x.k / BLOCK);
        let ones = _mm256_set1_epi16(1);
        for c in 0..2 {
            let mut acc = [_mm256_setzero_ps(); 4];
            for (b, &d) in wd[c][..kb].iter().enumerate() {
                // SAFETY: b·32 + 32 ≤ k ≤ each wq's length, and likewise within each row of x.
                let w = unsafe { _mm256_loadu_si256(wq[c].as_ptr().add(b * BLOCK).cast()) };
                let (aw, dw) = (_mm256_sign_epi8(w, w), _mm256_set1_ps(d));
                for (r, a) in acc.iter_mut().enumerate().take(rows) {
                    let xv = unsafe { _mm256_loadu_si256(x.q.as_ptr().add(r * k + b * BLOCK).cast()) };
                    let dx = unsafe { _mm256_loadu_ps(x.dv.as_ptr().add((r * kb + b) * 8)) };
                    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, w)), ones);
                    *a = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(p), *a);
                }
            }
            for (r, a) in acc.iter().enumerate().take(rows) {
                // SAFETY: as in `q4x2_acc_avx2`.
                unsafe { _mm256_storeu_ps(out.as_mut_ptr().add((r * stride + c) * 8), *a) };
            }
        }
    }

    /// [`reduce_row`] at AVX2: two trees of eight columns' eight lanes, then the `m` part.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `acc` holds 128 values, `mins` as [`super::reduce_row`] checks,
    /// `out` at most 16 long.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn reduce_row_avx2(acc: &[f32], mins: Option<(&[u16], &[f32])>, out: &mut [f32]) {
        let mut sums = [0f32; 16];
        for h in 0..2 {
            let mut t = [_mm256_setzero_ps(); 4];
            for (i, t) in t.iter_mut().enumerate() {
                // SAFETY: vectors 8h + 2i and 8h + 2i + 1 lie within the 128 values.
                let (a, b) = unsafe { (_mm256_loadu_ps(acc.as_ptr().add(64 * h + 16 * i)), _mm256_loadu_ps(acc.as_ptr().add(64 * h + 16 * i + 8))) };
                *t = _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
            }
            let mut u = [_mm256_setzero_ps(); 2];
            for (i, u) in u.iter_mut().enumerate() {
                let (a, b) = (_mm256_castps_pd(t[2 * i]), _mm256_castps_pd(t[2 * i + 1]));
                *u = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)), _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
            }
            let s = _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(u[0], u[1]), _mm256_permute2f128_ps::<0x31>(u[0], u[1]));
            // SAFETY: 8h + 8 ≤ 16.
            unsafe { _mm256_storeu_ps(sums.as_mut_ptr().add(8 * h), s) };
        }
        if let Some((m, xs)) = mins {
            let mut ms = [0f32; 16];
            // SAFETY: F16C and FMA are enabled here; m holds 16 values per block of xs.
            unsafe { mins_avx2(m, xs, &mut ms) };
            for (s, m) in sums.iter_mut().zip(ms) {
                *s += m;
            }
        }
        out.copy_from_slice(&sums[..out.len()]);
    }
}
