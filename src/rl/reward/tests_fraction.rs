//! `tests_fraction`: the fraction of tests passed, plus `format_coef` × format score. Denser than
//! all-pass on hard problems, at the risk of rewarding special-casing of easy tests.

use super::{Grading, RewardStrategy};

/// Partial credit with a format penalty.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TestsFraction {
    /// Weight of the format score.
    pub format_coef: f64,
}

impl RewardStrategy for TestsFraction {
    fn name(&self) -> &'static str {
        "tests_fraction"
    }
    fn reward(&self, o: &Grading<'_>) -> Option<f64> {
        if o.infra_error {
            return None;
        }
        Some(o.fraction() + self.format_coef * o.format_score())
    }
}
