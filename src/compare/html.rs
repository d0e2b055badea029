//! The HTML report: one self-contained file (no scripts, no network: the charts are inline SVG
//! and the font is a `data:` URL) with the same blocks as the terminal report, warnings first,
//! and every chart. The problems in a "largest drops" line link to a section at the end that
//! shows each side's recorded completions of them (`eval_rollouts.jsonl`): code and test
//! verdicts, so a regression can be read rather than only counted.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use base64::Engine as _;

use super::chart::Scene;
use super::svg::{self, escape};
use super::report::Regression;
use super::table::{Block, DROPS, Table};
use super::{Report, font};
use crate::runlog::{EvalSampleRecord, TestOutcome, VerdictStatus};

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
code{font-size:12px}
.sides{display:flex;flex-wrap:wrap;gap:16px}.side{flex:1;min-width:320px}
pre{background:#f7f7f7;border:1px solid #e6e6e6;padding:6px 8px;overflow-x:auto;font-size:12px;margin:4px 0}
.pass{color:#1a7f37}.fail{color:#c62828}.infra{color:#9a6700}.muted{color:#888}
section.drop{border-top:1px solid #ddd;margin-top:18px}h3{font-size:15px;margin:14px 0 4px}h4{font-size:14px;margin:10px 0 2px}";

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
    let links: BTreeMap<&str, &str> = report.regressions.iter().map(|r| (r.problem_id.as_str(), r.anchor.as_str())).collect();
    for b in tests {
        block(&mut h, b, &links);
    }
    if !scenes.is_empty() {
        h.push_str("<h2>charts</h2>\n<div class=\"charts\">");
        for (_, s) in scenes {
            let _ = writeln!(h, "<figure>{}</figure>", svg::render(s));
        }
        h.push_str("</div>\n");
    }
    for b in tables {
        block(&mut h, b, &links);
    }
    regressions(&mut h, &report.regressions);
    let _ = writeln!(h, "<p style=\"color:#888\">bootstrap: {} resamples, seed {}. Definitions: docs/compare.md in the rlx repository.</p>\n</body></html>", report.resamples, report.seed);
    h
}

fn block(h: &mut String, b: &Block, links: &BTreeMap<&str, &str>) {
    match b {
        Block::Lines { title, lines } => {
            let _ = write!(h, "<h2>{}</h2><ul>", escape(title));
            for l in lines {
                let l = l.trim();
                match l.strip_prefix(DROPS) {
                    Some(drops) if !links.is_empty() => {
                        let _ = write!(h, "<li>{}{}</li>", escape(DROPS), linked(drops, links));
                    }
                    _ => {
                        let _ = write!(h, "<li>{}</li>", escape(l));
                    }
                }
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

/// `p07 (−100.0 pp), p12 (−50.0 pp)` with each problem that has a section linked to it.
fn linked(drops: &str, links: &BTreeMap<&str, &str>) -> String {
    drops
        .split(", ")
        .map(|item| match item.rsplit_once(" (") {
            Some((id, rest)) if links.contains_key(id) => format!("<a href=\"#{}\">{}</a> ({}", links[id], escape(id), escape(rest)),
            _ => escape(item),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The section the drops link to: per problem, each side's completions.
fn regressions(h: &mut String, regs: &[Regression]) {
    if regs.is_empty() {
        return;
    }
    h.push_str("<h2 id=\"drops\">largest drops: the completions (eval_rollouts.jsonl)</h2>\n");
    for r in regs {
        let _ = write!(h, "<section class=\"drop\" id=\"{}\"><h3>problem <code>{}</code></h3><p class=\"muted\">dropped in {}</p><div class=\"sides\">", r.anchor, escape(&r.problem_id), escape(&r.contexts.join("; ")));
        for (label, samples) in &r.sides {
            let _ = write!(h, "<div class=\"side\"><h4>{}</h4>", escape(label));
            if samples.is_empty() {
                h.push_str("<p class=\"muted\">no completion of this problem recorded at this evaluation (`log.rollouts`, or a run older than eval_rollouts.jsonl)</p>");
            }
            for s in samples {
                sample(h, s);
            }
            h.push_str("</div>");
        }
        h.push_str("</div></section>\n");
    }
}

/// One completion: verdict, code (or the text when there is no code), each test.
fn sample(h: &mut String, s: &EvalSampleRecord) {
    let (name, class) = match s.completion.status {
        VerdictStatus::Passed => ("passed", "pass"),
        VerdictStatus::Failed => ("failed", "fail"),
        VerdictStatus::FormatError => ("format error (no code block)", "fail"),
        VerdictStatus::InfraError => ("infrastructure error", "infra"),
    };
    let tests = if matches!(s.completion.status, VerdictStatus::Passed | VerdictStatus::Failed) { format!(", {}/{} tests", s.completion.tests_passed, s.completion.tests_total) } else { String::new() };
    let _ = write!(h, "<p>sample {}: <b class=\"{class}\">{name}</b>{tests}, {} tokens</p>", s.completion.sample, s.completion.tokens);
    let _ = write!(h, "<pre>{}</pre>", escape(s.completion.code.as_deref().unwrap_or(&s.completion.text)));
    if let Some(e) = &s.completion.error {
        let _ = write!(h, "<p class=\"infra\">{}</p>", escape(e));
    }
    if !s.completion.tests.is_empty() {
        h.push_str("<ul>");
        for (i, t) in s.completion.tests.iter().enumerate() {
            let (name, class) = match t.status {
                TestOutcome::Passed => ("passed", "pass"),
                TestOutcome::WrongAnswer => ("wrong answer", "fail"),
                TestOutcome::RuntimeError => ("runtime error", "fail"),
                TestOutcome::Timeout => ("timeout", "fail"),
                TestOutcome::MemoryLimit => ("memory limit", "fail"),
                TestOutcome::OutputLimit => ("output limit", "fail"),
                TestOutcome::CompileError => ("compile error", "fail"),
            };
            let _ = write!(h, "<li>test {}: <span class=\"{class}\">{name}</span>, {} ms", i + 1, t.time_ms);
            if let Some(g) = &t.got {
                let _ = write!(h, "; got <code>{}</code>", escape(&clip(g, 300)));
            }
            if let Some(e) = &t.error {
                let tail: Vec<&str> = e.trim_end().lines().rev().take(4).collect();
                let _ = write!(h, "<pre>{}</pre>", escape(&tail.into_iter().rev().collect::<Vec<_>>().join("\n")));
            }
            h.push_str("</li>");
        }
        h.push_str("</ul>");
    }
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max { s.to_string() } else { s.chars().take(max).chain(std::iter::once('…')).collect() }
}
