//! What the monitor has seen of a run (each step's metrics, each eval's pass@1, metrics and
//! greedy outcomes, the leads), and [`Seen`], what one check reads: that history with its own
//! setting.

use std::collections::BTreeMap;

use super::leads::Leads;
use super::settings::Setting;

/// An eval's step and each problem's greedy pass/fail.
pub(crate) type Outcomes = (i64, BTreeMap<String, bool>);

/// An eval's step and metrics.
pub(crate) type EvalLine = (i64, BTreeMap<String, f64>);

/// One step's metrics.
#[derive(Debug, Clone)]
pub(crate) struct Point {
    pub(crate) step: i64,
    pub(crate) metrics: BTreeMap<String, f64>,
}

impl Point {
    pub(crate) fn get(&self, name: &str) -> Option<f64> {
        self.metrics.get(name).copied()
    }
}

/// What the monitor has seen.
#[derive(Debug, Default)]
pub(crate) struct History {
    pub(crate) steps: Vec<Point>,
    /// `(step, eval/pass@1)` of each eval, the baseline (−1) first when there is one.
    pub(crate) evals: Vec<(i64, f64)>,
    /// Each eval's metrics, in order (pass@k at every k for coverage).
    pub(crate) eval_metrics: Vec<EvalLine>,
    /// Each problem's greedy pass/fail at the first eval with greedy results, and at the latest.
    pub(crate) greedy_first: Option<Outcomes>,
    pub(crate) greedy_now: Option<Outcomes>,
    pub(crate) leads: Leads,
}

impl History {
    pub(crate) fn last(&self) -> Option<&Point> {
        self.steps.last()
    }
}

/// What a check reads: the history, the section's window and its own setting.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seen<'a> {
    pub(crate) history: &'a History,
    pub(crate) window: u32,
    pub(crate) setting: &'a Setting,
}

impl Seen<'_> {
    /// Threshold `key` of the signal's setting. The monitor checks a signal only when its
    /// setting has every threshold its row names, so this is never the NaN fallback (which
    /// compares false, and fires nothing).
    pub(crate) fn t(&self, key: &str) -> f64 {
        self.setting.get(key).unwrap_or(f64::NAN)
    }

    /// The last step, if any.
    pub(crate) fn last(&self) -> Option<&Point> {
        self.history.last()
    }
}

/// What a firing says: the evidence, with numbers, and the problems and rollouts to look at.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Evidence {
    pub(crate) text: String,
    pub(crate) leads: Vec<String>,
}

impl From<String> for Evidence {
    fn from(text: String) -> Evidence {
        Evidence { text, leads: vec![] }
    }
}
