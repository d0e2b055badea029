//! `tests_all_pass`: 1 when every test passes, plus `format_coef` × format score.

use super::{Grading, RewardStrategy};

/// Binary correctness with a format penalty.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TestsAllPass {
    /// Weight of the format score.
    pub format_coef: f64,
}

impl RewardStrategy for TestsAllPass {
    fn name(&self) -> &'static str {
        "tests_all_pass"
    }
    fn reward(&self, o: &Grading<'_>) -> Option<f64> {
        if o.infra_error {
            return None;
        }
        Some(f64::from(u8::from(o.all_passed())) + self.format_coef * o.format_score())
    }
}
