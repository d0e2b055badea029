//! A [`Scene`] as SVG text, for inlining in the HTML report: no external references, text in the
//! embedded font's family (declared by the HTML) with generic fallbacks.

use std::fmt::Write as _;

use super::chart::{Anchor, Scene, Shape};
use super::font::FAMILY;

/// The SVG of `scene`.
pub(crate) fn render(scene: &Scene) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" font-family="{FAMILY}, 'DejaVu Sans', Verdana, sans-serif"><title>{t}</title>"#,
        w = scene.width,
        h = scene.height.ceil(),
        t = escape(&scene.title)
    );
    for sh in &scene.shapes {
        match sh {
            Shape::Line { points, color, width, opacity, dashed } => {
                let _ = write!(
                    s,
                    r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="{width}" stroke-opacity="{opacity}" stroke-linejoin="round" stroke-linecap="round"{}/>"#,
                    pts(points),
                    color.hex(),
                    if *dashed { r#" stroke-dasharray="5 4""# } else { "" }
                );
            }
            Shape::Area { points, color, opacity } => {
                let _ = write!(s, r#"<polygon points="{}" fill="{}" fill-opacity="{opacity}" stroke="none"/>"#, pts(points), color.hex());
            }
            Shape::Dot { x, y, r, color } => {
                let _ = write!(s, r#"<circle cx="{x:.1}" cy="{y:.1}" r="{r}" fill="{}"/>"#, color.hex());
            }
            Shape::Rect { x, y, w, h, fill } => {
                let _ = write!(s, r#"<rect x="{x}" y="{y}" width="{w}" height="{h:.1}" fill="{}"/>"#, fill.hex());
            }
            Shape::Text { x, y, text, size, color, anchor } => {
                let a = match anchor {
                    Anchor::Start => "start",
                    Anchor::Middle => "middle",
                    Anchor::End => "end",
                };
                let _ = write!(s, r#"<text x="{x:.1}" y="{y:.1}" font-size="{size}" fill="{}" text-anchor="{a}">{}</text>"#, color.hex(), escape(text));
            }
        }
    }
    s.push_str("</svg>");
    s
}

fn pts(points: &[(f32, f32)]) -> String {
    points.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect::<Vec<_>>().join(" ")
}

/// XML-escapes text.
pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}
