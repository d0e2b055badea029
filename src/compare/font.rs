//! The one font of every chart: a subset of DejaVu Sans embedded in the binary
//! (`assets/DejaVuSans-subset.ttf`, 18 KB; provenance and license in `assets/README.md`).
//!
//! One font for measuring, rasterising (PNG) and displaying (the HTML embeds it as a `data:`
//! URL) means a label that fits when rlx lays the chart out fits on every screen, and a PNG needs
//! no fonts installed on the machine (slim containers have none; fontconfig-based routes crash
//! there).

use std::sync::OnceLock;

/// The font file.
pub(crate) const TTF: &[u8] = include_bytes!("assets/DejaVuSans-subset.ttf");

/// The CSS family name the HTML report declares for [`TTF`].
pub(crate) const FAMILY: &str = "rlx-sans";

/// The parsed font.
pub(crate) fn face() -> &'static ttf_parser::Face<'static> {
    static FACE: OnceLock<ttf_parser::Face<'static>> = OnceLock::new();
    FACE.get_or_init(|| ttf_parser::Face::parse(TTF, 0).expect("the embedded font parses"))
}

/// The glyph of `c`, or the font's "missing glyph" box for characters outside the subset.
pub(crate) fn glyph(c: char) -> ttf_parser::GlyphId {
    face().glyph_index(c).unwrap_or(ttf_parser::GlyphId(0))
}

/// Width in pixels of `text` at `size` px (advance widths; the subset has no kerning).
pub(crate) fn width(text: &str, size: f32) -> f32 {
    let f = face();
    let scale = size / f32::from(f.units_per_em());
    text.chars().map(|c| f32::from(f.glyph_hor_advance(glyph(c)).unwrap_or(0)) * scale).sum()
}

/// `text` shortened with `…` in the middle until it fits `max` px: run ids differ at their ends
/// (the hash) and share their starts (the experiment name), so both ends stay visible.
pub(crate) fn fit(text: &str, size: f32, max: f32) -> String {
    if width(text, size) <= max {
        return text.to_string();
    }
    let chars: Vec<char> = text.chars().collect();
    let mut keep = chars.len();
    while keep > 2 {
        keep -= 1;
        let head = keep.div_ceil(2);
        let tail = keep - head;
        let s: String = chars[..head].iter().chain(std::iter::once(&'…')).chain(&chars[chars.len() - tail..]).collect();
        if width(&s, size) <= max {
            return s;
        }
    }
    "…".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_and_fits() {
        // Every glyph the charts print is in the subset.
        for c in "eval/pass@1 (%) −±·×ΔΣσμ…★→≤≥ 0123456789 abcdefghijklmnopqrstuvwxyz ABCXYZ".chars() {
            assert_ne!(glyph(c).0, 0, "{c:?} is missing");
        }
        let w = width("step", 12.0);
        assert!(w > 15.0 && w < 35.0, "{w}");
        assert_eq!(width("ab", 12.0), width("a", 12.0) + width("b", 12.0));
        let long = "quickstart-lr-sweep-0123456789abcdef";
        let f = fit(long, 12.0, 120.0);
        assert!(width(&f, 12.0) <= 120.0 && f.starts_with("quick") && f.ends_with("ef") && f.contains('…'), "{f}");
        assert_eq!(fit("short", 12.0, 120.0), "short");
    }
}
