//! What `rlx compare` reads at which step: [`StepSel`] (an eval step named on the command line)
//! and [`series`] (one metric of a run over its steps). Below both the report and the pooled
//! tests, which each read runs this way (kept in the report, they made an import cycle).

use std::str::FromStr;

use serde::Serialize;

use super::load::Run;

/// An eval step named on the command line: a number (`-1` is the baseline), `first` or `last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum StepSel {
    /// This step.
    Step(i64),
    /// The run's first (eval) step.
    First,
    /// The run's last (eval) step.
    Last,
}

impl FromStr for StepSel {
    type Err = String;
    fn from_str(s: &str) -> Result<StepSel, String> {
        match s.trim() {
            "last" | "final" => Ok(StepSel::Last),
            "first" => Ok(StepSel::First),
            "baseline" => Ok(StepSel::Step(-1)),
            t => t.parse().map(StepSel::Step).map_err(|_| format!("`{t}` is not a step (a number, `-1` for the baseline, `first` or `last`)")),
        }
    }
}

impl std::fmt::Display for StepSel {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            StepSel::Step(s) => write!(f, "{s}"),
            StepSel::First => f.write_str("first"),
            StepSel::Last => f.write_str("last"),
        }
    }
}

impl StepSel {
    /// The step among `steps` (sorted) this selects; `None` when absent.
    pub(crate) fn pick(self, steps: &[i64]) -> Option<i64> {
        match self {
            StepSel::Step(s) => steps.contains(&s).then_some(s),
            StepSel::First => steps.first().copied(),
            StepSel::Last => steps.last().copied(),
        }
    }
}

/// A metric's `(step, value)` points in one run, NaN values left out, sorted by step.
pub(crate) fn series(run: &Run, m: &str) -> Vec<(i64, f64)> {
    let mut v: Vec<(i64, f64)> = run.metrics.iter().filter_map(|l| l.get(m).filter(|x| !x.is_nan()).map(|x| (l.step, x))).collect();
    v.sort_by_key(|p| p.0);
    v.dedup_by_key(|p| p.0);
    v
}
