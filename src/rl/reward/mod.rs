//! Graded completion → scalar reward. One file per strategy; [`strategy`] is the registry the
//! spec's `reward.kind` selects from.
//!
//! The format score is 0 when the completion has a code block and −1 when it has none, so with
//! the default `format_coef: 0.1` rewards are −0.1 (no code block), 0 (code that fails), 1 (code
//! that passes every test): the origin pipeline's reward.

mod tests_all_pass;
mod tests_fraction;
mod weighted;

pub(crate) use tests_all_pass::TestsAllPass;
pub(crate) use tests_fraction::TestsFraction;
pub(crate) use weighted::Weighted;

use crate::spec::types::{Reward, RewardKind};

/// What grading found about one completion: the input of every reward strategy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Outcome {
    /// Whether a code block could be extracted.
    pub format_ok: bool,
    /// Tests passed.
    pub tests_passed: u32,
    /// Tests run.
    pub tests_total: u32,
    /// The sandbox failed (not the program): the outcome says nothing about the model.
    pub infra_error: bool,
}

impl Outcome {
    /// A completion without a code block (the sandbox is not called).
    pub(crate) fn format_error() -> Self {
        Outcome { format_ok: false, tests_passed: 0, tests_total: 0, infra_error: false }
    }

    /// Every test passed (and there was at least one).
    pub(crate) fn all_passed(&self) -> bool {
        self.format_ok && self.tests_total > 0 && self.tests_passed == self.tests_total
    }

    /// Fraction of tests passed (0 without tests).
    pub(crate) fn fraction(&self) -> f64 {
        if self.tests_total == 0 { 0.0 } else { f64::from(self.tests_passed) / f64::from(self.tests_total) }
    }

    /// 0 with a code block, −1 without.
    pub(crate) fn format_score(&self) -> f64 {
        if self.format_ok { 0.0 } else { -1.0 }
    }
}

/// Turns an outcome into a reward.
pub(crate) trait RewardStrategy: Send + Sync {
    /// The spec name.
    fn name(&self) -> &'static str;
    /// The reward; `None` for an infrastructure failure, which must never be scored (the engine
    /// retries it or drops the group).
    fn reward(&self, outcome: &Outcome) -> Option<f64>;
}

/// The strategy a spec asks for.
pub(crate) fn strategy(spec: &Reward) -> Box<dyn RewardStrategy> {
    match spec.kind {
        RewardKind::TestsAllPass => Box::new(TestsAllPass { format_coef: spec.format_coef }),
        RewardKind::TestsFraction => Box::new(TestsFraction { format_coef: spec.format_coef }),
        RewardKind::Weighted => Box::new(Weighted { terms: spec.terms.iter().map(|t| (t.kind, t.weight)).collect() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::types::{RewardTerm, RewardTermKind};

    fn o(format_ok: bool, passed: u32, total: u32) -> Outcome {
        Outcome { format_ok, tests_passed: passed, tests_total: total, infra_error: false }
    }

    #[test]
    fn origin_reward_table() {
        let s = strategy(&Reward::default());
        assert_eq!(s.name(), "tests_all_pass");
        assert_eq!(s.reward(&Outcome::format_error()), Some(-0.1));
        assert_eq!(s.reward(&o(true, 3, 4)), Some(0.0));
        assert_eq!(s.reward(&o(true, 4, 4)), Some(1.0));
        assert_eq!(s.reward(&o(true, 0, 0)), Some(0.0), "no tests is not a pass");
    }

    #[test]
    fn infra_errors_are_never_scored() {
        let bad = Outcome { infra_error: true, ..o(true, 0, 4) };
        let weighted = Reward { kind: RewardKind::Weighted, terms: vec![RewardTerm { kind: RewardTermKind::TestsFraction, weight: 1.0 }], ..Reward::default() };
        for spec in [Reward::default(), Reward { kind: RewardKind::TestsFraction, ..Reward::default() }, weighted] {
            assert_eq!(strategy(&spec).reward(&bad), None);
        }
    }

    #[test]
    fn fraction_and_weighted() {
        let frac = strategy(&Reward { kind: RewardKind::TestsFraction, format_coef: 0.2, ..Reward::default() });
        assert_eq!(frac.reward(&o(true, 1, 4)), Some(0.25));
        assert_eq!(frac.reward(&Outcome::format_error()), Some(-0.2));
        let w = strategy(&Reward {
            kind: RewardKind::Weighted,
            terms: vec![
                RewardTerm { kind: RewardTermKind::TestsAllPass, weight: 0.5 },
                RewardTerm { kind: RewardTermKind::TestsFraction, weight: 0.5 },
                RewardTerm { kind: RewardTermKind::Format, weight: 0.1 },
            ],
            ..Reward::default()
        });
        assert_eq!(w.name(), "weighted");
        assert_eq!(w.reward(&o(true, 2, 4)), Some(0.25));
        assert_eq!(w.reward(&o(true, 4, 4)), Some(1.0));
        assert_eq!(w.reward(&Outcome::format_error()), Some(-0.1));
    }
}
