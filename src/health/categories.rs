//! pass@1 by problem category (a row's `category`: the list-function task's operation), between
//! two evaluations, under each protocol: where a gain comes from (issue #54). `rlx doctor` prints
//! it for one run; `rlx compare` for each arm, its seeds pooled per problem first.
//!
//! Each problem counts once: its pass@1 at each evaluation (the mean over an arm's seeds when
//! pooled), then the mean over the category's problems. Descriptive only, with no test per
//! category: a category holds a handful of problems, and eight more tests beside the overall one
//! would be eight more chances of a false "significant" (the overall paired test is the claim).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::runlog::EvalResultRecord;

/// The row of the problems whose data named no category, when some others did.
pub const UNCATEGORIZED: &str = "(none)";
/// The row of every problem, after the categories.
pub const ALL: &str = "all";

/// One protocol's pass@1 over one category's problems at two evaluations.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Shift {
    /// Problems evaluated at both.
    pub problems: usize,
    /// Mean pass@1 at the earlier evaluation.
    pub from: f64,
    /// At the later one.
    pub to: f64,
    /// Problems whose pass@1 rose.
    pub up: usize,
    /// Problems whose pass@1 fell.
    pub down: usize,
}

impl Shift {
    /// `22.1 → 50.8 (+28.7; 5↑ 1↓)`: percentages, the change in points, problems up and down.
    pub fn cell(&self) -> String {
        let delta = format!("{:+.1}", 100.0 * (self.to - self.from)).replace('-', "−");
        format!("{:.1} → {:.1} ({delta}; {}↑ {}↓)", 100.0 * self.from, 100.0 * self.to, self.up, self.down)
    }
}

/// Per category (in name order, [`UNCATEGORIZED`] among them, then [`ALL`]): the mean of each
/// problem's (earlier, later) pass@1. `category`: problem id → its category. Empty when no
/// problem has a category: then there is nothing to break down.
pub fn by_category(estimates: &BTreeMap<String, (f64, f64)>, category: &BTreeMap<String, String>) -> Vec<(String, Shift)> {
    if !estimates.keys().any(|id| category.contains_key(id)) {
        return vec![];
    }
    let mut groups: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
    for (id, &e) in estimates {
        groups.entry(category.get(id).map_or(UNCATEGORIZED, String::as_str)).or_default().push(e);
    }
    let all: Vec<(f64, f64)> = estimates.values().copied().collect();
    groups.into_iter().map(|(c, es)| (c.to_owned(), shift(&es))).chain([(ALL.to_owned(), shift(&all))]).collect()
}

fn shift(es: &[(f64, f64)]) -> Shift {
    const EPS: f64 = 1e-12;
    let n = es.len().max(1) as f64;
    Shift {
        problems: es.len(),
        from: es.iter().map(|e| e.0).sum::<f64>() / n,
        to: es.iter().map(|e| e.1).sum::<f64>() / n,
        up: es.iter().filter(|e| e.1 - e.0 > EPS).count(),
        down: es.iter().filter(|e| e.0 - e.1 > EPS).count(),
    }
}

/// An eval data file a run's config names, and the SHA-256 its provenance recorded.
#[derive(Debug, Clone)]
pub struct DataFile {
    /// The path, as the config names it.
    pub path: std::path::PathBuf,
    /// Its `format`, as the config names it (`mbpp`, `auto`).
    pub format: Option<String>,
    /// Its SHA-256 when the run started, if recorded.
    pub sha256: Option<String>,
}

/// For a run whose eval records carry no category (written before records had one): the
/// categories the rows of its eval data files name now, by problem id, and a note per file read.
/// Why join rather than show nothing: the runs a README reports on were made before, and the
/// rows' ids are the task's own. A file whose bytes differ from those provenance recorded is said
/// to have changed since (an id may then name another problem); a file that cannot be read is
/// skipped.
pub fn from_data(files: &[DataFile]) -> (BTreeMap<String, String>, Vec<String>) {
    let (mut out, mut notes) = (BTreeMap::new(), vec![]);
    for f in files {
        let Ok(bytes) = std::fs::read(&f.path) else { continue };
        let format = f.format.as_deref().and_then(|x| x.parse().ok());
        let Ok(problems) = crate::data::load_file(&f.path, format) else { continue };
        let found: Vec<(String, String)> = problems.iter().filter_map(|p| Some((p.id.clone(), p.category()?.to_owned()))).collect();
        if found.is_empty() {
            continue;
        }
        let changed = f.sha256.as_ref().is_some_and(|h| *h != crate::plan::hash::sha256_hex(&bytes));
        notes.push(format!(
            "its eval records name no category: the categories of {} problems read from `{}` now{}",
            found.len(),
            f.path.display(),
            if changed { " (the file changed since the run: an id may name another problem)" } else { "" }
        ));
        out.extend(found);
    }
    (out, notes)
}

/// One run's breakdown between its first and its last evaluation.
#[derive(Debug, Clone, PartialEq)]
pub struct Breakdown {
    /// The earlier evaluation's step (−1: the baseline).
    pub from: i64,
    /// The later one's.
    pub to: i64,
    /// The protocols shown: `sampled` and `greedy`, or `pass@1` for a run with one.
    pub protocols: Vec<&'static str>,
    /// Per category: each protocol's [`Shift`] (`None` where that protocol has no problem of it).
    pub rows: Vec<(String, Vec<Option<Shift>>)>,
    /// Where the categories came from when the records named none ([`from_data`]).
    pub notes: Vec<String>,
}

/// The breakdown of a run's eval records between its first and last evaluation, their categories
/// from the records, else from `files`; `None` when neither names one or the run evaluated once.
pub fn breakdown(evals: &[EvalResultRecord], files: &[DataFile]) -> Option<Breakdown> {
    let mut category: BTreeMap<String, String> = evals.iter().filter_map(|r| Some((r.problem_id.clone(), r.category.clone()?))).collect();
    let mut notes = vec![];
    if category.is_empty() {
        (category, notes) = from_data(files);
    }
    let main: Vec<&EvalResultRecord> = evals.iter().filter(|r| r.protocol.is_none()).collect();
    let (from, to) = (main.iter().map(|r| r.step).min()?, main.iter().map(|r| r.step).max()?);
    if category.is_empty() || from == to {
        return None;
    }
    let greedy = evals.iter().any(|r| r.protocol.is_some());
    let protocols: Vec<&'static str> = if greedy { vec!["sampled", "greedy"] } else { vec!["pass@1"] };
    let tables: Vec<BTreeMap<String, Shift>> = protocols
        .iter()
        .map(|&p| {
            let at = |step: i64| -> BTreeMap<&str, f64> {
                evals.iter().filter(|r| r.step == step && r.protocol.is_some() == (p == "greedy") && r.n > 0).map(|r| (r.problem_id.as_str(), f64::from(r.correct) / f64::from(r.n))).collect()
            };
            let (a, b) = (at(from), at(to));
            let estimates: BTreeMap<String, (f64, f64)> = a.iter().filter_map(|(id, &x)| Some(((*id).to_owned(), (x, *b.get(id)?)))).collect();
            by_category(&estimates, &category).into_iter().collect()
        })
        .collect();
    Some(Breakdown { from, to, protocols, rows: side_by_side(&tables), notes })
}

/// Several protocols' categories side by side: every category any of them has, in name order
/// and `all` last (as [`by_category`] orders them), with each protocol's shift or `None`.
pub fn side_by_side(tables: &[BTreeMap<String, Shift>]) -> Vec<(String, Vec<Option<Shift>>)> {
    let names: std::collections::BTreeSet<&String> = tables.iter().flat_map(BTreeMap::keys).filter(|n| n.as_str() != ALL).collect();
    let all = ALL.to_owned();
    let has_all = tables.iter().any(|t| t.contains_key(ALL));
    names.into_iter().chain(has_all.then_some(&all)).map(|n| (n.clone(), tables.iter().map(|t| t.get(n).copied()).collect())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_problem_counts_once_and_all_comes_last() {
        let e: BTreeMap<String, (f64, f64)> = [("a", (0.0, 1.0)), ("b", (0.5, 0.5)), ("c", (1.0, 0.0)), ("d", (0.0, 0.25))].into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        let c: BTreeMap<String, String> = [("a", "keep"), ("b", "keep"), ("c", "count")].into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
        let rows = by_category(&e, &c);
        let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(names, ["(none)", "count", "keep", "all"]);
        assert_eq!(rows[2].1, Shift { problems: 2, from: 0.25, to: 0.75, up: 1, down: 0 });
        assert_eq!(rows[3].1, Shift { problems: 4, from: 0.375, to: 0.4375, up: 2, down: 1 });
        assert_eq!(rows[1].1.cell(), "100.0 → 0.0 (−100.0; 0↑ 1↓)");
        assert!(by_category(&e, &BTreeMap::new()).is_empty(), "no category, no breakdown");
    }
}
