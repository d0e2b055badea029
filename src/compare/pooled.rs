//! Evidence that counts each problem once and says where a gain came from: an arm's seeds pooled
//! between two eval steps per problem (each problem's mean over the runs, then one paired test
//! over problems), and pass@1 split into its format rate (an extractable answer) and its
//! correctness given format.
//!
//! Why pool per problem rather than add each seed's discordant pairs: three seeds of one problem
//! set are not three independent samples of problems. The same problem tends to pass or fail on
//! every seed (and the greedy baseline is identical across seeds), so counting seeds × problems as
//! pairs understates the variance and gives p-values far too small (issue #54: p = 1e-5 pooled
//! that way, 6e-4–0.02 pooled per problem).

use serde::Serialize;

use super::arms::Arm;
use super::load::Run;
use super::paired::{self, Paired, Side};
use super::select::{StepSel, series};
use crate::runlog::metrics::eval as names;

/// One protocol's pass@1 as format × correctness given format, at one step (means over runs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Decomp {
    /// Fraction of completions with an extractable answer (`eval/format_rate`).
    pub format: f64,
    /// pass@1 (`eval/pass@1`, or greedy's).
    pub pass: f64,
}

impl Decomp {
    /// pass@1 among well-formed completions: pass / format (a malformed one never passes).
    pub(crate) fn given_format(&self) -> Option<f64> {
        (self.format > 0.0).then(|| self.pass / self.format)
    }
}

/// A protocol's [`Decomp`] at the earlier and the later step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct FormatSplit {
    /// `sampled` or `greedy`.
    pub protocol: String,
    /// At the earlier step.
    pub from: Decomp,
    /// At the later step.
    pub to: Decomp,
}

/// The metrics' mean over `at` (run, step) pairs; `None` when some run lacks one.
fn mean_at(at: &[(&Run, i64)], m: &str) -> Option<f64> {
    let vals: Option<Vec<f64>> = at.iter().map(|(r, s)| series(r, m).into_iter().find(|p| p.0 == *s).map(|p| p.1)).collect();
    let vals = vals?;
    (!vals.is_empty()).then(|| vals.iter().sum::<f64>() / vals.len() as f64)
}

/// Format and correctness of both protocols between `from` and `to` (each a run and its step),
/// for the protocols every run logged.
pub(crate) fn format_splits(from: &[(&Run, i64)], to: &[(&Run, i64)]) -> Vec<FormatSplit> {
    let mut out = vec![];
    for (protocol, format, pass) in [("sampled", names::FORMAT_RATE.to_string(), names::pass_at(1)), ("greedy", names::GREEDY_FORMAT_RATE.to_string(), names::GREEDY_PASS_AT_1.to_string())] {
        let at = |side: &[(&Run, i64)]| Some(Decomp { format: mean_at(side, &format)?, pass: mean_at(side, &pass)? });
        if let (Some(f), Some(t)) = (at(from), at(to)) {
            out.push(FormatSplit { protocol: protocol.into(), from: f, to: t });
        }
    }
    out
}

/// An arm's runs pooled between two of their eval steps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct PooledWithin {
    /// The arm's label.
    pub arm: String,
    /// The run numbers pooled (1-based, as in the runs table).
    pub runs: Vec<usize>,
    /// Their seeds.
    pub seeds: Vec<String>,
    /// The earlier and later step, as asked (`-1`, `last`, ...).
    pub from: String,
    /// The later step.
    pub to: String,
    /// The main protocol: each problem's estimate averaged over the runs at each step, then the
    /// sign-flip test over problems.
    pub paired: Option<Paired>,
    /// Greedy pass@1 the same way (sign-flip over per-problem means: not McNemar, which needs one
    /// binary outcome per problem).
    pub greedy: Option<Paired>,
    /// Format and correctness given format, means over the runs.
    pub format: Vec<FormatSplit>,
}

/// What [`pooled`] needs beyond the runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PoolOpts {
    /// The steps.
    pub steps: (StepSel, StepSel),
    /// pass@k's k of the main protocol.
    pub k: u32,
    /// Bootstrap and Monte Carlo resamples.
    pub resamples: usize,
    /// Their seed.
    pub seed: u64,
    /// The equivalence margin, when asked for.
    pub margin: Option<f64>,
}

/// Every arm with two or more runs that have both steps, pooled per problem.
pub(crate) fn pooled(runs: &[Run], groups: &[Arm], o: PoolOpts) -> Vec<PooledWithin> {
    let mut out = vec![];
    for arm in groups {
        let mut from_at = vec![];
        let mut to_at = vec![];
        let mut members = vec![];
        for &i in &arm.runs {
            let steps: Vec<i64> = runs[i].evals.keys().copied().collect();
            if let (Some(f), Some(t)) = (o.steps.0.pick(&steps), o.steps.1.pick(&steps))
                && f != t
            {
                from_at.push((&runs[i], f));
                to_at.push((&runs[i], t));
                members.push(i);
            }
        }
        if members.len() < 2 {
            continue;
        }
        let later = Side { label: format!("step {}", o.steps.1), runs: to_at.clone(), greedy: false };
        let earlier = Side { label: format!("step {}", o.steps.0), runs: from_at.clone(), greedy: false };
        let paired = paired::compare(&later, &earlier, o.k, o.resamples, o.seed, o.margin);
        let greedy = if members.iter().all(|&i| !runs[i].greedy_evals.is_empty()) {
            paired::compare(&Side { greedy: true, ..later }, &Side { greedy: true, ..earlier }, 1, o.resamples, o.seed, o.margin)
        } else {
            None
        };
        out.push(PooledWithin {
            arm: arm.label.clone(),
            runs: members.iter().map(|i| i + 1).collect(),
            seeds: members.iter().map(|&i| runs[i].seed().unwrap_or("?").to_string()).collect(),
            from: o.steps.0.to_string(),
            to: o.steps.1.to_string(),
            paired,
            greedy,
            format: format_splits(&from_at, &to_at),
        });
    }
    out
}
