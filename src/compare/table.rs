//! The report as text: [`blocks`] turns a [`Report`] into titled tables and paragraphs once;
//! [`text`] lays them out for a terminal (100 columns by default), [`markdown`] as GitHub tables,
//! and the HTML report renders the same blocks. [`csv`] is one row per run for spreadsheets, and
//! JSON is the [`Report`] itself (serde).

use std::fmt::Write as _;

use super::arms::show;
use super::configdiff::{middle_cut, short};
use super::metric;
use super::paired::Paired;
use super::report::{Decision, Report};

/// A titled table.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Table {
    /// Title line.
    pub title: String,
    /// Column headers.
    pub headers: Vec<String>,
    /// Rows of cells.
    pub rows: Vec<Vec<String>>,
    /// Right-aligned columns (numbers).
    pub right: Vec<bool>,
    /// Leading columns repeated when a wide table is split into column groups.
    pub key_cols: usize,
    /// The column that may be shortened (with `…` in the middle) to fit: run ids.
    pub shrink: Option<usize>,
}

/// A part of the report.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Block {
    /// A table.
    Table(Table),
    /// A titled paragraph of lines (the title may be empty).
    Lines {
        /// Title line.
        title: String,
        /// Lines.
        lines: Vec<String>,
    },
}

fn decision_of<'a>(r: &'a Report, m: &str) -> &'a Decision {
    r.decisions.iter().find(|d| d.metric == m).expect("a decision per metric")
}

fn step_text(s: i64) -> String {
    if s < 0 { format!("{s} (baseline)") } else { s.to_string() }
}

/// The report's blocks, in reading order.
pub(crate) fn blocks(r: &Report) -> Vec<Block> {
    let mut out = vec![];
    head_block(r, &mut out);
    legend_block(r, &mut out);
    runs_table(r, &mut out);
    metrics_table(r, &mut out);
    arms_table(r, &mut out);
    config_diff_table(r, &mut out);
    config_table(r, &mut out);
    comparison_blocks(r, &mut out);
    within_block(r, &mut out);
    pooled_block(r, &mut out);
    category_tables(r, &mut out);
    pass_at_k_table(r, &mut out);
    sources_table(r, &mut out);
    diagnostics_block(r, &mut out);
    best_block(r, &mut out);
    warnings_block(r, &mut out);
    out
}

/// The title lines: runs, arms, what differs, seeds, eval, the deciding metric.
fn head_block(r: &Report, out: &mut Vec<Block>) {
    let n_runs = r.runs.len();
    let mut head = vec![];
    let seeds: std::collections::BTreeSet<&str> = r.runs.iter().filter_map(|x| x.seed.as_deref()).collect();
    let differ = if r.differing.is_empty() { String::new() } else { format!(" (differ in: {})", r.differing.iter().map(|k| short(k)).collect::<Vec<_>>().join(", ")) };
    let mut first = format!("rlx compare: {n_runs} run{} → {} arm{}{differ}", plural(n_runs), r.arms.len(), plural(r.arms.len()));
    if !seeds.is_empty() {
        let _ = write!(first, " · seeds {{{}}}", seeds.into_iter().collect::<Vec<_>>().join(","));
    }
    if let Some(e) = &r.eval_summary {
        let _ = write!(first, " · eval: {e}");
    }
    head.push(first);
    if let Some(d) = r.decisions.first() {
        head.push(format!("deciding metric: {} ({} is better) at {}", d.metric, if d.higher_is_better { "higher" } else { "lower" }, d.rule));
    }
    out.push(Block::Lines { title: String::new(), lines: head });
}

/// What each letter stands for, when several keys differ: the arm's values of them.
fn legend_block(r: &Report, out: &mut Vec<Block>) {
    if !r.lettered {
        return;
    }
    let width = r.arms.iter().map(|a| a.label.chars().count()).max().unwrap_or(1);
    let lines = r
        .arms
        .iter()
        .map(|a| {
            let runs = a.runs.iter().map(|i| format!("#{i}")).collect::<Vec<_>>().join(",");
            let settings = a.settings.iter().map(|(k, v)| format!("{}={v}", short(k))).collect::<Vec<_>>().join(", ");
            format!("{:<width$}  {settings}  ({runs})", a.label)
        })
        .collect();
    out.push(Block::Lines { title: "arm labels (the keys that differ)".into(), lines });
}

/// The runs, one row each, with the keys that differ (or the arm's letter, when several do:
/// the legend names their values).
fn runs_table(r: &Report, out: &mut Vec<Block>) {
    let mut headers: Vec<String> = ["#", "run", "status", "steps", "wall", "tokens"].map(String::from).to_vec();
    let keys: &[String] = if r.lettered { &[] } else { &r.differing };
    if r.lettered {
        headers.push("arm".into());
    }
    headers.extend(keys.iter().map(|k| short(k).to_string()));
    if r.runs.iter().any(|x| x.seed.is_some()) {
        headers.push("seed".into());
    }
    let rows = r
        .runs
        .iter()
        .map(|x| {
            let mut row = vec![
                format!("#{}", x.index),
                x.id.clone(),
                x.status.clone(),
                format!("{}/{}", x.steps_done, x.max_steps),
                x.wall_s.map_or("—".into(), metric::duration),
                x.tokens.map_or("—".into(), |t| metric::thousands(t.round() as i64)),
            ];
            if r.lettered {
                row.push(x.arm.clone());
            }
            row.extend(keys.iter().map(|k| x.config.get(k).map_or_else(String::new, |v| show(&r.shown, k, v).to_string())));
            if headers.last().is_some_and(|h| h == "seed") {
                row.push(x.seed.clone().unwrap_or("—".into()));
            }
            row
        })
        .collect();
    let right = headers.iter().map(|h| ["steps", "wall", "tokens", "seed"].contains(&h.as_str())).collect();
    out.push(Block::Table(Table { title: "runs".into(), headers, rows, right, key_cols: 1, shrink: Some(1) }));
}

/// Per run: final value, best value and its step, value at the deciding step.
fn metrics_table(r: &Report, out: &mut Vec<Block>) {
    let mut headers = vec!["#".to_string()];
    let mut right = vec![false];
    for m in &r.metrics {
        let d = decision_of(r, m);
        headers.push(format!("{m} final"));
        headers.push("best @step".into());
        right.extend([true, true]);
        if let Some(s) = d.step {
            headers.push(format!("@{s}"));
            right.push(true);
        }
    }
    let rows = r
        .runs
        .iter()
        .map(|x| {
            let mut row = vec![format!("#{}", x.index)];
            for m in &r.metrics {
                let v = &x.metrics[m];
                row.push(v.last.map_or("—".into(), |a| metric::value(m, a.value)));
                row.push(v.best.map_or("—".into(), |a| format!("{} @{}", metric::value(m, a.value), a.step)));
                if decision_of(r, m).step.is_some() {
                    row.push(v.at.map_or("—".into(), |a| metric::value(m, a.value)));
                }
            }
            row
        })
        .collect();
    out.push(Block::Table(Table { title: "metrics (final value, best value and its step, value at the deciding step)".into(), headers, rows, right, key_cols: 1, shrink: None }));
}

/// Arms: mean over seeds with a t interval.
fn arms_table(r: &Report, out: &mut Vec<Block>) {
    if r.runs.len() > 1 {
        let mut headers: Vec<String> = ["", "arm", "runs", "seeds"].map(String::from).to_vec();
        let mut right = vec![false, false, false, false];
        for m in &r.metrics {
            let d = decision_of(r, m);
            let at = d.step.map_or("final".into(), |s| format!("@{s}"));
            headers.push(format!("{m} {at}{}", if metric::is_fraction(m) { " (%)" } else { "" }));
            right.push(true);
        }
        let rows = r
            .arms
            .iter()
            .map(|a| {
                let mut row = vec![
                    if a.best { "★".into() } else { String::new() },
                    a.label.clone(),
                    a.runs.iter().map(|i| format!("#{i}")).collect::<Vec<_>>().join(","),
                    a.seeds.join(","),
                ];
                for v in &a.values {
                    row.push(match v.stat {
                        None => "—".into(),
                        Some(s) => match s.ci {
                            Some(ci) => format!("{} [{}, {}]", metric::bare(&v.metric, s.mean), metric::bare(&v.metric, ci.lo), metric::bare(&v.metric, ci.hi)),
                            None => format!("{} (1 seed)", metric::bare(&v.metric, s.mean)),
                        },
                    });
                }
                row
            })
            .collect();
    // Arm labels are never shortened (they are the only place that names an arm in full);
        // a wide table splits into column groups instead.
        out.push(Block::Table(Table { title: "arms (mean over seeds [95% t interval, m−1 df]; ★ best)".into(), headers, rows, right, key_cols: 2, shrink: None }));
    }
}

/// The keys that differ, by arm.
fn config_diff_table(r: &Report, out: &mut Vec<Block>) {
    if !r.differing.is_empty() && r.arms.len() > 1 {
        let mut headers = vec!["key".to_string()];
        headers.extend(r.arms.iter().map(|a| a.label.clone()));
        let rows = r
            .differing
            .iter()
            .map(|k| {
                let mut row = vec![k.clone()];
                row.extend(r.arms.iter().map(|a| r.runs[a.runs[0] - 1].config.get(k).map_or_else(String::new, |v| show(&r.shown, k, v).to_string())));
                row
            })
            .collect();
        let n = headers.len();
        out.push(Block::Table(Table { title: "config (keys that differ, by arm; seed, name and log hidden; files compared by content)".into(), headers, rows, right: vec![false; n], key_cols: 1, shrink: None }));
    }
}

/// One run: its whole config.
fn config_table(r: &Report, out: &mut Vec<Block>) {
    if !r.config.is_empty() {
        let rows = r.config.iter().map(|(k, v)| vec![k.clone(), v.clone()]).collect();
        out.push(Block::Table(Table { title: "config (resolved spec)".into(), headers: vec!["key".into(), "value".into()], rows, right: vec![false, false], key_cols: 1, shrink: Some(1) }));
    }
}

/// Each arm against the baseline: recipe level, checkpoints, verdict.
fn comparison_blocks(r: &Report, out: &mut Vec<Block>) {
    for c in &r.comparisons {
        let m = &c.metric;
        let mut lines = vec![];
        match &c.recipe {
            Some(w) => lines.push(format!(
                "recipe level   Δ {} {}  Welch t, df {:.1}, p = {} ({} vs {} seeds)",
                metric::delta(m, w.delta),
                metric::delta_ci(m, w.ci.lo, w.ci.hi),
                w.df,
                metric::p(w.p),
                c.seeds.0,
                c.seeds.1
            )),
            None => lines.push(format!("recipe level   untested: needs ≥ 2 seeds per arm ({} vs {})", c.seeds.0, c.seeds.1)),
        }
        match &c.paired {
            Some(p) => lines.extend(paired_lines(m, p, "checkpoints    ", "better", "worse", "tied")),
            None => lines.push("checkpoints    no shared eval problems to pair on".into()),
        }
        if let Some(t) = c.paired.as_ref().and_then(|p| p.tost.as_ref()) {
            lines.push(format!("               {}", super::report::tost_text(m, t)));
        }
        if let (Some(p), Some(h)) = (&c.paired, c.holm_p) {
            lines.push(format!("               raw p = {}, Holm-adjusted over the {} arms against `{}`: p = {}", metric::p(p.p()), c.family, c.baseline, metric::p(h)));
        }
        if let Some(g) = &c.greedy {
            lines.push(format!("greedy pass@1  {}", greedy_line(g)));
            if let Some(h) = c.greedy_holm_p {
                lines.push(format!("               raw p = {}, Holm-adjusted over the {} arms: p = {}", metric::p(g.p()), c.family, metric::p(h)));
            }
            if let Some(t) = &g.tost {
                lines.push(format!("               {}", super::report::tost_text("eval/pass@1", t)));
            }
        }
        for f in &c.format {
            lines.push(format_line(f, "baseline arm → this arm"));
        }
        lines.push(format!("verdict: {}", c.verdict));
        if let (Some(p), Some(g)) = (&c.paired, &c.greedy) {
            lines.push(format!(
                "by protocol: {}; {}",
                protocol_verdict_adj(&format!("sampled {}", short_metric(m)), p, c.holm_p),
                protocol_verdict_adj("greedy pass@1", g, c.greedy_holm_p)
            ));
        }
        let at = c.eval_step.map_or("each run's last eval".into(), |s| format!("eval step {s}"));
        out.push(Block::Lines { title: format!("`{}` − `{}` ({m}; paired at {at})", c.arm, c.baseline), lines });
    }
}

/// Within runs: a metric between two eval steps, paired on problems.
fn within_block(r: &Report, out: &mut Vec<Block>) {
    if !r.within.is_empty() {
        let m = r.decisions.first().map(|d| d.metric.as_str()).unwrap_or("eval/pass@1");
        let m = if metric::is_fraction(m) && m.starts_with("eval/") { m.to_string() } else { "eval/pass@1".into() };
        let mut lines = vec![];
        for w in &r.within {
            match (&w.paired, w.from, w.to) {
                (Some(p), Some(f), Some(t)) => {
                    lines.push(format!(
                        "#{} step {} → {}: {} → {}  Δ {} {}",
                        w.run,
                        f,
                        t,
                        metric::value(&m, p.mean_b),
                        metric::value(&m, p.mean_a),
                        metric::delta(&m, p.delta()),
                        metric::delta_ci(&m, p.ci().lo, p.ci().hi)
                    ));
                    lines.push(format!("    {}", test_line(p, "up", "down", "same")));
                    if !p.largest_drops.is_empty() {
                        lines.push(format!("    {}", drops_line(&m, p)));
                    }
                    match &w.greedy {
                        Some(g) => {
                            lines.push(format!("    greedy pass@1: {}", greedy_line(g)));
                            lines.push(format!("    {}", protocol_verdict(&format!("sampled {}", short_metric(&m)), p)));
                            lines.push(format!("    {}", protocol_verdict("greedy pass@1", g)));
                        }
                        None => lines.push(format!(
                            "    {}",
                            if p.p() < 0.05 {
                                "training changed the eval score beyond noise (p < 0.05)".to_string()
                            } else {
                                format!("no change detected (p ≥ 0.05; Δ 95% CI {}{}): the change could be noise", metric::delta_ci(&m, p.ci().lo, p.ci().hi), super::report::unit(&m))
                            }
                        )),
                    }
                    for f in &w.format {
                        lines.push(format!("  {}", format_line(f, "")));
                    }
                }
                _ => lines.push(format!("#{}: {}", w.run, w.note.clone().unwrap_or_default())),
            }
        }
        out.push(Block::Lines { title: format!("within runs: {m} between two eval steps, paired on problems (Δ = later − earlier; 95% paired bootstrap)"), lines });
    }
}

/// Each arm's seeds pooled per problem between two eval steps: one test over problems.
fn pooled_block(r: &Report, out: &mut Vec<Block>) {
    if r.pooled.is_empty() {
        return;
    }
    let m = "eval/pass@1";
    let mut lines = vec![];
    for pw in &r.pooled {
        let runs = pw.runs.iter().map(|i| format!("#{i}")).collect::<Vec<_>>().join(",");
        lines.push(format!("`{}` ({runs}; seeds {}), step {} → {}:", pw.arm, pw.seeds.join(","), pw.from, pw.to));
        for (name, p) in [("sampled", &pw.paired), ("greedy pass@1", &pw.greedy)] {
            let Some(p) = p else { continue };
            lines.push(format!(
                "    {name}: {} → {}  Δ {} {}",
                metric::value(m, p.mean_b),
                metric::value(m, p.mean_a),
                metric::delta(m, p.delta()),
                metric::delta_ci(m, p.ci().lo, p.ci().hi)
            ));
            lines.push(format!("        {}", test_line(p, "up", "down", "level")));
            if let Some(t) = &p.tost {
                lines.push(format!("        {}", super::report::tost_text(m, t)));
            }
        }
        for f in &pw.format {
            lines.push(format_line(f, ""));
        }
    }
    out.push(Block::Lines {
        title: "pooled over each arm's seeds, per problem (each problem's mean over the runs, then one paired test over problems: seeds × problems are not independent pairs)".into(),
        lines,
    });
}

/// pass@1 by category, one table per arm: each protocol's `from → to (Δ; up↑ down↓)`.
fn category_tables(r: &Report, out: &mut Vec<Block>) {
    for a in &r.categories {
        let greedy = a.rows.iter().any(|x| x.greedy.is_some());
        let mut headers = vec!["category".to_string(), "problems".into(), if greedy { "sampled pass@1 (%)" } else { "pass@1 (%)" }.into()];
        if greedy {
            headers.push("greedy pass@1 (%)".into());
        }
        let cell = |s: Option<crate::health::categories::Shift>| s.map_or("—".to_string(), |s| s.cell());
        let rows = a
            .rows
            .iter()
            .map(|x| {
                let problems = x.sampled.or(x.greedy).map_or(0, |s| s.problems);
                let mut row = vec![x.category.clone(), problems.to_string(), cell(x.sampled)];
                if greedy {
                    row.push(cell(x.greedy));
                }
                row
            })
            .collect();
        let runs = a.runs.iter().map(|i| format!("#{i}")).collect::<Vec<_>>().join(",");
        let n = headers.len();
        out.push(Block::Table(Table {
            title: format!(
                "pass@1 by category, `{}` ({runs}), step {} → {} (each problem once, its mean over the runs; descriptive: no test per category)",
                a.arm, a.from, a.to
            ),
            headers,
            rows,
            right: (0..n).map(|i| i == 1).collect(),
            key_cols: 1,
            shrink: None,
        }));
    }
}

/// `    greedy: format 95.0% → 100.0%, pass@1 given format 57.9% → 76.7%`.
fn format_line(f: &super::pooled::FormatSplit, what: &str) -> String {
    let m = "eval/pass@1";
    let given = |d: &super::pooled::Decomp| d.given_format().map_or("—".into(), |v| metric::value(m, v));
    let what = if what.is_empty() { String::new() } else { format!(" ({what})") };
    format!(
        "    {}: well-formed {} → {}, pass@1 given well-formed {} → {}{what}",
        f.protocol,
        metric::value(m, f.from.format),
        metric::value(m, f.to.format),
        given(&f.from),
        given(&f.to)
    )
}

/// The k shown: every k up to 4, then powers of two and the largest (1, 2, 4, 8, 10), so the
/// table keeps within a terminal's 100 columns whatever n was.
fn shown_ks(max_k: u32) -> Vec<u32> {
    if max_k <= 4 { (1..=max_k).collect() } else { (0..).map(|i| 1u32 << i).take_while(|&k| k < max_k).chain([max_k]).collect() }
}

/// Greedy pass@1 and sampled pass@k at the first eval and the compared step, one row each, and
/// their difference.
fn pass_at_k_table(r: &Report, out: &mut Vec<Block>) {
    if r.pass_at_k.is_empty() {
        return;
    }
    let max_k = r.pass_at_k.iter().flat_map(|x| x.values.iter().map(|v| v.k)).max().unwrap_or(1);
    let ks = shown_ks(max_k);
    let greedy = r.pass_at_k.iter().any(|x| x.greedy.is_some() || x.base_greedy.is_some());
    let mut headers = vec!["#".to_string(), "step".into()];
    if greedy {
        headers.push("greedy".into());
    }
    headers.extend(ks.iter().map(|k| format!("pass@{k}")));
    fn at(vs: &[super::paired::PassAtK], k: u32) -> Option<&super::paired::PassAtK> {
        vs.iter().find(|v| v.k == k)
    }
    let pct = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{:.1}", v * 100.0));
    let delta = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => metric::delta("eval/pass@1", a - b).replace(" pp", ""),
        _ => "—".into(),
    };
    let mut rows = vec![];
    for x in &r.pass_at_k {
        let cells = |vs: &[super::paired::PassAtK], g: Option<f64>| {
            let mut row: Vec<String> = if greedy { vec![pct(g)] } else { vec![] };
            row.extend(ks.iter().map(|&k| at(vs, k).map_or("—".into(), |v| format!("{:.1}{}", v.value * 100.0, if v.excluded > 0 { "*" } else { "" }))));
            row
        };
        if let Some(b) = x.base_step {
            rows.push([vec![format!("#{}", x.run), step_text(b)], cells(&x.base, x.base_greedy)].concat());
        }
        rows.push([vec![format!("#{}", x.run), step_text(x.step)], cells(&x.values, x.greedy)].concat());
        if x.base_step.is_some() {
            let mut d: Vec<String> = vec![String::new(), "Δ (pp)".into()];
            if greedy {
                d.push(delta(x.greedy, x.base_greedy));
            }
            d.extend(ks.iter().map(|&k| delta(at(&x.values, k).map(|v| v.value), at(&x.base, k).map(|v| v.value))));
            rows.push(d);
        }
    }
    let n = headers.len();
    let mut right = vec![true; n];
    right[..2].fill(false);
    let what = if greedy { "greedy pass@1 (1 sample at temperature 0) and sampled pass@k" } else { "pass@k" };
    out.push(Block::Table(Table {
        title: format!("{what} (%), first eval and compared step (unbiased estimator; * n < k for some problems, left out)"),
        headers,
        rows,
        right,
        key_cols: 2,
        shrink: None,
    }));
}

/// pass@k per eval source (`eval/<source>/pass@k`), first eval → compared step.
fn sources_table(r: &Report, out: &mut Vec<Block>) {
    if r.sources.is_empty() {
        return;
    }
    let ks: std::collections::BTreeSet<u32> = r.sources.iter().flat_map(|x| x.values.iter().map(|v| v.k)).collect();
    let mut headers = vec!["#".to_string(), "source".into(), "problems".into(), "steps".into()];
    headers.extend(ks.iter().map(|k| format!("pass@{k}")));
    let pct = |a: Option<super::report::AtStep>| a.map_or("—".to_string(), |a| format!("{:.1}", a.value * 100.0));
    let rows = r
        .sources
        .iter()
        .map(|x| {
            let (first, at) = x.values.first().map_or((None, None), |v| (v.first.map(|a| a.step), v.at.map(|a| a.step)));
            let steps = match (first, at) {
                (Some(f), Some(a)) if f != a => format!("{f}→{a}"),
                (_, Some(a)) => a.to_string(),
                (Some(f), None) => f.to_string(),
                (None, None) => "—".into(),
            };
            let mut row = vec![format!("#{}", x.run), x.source.clone(), x.problems.map_or("—".into(), |p| format!("{p:.0}")), steps];
            row.extend(ks.iter().map(|k| match x.values.iter().find(|v| v.k == *k) {
                Some(v) if v.first.is_some() && v.first.map(|a| a.step) != v.at.map(|a| a.step) => format!("{}→{}", pct(v.first), pct(v.at)),
                Some(v) => pct(v.at),
                None => "—".into(),
            }));
            row
        })
        .collect();
    let n = headers.len();
    let mut right = vec![true; n];
    right[0] = false;
    right[1] = false;
    out.push(Block::Table(Table { title: "eval by source: pass@k (%) at the first eval → the compared eval step".into(), headers, rows, right, key_cols: 2, shrink: None }));
}

/// The run-health diagnostics that fired (`events.jsonl`); the same firing in several runs (the
/// seeds of an arm, most often) is one line naming them all.
fn diagnostics_block(r: &Report, out: &mut Vec<Block>) {
    let mut lines: Vec<(String, Vec<usize>)> = vec![];
    for d in &r.diagnostics {
        let stop = if d.action == "stop" { ", stopped the run" } else { "" };
        let mut text = format!("step {} {}{stop}: {} → {}", d.step, d.signal, d.evidence, d.remedy);
        for l in d.leads.iter().take(3) {
            let _ = write!(text, "\n    lead: {l}");
        }
        match lines.iter_mut().find(|(t, _)| *t == text) {
            Some((_, runs)) => runs.push(d.run),
            None => lines.push((text, vec![d.run])),
        }
    }
    if lines.is_empty() {
        return;
    }
    // A lead is a line of its own, under its firing.
    let lines = lines
        .into_iter()
        .flat_map(|(text, runs)| {
            let runs = runs.iter().map(|i| format!("#{i}")).collect::<Vec<_>>().join(",");
            let mut parts = text.split('\n');
            let first = format!("{runs} {}", parts.next().unwrap_or_default());
            std::iter::once(first).chain(parts.map(str::to_owned)).collect::<Vec<_>>()
        })
        .collect();
    out.push(Block::Lines { title: "diagnostics fired (events.jsonl: signal, evidence → remedy)".into(), lines });
}

/// The best evaluation of each run, with its checkpoint.
fn best_block(r: &Report, out: &mut Vec<Block>) {
    let best: Vec<String> = r
        .runs
        .iter()
        .filter_map(|x| {
            let b = x.best_checkpoint.as_ref()?;
            let ck = match (&b.checkpoint, &b.state_path) {
                (Some(n), Some(p)) => format!("checkpoint `{n}` ({p})"),
                (Some(n), None) => format!("checkpoint `{n}`"),
                _ => "no checkpoint saved at that step".into(),
            };
            Some(format!("#{} {} {} at step {} → {ck}", x.index, b.metric, metric::value(&b.metric, b.best.value), step_text(b.best.step)))
        })
        .collect();
    if !best.is_empty() {
        let mut lines = best;
        lines.push("(the best of several noisy evals is biased upward; decide on the deciding step, not on this)".into());
        out.push(Block::Lines { title: "best evaluation per run".into(), lines });
    }
}

/// Warnings met while loading and comparing.
fn warnings_block(r: &Report, out: &mut Vec<Block>) {
    if !r.warnings.is_empty() {
        out.push(Block::Lines { title: "warnings".into(), lines: r.warnings.clone() });
    }
}

/// `eval/pass@1` → `pass@1`.
fn short_metric(m: &str) -> &str {
    m.strip_prefix("eval/").unwrap_or(m)
}

/// Greedy pass@1 between two sides: the means, Δ, and the exact McNemar test's discordant pairs
/// (b: passed only at A, c: passed only at B) and p.
fn greedy_line(g: &Paired) -> String {
    let m = "eval/pass@1";
    let test = match g.mcnemar {
        Some(mc) => format!("McNemar exact b = {}, c = {}, p = {}", mc.b, mc.c, metric::p(mc.p)),
        None => format!("{} p = {} ({} up, {} down)", g.test_name(), metric::p(g.p()), g.better, g.worse),
    };
    format!("{} → {}  Δ {}  {test}", metric::value(m, g.mean_b), metric::value(m, g.mean_a), metric::delta(m, g.delta()))
}

/// `greedy pass@1 down beyond noise (McNemar exact p = 0.039)`: which way one protocol moved,
/// and whether the paired test sees more than noise.
fn protocol_verdict(name: &str, p: &Paired) -> String {
    protocol_verdict_adj(name, p, None)
}

/// [`protocol_verdict`] judged on a Holm-adjusted p when there is one; a change not detected is
/// given with its interval.
fn protocol_verdict_adj(name: &str, p: &Paired, holm: Option<f64>) -> String {
    let (pv, test) = match holm {
        Some(h) => (h, format!("{} p = {}, Holm {}", p.test_name(), metric::p(p.p()), metric::p(h))),
        None => (p.p(), format!("{} p = {}", p.test_name(), metric::p(p.p()))),
    };
    match (pv < 0.05, p.delta() > 0.0) {
        (true, true) => format!("{name} up beyond noise ({test})"),
        (true, false) => format!("{name} DOWN beyond noise ({test})"),
        (false, _) => {
            let m = "eval/pass@1";
            format!("{name}: no change detected ({test}; Δ {} 95% CI {})", metric::delta(m, p.delta()), metric::delta_ci(m, p.ci().lo, p.ci().hi))
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn test_line(p: &Paired, up: &str, down: &str, same: &str) -> String {
    let test = match p.mcnemar {
        Some(mc) => format!("McNemar exact p = {} (mid-p {})", metric::p(mc.p), metric::p(mc.mid_p)),
        None => format!("{} p = {}", p.test_name(), metric::p(p.p())),
    };
    let mut s = format!("{test} · {} {up}, {} {down}, {} {same} of {} problems", p.better, p.worse, p.tied, p.problems);
    if p.only_a + p.only_b > 0 {
        let _ = write!(s, " ({} unshared left out)", p.only_a + p.only_b);
    }
    s
}

fn paired_lines(m: &str, p: &Paired, lead: &str, up: &str, down: &str, same: &str) -> Vec<String> {
    let pad = " ".repeat(lead.chars().count());
    let how = match p.mcnemar {
        Some(_) => format!("McNemar's exact interval over {} problems", p.problems),
        None => format!("paired bootstrap over {} problems ({} resamples)", p.problems, p.bootstrap.resamples),
    };
    let mut lines = vec![
        format!("{lead}Δ {} {}  {how}", metric::delta(m, p.delta()), metric::delta_ci(m, p.ci().lo, p.ci().hi)),
        format!("{pad}{}", test_line(p, up, down, same)),
    ];
    if !p.largest_drops.is_empty() {
        lines.push(format!("{pad}{}", drops_line(m, p)));
    }
    lines
}

/// `largest drops: p07 (−100.0 pp), ...`: the HTML report links each problem to its
/// completions ([`DROPS`]).
fn drops_line(m: &str, p: &Paired) -> String {
    let drops = p.largest_drops.iter().take(3).map(|x| format!("{} ({})", x.problem_id, metric::delta(m, x.delta))).collect::<Vec<_>>().join(", ");
    format!("{DROPS}{drops}")
}

/// What a largest-drops line starts with.
pub(crate) const DROPS: &str = "largest drops: ";

/// Lays out the blocks for a terminal `width` columns wide: tables wider than that shorten their
/// run-id column (keeping both ends), then split into column groups that repeat the key columns.
pub(crate) fn text(blocks: &[Block], width: usize) -> String {
    let mut out = String::new();
    for b in blocks {
        match b {
            Block::Lines { title, lines } => {
                if !title.is_empty() {
                    for w in wrap(title, width) {
                        let _ = writeln!(out, "{w}");
                    }
                }
                let indent = if title.is_empty() { "" } else { "  " };
                for l in lines {
                    for w in wrap(&format!("{indent}{l}"), width) {
                        let _ = writeln!(out, "{w}");
                    }
                }
            }
            Block::Table(t) => {
                for w in wrap(&t.title, width) {
                    let _ = writeln!(out, "{w}");
                }
                out.push_str(&table_text(t, width));
            }
        }
        out.push('\n');
    }
    out.trim_end().to_string() + "\n"
}

/// Word-wraps a line to `width` columns; continuation lines are indented 4 columns deeper than
/// the line's own indentation.
fn wrap(line: &str, width: usize) -> Vec<String> {
    if chars(line) <= width {
        return vec![line.to_string()];
    }
    let lead = line.len() - line.trim_start().len();
    let cont = " ".repeat(lead + 4);
    let mut out = vec![];
    let mut cur = line[..lead].to_string();
    for word in line[lead..].split(' ') {
        let fresh = cur.trim().is_empty();
        if !fresh && chars(&cur) + 1 + chars(word) > width {
            out.push(std::mem::replace(&mut cur, cont.clone()));
            cur.push_str(word);
        } else {
            if !fresh {
                cur.push(' ');
            }
            cur.push_str(word);
        }
    }
    out.push(cur);
    out
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

fn table_text(t: &Table, width: usize) -> String {
    const GAP: usize = 2;
    const INDENT: usize = 2;
    let ncol = t.headers.len();
    let mut rows: Vec<Vec<String>> = t.rows.clone();
    let mut headers: Vec<String> = t.headers.clone();
    let mut widths: Vec<usize> = (0..ncol).map(|c| rows.iter().map(|r| chars(&r[c])).chain([chars(&t.headers[c])]).max().unwrap_or(0)).collect();
    let total = |w: &[usize]| INDENT + w.iter().sum::<usize>() + GAP * w.len().saturating_sub(1);
    if let Some(s) = t.shrink
        && total(&widths) > width
    {
        let over = total(&widths) - width;
        let target = widths[s].saturating_sub(over).max(16).min(widths[s]);
        for r in &mut rows {
            r[s] = middle_cut(&r[s], target);
        }
        widths[s] = target.max(chars(&t.headers[s]));
    }
    // A cell wider than a column group leaves room for (a long path or eval setting in the
    // config table) is cut in the middle rather than breaking the width.
    let keys_w: usize = (0..t.key_cols.min(ncol)).map(|c| widths[c] + GAP).sum();
    let room = width.saturating_sub(INDENT + keys_w).max(16);
    for c in t.key_cols.min(ncol)..ncol {
        if widths[c] > room {
            for r in &mut rows {
                r[c] = middle_cut(&r[c], room);
            }
            headers[c] = middle_cut(&headers[c], room);
            widths[c] = room;
        }
    }
    // Column groups: key columns, then as many others as fit.
    let keys: Vec<usize> = (0..t.key_cols.min(ncol)).collect();
    let mut groups: Vec<Vec<usize>> = vec![];
    let mut cur: Vec<usize> = keys.clone();
    for c in t.key_cols..ncol {
        let mut next = cur.clone();
        next.push(c);
        let w: Vec<usize> = next.iter().map(|&i| widths[i]).collect();
        if total(&w) > width && cur.len() > keys.len() {
            groups.push(std::mem::replace(&mut cur, keys.clone()));
        }
        cur.push(c);
    }
    if cur.len() > keys.len() || groups.is_empty() {
        groups.push(cur);
    }
    let mut out = String::new();
    for (gi, g) in groups.iter().enumerate() {
        if gi > 0 {
            out.push('\n');
        }
        let line = |cells: Vec<&str>| {
            let mut s = " ".repeat(INDENT);
            for (j, (&c, cell)) in g.iter().zip(cells).enumerate() {
                if j > 0 {
                    s.push_str(&" ".repeat(GAP));
                }
                let pad = widths[c].saturating_sub(chars(cell));
                if t.right[c] {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(cell);
                } else {
                    s.push_str(cell);
                    s.push_str(&" ".repeat(pad));
                }
            }
            s.trim_end().to_string() + "\n"
        };
        out.push_str(&line(g.iter().map(|&c| headers[c].as_str()).collect()));
        for r in &rows {
            out.push_str(&line(g.iter().map(|&c| r[c].as_str()).collect()));
        }
    }
    out
}

/// The blocks as Markdown: tables as GitHub tables, paragraphs as lists.
pub(crate) fn markdown(blocks: &[Block]) -> String {
    let cell = |s: &str| s.replace('|', "\\|");
    let mut out = String::from("# rlx compare\n\n");
    for b in blocks {
        match b {
            Block::Lines { title, lines } => {
                if !title.is_empty() {
                    let _ = writeln!(out, "## {}\n", title);
                }
                for l in lines {
                    let _ = writeln!(out, "- {}", cell(l.trim()));
                }
            }
            Block::Table(t) => {
                let _ = writeln!(out, "## {}\n", t.title);
                let _ = writeln!(out, "| {} |", t.headers.iter().map(|h| cell(h)).collect::<Vec<_>>().join(" | "));
                let _ = writeln!(out, "|{}|", t.right.iter().map(|&r| if r { "---:" } else { "---" }).collect::<Vec<_>>().join("|"));
                for r in &t.rows {
                    let _ = writeln!(out, "| {} |", r.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | "));
                }
            }
        }
        out.push('\n');
    }
    out
}

/// One CSV row per run: identity, state, the differing config keys, and per metric its final,
/// best and deciding-step values with their steps. Raw numbers (fractions stay 0–1).
pub(crate) fn csv(r: &Report) -> String {
    let mut headers: Vec<String> = ["index", "run_id", "path", "arm", "seed", "status", "steps_done", "max_steps", "wall_s", "tokens"].map(String::from).to_vec();
    headers.extend(r.differing.iter().cloned());
    for m in &r.metrics {
        for s in ["final", "final_step", "best", "best_step", "at", "at_step"] {
            headers.push(format!("{m}:{s}"));
        }
    }
    let num = |v: Option<f64>| v.map_or(String::new(), |x| if x.is_nan() { String::new() } else { x.to_string() });
    let mut out = line_csv(&headers);
    for x in &r.runs {
        let mut row = vec![
            x.index.to_string(),
            x.id.clone(),
            x.path.clone(),
            x.arm.clone(),
            x.seed.clone().unwrap_or_default(),
            x.status.clone(),
            x.steps_done.to_string(),
            x.max_steps.to_string(),
            num(x.wall_s),
            num(x.tokens),
        ];
        row.extend(r.differing.iter().map(|k| x.config.get(k).cloned().unwrap_or_default()));
        for m in &r.metrics {
            let v = &x.metrics[m];
            for a in [v.last, v.best, v.at] {
                row.push(num(a.map(|a| a.value)));
                row.push(a.map_or(String::new(), |a| a.step.to_string()));
            }
        }
        out.push_str(&line_csv(&row));
    }
    out
}

fn line_csv(cells: &[String]) -> String {
    let q = |s: &String| if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.clone() };
    cells.iter().map(q).collect::<Vec<_>>().join(",") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_tables_shorten_then_split() {
        let t = Table {
            title: "t".into(),
            headers: vec!["#".into(), "run".into(), "a".into(), "b".into()],
            rows: vec![vec!["#1".into(), "x".repeat(60) + "END", "y".repeat(30), "z".repeat(30)]],
            right: vec![false; 4],
            key_cols: 1,
            shrink: Some(1),
        };
        let s = table_text(&t, 100);
        assert!(s.lines().all(|l| l.chars().count() <= 100), "{s}");
        assert!(s.contains('…') && s.contains("END"), "{s}");
        // Still too wide after shortening: split, repeating `#`.
        let s = table_text(&t, 60);
        assert!(s.lines().all(|l| l.chars().count() <= 60), "{s}");
        assert!(s.lines().filter(|l| l.trim_start().starts_with("#1")).count() >= 2, "{s}");
    }

    #[test]
    fn long_lines_wrap_under_their_indent() {
        let w = wrap("  verdict: one two three four five six", 20);
        assert_eq!(w, ["  verdict: one two", "      three four", "      five six"]);
        assert!(w.iter().all(|l| l.chars().count() <= 20));
    }

    #[test]
    fn csv_quotes() {
        assert_eq!(line_csv(&["a".into(), "b,c".into(), "d\"e".into()]), "a,\"b,c\",\"d\"\"e\"\n");
    }
}
