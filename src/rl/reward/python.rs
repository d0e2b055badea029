//! `python`: the value of the user's Python function (`reward.path`, `reward.function`), run
//! by the engine in the sandbox before rewards are computed ([`super::Custom`] carries what it
//! returned). A number is the reward; a dict's components are summed.

use super::{Grading, RewardStrategy};

/// The user's Python function.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Python;

impl RewardStrategy for Python {
    fn name(&self) -> &'static str {
        "python"
    }
    fn reward(&self, o: &Grading<'_>) -> Option<f64> {
        if o.infra_error {
            return None;
        }
        o.custom?.total()
    }
}
