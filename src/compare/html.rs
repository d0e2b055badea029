//! The HTML report: one self-contained file (no scripts, no network: the charts are inline SVG
//! and the font is a `data:` URL) with the same blocks as the terminal report, warnings first,
//! and every chart.

use std::fmt::Write as _;

use base64::Engine as _;

use super::chart::Scene;
use super::svg::{self, escape};
use super::table::{Block, Table};
use super::{Report, font};

const STYLE: &str = "
body{font-family:FAMILY,'DejaVu Sans',Verdana,sans-serif;color:#222;max-width:1180px;margin:24px auto;padding:0 16px;font-size:14px;line-height:1.45}
h1{font-size:22px;margin:0 0 8px}h2{font-size:16px;margin:26px 0 8px}
table{border-collapse:collapse;font-size:13px;margin:4px 0}
th,td{padding:3px 9px;border-bottom:1px solid #e2e2e2;text-align:left;vertical-align:top}
th{background:#f4f4f4;font-weight:normal;color:#555}
td.r,th.r{text-align:right;font-variant-numeric:tabular-nums}
td.id{word-break:break-all;max-width:460px}
ul{margin:4px 0;padding-left:20px}li{margin:2px 0}
.head p{margin:2px 0}.warn{background:#fff6e0;border:1px solid #f0d79a;padding:6px 12px;margin:12px 0}
.charts{display:flex;flex-wrap:wrap;gap:18px}figure{margin:0;border:1px solid #e6e6e6}
code{font-size:12px}";

/// The HTML document of `report` with its chart `scenes`.
pub(crate) fn render(report: &Report, blocks: &[Block], scenes: &[(String, Scene)]) -> String {
    let font64 = base64::engine::general_purpose::STANDARD.encode(font::TTF);
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\"><title>rlx compare: {} runs</title>\n<style>@font-face{{font-family:{f};src:url(data:font/ttf;base64,{font64}) format('truetype')}}{}</style></head><body>\n<h1>rlx compare</h1>\n",
        report.runs.len(),
        STYLE.replace("FAMILY", font::FAMILY),
        f = font::FAMILY,
    );
    let (head, rest) = blocks.split_first().map_or((None, blocks), |(a, b)| (Some(a), b));
    if let Some(Block::Lines { lines, .. }) = head {
        h.push_str("<div class=\"head\">");
        for l in lines {
            let _ = write!(h, "<p>{}</p>", escape(l));
        }
        h.push_str("</div>\n");
    }
    if !report.warnings.is_empty() {
        h.push_str("<div class=\"warn\"><b>Read these first</b><ul>");
        for w in &report.warnings {
            let _ = write!(h, "<li>{}</li>", escape(w));
        }
        h.push_str("</ul></div>\n");
    }
    // Verdicts (comparison and within-run blocks) before the charts, tables after.
    let (tests, tables): (Vec<&Block>, Vec<&Block>) = rest.iter().filter(|b| !matches!(b, Block::Lines { title, .. } if title == "warnings")).partition(|b| matches!(b, Block::Lines { .. }));
    for b in tests {
        block(&mut h, b);
    }
    if !scenes.is_empty() {
        h.push_str("<h2>charts</h2>\n<div class=\"charts\">");
        for (_, s) in scenes {
            let _ = writeln!(h, "<figure>{}</figure>", svg::render(s));
        }
        h.push_str("</div>\n");
    }
    for b in tables {
        block(&mut h, b);
    }
    let _ = writeln!(h, "<p style=\"color:#888\">bootstrap: {} resamples, seed {}. Definitions: docs/compare.md in the rlx repository.</p>\n</body></html>", report.resamples, report.seed);
    h
}

fn block(h: &mut String, b: &Block) {
    match b {
        Block::Lines { title, lines } => {
            let _ = write!(h, "<h2>{}</h2><ul>", escape(title));
            for l in lines {
                let _ = write!(h, "<li>{}</li>", escape(l.trim()));
            }
            h.push_str("</ul>\n");
        }
        Block::Table(t) => table(h, t),
    }
}

fn table(h: &mut String, t: &Table) {
    let _ = write!(h, "<h2>{}</h2><table><tr>", escape(&t.title));
    for (i, c) in t.headers.iter().enumerate() {
        let _ = write!(h, "<th{}>{}</th>", if t.right[i] { " class=\"r\"" } else { "" }, escape(c));
    }
    h.push_str("</tr>");
    for r in &t.rows {
        h.push_str("<tr>");
        for (i, c) in r.iter().enumerate() {
            let class = if t.shrink == Some(i) { " class=\"id\"" } else if t.right[i] { " class=\"r\"" } else { "" };
            let _ = write!(h, "<td{class}>{}</td>", escape(c));
        }
        h.push_str("</tr>");
    }
    h.push_str("</table>\n");
}
