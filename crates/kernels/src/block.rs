//! The block format every product shares: values come in blocks of [`BLOCK`], each with an f16
//! scale. A leaf of its own so that the dot products (`dot`) and the matrices built on them
//! (`quant`) both name it without naming each other.

/// Values per block.
pub const BLOCK: usize = 32;

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
