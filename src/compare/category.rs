//! pass@1 by problem category for each arm between two eval steps, under each protocol: where a
//! gain (or a loss) comes from. An arm's seeds are pooled per problem first (each problem's pass@1
//! averaged over the runs at each step), so each problem counts once, as in [`super::pooled`];
//! the categories' means come from `health::categories`, which `rlx doctor` prints for one run.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::arms::Arm;
use super::load::Run;
use super::select::StepSel;
use crate::health::categories::{self, Shift};

/// One category of one arm: each protocol's [`Shift`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct CategoryRow {
    /// The category (`all` for every problem, last).
    pub category: String,
    /// The main protocol's, between the two steps.
    pub sampled: Option<Shift>,
    /// Greedy pass@1's.
    pub greedy: Option<Shift>,
}

/// An arm's pass@1 by category between two eval steps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ArmCategories {
    /// The arm's label.
    pub arm: String,
    /// The run numbers pooled (1-based).
    pub runs: Vec<usize>,
    /// The steps, as asked (`-1`, `last`, ...).
    pub from: String,
    /// The later step.
    pub to: String,
    /// One row per category, `all` last.
    pub rows: Vec<CategoryRow>,
}

/// Each problem's pass@1 averaged over `at`'s (run, step) pairs, for the problems every run
/// graded there (n > 0).
fn means(at: &[(&Run, i64)], greedy: bool) -> BTreeMap<String, f64> {
    let mut common: Option<BTreeSet<&String>> = None;
    for (r, s) in at {
        let ids: BTreeSet<&String> = r.outcomes(greedy).get(s).map(|m| m.iter().filter(|(_, o)| o.n > 0).map(|(id, _)| id).collect()).unwrap_or_default();
        common = Some(common.map_or(ids.clone(), |c| c.intersection(&ids).copied().collect()));
    }
    common
        .unwrap_or_default()
        .into_iter()
        .map(|id| {
            let sum: f64 = at.iter().map(|(r, s)| r.outcomes(greedy)[s][id]).map(|o| f64::from(o.correct) / f64::from(o.n)).sum();
            (id.clone(), sum / at.len() as f64)
        })
        .collect()
}

/// One protocol's categories between `from` and `to`: category → shift.
fn shifts(from: &[(&Run, i64)], to: &[(&Run, i64)], greedy: bool, category: &BTreeMap<String, String>) -> BTreeMap<String, Shift> {
    let (a, b) = (means(from, greedy), means(to, greedy));
    let estimates: BTreeMap<String, (f64, f64)> = a
        .into_iter()
        .filter_map(|(id, x)| {
            let y = *b.get(&id)?;
            Some((id, (x, y)))
        })
        .collect();
    categories::by_category(&estimates, category).into_iter().collect()
}

/// Every arm whose runs' eval records name categories, between `steps` (each run's own pick of
/// them); none when no run's records name one.
pub(crate) fn by_arm(runs: &[Run], groups: &[Arm], steps: (StepSel, StepSel)) -> Vec<ArmCategories> {
    let category: BTreeMap<String, String> = runs.iter().flat_map(|r| r.categories.iter().map(|(k, v)| (k.clone(), v.clone()))).collect();
    if category.is_empty() {
        return vec![];
    }
    let mut out = vec![];
    for arm in groups {
        let (mut from, mut to, mut members) = (vec![], vec![], vec![]);
        for &i in &arm.runs {
            let have: Vec<i64> = runs[i].evals.keys().copied().collect();
            if let (Some(f), Some(t)) = (steps.0.pick(&have), steps.1.pick(&have))
                && f != t
            {
                from.push((&runs[i], f));
                to.push((&runs[i], t));
                members.push(i + 1);
            }
        }
        if members.is_empty() {
            continue;
        }
        let mut tables = vec![shifts(&from, &to, false, &category)];
        // A run whose main eval is greedy has one protocol: its main one.
        if from.iter().all(|(r, _)| !r.greedy_evals.is_empty()) {
            tables.push(shifts(&from, &to, true, &category));
        }
        let rows = categories::side_by_side(&tables).into_iter().map(|(c, s)| CategoryRow { category: c, sampled: s[0], greedy: s.get(1).copied().flatten() }).collect();
        out.push(ArmCategories { arm: arm.label.clone(), runs: members, from: steps.0.to_string(), to: steps.1.to_string(), rows });
    }
    out
}
