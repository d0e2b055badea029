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

use crate::runlog::MetricsLine;
use crate::runlog::metrics::{eval, train};

use super::signals::{fmt, pct};

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
    (20, 50, "20–50", "eval pass@1 modestly above the baseline"),
];

/// The expectations for a run of `steps` steps with these metrics lines.
pub fn check(lines: &[MetricsLine], steps: u32) -> Vec<Expectation> {
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
                _ => eval_gain(lines, hi),
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
    // Already formatting nearly everything leaves nothing to rise.
    (format!("train/format_rate {} → {}", pct(first.1), pct(last.1)), Some(last.1 >= first.1 || last.1 >= 0.95))
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

fn eval_gain(lines: &[MetricsLine], hi: u32) -> (String, Option<bool>) {
    let pass1 = |l: &MetricsLine| l.get(&eval::pass_at(1));
    let base = lines.iter().find(|l| l.step < 0).and_then(pass1);
    let last = lines.iter().filter(|l| l.step >= 0 && l.step <= i64::from(hi)).filter_map(|l| Some((l.step, pass1(l)?))).next_back();
    match (base, last) {
        (Some(b), Some((s, v))) => (format!("eval/pass@1 {} at the baseline → {} at step {s}", pct(b), pct(v)), Some(v > b)),
        (None, Some((s, v))) => (format!("eval/pass@1 {} at step {s}, no baseline (schedule.eval_at_start)", pct(v)), None),
        _ => ("no eval/pass@1 after a step".into(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
