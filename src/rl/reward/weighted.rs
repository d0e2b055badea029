//! `weighted`: Σ weight × term over the spec's `reward.terms`.

use super::{Outcome, RewardStrategy};
use crate::spec::types::RewardTermKind;

/// A weighted sum of terms.
#[derive(Debug, Clone)]
pub(crate) struct Weighted {
    /// (term, weight) pairs.
    pub terms: Vec<(RewardTermKind, f64)>,
}

impl RewardStrategy for Weighted {
    fn name(&self) -> &'static str {
        "weighted"
    }
    fn reward(&self, o: &Outcome) -> Option<f64> {
        if o.infra_error {
            return None;
        }
        Some(
            self.terms
                .iter()
                .map(|(kind, w)| {
                    w * match kind {
                        RewardTermKind::TestsAllPass => f64::from(u8::from(o.all_passed())),
                        RewardTermKind::TestsFraction => o.fraction(),
                        RewardTermKind::Format => o.format_score(),
                    }
                })
                .sum(),
        )
    }
}
