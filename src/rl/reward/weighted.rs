//! `weighted`: Σ weight × term over the spec's `reward.terms`; a `python` term weighs the
//! Python function's value or one named component of it.

use super::{Grading, RewardStrategy};
use crate::spec::types::{RewardTerm, RewardTermKind};

/// A weighted sum of terms.
#[derive(Debug, Clone)]
pub(crate) struct Weighted {
    /// The terms, as the spec lists them.
    pub terms: Vec<RewardTerm>,
}

impl RewardStrategy for Weighted {
    fn name(&self) -> &'static str {
        "weighted"
    }
    fn reward(&self, o: &Grading<'_>) -> Option<f64> {
        if o.infra_error {
            return None;
        }
        let mut sum = 0.0;
        for t in &self.terms {
            let value = match t.kind {
                RewardTermKind::TestsAllPass => f64::from(u8::from(o.all_passed())),
                RewardTermKind::TestsFraction => o.fraction(),
                RewardTermKind::Format => o.format_score(),
                // A failed call, or a component the function did not return: not scored.
                RewardTermKind::Python => match &t.component {
                    None => o.custom?.total()?,
                    Some(name) => o.custom?.component(name)?,
                },
            };
            sum += t.weight * value;
        }
        Some(sum)
    }
}
