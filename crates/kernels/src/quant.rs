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
//! Q8_0 scales are f32 (GGUF's f16 widened on load). 4-bit blocks keep GGUF's f16 scales, 4
//! bytes a block fewer to stream, widened per tile of columns as used; their minimums are stored
//! grouped by sixteen columns, the columns whose `m` parts are summed at once.
//!
//! Activations are quantised per row and block to int8 with their own scale, as llama.cpp does
//! ([`Acts`], with each block's scaled sum for the `m` term), so a product is an int8 dot per
//! block and one multiply-add of the two scales.

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut, Range};

use rayon::prelude::*;

use crate::dot::{self, ROWS, XRows};
use crate::isa::{self, Isa};
use crate::team::Team;

pub use crate::block::{BLOCK, f16_to_f32};

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
    q: Aligned<i8>,
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
        self.q.resize(rows * k);
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
        XRows { q: &self.q[r * self.k..], d: &self.d[r * kb..], dv: &self.dv[r * kb * 8..], k: self.k }
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
    Q8 { q: Aligned<i8>, d: Vec<f32> },
    /// Scales as stored in GGUF (f16 bits): 20 bytes a block instead of 24 with f32, and a
    /// decoding step is bound by the bytes it streams; `d` is widened per tile as used. The
    /// minimums `mt` are grouped by sixteen columns, `[n / 16, blocks, 16]` (zero past `n`):
    /// the `m` part of a product is summed across sixteen columns at once.
    Q4 { qs: Aligned<u8>, d: Vec<u16>, mt: Vec<u16> },
}

/// A weight `[n, k]` in blocks along `k`, for `x Wᵀ`.
#[derive(Debug, Clone)]
pub struct QMatrix {
    n: usize,
    k: usize,
    blocks: Blocks,
}

/// Below this many multiply-adds a product runs on the calling thread: handing parts to the
/// team's other threads costs a few hundred nanoseconds (a 576 × 576 projection for one row is
/// about 7 µs; its 192-row keys and values, 2).
const PAR_MACS: usize = 1 << 15;

thread_local! {
    /// Each thread's tile buffers, reused across products.
    static SCRATCH: std::cell::RefCell<TileScratch> = std::cell::RefCell::default();
}

impl QMatrix {
    /// The Q8_0 copy of the row-major f32 weight `w` `[n, k]`; `None` when `k` is not a
    /// non-zero multiple of 32.
    pub fn q8_0(w: &[f32], n: usize, k: usize) -> Option<Self> {
        if k == 0 || !k.is_multiple_of(BLOCK) || w.len() != n * k {
            return None;
        }
        let mut q = Aligned::<i8>::zeroed(n * k);
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
                let (mut q, mut d) = (Aligned::<i8>::zeroed(n * k), Vec::with_capacity(n * kb));
                for (b, qb) in blocks.zip(q.chunks_exact_mut(BLOCK)) {
                    d.push(half(b));
                    for (dst, &v) in qb.iter_mut().zip(&b[2..]) {
                        *dst = v as i8;
                    }
                }
                Blocks::Q8 { q, d }
            }
            GgmlType::Q4_0 | GgmlType::Q4_1 => {
                let (mut qs, mut d, mut m) = (Aligned::<u8>::zeroed(n * k / 2), Vec::with_capacity(n * kb), Vec::with_capacity(n * kb));
                let bits = |b: &[u8]| u16::from_le_bytes([b[0], b[1]]);
                for (b, qb) in blocks.zip(qs.chunks_exact_mut(16)) {
                    d.push(bits(b));
                    if ty == GgmlType::Q4_0 {
                        // d·(q − 8) = d·q + (−8d); times a power of two, −8d is an f16 too.
                        m.push(f32_to_f16(-8.0 * half(b)).ok_or_else(|| format!("Q4_0 scale {} is too large for a 4-bit minimum", half(b)))?);
                        qb.copy_from_slice(&b[2..18]);
                    } else {
                        m.push(bits(&b[2..]));
                        qb.copy_from_slice(&b[4..20]);
                    }
                }
                Blocks::Q4 { qs, d, mt: group_mins(&m, n, kb) }
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
                q: Aligned::from_slice(&rows.iter().flat_map(|&r| q[r * k..(r + 1) * k].iter().copied()).collect::<Vec<_>>()),
                d: rows.iter().flat_map(|&r| d[r * kb..(r + 1) * kb].iter().copied()).collect(),
            },
            Blocks::Q4 { qs, d, mt } => {
                let m: Vec<u16> = rows.iter().flat_map(|&r| (0..kb).map(move |b| min_at(mt, kb, r, b))).collect();
                Blocks::Q4 {
                    qs: Aligned::from_slice(&rows.iter().flat_map(|&r| qs[r * k / 2..(r + 1) * k / 2].iter().copied()).collect::<Vec<_>>()),
                    d: rows.iter().flat_map(|&r| d[r * kb..(r + 1) * kb].iter().copied()).collect(),
                    mt: group_mins(&m, rows.len(), kb),
                }
            }
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
            Blocks::Q4 { qs, d, mt } => qs.len() + 2 * (d.len() + mt.len()),
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
            Blocks::Q4 { qs, d, mt } => {
                let kb = self.k / BLOCK;
                for (i, (qb, &s)) in qs.chunks_exact(16).zip(d).enumerate() {
                    let (s, mm) = (f16_to_f32(s), f16_to_f32(min_at(mt, kb, i / kb, i % kb)));
                    out.extend(qb.iter().map(|&v| s * f32::from(v & 0x0F) + mm));
                    out.extend(qb.iter().map(|&v| s * f32::from(v >> 4) + mm));
                }
            }
        }
        out
    }

    /// `out = x Wᵀ` `[m, n]` row-major for the quantised rows `x` `[m, k]`. With a `team`, the
    /// output columns split over its threads when the product is large enough to pay for it.
    /// Each output is one column's dot product with one row, whatever the split.
    ///
    /// # Panics
    /// If `x` is not `k` wide or `out` is not `m · n` long.
    pub fn matmul_t(&self, x: &Acts, out: &mut [f32], team: Option<&Team>) {
        self.matmul_t_isa(isa::current(), x, out, team);
    }

    /// [`QMatrix::matmul_t`] at a given instruction-set level (tests and benchmarks).
    pub fn matmul_t_isa(&self, isa: Isa, x: &Acts, out: &mut [f32], team: Option<&Team>) {
        let m = x.rows;
        assert!(x.k == self.k && out.len() == m * self.n, "q matmul: [{m}, {}] against [{}, {}]", x.k, self.n, self.k);
        if m == 0 {
            return;
        }
        // Tiles of columns: a tile's weight rows stay in cache while every group of ROWS
        // activation rows passes over them, and each pass writes 64 contiguous outputs per row
        // (a column-major buffer transposed at the end cost 6% of a 32-row step, most of it in
        // the LM head's 49,152 columns).
        // One row (a decoding step of one sequence) has nothing to keep in cache: tiles of 16
        // columns split a 576-column projection evenly over the cores (9 tiles of 64 did not).
        // Both widths are multiples of 16, the columns whose `m` parts and lanes are summed at once.
        let width = if m > ROWS { 64 } else { 16 };
        let tiles = self.n.div_ceil(width);
        let kb = self.k / BLOCK;
        let dst = OutPtr(out.as_mut_ptr());
        let run = |ts: Range<usize>| {
            SCRATCH.with_borrow_mut(|sc| {
                for t in ts {
                    let cs = t * width..((t + 1) * width).min(self.n);
                    sc.widen(isa, &self.blocks, cs.start * kb..cs.end * kb);
                    for r0 in (0..m).step_by(ROWS) {
                        self.pass(isa, cs.clone(), x, r0..(r0 + ROWS).min(m), sc, dst);
                    }
                }
            });
        };
        match team {
            Some(team) if team.threads() > 1 && self.n * self.k * m >= PAR_MACS => {
                // A few parts per thread: a thread that arrives late, or is slower, leaves
                // parts to the others.
                let parts = tiles.min(4 * team.threads());
                let per = tiles.div_ceil(parts);
                team.split(tiles.div_ceil(per), &|p| run(p * per..((p + 1) * per).min(tiles)));
            }
            _ => run(0..tiles),
        }
    }

    /// The rows `rs` (at most [`ROWS`]) of the product at the columns `cs` (a tile, starting at
    /// a multiple of 16), written through `dst`: the task that owns the tile alone writes them.
    fn pass(&self, isa: Isa, cs: Range<usize>, x: &Acts, rs: Range<usize>, sc: &mut TileScratch, dst: OutPtr) {
        #[cfg(target_arch = "x86_64")]
        if isa >= Isa::Avx2 {
            return self.pass_lanes(isa, cs, x, rs, sc, dst);
        }
        let _ = isa;
        let (k, kb, n) = (self.k, self.k / BLOCK, self.n);
        let (xr, mut col) = (x.x(rs.start), [0f32; ROWS]);
        for c in cs.clone() {
            let col = &mut col[..rs.len()];
            match &self.blocks {
                Blocks::Q8 { q, d } => dot::q8_scalar(&q[c * k..(c + 1) * k], &d[c * kb..(c + 1) * kb], xr, col),
                Blocks::Q4 { qs, .. } => {
                    let j = c - cs.start;
                    dot::q4_scalar(&qs[c * k / 2..(c + 1) * k / 2], &sc.d[j * kb..(j + 1) * kb], xr, col);
                }
            }
            for (r, &v) in rs.clone().zip(col.iter()) {
                // SAFETY: r·n + c < m·n = out.len(), within this task's tile.
                unsafe { *dst.get().add(r * n + c) = v };
            }
        }
        if let Blocks::Q4 { mt, .. } = &self.blocks {
            let mut sums = [0f32; 16];
            for g in cs.clone().step_by(16) {
                for r in rs.clone() {
                    dot::mins_scalar(&mt[g * kb..(g + 16) * kb], &x.s[r * kb..(r + 1) * kb], &mut sums);
                    for (c, v) in (g..cs.end).zip(sums) {
                        // SAFETY: as above.
                        unsafe { *dst.get().add(r * n + c) += v };
                    }
                }
            }
        }
    }

    /// [`QMatrix::pass`] at AVX-512 or AVX2: each pair of columns leaves its rows' sums in
    /// lanes, and sixteen columns' lanes are summed at once, with the 4-bit `m` part, into one
    /// store per row.
    #[cfg(target_arch = "x86_64")]
    fn pass_lanes(&self, isa: Isa, cs: Range<usize>, x: &Acts, rs: Range<usize>, sc: &mut TileScratch, dst: OutPtr) {
        let (k, kb, rows, lanes) = (self.k, self.k / BLOCK, rs.len(), dot::lanes(isa));
        let stride = cs.len().div_ceil(16) * 16;
        let TileScratch { d: wd, acc } = sc;
        acc.resize(rows * stride * lanes, 0.0);
        let xr = x.x(rs.start);
        for c in cs.clone().step_by(2) {
            // An odd last column goes with itself; its twin's lanes land in the padding.
            let (c2, j) = ((c + 1).min(cs.end - 1), c - cs.start);
            let j2 = c2 - cs.start;
            let cols = match &self.blocks {
                Blocks::Q8 { q, d } => dot::Cols::Q8 { q: [&q[c * k..], &q[c2 * k..]], d: [&d[c * kb..], &d[c2 * kb..]] },
                Blocks::Q4 { qs, .. } => dot::Cols::Q4 { q: [&qs[c * k / 2..], &qs[c2 * k / 2..]], d: [&wd[j * kb..], &wd[j2 * kb..]] },
            };
            dot::acc2(isa, cols, xr, rows, &mut acc[j * lanes..], stride);
        }
        for (i, r) in rs.enumerate() {
            for g in (0..cs.len()).step_by(16) {
                let c = cs.start + g;
                let mins = match &self.blocks {
                    Blocks::Q4 { mt, .. } => Some((&mt[c * kb..(c + 16) * kb], &x.s[r * kb..(r + 1) * kb])),
                    Blocks::Q8 { .. } => None,
                };
                // SAFETY: row r, columns c..c + len of the output (r·n + c + len ≤ m·n), within
                // this task's tile and written by nothing else while the slice lives.
                let out = unsafe { std::slice::from_raw_parts_mut(dst.get().add(r * self.n + c), (cs.end - c).min(16)) };
                dot::reduce_row(isa, &acc[(i * stride + g) * lanes..], mins, out);
            }
        }
    }
}

/// Bytes (`i8` or `u8`) starting on a 64-byte boundary. The AVX-512 kernels load a pair of
/// blocks (or a row's 64 activations) at a time, one cache line only where the buffer starts on
/// a line: a large `Vec` from malloc starts 16 bytes past a page, so that every such load spanned
/// two lines (576 × 576 Q4_1 against 16 rows: 51.8 → 48.1 µs).
#[derive(Clone)]
pub(crate) struct Aligned<T> {
    lines: Vec<Line>,
    len: usize,
    _t: PhantomData<T>,
}

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// One-byte types for which every bit pattern is a value.
pub(crate) trait Byte: Copy {}
impl Byte for i8 {}
impl Byte for u8 {}

impl<T: Byte> Aligned<T> {
    fn zeroed(len: usize) -> Self {
        Self { lines: vec![Line([0; 64]); len.div_ceil(64)], len, _t: PhantomData }
    }

    fn from_slice(v: &[T]) -> Self {
        let mut a = Self::zeroed(v.len());
        a.copy_from_slice(v);
        a
    }

    /// Keeps the lines it has: values past the old length are whatever they held (zero in new
    /// lines); the one caller overwrites them all.
    fn resize(&mut self, len: usize) {
        self.lines.resize(len.div_ceil(64), Line([0; 64]));
        self.len = len;
    }
}

impl<T> Default for Aligned<T> {
    fn default() -> Self {
        Self { lines: Vec::new(), len: 0, _t: PhantomData }
    }
}

impl<T> std::fmt::Debug for Aligned<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Aligned({} bytes)", self.len)
    }
}

impl<T: Byte> Deref for Aligned<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: `T` is one byte with every bit pattern a value (`Byte`), and the lines hold
        // at least `len` initialised bytes.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast(), self.len) }
    }
}

impl<T: Byte> DerefMut for Aligned<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, borrowed mutably through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast(), self.len) }
    }
}

/// Minimums row-major `[n, kb]` grouped by sixteen columns, `[n / 16, kb, 16]`, zero past `n`.
fn group_mins(m: &[u16], n: usize, kb: usize) -> Vec<u16> {
    let mut mt = vec![0u16; n.div_ceil(16) * kb * 16];
    for (i, &v) in m.iter().enumerate() {
        let (c, b) = (i / kb, i % kb);
        mt[((c / 16) * kb + b) * 16 + c % 16] = v;
    }
    mt
}

/// Column `c`'s minimum of block `b` in the grouped layout.
fn min_at(mt: &[u16], kb: usize, c: usize, b: usize) -> u16 {
    mt[((c / 16) * kb + b) * 16 + c % 16]
}

/// A tile task's buffers: its columns' 4-bit scales widened to f32 (once per tile, not per
/// column and group of rows: widening per column was 6% of a one-sequence decoding profile),
/// and AVX-512's unsummed lanes.
#[derive(Default)]
struct TileScratch {
    d: Vec<f32>,
    acc: Vec<f32>,
}

impl TileScratch {
    fn widen(&mut self, isa: Isa, blocks: &Blocks, range: Range<usize>) {
        if let Blocks::Q4 { d, .. } = blocks {
            self.d.resize(range.len(), 0.0);
            dot::widen(isa, &d[range], &mut self.d);
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
    /// block counts (the AVX-512 pair loop's tail), column counts that end mid-pair and
    /// mid-group of 16, several tiles, serial and split over a team (the last two shapes are
    /// above [`PAR_MACS`] even for one row): the product
    /// equals the exact product of the dequantised operands up to f32 rounding.
    #[test]
    fn products_match_the_dequantised_reference_at_every_level() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let shapes = [(GgmlType::Q8_0, 96, 37), (GgmlType::Q8_0, 128, 37), (GgmlType::Q4_0, 96, 37), (GgmlType::Q4_1, 96, 37), (GgmlType::Q4_1, 256, 37), (GgmlType::Q4_1, 96, 150), (GgmlType::Q4_1, 256, 150), (GgmlType::Q8_0, 256, 150)];
        for (ty, k, n) in shapes {
            let q = QMatrix::from_ggml(ty, &ggml_bytes(ty, n, k, 3), n, k).unwrap();
            let w = q.dequantize();
            for m in [1usize, 2, 4, 5, 9] {
                let mut x = Acts::new();
                x.quantize(&normals(m as u64, m * k), m, k);
                let want = reference(&w, &x, n, k);
                for isa in Isa::available() {
                    for split in [false, true] {
                        let mut got = vec![0f32; m * n];
                        if split {
                            pool.install(|| Team::run(|team| q.matmul_t_isa(isa, &x, &mut got, Some(team))));
                        } else {
                            q.matmul_t_isa(isa, &x, &mut got, None);
                        }
                        assert_close(&got, &want, &format!("{ty:?} k={k} m={m} {isa:?} split={split}"));
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
        q.matmul_t(&acts, &mut got, None);
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
