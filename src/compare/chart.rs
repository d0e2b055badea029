//! Charts as a [`Scene`]: a few kinds of shapes in pixel coordinates, laid out here once and
//! drawn by [`super::svg`] (inline in the HTML) and [`super::png`] alike, so the two outputs show
//! the same chart. Text is measured with the embedded font ([`super::font`]), so tick labels,
//! legends and long run ids are placed to fit rather than guessed.
//!
//! Hand-written rather than plotters: plotters' SVG backend measures text with a fixed 0.7 em
//! per character and its bitmap backend needs a font feature with system libraries or a
//! registered font; a scene of lines, areas, dots and text is about as much code as driving it,
//! and legends that wrap and shorten long run ids are ours to lay out either way.

use super::font;

/// An sRGB colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Color(pub u8, pub u8, pub u8);

impl Color {
    /// `#rrggbb`.
    pub(crate) fn hex(self) -> String {
        format!("#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }
}

/// Series colours (Tableau 10: distinguishable, and still apart in grey for most pairs).
pub(crate) const PALETTE: [Color; 10] = [
    Color(0x4e, 0x79, 0xa7),
    Color(0xf2, 0x8e, 0x2b),
    Color(0xe1, 0x57, 0x59),
    Color(0x76, 0xb7, 0xb2),
    Color(0x59, 0xa1, 0x4f),
    Color(0xed, 0xc9, 0x48),
    Color(0xb0, 0x7a, 0xa1),
    Color(0xff, 0x9d, 0xa7),
    Color(0x9c, 0x75, 0x5f),
    Color(0xba, 0xb0, 0xac),
];
/// Text and axes.
pub(crate) const INK: Color = Color(0x22, 0x22, 0x22);
/// Grid lines and secondary text.
pub(crate) const GREY: Color = Color(0x88, 0x88, 0x88);
/// Grid lines.
pub(crate) const GRID: Color = Color(0xe4, 0xe4, 0xe4);
/// Background.
pub(crate) const WHITE: Color = Color(0xff, 0xff, 0xff);

/// Horizontal placement of a text relative to its x.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Anchor {
    /// x is the left end.
    Start,
    /// x is the centre.
    Middle,
    /// x is the right end.
    End,
}

/// One shape.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Shape {
    /// A polyline.
    Line {
        /// Points.
        points: Vec<(f32, f32)>,
        /// Colour.
        color: Color,
        /// Stroke width (px).
        width: f32,
        /// 0–1.
        opacity: f32,
        /// Dashed.
        dashed: bool,
    },
    /// A filled polygon.
    Area {
        /// Points.
        points: Vec<(f32, f32)>,
        /// Colour.
        color: Color,
        /// 0–1.
        opacity: f32,
    },
    /// A filled circle.
    Dot {
        /// Centre x.
        x: f32,
        /// Centre y.
        y: f32,
        /// Radius.
        r: f32,
        /// Colour.
        color: Color,
    },
    /// A rectangle.
    Rect {
        /// Left.
        x: f32,
        /// Top.
        y: f32,
        /// Width.
        w: f32,
        /// Height.
        h: f32,
        /// Fill.
        fill: Color,
    },
    /// One line of text; y is its baseline.
    Text {
        /// Anchor x.
        x: f32,
        /// Baseline y.
        y: f32,
        /// The text.
        text: String,
        /// Size in px.
        size: f32,
        /// Colour.
        color: Color,
        /// Placement.
        anchor: Anchor,
    },
}

/// A chart, ready to draw.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Scene {
    /// Width in px.
    pub width: f32,
    /// Height in px.
    pub height: f32,
    /// What it shows (the SVG `<title>`, the PNG file name's source).
    pub title: String,
    /// The shapes, back to front.
    pub shapes: Vec<Shape>,
}

/// One series of a line chart: an arm's mean with its band, and its seeds as thin lines.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Series {
    /// Legend text.
    pub label: String,
    /// Index into [`PALETTE`].
    pub color: usize,
    /// The main line.
    pub points: Vec<(f64, f64)>,
    /// Band segments of `(x, lo, hi)`: where fewer than two seeds cover x there is no band, so
    /// it comes in pieces. A one-point piece is drawn as an error bar.
    pub band: Vec<Vec<(f64, f64, f64)>>,
    /// Thin lines (the individual seeds), drawn under the main line.
    pub thin: Vec<Vec<(f64, f64)>>,
}

/// A line chart.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LineChart {
    /// Title.
    pub title: String,
    /// x axis label, with its unit.
    pub x_label: String,
    /// y axis label, with its unit.
    pub y_label: String,
    /// Show y values in percent (y is a 0–1 fraction).
    pub percent: bool,
    /// Series.
    pub series: Vec<Series>,
    /// A note under the legend (how to read the band).
    pub note: Option<String>,
}

const W: f32 = 760.0;
const PLOT_H: f32 = 280.0;
const TICK: f32 = 11.0;
const LABEL: f32 = 12.0;
const TITLE: f32 = 15.0;

/// "Nice" tick values covering [lo, hi]: steps of 1, 2 or 5 × 10^k, about `target` of them.
pub(crate) fn ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    let span = (hi - lo).max(1e-12);
    let raw = span / target.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| span / s <= target as f64 + 0.5).unwrap_or(10.0 * mag);
    // From the nice value at or below lo to the one at or above hi, so the axis ends on ticks.
    let (first, last) = ((lo / step + 1e-9).floor() as i64, (hi / step - 1e-9).ceil() as i64);
    (first..=last).map(|i| if i == 0 { 0.0 } else { i as f64 * step }).collect()
}

fn tick_text(v: f64, percent: bool) -> String {
    let v = if percent { v * 100.0 } else { v };
    super::metric::sig(v)
}

/// Lays out a line chart.
pub(crate) fn line_chart(c: &LineChart) -> Scene {
    // A t band over 2–3 seeds can reach past 0% or 100%; a fraction cannot, so the band is
    // drawn clipped (the tables keep the unclipped interval).
    let clip = |v: f64| if c.percent { v.clamp(0.0, 1.0) } else { v };
    let series: Vec<Series> = c
        .series
        .iter()
        .map(|s| Series { band: s.band.iter().map(|seg| seg.iter().map(|&(x, lo, hi)| (x, clip(lo), clip(hi))).collect()).collect(), ..s.clone() })
        .collect();
    let c = &LineChart { series, ..c.clone() };
    let Ranges { x: (x0, x1), y: (y0, y1), xt, yt } = ranges(c);

    let ytext: Vec<String> = yt.iter().map(|&v| tick_text(v, c.percent)).collect();
    let left = 14.0 + ytext.iter().map(|t| font::width(t, TICK)).fold(0.0, f32::max) + 8.0;
    let right = 18.0;
    let top = 14.0 + TITLE + 8.0 + LABEL + 8.0;
    let plot_w = W - left - right;
    let (px, py) = (left, top);
    let sx = |x: f64| px + ((x - x0) / (x1 - x0)) as f32 * plot_w;
    let sy = |y: f64| py + PLOT_H - ((y - y0) / (y1 - y0)) as f32 * PLOT_H;

    let mut shapes = vec![Shape::Rect { x: 0.0, y: 0.0, w: W, h: 0.0, fill: WHITE }];
    shapes.push(text(14.0, 14.0 + TITLE, &font::fit(&c.title, TITLE, W - 28.0), TITLE, INK, Anchor::Start));
    shapes.push(text(14.0, top - 8.0, &c.y_label, LABEL, GREY, Anchor::Start));
    for (v, t) in yt.iter().zip(&ytext) {
        let y = sy(*v);
        shapes.push(Shape::Line { points: vec![(px, y), (px + plot_w, y)], color: GRID, width: 1.0, opacity: 1.0, dashed: false });
        shapes.push(text(px - 6.0, y + TICK * 0.35, t, TICK, INK, Anchor::End));
    }
    for v in &xt {
        let x = sx(*v);
        shapes.push(Shape::Line { points: vec![(x, py + PLOT_H), (x, py + PLOT_H + 4.0)], color: INK, width: 1.0, opacity: 1.0, dashed: false });
        shapes.push(text(x, py + PLOT_H + 6.0 + TICK, &tick_text(*v, false), TICK, INK, Anchor::Middle));
    }
    shapes.push(Shape::Line { points: vec![(px, py), (px, py + PLOT_H), (px + plot_w, py + PLOT_H)], color: INK, width: 1.0, opacity: 1.0, dashed: false });
    shapes.push(text(px + plot_w / 2.0, py + PLOT_H + 10.0 + TICK + LABEL + 2.0, &c.x_label, LABEL, GREY, Anchor::Middle));

    for s in &c.series {
        let color = PALETTE[s.color % PALETTE.len()];
        for seg in &s.band {
            if let [b] = seg.as_slice() {
                let x = sx(b.0);
                shapes.push(Shape::Line { points: vec![(x, sy(b.1)), (x, sy(b.2))], color, width: 6.0, opacity: 0.25, dashed: false });
                continue;
            }
            let mut pts: Vec<(f32, f32)> = seg.iter().map(|b| (sx(b.0), sy(b.2))).collect();
            pts.extend(seg.iter().rev().map(|b| (sx(b.0), sy(b.1))));
            shapes.push(Shape::Area { points: pts, color, opacity: 0.18 });
        }
    }
    for s in &c.series {
        let color = PALETTE[s.color % PALETTE.len()];
        for t in &s.thin {
            if t.len() > 1 {
                shapes.push(Shape::Line { points: t.iter().map(|p| (sx(p.0), sy(p.1))).collect(), color, width: 1.0, opacity: 0.45, dashed: true });
            }
        }
    }
    for s in &c.series {
        let color = PALETTE[s.color % PALETTE.len()];
        if s.points.len() > 1 {
            shapes.push(Shape::Line { points: s.points.iter().map(|p| (sx(p.0), sy(p.1))).collect(), color, width: 2.2, opacity: 1.0, dashed: false });
        }
        if s.points.len() <= 40 {
            for p in &s.points {
                shapes.push(Shape::Dot { x: sx(p.0), y: sy(p.1), r: 3.2, color });
            }
        }
    }

    let y = legend(c, &mut shapes, py + PLOT_H + 10.0 + TICK + LABEL + 24.0);
    let height = y + 14.0;
    if let Shape::Rect { h, .. } = &mut shapes[0] {
        *h = height;
    }
    Scene { width: W, height, title: c.title.clone(), shapes }
}

/// The axes' ranges and ticks.
struct Ranges {
    x: (f64, f64),
    y: (f64, f64),
    xt: Vec<f64>,
    yt: Vec<f64>,
}

/// Ranges that hold every point and band, widened to whole ticks; fractions keep 0% and 100%
/// when the data come close.
fn ranges(c: &LineChart) -> Ranges {
    let xs = c.series.iter().flat_map(|s| s.points.iter().map(|p| p.0).chain(s.thin.iter().flatten().map(|p| p.0)));
    let ys = c.series.iter().flat_map(|s| {
        s.points.iter().map(|p| p.1).chain(s.thin.iter().flatten().map(|p| p.1)).chain(s.band.iter().flatten().flat_map(|b| [b.1, b.2]))
    });
    let (mut x0, mut x1) = bounds(xs);
    let (mut y0, mut y1) = bounds(ys.filter(|y| y.is_finite()));
    if x1 <= x0 {
        x0 -= 1.0;
        x1 += 1.0;
    }
    if y1 <= y0 {
        let pad = if y0 == 0.0 { 0.5 } else { y0.abs() * 0.1 };
        y0 -= pad;
        y1 += pad;
    }
    // Fractions keep their natural floor and ceiling when the data come close.
    if c.percent {
        y0 = if y0 < 0.05 { y0.min(0.0) } else { y0 };
        y1 = if y1 > 0.95 { y1.max(1.0) } else { y1 };
    }
    let yt = ticks(y0, y1, 5);
    let (y0, y1) = (y0.min(*yt.first().unwrap_or(&y0)), y1.max(*yt.last().unwrap_or(&y1)));
    let xt = ticks(x0, x1, 8);
    let (x0, x1) = (x0.min(*xt.first().unwrap_or(&x0)), x1.max(*xt.last().unwrap_or(&x1)));
    Ranges { x: (x0, x1), y: (y0, y1), xt, yt }
}

/// The legend below the plot from baseline `y`: swatch + label, flowing left to right, wrapping;
/// labels shortened in the middle. Returns the baseline of its last line.
fn legend(c: &LineChart, shapes: &mut Vec<Shape>, mut y: f32) -> f32 {
    let mut x = 14.0;
    let max_label = W - 28.0 - 22.0;
    for s in &c.series {
        let color = PALETTE[s.color % PALETTE.len()];
        let label = font::fit(&s.label, LABEL, max_label);
        let w = 22.0 + font::width(&label, LABEL) + 18.0;
        if x > 14.0 && x + w > W - 14.0 {
            x = 14.0;
            y += LABEL + 8.0;
        }
        shapes.push(Shape::Line { points: vec![(x, y - LABEL * 0.35), (x + 16.0, y - LABEL * 0.35)], color, width: 3.0, opacity: 1.0, dashed: false });
        shapes.push(text(x + 22.0, y, &label, LABEL, INK, Anchor::Start));
        x += w;
    }
    if let Some(note) = &c.note {
        y += LABEL + 8.0;
        shapes.push(text(14.0, y, &font::fit(note, TICK, W - 28.0), TICK, GREY, Anchor::Start));
    }
    y
}

fn text(x: f32, y: f32, s: &str, size: f32, color: Color, anchor: Anchor) -> Shape {
    Shape::Text { x, y, text: s.to_string(), size, color, anchor }
}

fn bounds(v: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = v.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| (lo.min(x), hi.max(x)));
    if lo.is_finite() { (lo, hi) } else { (0.0, 1.0) }
}

/// The band segments of an aggregated curve: consecutive points that have a band.
pub(crate) fn band_segments(points: &[super::arms::Point]) -> Vec<Vec<(f64, f64, f64)>> {
    let mut out: Vec<Vec<(f64, f64, f64)>> = vec![];
    let mut cur = vec![];
    for p in points {
        match p.band {
            Some(b) => cur.push((p.x, b.lo, b.hi)),
            None if !cur.is_empty() => out.push(std::mem::take(&mut cur)),
            None => {}
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Every chart of a report, each with a file stem for `--png`: per metric, against step and
/// against wall time; pass@k against k when some evaluation drew several samples.
pub(crate) fn scenes(r: &super::Report) -> Vec<(String, Scene)> {
    let mut out = vec![];
    let seeded = r.curves.iter().flat_map(|c| &c.arms).any(|a| a.by_step.len() > 1);
    let note = seeded.then(|| "thick line: mean over seeds · band: 95% t interval where ≥ 2 seeds cover x · dashed: individual seeds".to_string());
    for c in &r.curves {
        let percent = super::metric::is_fraction(&c.metric);
        let y_label = if percent { format!("{} (%)", c.metric) } else { c.metric.clone() };
        let stem = c.metric.replace(['/', '@'], "_");
        for wall in [false, true] {
            let series: Vec<Series> = c
                .arms
                .iter()
                .enumerate()
                .filter(|(_, a)| !a.by_step.is_empty())
                .map(|(i, a)| {
                    let (runs, agg) = if wall { (&a.by_wall, &a.agg_wall) } else { (&a.by_step, &a.agg_step) };
                    let label = if runs.len() == 1 { format!("{} ({})", a.label, runs[0].0) } else { format!("{} (mean of {} seeds)", a.label, runs.len()) };
                    Series {
                        label,
                        color: i,
                        points: agg.iter().map(|p| (p.x, p.mean)).collect(),
                        band: band_segments(agg),
                        thin: if runs.len() > 1 { runs.iter().map(|(_, s)| s.clone()).collect() } else { vec![] },
                    }
                })
                .collect();
            if series.is_empty() || (wall && series.iter().all(|s| s.points.iter().all(|p| p.0 == 0.0))) {
                continue;
            }
            let (title, x_label, suffix) = if wall {
                (format!("{} vs wall time", c.metric), "wall time (minutes; Σ time/step_s + time/eval_s)".to_string(), "wall")
            } else {
                (format!("{} vs step", c.metric), "training step (−1: baseline eval before training)".to_string(), "step")
            };
            out.push((format!("{stem}-{suffix}"), line_chart(&LineChart { title, x_label, y_label: y_label.clone(), percent, series, note: note.clone() })));
        }
    }
    if !r.pass_at_k.is_empty() {
        let series = r
            .pass_at_k
            .iter()
            .map(|row| {
                let run = &r.runs[row.run - 1];
                let arm = r.arms.iter().position(|a| a.runs.contains(&row.run)).unwrap_or(0);
                Series {
                    label: format!("#{} {} (step {})", row.run, run.arm, row.step),
                    color: arm,
                    points: row.values.iter().filter(|v| !v.value.is_nan()).map(|v| (f64::from(v.k), v.value)).collect(),
                    band: vec![],
                    thin: vec![],
                }
            })
            .collect();
        out.push((
            "pass_at_k".into(),
            line_chart(&LineChart {
                title: "pass@k vs k (unbiased estimator)".into(),
                x_label: "k (samples drawn per problem)".into(),
                y_label: "pass@k (%)".into(),
                percent: true,
                series,
                note: None,
            }),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_ticks() {
        assert_eq!(ticks(0.0, 1.0, 5), vec![0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]);
        assert_eq!(ticks(-1.0, 11.0, 8), vec![-2.0, 0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0]);
        assert_eq!(ticks(0.42, 0.58, 5), vec![0.4, 0.45, 0.5, 0.55, 0.6000000000000001]);
    }

    #[test]
    fn a_chart_has_axes_labels_and_a_legend() {
        let long = "optimizer.learning_rate=0.0003, grpo.group_size=8, sampling.temperature=0.7, data.train.0.path=/home/someone/datasets/a-rather-long-directory-name/train.jsonl, eval.k=[1,5]".to_string();
        let chart = LineChart {
            title: "eval/pass@1 vs step".into(),
            x_label: "step".into(),
            y_label: "eval/pass@1 (%)".into(),
            percent: true,
            series: vec![Series { label: long.clone(), color: 0, points: vec![(-1.0, 0.4), (5.0, 0.55), (11.0, 0.5)], band: vec![vec![(-1.0, 0.3, 0.5), (5.0, 0.5, 0.6)]], thin: vec![] }],
            note: Some("band: 95% t interval over seeds".into()),
        };
        let s = line_chart(&chart);
        let texts: Vec<&str> = s.shapes.iter().filter_map(|x| if let Shape::Text { text, .. } = x { Some(text.as_str()) } else { None }).collect();
        for want in ["eval/pass@1 vs step", "step", "eval/pass@1 (%)", "40", "50"] {
            assert!(texts.contains(&want), "{want} missing from {texts:?}");
        }
        // The long label is shortened to fit the chart, keeping both ends.
        let legend = texts.iter().find(|t| t.starts_with("optimizer")).unwrap();
        assert!(legend.contains('…') && legend.ends_with("[1,5]"), "{legend}");
        // Every text lies inside the canvas.
        for sh in &s.shapes {
            if let Shape::Text { x, y, text, size, anchor, .. } = sh {
                let w = font::width(text, *size);
                let left = match anchor { Anchor::Start => *x, Anchor::Middle => x - w / 2.0, Anchor::End => x - w };
                assert!(left >= 0.0 && left + w <= s.width && *y <= s.height, "{text} at {x},{y}");
            }
        }
    }
}
