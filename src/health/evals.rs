//! The signals checked after an eval that read more than pass@1: greedy pass@1 against the
//! first eval's, problem by problem (exact McNemar), and pass@k at the largest k against
//! pass@1 (coverage).

use std::collections::BTreeMap;

use crate::rl::signif::mcnemar;
use crate::runlog::metrics::eval as names;
use crate::spec::health::Health;

/// An eval's step and each problem's greedy pass/fail.
pub(super) type Outcomes = (i64, BTreeMap<String, bool>);

/// An eval's step and metrics.
pub(super) type EvalLine = (i64, BTreeMap<String, f64>);

/// A rate as a percentage, `37.5%` (as the other signals print it; this file names no sibling,
/// so that `health`'s parent–child import cycle does not grow).
fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// A p-value as `compare` prints it: 3 decimals, or scientific below 0.001.
pub(crate) fn p_text(p: f64) -> String {
    if p < 0.001 { format!("{p:.1e}") } else { format!("{p:.3}") }
}

/// How the first eval is named: `the baseline` (−1) or `step N`.
fn first_name(step: i64) -> String {
    if step < 0 { "the baseline".to_owned() } else { format!("step {step}") }
}

/// Greedy pass@1 fell from the first eval's beyond noise: on the problems both evaluated, more
/// lost than gained, with exact McNemar p below `greedy_below_baseline.p`. Leads: the problems
/// lost.
pub(super) fn greedy_below(cfg: &Health, first: Option<&Outcomes>, now: Option<&Outcomes>) -> Option<(String, Vec<String>)> {
    let ((fs, first), (ns, now)) = (first?, now?);
    if fs == ns {
        return None;
    }
    let shared: Vec<(&String, bool, bool)> = first.iter().filter_map(|(id, &was)| Some((id, was, *now.get(id)?))).collect();
    let gained = shared.iter().filter(|(_, was, is)| *is && !*was).count() as u64;
    let lost: Vec<&String> = shared.iter().filter(|(_, was, is)| *was && !*is).map(|(id, _, _)| *id).collect();
    let m = mcnemar(gained, lost.len() as u64);
    if (lost.len() as u64) <= gained || m.p >= cfg.greedy_below_baseline.p {
        return None;
    }
    let n = shared.len().max(1) as f64;
    let rate = |pass: usize| pct(pass as f64 / n);
    let evidence = format!(
        "greedy pass@1 {} at {} → {} at step {ns} on {} problems: {} lost, {gained} gained (exact McNemar p = {}, threshold {})",
        rate(shared.iter().filter(|s| s.1).count()),
        first_name(*fs),
        rate(shared.iter().filter(|s| s.2).count()),
        shared.len(),
        lost.len(),
        p_text(m.p),
        cfg.greedy_below_baseline.p
    );
    let leads = lost.iter().take(5).map(|id| format!("eval problem {id}: passed greedily at {}, fails at step {ns}", first_name(*fs))).collect();
    Some((evidence, leads))
}

/// pass@k at the largest k (> 1) fell by more than `coverage_collapse.drop` from the first
/// eval's while pass@1 rose.
pub(super) fn coverage(cfg: &Health, evals: &[EvalLine]) -> Option<String> {
    let ((fs, first), (ns, now)) = (evals.first()?, evals.last()?);
    if fs == ns {
        return None;
    }
    let k = now.keys().filter_map(|m| names::parse_pass_at(m)).max().filter(|&k| k > 1)?;
    let (big, one) = (names::pass_at(k), names::pass_at(1));
    let (was, is) = (*first.get(&big)?, *now.get(&big)?);
    let (was1, is1) = (*first.get(&one)?, *now.get(&one)?);
    (was - is > cfg.coverage_collapse.drop && is1 > was1).then(|| {
        format!(
            "eval pass@{k} fell {} → {} since {} (more than {}) while pass@1 rose {} → {}: fewer problems solved by any of {k} samples",
            pct(was),
            pct(is),
            first_name(*fs),
            pct(cfg.coverage_collapse.drop),
            pct(was1),
            pct(is1)
        )
    })
}
