//! Weights in blocks of 32 values and their product with f32 activations.
//!
//! Two layouts cover the formats rlx decodes with:
//! - **Q8_0**: 32 int8 values and one scale per block (`w = d·q`). rlx makes these from f32
//!   weights (weights that change every step, or models stored in f32/bf16), and reads them from
//!   GGUF files as they are.
//! - **4-bit** (`w = d·q + m`, `q` in 0..15, two per byte): GGUF's Q4_1 as stored, and Q4_0
//!   (`w = d·(q − 8)`) as `m = −8d`, which is exact. Decoding a GGUF model's frozen weights in
//!   their own format streams 0.625 bytes per weight instead of Q8_0's 1.0625, and multiplies by
//!   exactly the weights the trainer dequantised from the file (rlx's own Q8_0 copy would
//!   re-round them).
//!
//! Scales are f32 (GGUF's f16 scales are widened on load): the kernels then need no
//! conversions, at 4 bytes per block more than GGUF.
//!
//! Activations are quantised per row and block to int8 with their own scale, as llama.cpp does
//! ([`Acts`], with each block's scaled sum for the `m` term), so a product is an int8 dot per
//! block and one multiply-add of the two scales.

use rayon::prelude::*;

use crate::dot::{self, ROWS, XRows};
use crate::isa::{self, Isa};

/// Values per block.
pub const BLOCK: usize = 32;

/// A GGUF tensor type [`QMatrix::from_ggml`] reads as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgmlType {
    /// `d` (f16), 16 bytes of 4-bit `q`: `d·(q − 8)`.
    Q4_0,
    /// `d`, `m` (f16), 16 bytes of 4-bit `q`: `d·q + m`.
    Q4_1,
    /// `d` (f16), 32 int8 `q`: `d·q`.
    Q8_0,
}

impl GgmlType {
    /// Bytes per block of 32 values in the file.
    pub fn block_bytes(self) -> usize {
        match self {
            GgmlType::Q4_0 => 18,
            GgmlType::Q4_1 => 20,
            GgmlType::Q8_0 => 34,
        }
    }
}

/// Activation rows quantised to int8 per block of 32 (values, scales, and `d·Σq` per block).
#[derive(Debug, Default, Clone)]
pub struct Acts {
    q: Vec<i8>,
    d: Vec<f32>,
    /// Each block's scale eight times over: the SIMD kernels load a block's (or, at 512 bits,
    /// two blocks') scales as one vector instead of broadcasting scalars per row and block.
    dv: Vec<f32>,
    s: Vec<f32>,
    rows: usize,
    k: usize,
}

impl Acts {
    /// Empty buffers (reused by [`Acts::quantize`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Quantises `x` `[rows, k]` (`k` a multiple of 32), replacing what was held.
    ///
    /// # Panics
    /// If `k` is not a multiple of 32 or `x` is not `rows · k` long.
    pub fn quantize(&mut self, x: &[f32], rows: usize, k: usize) {
        assert!(k.is_multiple_of(BLOCK) && x.len() == rows * k, "activations of {} values as [{rows}, {k}]", x.len());
        let kb = k / BLOCK;
        self.q.resize(rows * k, 0);
        self.d.resize(rows * kb, 0.0);
        self.s.resize(rows * kb, 0.0);
        self.dv.resize(rows * kb * 8, 0.0);
        (self.rows, self.k) = (rows, k);
        let blocks = x.chunks_exact(BLOCK).zip(self.q.chunks_exact_mut(BLOCK));
        for ((xb, qb), ((d, s), dv)) in blocks.zip(self.d.iter_mut().zip(self.s.iter_mut()).zip(self.dv.chunks_exact_mut(8))) {
            let (scale, sum) = quantize_block(xb, qb);
            *d = scale;
            *s = scale * sum as f32;
            dv.fill(scale);
        }
    }

    /// Rows held.
    pub fn rows(&self) -> usize {
        self.rows
    }

    fn x(&self, r: usize) -> XRows<'_> {
        let kb = self.k / BLOCK;
        XRows { q: &self.q[r * self.k..], d: &self.d[r * kb..], dv: &self.dv[r * kb * 8..], s: &self.s[r * kb..], k: self.k }
    }
}

/// Rounds one block to int8 with scale `max|x| / 127`; returns the scale and the sum of the
/// int8 values.
fn quantize_block(x: &[f32], q: &mut [i8]) -> (f32, i32) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let scale = amax / 127.0;
    let inv = if scale == 0.0 { 0.0 } else { 1.0 / scale };
    let mut sum = 0i32;
    for (qv, &xv) in q.iter_mut().zip(x) {
        // Round to nearest (ties to even) by the 1.5·2²³ trick: `f32::round` is a libm call
        // that was 7% of a decoding profile. |x·inv| ≤ 127 < 2²².
        const MAGIC: f32 = 12_582_912.0;
        *qv = ((xv * inv + MAGIC) - MAGIC) as i8;
        sum += i32::from(*qv);
    }
    (scale, sum)
}

#[derive(Debug, Clone)]
enum Blocks {
    Q8 { q: Vec<i8>, d: Vec<f32> },
    /// Scales as stored in GGUF (f16 bits): 20 bytes a block instead of 24 with f32, and a
    /// decoding step is bound by the bytes it streams; they are widened per column as used.
    Q4 { qs: Vec<u8>, d: Vec<u16>, m: Vec<u16> },
}

/// A weight `[n, k]` in blocks along `k`, for `x Wᵀ`.
#[derive(Debug, Clone)]
pub struct QMatrix {
    n: usize,
    k: usize,
    blocks: Blocks,
}

/// Below this many multiply-adds a product runs on the calling thread: waking a second thread
/// costs more than it saves (a 576 × 576 projection for one row is a few microseconds).
const PAR_MACS: usize = 1 << 17;

impl QMatrix {
    /// The Q8_0 copy of the row-major f32 weight `w` `[n, k]`; `None` when `k` is not a
    /// non-zero multiple of 32.
    pub fn q8_0(w: &[f32], n: usize, k: usize) -> Option<Self> {
        if k == 0 || !k.is_multiple_of(BLOCK) || w.len() != n * k {
            return None;
        }
        let mut q = vec![0i8; n * k];
        let mut d = vec![0f32; n * k / BLOCK];
        let rows = w.chunks_exact(k).zip(q.chunks_exact_mut(k).zip(d.chunks_exact_mut(k / BLOCK)));
        let quantize_row = |(wr, (qr, dr)): (&[f32], (&mut [i8], &mut [f32]))| {
            for ((wb, qb), db) in wr.chunks_exact(BLOCK).zip(qr.chunks_exact_mut(BLOCK)).zip(dr.iter_mut()) {
                *db = quantize_block(wb, qb).0;
            }
        };
        if n * k >= 1 << 20 {
            // Whole weight matrices, quantised once per snapshot: worth every core.
            rows.par_bridge().for_each(quantize_row);
        } else {
            rows.for_each(quantize_row);
        }
        Some(Self { n, k, blocks: Blocks::Q8 { q, d } })
    }

    /// The weight `[n, k]` from a GGUF tensor's raw bytes (`n` rows of `k / 32` blocks).
    ///
    /// # Errors
    /// `k` not a multiple of 32, or `bytes` not the size `n` rows of this type take.
    pub fn from_ggml(ty: GgmlType, bytes: &[u8], n: usize, k: usize) -> Result<Self, String> {
        let kb = k / BLOCK;
        if k == 0 || !k.is_multiple_of(BLOCK) || bytes.len() != n * kb * ty.block_bytes() {
            return Err(format!("{ty:?} tensor [{n}, {k}] of {} bytes (expected {})", bytes.len(), n * kb * ty.block_bytes()));
        }
        let half = |b: &[u8]| f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
        let blocks = bytes.chunks_exact(ty.block_bytes());
        let out = match ty {
            GgmlType::Q8_0 => {
                let (mut q, mut d) = (Vec::with_capacity(n * k), Vec::with_capacity(n * kb));
                for b in blocks {
                    d.push(half(b));
                    q.extend(b[2..].iter().map(|&v| v as i8));
                }
                Blocks::Q8 { q, d }
            }
            GgmlType::Q4_0 | GgmlType::Q4_1 => {
                let (mut qs, mut d, mut m) = (Vec::with_capacity(n * k / 2), Vec::with_capacity(n * kb), Vec::with_capacity(n * kb));
                let bits = |b: &[u8]| u16::from_le_bytes([b[0], b[1]]);
                for b in blocks {
                    d.push(bits(b));
                    if ty == GgmlType::Q4_0 {
                        // d·(q − 8) = d·q + (−8d); times a power of two, −8d is an f16 too.
                        m.push(f32_to_f16(-8.0 * half(b)).ok_or_else(|| format!("Q4_0 scale {} is too large for a 4-bit minimum", half(b)))?);
                        qs.extend_from_slice(&b[2..18]);
                    } else {
                        m.push(bits(&b[2..]));
                        qs.extend_from_slice(&b[4..20]);
                    }
                }
                Blocks::Q4 { qs, d, m }
            }
        };
        Ok(Self { n, k, blocks: out })
    }

    /// A matrix of the rows `rows` of this one, in that order (llama.cpp's converter permutes
    /// the rows of q/k projections; rows are whole blocks, so no requantisation).
    ///
    /// # Panics
    /// If a row index is out of range.
    pub fn select_rows(&self, rows: &[usize]) -> Self {
        let (k, kb) = (self.k, self.k / BLOCK);
        let blocks = match &self.blocks {
            Blocks::Q8 { q, d } => Blocks::Q8 {
                q: rows.iter().flat_map(|&r| q[r * k..(r + 1) * k].iter().copied()).collect(),
                d: rows.iter().flat_map(|&r| d[r * kb..(r + 1) * kb].iter().copied()).collect(),
            },
            Blocks::Q4 { qs, d, m } => Blocks::Q4 {
                qs: rows.iter().flat_map(|&r| qs[r * k / 2..(r + 1) * k / 2].iter().copied()).collect(),
                d: rows.iter().flat_map(|&r| d[r * kb..(r + 1) * kb].iter().copied()).collect(),
                m: rows.iter().flat_map(|&r| m[r * kb..(r + 1) * kb].iter().copied()).collect(),
            },
        };
        Self { n: rows.len(), k, blocks }
    }

    /// Output width (rows of the weight).
    pub fn n(&self) -> usize {
        self.n
    }

    /// Input width.
    pub fn k(&self) -> usize {
        self.k
    }

    /// `"q8_0"` or `"q4"`.
    pub fn format(&self) -> &'static str {
        match self.blocks {
            Blocks::Q8 { .. } => "q8_0",
            Blocks::Q4 { .. } => "q4",
        }
    }

    /// Bytes held (what a product streams).
    pub fn bytes(&self) -> usize {
        match &self.blocks {
            Blocks::Q8 { q, d } => q.len() + 4 * d.len(),
            Blocks::Q4 { qs, d, m } => qs.len() + 2 * (d.len() + m.len()),
        }
    }

    /// The f32 values `[n, k]` the blocks stand for.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.n * self.k);
        match &self.blocks {
            Blocks::Q8 { q, d } => {
                for (qb, &s) in q.chunks_exact(BLOCK).zip(d) {
                    out.extend(qb.iter().map(|&v| s * f32::from(v)));
                }
            }
            Blocks::Q4 { qs, d, m } => {
                for ((qb, &s), &mm) in qs.chunks_exact(16).zip(d).zip(m) {
                    let (s, mm) = (f16_to_f32(s), f16_to_f32(mm));
                    out.extend(qb.iter().map(|&v| s * f32::from(v & 0x0F) + mm));
                    out.extend(qb.iter().map(|&v| s * f32::from(v >> 4) + mm));
                }
            }
        }
        out
    }

    /// `out = x Wᵀ` `[m, n]` row-major for the quantised rows `x` `[m, k]`. With `par`, the
    /// output columns split over rayon's pool when the product is large enough to pay for it.
    /// Each output is one column's dot product with one row, whatever the split.
    ///
    /// # Panics
    /// If `x` is not `k` wide or `out` is not `m · n` long.
    pub fn matmul_t(&self, x: &Acts, out: &mut [f32], par: bool) {
        self.matmul_t_isa(isa::current(), x, out, par);
    }

    /// [`QMatrix::matmul_t`] at a given instruction-set level (tests and benchmarks).
    pub fn matmul_t_isa(&self, isa: Isa, x: &Acts, out: &mut [f32], par: bool) {
        let m = x.rows;
        assert!(x.k == self.k && out.len() == m * self.n, "q matmul: [{m}, {}] against [{}, {}]", x.k, self.n, self.k);
        if m == 0 {
            return;
        }
        let threads = if par && self.n * self.k * m >= PAR_MACS { rayon::current_num_threads() } else { 1 };
        // Tiles of columns: a tile's weight rows stay in cache while every group of ROWS
        // activation rows passes over them, and each pass writes 64 contiguous outputs per row
        // (a column-major buffer transposed at the end cost 6% of a 32-row step, most of it in
        // the LM head's 49,152 columns).
        // One row (a decoding step of one sequence) has nothing to keep in cache: tiles of 16
        // columns split a 576-column projection evenly over the cores (9 tiles of 64 did not).
        let width = if m > ROWS { 64 } else { 16 };
        let tiles = self.n.div_ceil(width);
        let kb = self.k / BLOCK;
        let dst = OutPtr(out.as_mut_ptr());
        let tile = |scales: &mut Scales, t: usize| {
            let (c0, c1) = (t * width, ((t + 1) * width).min(self.n));
            scales.widen(isa, &self.blocks, c0 * kb..c1 * kb);
            let mut buf = [[0f32; ROWS]; 2];
            for r0 in (0..m).step_by(ROWS) {
                let rows = (m - r0).min(ROWS);
                // Columns two at a time (the last alone when the tile's count is odd).
                for c in (c0..c1).step_by(2) {
                    let cols = (c1 - c).min(2);
                    let [b0, b1] = &mut buf;
                    self.columns(isa, (c..c + cols, c - c0), x, r0, [&mut b0[..rows], &mut b1[..rows]], scales);
                    for (j, col) in buf[..cols].iter().enumerate() {
                        for (i, &v) in col[..rows].iter().enumerate() {
                            // SAFETY: (r0 + i)·n + c + j < m·n = out.len(), and each (row,
                            // column) is written by the one task that owns the column's tile.
                            unsafe { *dst.get().add((r0 + i) * self.n + c + j) = v };
                        }
                    }
                }
            }
        };
        if threads == 1 {
            let mut scales = Scales::default();
            (0..tiles).for_each(|t| tile(&mut scales, t));
        } else {
            // Many rows: two chunks of tiles per thread, so that a core busy elsewhere (the
            // trainer, the sandbox) leaves its second chunk to be stolen. A few rows: one chunk
            // per thread, a product being a few microseconds of work per core.
            let per = if m > ROWS { threads * 2 } else { threads };
            (0..tiles).into_par_iter().with_min_len(tiles.div_ceil(per)).for_each_init(Scales::default, tile);
        }
    }

    /// Columns `cs.0` (one or two; the first is column `cs.1` of its tile) against the up to
    /// [`ROWS`] rows of `x` from `r0`; `s` holds the tile's widened 4-bit scales.
    fn columns(&self, isa: Isa, cs: (std::ops::Range<usize>, usize), x: &Acts, r0: usize, out: [&mut [f32]; 2], s: &Scales) {
        let (k, kb) = (self.k, self.k / BLOCK);
        let ((c, cols), j) = ((cs.0.start, cs.0.len()), cs.1);
        let xr = x.x(r0);
        let [o0, o1] = out;
        match &self.blocks {
            Blocks::Q8 { q, d } => {
                let (w, ds) = (|c: usize| &q[c * k..(c + 1) * k], |c: usize| &d[c * kb..(c + 1) * kb]);
                if cols == 2 {
                    dot::q8x2(isa, [w(c), w(c + 1)], [ds(c), ds(c + 1)], xr, [o0, o1]);
                } else {
                    dot::q8(isa, w(c), ds(c), xr, o0);
                }
            }
            Blocks::Q4 { qs, .. } => {
                let w = |c: usize| &qs[c * k / 2..(c + 1) * k / 2];
                let (d, m) = (|j: usize| &s.d[j * kb..(j + 1) * kb], |j: usize| &s.m[j * kb..(j + 1) * kb]);
                if cols == 2 {
                    dot::q4x2(isa, [w(c), w(c + 1)], [d(j), d(j + 1)], [m(j), m(j + 1)], xr, [o0, o1]);
                } else {
                    dot::q4(isa, w(c), d(j), m(j), xr, o0);
                }
            }
        }
    }
}

/// A tile's 4-bit scales widened to f32 (once per tile, not per column and group of rows:
/// widening per column was 6% of a one-sequence decoding profile).
#[derive(Default)]
struct Scales {
    d: Vec<f32>,
    m: Vec<f32>,
}

impl Scales {
    fn widen(&mut self, isa: Isa, blocks: &Blocks, range: std::ops::Range<usize>) {
        if let Blocks::Q4 { d, m, .. } = blocks {
            self.d.resize(range.len(), 0.0);
            self.m.resize(range.len(), 0.0);
            dot::widen(isa, &d[range.clone()], &mut self.d);
            dot::widen(isa, &m[range], &mut self.m);
        }
    }
}

/// The output of a product, shared by the tasks that write its disjoint column tiles.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);

// SAFETY: tasks write disjoint elements and the product waits for all of them.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// Through a method, so that closures capture the `Sync` wrapper and not the raw pointer.
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// Single to half precision, exactly, or `None` where `x` has no exact f16 form (Q4_0's −8d
/// always has one unless it overflows).
fn f32_to_f16(x: f32) -> Option<u16> {
    let sign = ((x.to_bits() >> 16) & 0x8000) as u16;
    let a = x.abs();
    if a == 0.0 {
        return Some(sign);
    }
    // Normal f16: exponent −14..=15 and 10 fraction bits; subnormal: multiples of 2⁻²⁴.
    let h = if a >= 2f32.powi(-14) {
        let bits = a.to_bits();
        let exp = ((bits >> 23) & 0xFF) as i32 - 127;
        if exp > 15 || bits & 0x1FFF != 0 {
            return None;
        }
        (((exp + 15) as u16) << 10) | ((bits >> 13) & 0x3FF) as u16
    } else {
        let units = a * 2f32.powi(24);
        if units.fract() != 0.0 {
            return None;
        }
        units as u16
    };
    let out = sign | h;
    (f16_to_f32(out) == x).then_some(out)
}

/// IEEE half to single precision (GGUF block scales).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1F);
    let frac = u32::from(h & 0x3FF);
    let bits = match (exp, frac) {
        (0, 0) => sign,
        // Subnormal: value frac·2⁻²⁴, exact in f32.
        (0, _) => return if sign != 0 { -(frac as f32) * 2f32.powi(-24) } else { frac as f32 * 2f32.powi(-24) },
        (31, 0) => sign | 0x7F80_0000,
        (31, _) => sign | 0x7FC0_0000,
        _ => sign | ((exp + 112) << 23) | (frac << 13),
    };
    f32::from_bits(bits)
}

/// Deterministic test data without a dependency.
#[cfg(test)]
pub(crate) mod tests_support {
    /// SplitMix64 uniforms through Box-Muller.
    pub(crate) fn normals(seed: u64, n: usize) -> Vec<f32> {
        let mut s = seed;
        let mut next = || {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        };
        (0..n).map(|_| ((-2.0 * next().max(1e-300).ln()).sqrt() * (std::f64::consts::TAU * next()).cos()) as f32).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::normals;
    use super::*;

    fn to_f16(x: f32) -> u16 {
        // Round-to-nearest for normal values only (tests pick scales in the normal range).
        let b = x.to_bits();
        let sign = ((b >> 16) & 0x8000) as u16;
        let exp = ((b >> 23) & 0xFF) as i32 - 127 + 15;
        let frac = (b & 0x7F_FFFF) + 0x1000;
        let (exp, frac) = if frac & 0x80_0000 != 0 { (exp + 1, 0) } else { (exp, frac >> 13) };
        sign | ((exp as u16) << 10) | frac as u16
    }

    /// GGUF bytes of a random `[n, k]` tensor of type `ty` (random codes and scales).
    fn ggml_bytes(ty: GgmlType, n: usize, k: usize, seed: u64) -> Vec<u8> {
        let r = normals(seed, n * k * 2);
        let mut out = Vec::new();
        for b in 0..n * k / BLOCK {
            let v = &r[b * 64..(b + 1) * 64];
            out.extend_from_slice(&to_f16(0.01 + v[0].abs() * 0.02).to_le_bytes());
            match ty {
                GgmlType::Q8_0 => out.extend(v[1..33].iter().map(|x| ((x * 40.0).clamp(-127.0, 127.0) as i8) as u8)),
                GgmlType::Q4_0 | GgmlType::Q4_1 => {
                    if ty == GgmlType::Q4_1 {
                        out.extend_from_slice(&to_f16(-0.1 * v[40].abs()).to_le_bytes());
                    }
                    out.extend(v[1..17].iter().map(|x| (x.abs() * 97.0) as u8));
                }
            }
        }
        out
    }

    /// The straightforward product of the dequantised weights with the dequantised activations.
    fn reference(w: &[f32], x: &Acts, n: usize, k: usize) -> Vec<f32> {
        let xd: Vec<f32> = (0..x.rows * k).map(|i| x.d[i / BLOCK] * f32::from(x.q[i])).collect();
        let mut out = vec![0f32; x.rows * n];
        for r in 0..x.rows {
            for c in 0..n {
                out[r * n + c] = (0..k).map(|i| f64::from(xd[r * k + i]) * f64::from(w[c * k + i])).sum::<f64>() as f32;
            }
        }
        out
    }

    fn assert_close(got: &[f32], want: &[f32], what: &str) {
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= 2e-4 * w.abs().max(1.0), "{what}: element {i}: {g} vs {w}");
        }
    }

    /// Every format, every instruction-set level, 1–9 rows (partial passes of 4), odd and even
    /// block counts (the AVX-512 pair loop's tail), serial and split over threads: the product
    /// equals the exact product of the dequantised operands up to f32 rounding.
    #[test]
    fn products_match_the_dequantised_reference_at_every_level() {
        for (ty, k) in [(GgmlType::Q8_0, 96), (GgmlType::Q8_0, 128), (GgmlType::Q4_0, 96), (GgmlType::Q4_1, 96), (GgmlType::Q4_1, 256)] {
            let n = 37;
            let q = QMatrix::from_ggml(ty, &ggml_bytes(ty, n, k, 3), n, k).unwrap();
            let w = q.dequantize();
            for m in [1usize, 2, 4, 5, 9] {
                let mut x = Acts::new();
                x.quantize(&normals(m as u64, m * k), m, k);
                let want = reference(&w, &x, n, k);
                for isa in Isa::available() {
                    for par in [false, true] {
                        let mut got = vec![0f32; m * n];
                        q.matmul_t_isa(isa, &x, &mut got, par);
                        assert_close(&got, &want, &format!("{ty:?} k={k} m={m} {isa:?} par={par}"));
                    }
                }
            }
        }
    }

    /// Q8_0 from f32 errs by at most half a step per value, and products by the block rounding
    /// of both operands (about 0.08 standard deviations over 96 unit-variance terms).
    #[test]
    fn q8_0_from_f32_is_within_half_a_step() {
        let (n, k) = (70, 96);
        let w = normals(5, n * k);
        let q = QMatrix::q8_0(&w, n, k).expect("k is a multiple of 32");
        for (b, (orig, back)) in w.chunks_exact(BLOCK).zip(q.dequantize().chunks_exact(BLOCK)).enumerate() {
            let step = orig.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
            for (o, r) in orig.iter().zip(back) {
                assert!((o - r).abs() <= 0.5 * step + 1e-6, "block {b}: {o} -> {r}");
            }
        }
        let x = normals(6, 3 * k);
        let mut acts = Acts::new();
        acts.quantize(&x, 3, k);
        let mut got = vec![0f32; 3 * n];
        q.matmul_t(&acts, &mut got, false);
        for r in 0..3 {
            for c in 0..n {
                let exact: f32 = (0..k).map(|i| x[r * k + i] * w[c * k + i]).sum();
                assert!((got[r * n + c] - exact).abs() < 0.5, "{r},{c}: {} vs {exact}", got[r * n + c]);
            }
        }
        assert!(QMatrix::q8_0(&w[..4 * 48], 4, 48).is_none(), "48 is not a multiple of 32");
    }

    /// GGUF's block layouts decode to the values llama.cpp defines (checked by hand on one
    /// block each), and row selection moves whole rows.
    #[test]
    fn ggml_blocks_decode_as_llama_cpp_defines_them() {
        let mut q41 = to_f16(0.5).to_le_bytes().to_vec();
        q41.extend_from_slice(&to_f16(-1.0).to_le_bytes());
        q41.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let w = QMatrix::from_ggml(GgmlType::Q4_1, &q41, 1, 32).unwrap().dequantize();
        assert_eq!(w[0], -1.0);
        assert_eq!(w[3], 0.5);
        assert_eq!(w[16], 6.5, "element 16 is the high nibble of byte 0 (15)");
        let mut q40 = to_f16(2.0).to_le_bytes().to_vec();
        q40.extend((0..16u8).map(|j| j | (j << 4)));
        let w = QMatrix::from_ggml(GgmlType::Q4_0, &q40, 1, 32).unwrap().dequantize();
        assert_eq!((w[0], w[8], w[31]), (-16.0, 0.0, 14.0));
        let mut q80 = to_f16(0.25).to_le_bytes().to_vec();
        q80.extend((0..32).map(|j: i32| ((j - 16) as i8) as u8));
        let w = QMatrix::from_ggml(GgmlType::Q8_0, &q80, 1, 32).unwrap().dequantize();
        assert_eq!((w[0], w[16], w[31]), (-4.0, 0.0, 3.75));
        assert!(QMatrix::from_ggml(GgmlType::Q8_0, &q80[..30], 1, 32).is_err());
        let two = QMatrix::from_ggml(GgmlType::Q4_1, &[q41.clone(), ggml_bytes(GgmlType::Q4_1, 1, 32, 1)].concat(), 2, 32).unwrap();
        let swapped = two.select_rows(&[1, 0]).dequantize();
        let orig = two.dequantize();
        assert_eq!(&swapped[..32], &orig[32..]);
        assert_eq!(&swapped[32..], &orig[..32]);
    }

    #[test]
    fn f16_widening_is_exact() {
        assert_eq!(f16_to_f32(0x3C00), 1.0);
        assert_eq!(f16_to_f32(0xC000), -2.0);
        assert_eq!(f16_to_f32(0x7BFF), 65504.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x3555), 0.333_251_95);
        assert!(f16_to_f32(0x7C00).is_infinite());
        for h in [0x3C00u16, 0xC000, 0x7BFF, 0x0001, 0x3555, 0x8400, 0x03FF] {
            assert_eq!(f32_to_f16(f16_to_f32(h)), Some(h), "{h:#x}");
        }
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-12)), None, "not representable");
        assert_eq!(f32_to_f16(1e6), None, "overflows");
    }
}
