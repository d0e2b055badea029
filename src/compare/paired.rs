//! Paired comparisons on shared eval problems (from `eval_results.jsonl`): two arms at an eval
//! step, or one run at two eval steps. Pairing by problem removes the problem-difficulty
//! variance that dominates an unpaired comparison (Miller 2024, "Adding Error Bars to Evals").

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::load::Run;
use super::stats::{self, Bootstrap, McNemar, SignFlip, Tost};
use crate::rl::passk::pass_at_k;

/// One side of a comparison: runs, each read at one eval step. Several runs (the seeds of an
/// arm) are pooled by averaging each problem's estimate over them.
#[derive(Debug, Clone)]
pub(crate) struct Side<'a> {
    /// What the side is called in the report.
    pub label: String,
    /// The runs and the eval step of each.
    pub runs: Vec<(&'a Run, i64)>,
    /// Which protocol's outcomes: greedy pass@1's ([`Run::greedy`]) or the main eval's.
    pub greedy: bool,
}

/// A per-problem difference.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ProblemDelta {
    /// The problem id.
    pub problem_id: String,
    /// A's estimate − B's.
    pub delta: f64,
}

/// The paired comparison of side A against side B on their shared problems (Δ = A − B).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Paired {
    /// A's label.
    pub a: String,
    /// B's label.
    pub b: String,
    /// The k of the per-problem pass@k estimates compared.
    pub k: u32,
    /// Problems both sides evaluated (with n ≥ k): the pairs.
    pub problems: usize,
    /// Problems only A evaluated (left out).
    pub only_a: usize,
    /// Problems only B evaluated (left out).
    pub only_b: usize,
    /// Shared problems left out because some run had fewer than k graded samples there
    /// (`rl::passk` would clamp k to n and report pass@n as pass@k).
    pub excluded_n_lt_k: usize,
    /// A's mean estimate over the pairs.
    pub mean_a: f64,
    /// B's mean estimate over the pairs.
    pub mean_b: f64,
    /// Paired bootstrap over problems of the mean difference.
    pub bootstrap: Bootstrap,
    /// The exact McNemar test, when every pair is one sample against one sample (binary
    /// outcomes); `None` otherwise.
    pub mcnemar: Option<McNemar>,
    /// The sign-flip permutation test (equal to McNemar's on binary outcomes).
    pub sign_flip: SignFlip,
    /// The equivalence test within ±margin (`rlx compare --margin`), when asked for.
    pub tost: Option<Tost>,
    /// Problems where A's estimate is higher.
    pub better: usize,
    /// Problems where it is lower.
    pub worse: usize,
    /// Problems where they are equal.
    pub tied: usize,
    /// The largest drops (most negative Δ first), up to 5.
    pub largest_drops: Vec<ProblemDelta>,
    /// The largest gains, up to 5.
    pub largest_gains: Vec<ProblemDelta>,
}

impl Paired {
    /// Mean difference A − B.
    pub(crate) fn delta(&self) -> f64 {
        self.bootstrap.mean
    }

    /// The p-value the verdict uses: McNemar's exact p for binary outcomes, else the sign-flip
    /// test's.
    pub(crate) fn p(&self) -> f64 {
        self.mcnemar.map_or(self.sign_flip.p, |m| m.p)
    }

    /// The 95% interval of [`Paired::delta`] that goes with [`Paired::p`]: McNemar's exact one
    /// for binary outcomes ([`stats::mcnemar_interval`]), else the paired bootstrap's.
    pub(crate) fn ci(&self) -> stats::Interval {
        match self.mcnemar {
            Some(m) => {
                let (lo, hi) = stats::mcnemar_interval(m.b, m.c, self.problems as u64);
                stats::Interval { lo, hi }
            }
            None => self.bootstrap.ci,
        }
    }

    /// The name of the test behind [`Paired::p`].
    pub(crate) fn test_name(&self) -> &'static str {
        match (self.mcnemar, self.sign_flip.exact) {
            (Some(_), _) => "McNemar exact",
            (None, true) => "sign-flip exact",
            (None, false) => "sign-flip Monte Carlo",
        }
    }
}

/// Per-problem estimates of one side: problems every run evaluated at its step, each the mean
/// over runs of its pass@k; and the problems dropped because a run had n < k there.
fn estimates(side: &Side, k: u32) -> (BTreeMap<String, f64>, BTreeSet<String>, bool) {
    let mut common: Option<BTreeSet<&String>> = None;
    for (run, step) in &side.runs {
        let ids: BTreeSet<&String> = run.outcomes(side.greedy).get(step).map(|m| m.keys().collect()).unwrap_or_default();
        common = Some(match common {
            None => ids,
            Some(c) => c.intersection(&ids).copied().collect(),
        });
    }
    let mut out = BTreeMap::new();
    let mut short = BTreeSet::new();
    let mut single_sample = side.runs.len() == 1;
    for id in common.unwrap_or_default() {
        let outcomes: Vec<_> = side.runs.iter().map(|(r, s)| r.outcomes(side.greedy)[s][id]).collect();
        if outcomes.iter().any(|o| o.n < k || o.n == 0) {
            short.insert(id.clone());
            continue;
        }
        single_sample &= outcomes.iter().all(|o| o.n == 1);
        let v = outcomes.iter().map(|o| pass_at_k(o.n, o.correct, k)).sum::<f64>() / outcomes.len() as f64;
        out.insert(id.clone(), v);
    }
    (out, short, single_sample)
}

/// Compares A against B on their shared problems; `None` when they share none. Several runs on a
/// side are pooled per problem first (each problem's mean over the runs), so each problem counts
/// once however many seeds there are: seeds × problems are not independent pairs (the same
/// problem's outcomes agree across seeds). `margin`: also test equivalence within it.
pub(crate) fn compare(a: &Side, b: &Side, k: u32, resamples: usize, seed: u64, margin: Option<f64>) -> Option<Paired> {
    let (ea, short_a, single_a) = estimates(a, k);
    let (eb, short_b, single_b) = estimates(b, k);
    let shared: Vec<&String> = ea.keys().filter(|id| eb.contains_key(*id)).collect();
    let excluded: BTreeSet<&String> = short_a.iter().chain(&short_b).collect();
    let excluded_n_lt_k = excluded.len();
    if shared.is_empty() {
        return None;
    }
    let deltas: Vec<ProblemDelta> = shared.iter().map(|id| ProblemDelta { problem_id: (*id).clone(), delta: ea[*id] - eb[*id] }).collect();
    let d: Vec<f64> = deltas.iter().map(|x| x.delta).collect();
    const EPS: f64 = 1e-12;
    let better = d.iter().filter(|&&x| x > EPS).count();
    let worse = d.iter().filter(|&&x| x < -EPS).count();
    let mcnemar = (single_a && single_b).then(|| stats::mcnemar(better as u64, worse as u64));
    let mut sorted = deltas.clone();
    sorted.sort_by(|x, y| x.delta.total_cmp(&y.delta).then_with(|| x.problem_id.cmp(&y.problem_id)));
    let largest_drops = sorted.iter().filter(|x| x.delta < -EPS).take(5).cloned().collect();
    let largest_gains = sorted.iter().rev().filter(|x| x.delta > EPS).take(5).cloned().collect();
    let only = |mine: &BTreeMap<String, f64>, theirs: &BTreeMap<String, f64>, theirs_short: &BTreeSet<String>| {
        mine.keys().filter(|id| !theirs.contains_key(*id) && !theirs_short.contains(*id)).count()
    };
    Some(Paired {
        a: a.label.clone(),
        b: b.label.clone(),
        k,
        problems: shared.len(),
        only_a: only(&ea, &eb, &short_b),
        only_b: only(&eb, &ea, &short_a),
        excluded_n_lt_k,
        mean_a: shared.iter().map(|id| ea[*id]).sum::<f64>() / shared.len() as f64,
        mean_b: shared.iter().map(|id| eb[*id]).sum::<f64>() / shared.len() as f64,
        bootstrap: stats::paired_bootstrap(&d, resamples, seed),
        mcnemar,
        sign_flip: stats::sign_flip(&d, resamples, seed),
        tost: margin.and_then(|m| stats::tost(&d, m)),
        better,
        worse,
        tied: d.len() - better - worse,
        largest_drops,
        largest_gains,
    })
}

/// Unbiased pass@k (Chen et al. 2021) of one run at one eval step, for k = 1..max n: the mean
/// over problems with n ≥ k of 1 − C(n−c, k)/C(n, k). Problems with n < k are left out of that
/// k's mean and counted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct PassAtK {
    /// k.
    pub k: u32,
    /// The estimate (0–1).
    pub value: f64,
    /// Problems averaged.
    pub problems: usize,
    /// Problems left out (n < k).
    pub excluded: usize,
}

/// [`PassAtK`] for every k from 1 to the largest n of the run's evaluation at `step`.
pub(crate) fn pass_at_ks(run: &Run, step: i64) -> Vec<PassAtK> {
    let Some(outcomes) = run.evals.get(&step) else { return vec![] };
    let max_n = outcomes.values().map(|o| o.n).max().unwrap_or(0);
    (1..=max_n)
        .map(|k| {
            let ok: Vec<_> = outcomes.values().filter(|o| o.n >= k).collect();
            let value = if ok.is_empty() { f64::NAN } else { ok.iter().map(|o| pass_at_k(o.n, o.correct, k)).sum::<f64>() / ok.len() as f64 };
            PassAtK { k, value, problems: ok.len(), excluded: outcomes.len() - ok.len() }
        })
        .collect()
}
