//! A [`Scene`] rasterised to PNG: tiny-skia for the shapes, glyph outlines from the embedded
//! font (ttf-parser) filled as paths for the text, drawn at 2× so text stays crisp when the image
//! is shown at its nominal size.
//!
//! Rasterising our own scene rather than the SVG (resvg) avoids a text-shaping stack (harfrust,
//! skrifa, read-fonts: 31 new crates and ~7× the build time, measured in docs/compare.md): chart
//! labels are Latin text in one font, so advance widths are all the layout text needs.

use tiny_skia::{FillRule, LineCap, LineJoin, Paint, PathBuilder, Pixmap, Stroke, StrokeDash, Transform};

use super::chart::{Anchor, Color, Scene, Shape};
use super::font;

/// Pixels per scene unit.
pub(crate) const SCALE: f32 = 2.0;

/// The PNG bytes of `scene`.
///
/// # Panics
/// Never for scenes [`super::chart`] makes (finite coordinates, a non-empty canvas).
pub(crate) fn render(scene: &Scene) -> Vec<u8> {
    let (w, h) = ((scene.width * SCALE).ceil() as u32, (scene.height * SCALE).ceil().max(1.0) as u32);
    let mut pix = Pixmap::new(w, h).expect("a non-empty canvas");
    pix.fill(tiny_skia::Color::WHITE);
    let tf = Transform::from_scale(SCALE, SCALE);
    for sh in &scene.shapes {
        match sh {
            Shape::Line { points, color, width, opacity, dashed } => {
                let Some(path) = polyline(points, false) else { continue };
                let mut stroke = Stroke { width: *width, line_cap: LineCap::Round, line_join: LineJoin::Round, ..Stroke::default() };
                if *dashed {
                    stroke.dash = StrokeDash::new(vec![5.0, 4.0], 0.0);
                }
                pix.stroke_path(&path, &paint(*color, *opacity), &stroke, tf, None);
            }
            Shape::Area { points, color, opacity } => {
                if let Some(path) = polyline(points, true) {
                    pix.fill_path(&path, &paint(*color, *opacity), FillRule::Winding, tf, None);
                }
            }
            Shape::Dot { x, y, r, color } => {
                if let Some(path) = PathBuilder::from_circle(*x, *y, *r) {
                    pix.fill_path(&path, &paint(*color, 1.0), FillRule::Winding, tf, None);
                }
            }
            Shape::Rect { x, y, w, h, fill } => {
                if let Some(rect) = tiny_skia::Rect::from_xywh(*x, *y, *w, *h) {
                    pix.fill_rect(rect, &paint(*fill, 1.0), tf, None);
                }
            }
            Shape::Text { x, y, text, size, color, anchor } => {
                let width = font::width(text, *size);
                let left = match anchor {
                    Anchor::Start => *x,
                    Anchor::Middle => x - width / 2.0,
                    Anchor::End => x - width,
                };
                if let Some(path) = text_path(text, left, *y, *size) {
                    pix.fill_path(&path, &paint(*color, 1.0), FillRule::Winding, tf, None);
                }
            }
        }
    }
    pix.encode_png().expect("PNG encoding of an in-memory pixmap")
}

fn paint(c: Color, opacity: f32) -> Paint<'static> {
    let mut p = Paint::default();
    p.set_color_rgba8(c.0, c.1, c.2, (opacity.clamp(0.0, 1.0) * 255.0).round() as u8);
    p.anti_alias = true;
    p
}

fn polyline(points: &[(f32, f32)], close: bool) -> Option<tiny_skia::Path> {
    let mut pb = PathBuilder::new();
    let (first, rest) = points.split_first()?;
    pb.move_to(first.0, first.1);
    for p in rest {
        pb.line_to(p.0, p.1);
    }
    if close {
        pb.close();
    }
    pb.finish()
}

/// Glyph outlines of `text`, left end at `x`, baseline at `y`, in scene units.
fn text_path(text: &str, x: f32, y: f32, size: f32) -> Option<tiny_skia::Path> {
    let face = font::face();
    let scale = size / f32::from(face.units_per_em());
    let mut pb = PathBuilder::new();
    let mut pen = x;
    for c in text.chars() {
        let g = font::glyph(c);
        face.outline_glyph(g, &mut Outline { pb: &mut pb, x: pen, y, scale });
        pen += f32::from(face.glyph_hor_advance(g).unwrap_or(0)) * scale;
    }
    pb.finish()
}

/// Feeds font units into a path in scene units (font y points up, the scene's down).
struct Outline<'a> {
    pb: &'a mut PathBuilder,
    x: f32,
    y: f32,
    scale: f32,
}

impl Outline<'_> {
    fn p(&self, x: f32, y: f32) -> (f32, f32) {
        (self.x + x * self.scale, self.y - y * self.scale)
    }
}

impl ttf_parser::OutlineBuilder for Outline<'_> {
    fn move_to(&mut self, x: f32, y: f32) {
        let (a, b) = self.p(x, y);
        self.pb.move_to(a, b);
    }
    fn line_to(&mut self, x: f32, y: f32) {
        let (a, b) = self.p(x, y);
        self.pb.line_to(a, b);
    }
    fn quad_to(&mut self, x1: f32, y1: f32, x: f32, y: f32) {
        let ((a, b), (c, d)) = (self.p(x1, y1), self.p(x, y));
        self.pb.quad_to(a, b, c, d);
    }
    fn curve_to(&mut self, x1: f32, y1: f32, x2: f32, y2: f32, x: f32, y: f32) {
        let ((a, b), (c, d), (e, f)) = (self.p(x1, y1), self.p(x2, y2), self.p(x, y));
        self.pb.cubic_to(a, b, c, d, e, f);
    }
    fn close(&mut self) {
        self.pb.close();
    }
}
