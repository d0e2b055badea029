//! The reference workflow's smoke-test expectations (its §8, for the first 20–50 steps), scaled
//! to a run's length, and what the run showed against each:
//!
//! | reference steps | expectation |
//! |---|---|
//! | 1–5 | format adherence rises sharply |
//! | 5–15 | `mean_reward` trends upward (noisy but positive slope) |
//! | 10–30 | `mean_correct` rises from ~0.05 toward 0.10–0.20 |
//! | 20–50 | eval pass@1 shows modest improvement over the baseline |
//!
//! The reference's steps are read as fractions of a 50-step smoke run: a 12-step run's "steps
//! 5–15" are its steps 1–3.

use std::collections::BTreeMap;

use crate::rl::signif::{mcnemar, sign_flip};
use crate::runlog::metrics::{eval, train};
use crate::runlog::{EvalResultRecord, MetricsLine};

use super::text::{fmt, p_text, pct};

/// One expectation and what the run showed.
#[derive(Debug, Clone, PartialEq)]
pub struct Expectation {
    /// The reference's steps.
    pub reference: &'static str,
    /// This run's steps standing for them (`0–1`).
    pub steps: String,
    /// What should happen.
    pub expect: &'static str,
    /// What did, with numbers.
    pub seen: String,
    /// Whether it met the expectation; `None` when the run lacks the data.
    pub met: Option<bool>,
}

/// The reference phases: (first, last) of a 50-step run, the expectation.
const PHASES: [(u32, u32, &str, &str); 4] = [
    (1, 5, "1–5", "format adherence rises sharply"),
    (5, 15, "5–15", "train reward trends upward (noisy, positive slope)"),
    (10, 30, "10–30", "correct rate rises from ~0.05 toward 0.10–0.20"),
    (20, 50, "20–50", "eval pass@1 modestly above the baseline (paired test, each protocol)"),
];

/// The expectations for a run of `steps` steps with these metrics lines and eval records.
pub fn check(lines: &[MetricsLine], evals: &[EvalResultRecord], steps: u32) -> Vec<Expectation> {
    PHASES
        .iter()
        .enumerate()
        .map(|(i, &(a, b, reference, expect))| {
            let (lo, hi) = scale(a, b, steps);
            let in_phase: Vec<&MetricsLine> = lines.iter().filter(|l| l.step >= i64::from(lo) && l.step <= i64::from(hi)).collect();
            let (seen, met) = match i {
                0 => format_rise(&in_phase),
                1 => slope_of(&in_phase, train::REWARD_MEAN),
                2 => slope_of(&in_phase, train::CORRECT_MEAN),
                _ => eval_gain(lines, evals, hi),
            };
            Expectation { reference, steps: if lo == hi { format!("{lo}") } else { format!("{lo}–{hi}") }, expect, seen, met }
        })
        .collect()
}

/// The steps of a `steps`-step run that stand for the reference's steps `a`–`b` (1-based, of 50).
fn scale(a: u32, b: u32, steps: u32) -> (u32, u32) {
    let last = steps.saturating_sub(1);
    let lo = ((a - 1) * steps / 50).min(last);
    let hi = (b * steps).div_ceil(50).saturating_sub(1).clamp(lo, last);
    (lo, hi)
}

fn series(lines: &[&MetricsLine], name: &str) -> Vec<(f64, f64)> {
    lines.iter().filter(|l| l.step >= 0).filter_map(|l| Some((l.step as f64, l.get(name)?))).collect()
}

fn format_rise(lines: &[&MetricsLine]) -> (String, Option<bool>) {
    let xs = series(lines, train::FORMAT_RATE);
    let (Some(first), Some(last)) = (xs.first(), xs.last()) else { return ("no train/format_rate".into(), None) };
    (format!("train/format_rate {} → {}", pct(first.1), pct(last.1)), Some(rose_sharply(first.1, last.1)))
}

/// "Rises sharply": at least a quarter of the way from the first rate to 100% (a flat rate does
/// not rise), or both at 95% or more (already formatting nearly everything leaves nothing to
/// rise, and staying there is what the reference expects).
fn rose_sharply(first: f64, last: f64) -> bool {
    (first >= 0.95 && last >= 0.95) || (last > first && last - first >= 0.25 * (1.0 - first))
}

fn slope_of(lines: &[&MetricsLine], name: &str) -> (String, Option<bool>) {
    let xs = series(lines, name);
    if xs.len() < 2 {
        return (format!("{} step(s) with {name}", xs.len()), None);
    }
    let n = xs.len() as f64;
    let (mx, my) = (xs.iter().map(|p| p.0).sum::<f64>() / n, xs.iter().map(|p| p.1).sum::<f64>() / n);
    let sxy: f64 = xs.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = xs.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (format!("{name} {} → {}, slope {} per step", fmt(xs[0].1), fmt(xs[xs.len() - 1].1), fmt(slope)), Some(slope > 0.0))
}

/// Eval above the baseline, judged per protocol by a paired test on the problems both evals
/// graded (not by the point estimates): met only when every protocol the run recorded went up
/// with p < 0.05. Runs without per-problem records fall back to the point estimate, unjudged.
fn eval_gain(lines: &[MetricsLine], evals: &[EvalResultRecord], hi: u32) -> (String, Option<bool>) {
    let pass1 = |l: &MetricsLine| l.get(&eval::pass_at(1));
    let base = lines.iter().find(|l| l.step < 0).and_then(pass1);
    let last = lines.iter().filter(|l| l.step >= 0 && l.step <= i64::from(hi)).filter_map(|l| Some((l.step, pass1(l)?))).next_back();
    let (b, (s, v)) = match (base, last) {
        (Some(b), Some(last)) => (b, last),
        (None, Some((s, v))) => return (format!("eval/pass@1 {} at step {s}, no baseline (schedule.eval_at_start)", pct(v)), None),
        _ => return ("no eval/pass@1 after a step".into(), None),
    };
    let at = |step: i64, greedy: bool| -> BTreeMap<&str, (u32, u32)> {
        evals.iter().filter(|r| r.step == step && r.protocol.is_some() == greedy && r.n > 0).map(|r| (r.problem_id.as_str(), (r.n, r.correct))).collect()
    };
    let greedy_main = lines.iter().find(|l| l.step < 0).is_some_and(|l| l.get(eval::GREEDY_PASS_AT_1).is_some()) && at(-1, true).is_empty();
    let mut protocols = vec![(if greedy_main { "greedy pass@1" } else if at(-1, true).is_empty() { "pass@1" } else { "sampled pass@1" }, false)];
    if !at(-1, true).is_empty() {
        protocols.push(("greedy pass@1", true));
    }
    let judged: Vec<(String, bool)> = protocols.iter().filter_map(|&(name, greedy)| judge(name, &at(-1, greedy), &at(s, greedy))).collect();
    if judged.is_empty() {
        return (format!("eval/pass@1 {} at the baseline → {} at step {s}; no per-problem records to test", pct(b), pct(v)), None);
    }
    let mut seen = format!("at step {s}: {}", judged.iter().map(|j| j.0.as_str()).collect::<Vec<_>>().join("; "));
    if let Some(f) = super::evals::format_split(lines, s, &protocols) {
        seen = format!("{seen}; {f}");
    }
    (seen, Some(judged.iter().all(|j| j.1)))
}

/// One protocol from `base` to `now` (problem → (n, correct)): `greedy pass@1 80.0% → 60.0%
/// down (McNemar exact p = 0.039, 2 up, 10 down)`, and whether it went up beyond noise.
fn judge(name: &str, base: &BTreeMap<&str, (u32, u32)>, now: &BTreeMap<&str, (u32, u32)>) -> Option<(String, bool)> {
    let pairs: Vec<((u32, u32), (u32, u32))> = base.iter().filter_map(|(id, &b)| Some((b, *now.get(id)?))).collect();
    if pairs.is_empty() {
        return None;
    }
    let rate = |(n, c): (u32, u32)| f64::from(c) / f64::from(n);
    let d: Vec<f64> = pairs.iter().map(|&(b, a)| rate(a) - rate(b)).collect();
    let (up, down) = (d.iter().filter(|&&x| x > 1e-12).count(), d.iter().filter(|&&x| x < -1e-12).count());
    let (test, p) = if pairs.iter().all(|&(b, a)| b.0 == 1 && a.0 == 1) {
        ("McNemar exact", mcnemar(up as u64, down as u64).p)
    } else {
        let f = sign_flip(&d, 10_000, 0);
        (if f.exact { "sign-flip exact" } else { "sign-flip Monte Carlo" }, f.p)
    };
    let n = pairs.len() as f64;
    let (was, is) = (pairs.iter().map(|p| rate(p.0)).sum::<f64>() / n, pairs.iter().map(|p| rate(p.1)).sum::<f64>() / n);
    let delta: f64 = d.iter().sum();
    let way = match (p < 0.05, delta > 0.0) {
        (true, true) => "up",
        (true, false) => "DOWN",
        (false, _) => "no change detected",
    };
    Some((format!("{name} {} → {} {way} ({test} p = {}, {up} up, {down} down)", pct(was), pct(is), p_text(p)), way == "up"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flat_format_rate_does_not_rise_sharply() {
        assert!(!rose_sharply(0.5, 0.5), "flat");
        assert!(!rose_sharply(0.5, 0.55), "a tenth of the way");
        assert!(rose_sharply(0.5, 0.7));
        assert!(rose_sharply(0.97, 0.99) && rose_sharply(0.96, 0.96), "already there, and staying");
        assert!(!rose_sharply(0.97, 0.6), "falling");
    }

    #[test]
    fn phases_scale_to_the_run() {
        assert_eq!(scale(1, 5, 50), (0, 4));
        assert_eq!(scale(20, 50, 50), (19, 49));
        assert_eq!(scale(1, 5, 12), (0, 1));
        assert_eq!(scale(5, 15, 12), (0, 3));
        assert_eq!(scale(20, 50, 12), (4, 11));
        assert_eq!(scale(1, 5, 1), (0, 0));
    }
}
