//! Graded completion → scalar reward. One file per strategy; [`strategy`] is the registry the
//! spec's `reward.kind` selects from.
//!
//! The format score is 0 when the completion has a code block and −1 when it has none, so with
//! the default `format_coef: 0.1` rewards are −0.1 (no code block), 0 (code that fails), 1 (code
//! that passes every test): the origin pipeline's reward.
//!
//! A `python` reward (and a `python` term of `weighted`) is the user's function, which the engine
//! runs in the sandbox (`engine::pyreward`) before rewards are computed; what it
//! returned reaches the strategies as [`Grading::custom`], so they stay pure functions.

mod python;
mod tests_all_pass;
mod tests_fraction;
mod weighted;

use std::collections::BTreeMap;

pub(crate) use python::Python;
pub(crate) use tests_all_pass::TestsAllPass;
pub(crate) use tests_fraction::TestsFraction;
pub(crate) use weighted::Weighted;

use crate::spec::types::{Reward, RewardKind, RewardTermKind};

/// What the user's Python reward function gave for one completion.
#[derive(Debug, Clone, PartialEq)]
pub enum Custom {
    /// It returned a number.
    Value(f64),
    /// It returned a dict of named components; its value is their sum.
    Components(BTreeMap<String, f64>),
    /// The call failed (it raised, timed out, or returned something else): the user's bug,
    /// never the model's failure, so it is not scored.
    Failed,
}

impl Custom {
    /// The function's value: the number, or the sum of the components; `None` for a failure.
    pub fn total(&self) -> Option<f64> {
        match self {
            Custom::Value(v) => Some(*v),
            Custom::Components(m) => Some(m.values().sum()),
            Custom::Failed => None,
        }
    }

    /// One named component; `None` when the function returned a number, failed, or has no
    /// component of that name.
    pub fn component(&self, name: &str) -> Option<f64> {
        match self {
            Custom::Components(m) => m.get(name).copied(),
            _ => None,
        }
    }
}

/// What grading found about one completion: the input of every reward strategy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Grading<'a> {
    /// Whether a code block could be extracted.
    pub format_ok: bool,
    /// Tests passed.
    pub tests_passed: u32,
    /// Tests run.
    pub tests_total: u32,
    /// The sandbox failed (not the program): the outcome says nothing about the model.
    pub infra_error: bool,
    /// What the Python reward function returned, when the spec has one.
    pub custom: Option<&'a Custom>,
}

impl Grading<'_> {
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
    /// The reward; `None` for an infrastructure failure or a failed Python reward call, which
    /// must never be scored (the engine retries it or drops the group).
    fn reward(&self, outcome: &Grading<'_>) -> Option<f64>;
}

/// The strategy a spec asks for.
pub(crate) fn strategy(spec: &Reward) -> Box<dyn RewardStrategy> {
    match spec.kind {
        RewardKind::TestsAllPass => Box::new(TestsAllPass { format_coef: spec.format_coef }),
        RewardKind::TestsFraction => Box::new(TestsFraction { format_coef: spec.format_coef }),
        RewardKind::Weighted => Box::new(Weighted { terms: spec.terms.clone() }),
        RewardKind::Python => Box::new(Python),
    }
}

/// Whether the reward calls the user's Python function (`kind: python`, or a `python` term).
pub(crate) fn uses_python(spec: &Reward) -> bool {
    match spec.kind {
        RewardKind::Python => true,
        RewardKind::Weighted => spec.terms.iter().any(|t| t.kind == RewardTermKind::Python),
        RewardKind::TestsAllPass | RewardKind::TestsFraction => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Grading<'_> {
        /// A completion without a code block (the sandbox is not called).
        fn format_error() -> Self {
            Grading { format_ok: false, tests_passed: 0, tests_total: 0, infra_error: false, custom: None }
        }
    }
    use crate::spec::types::{RewardTerm, RewardTermKind};

    fn o(format_ok: bool, passed: u32, total: u32) -> Grading<'static> {
        Grading { format_ok, tests_passed: passed, tests_total: total, infra_error: false, custom: None }
    }

    #[test]
    fn origin_reward_table() {
        let s = strategy(&Reward::default());
        assert_eq!(s.name(), "tests_all_pass");
        assert_eq!(s.reward(&Grading::format_error()), Some(-0.1));
        assert_eq!(s.reward(&o(true, 3, 4)), Some(0.0));
        assert_eq!(s.reward(&o(true, 4, 4)), Some(1.0));
        assert_eq!(s.reward(&o(true, 0, 0)), Some(0.0), "no tests is not a pass");
    }

    #[test]
    fn infra_errors_are_never_scored() {
        let bad = Grading { infra_error: true, ..o(true, 0, 4) };
        let weighted = Reward { kind: RewardKind::Weighted, terms: vec![RewardTerm { kind: RewardTermKind::TestsFraction, weight: 1.0, component: None }], ..Reward::default() };
        for spec in [Reward::default(), Reward { kind: RewardKind::TestsFraction, ..Reward::default() }, weighted] {
            assert_eq!(strategy(&spec).reward(&bad), None);
        }
    }

    #[test]
    fn fraction_and_weighted() {
        let frac = strategy(&Reward { kind: RewardKind::TestsFraction, format_coef: 0.2, ..Reward::default() });
        assert_eq!(frac.reward(&o(true, 1, 4)), Some(0.25));
        assert_eq!(frac.reward(&Grading::format_error()), Some(-0.2));
        let w = strategy(&Reward {
            kind: RewardKind::Weighted,
            terms: vec![
                RewardTerm { kind: RewardTermKind::TestsAllPass, weight: 0.5, component: None },
                RewardTerm { kind: RewardTermKind::TestsFraction, weight: 0.5, component: None },
                RewardTerm { kind: RewardTermKind::Format, weight: 0.1, component: None },
            ],
            ..Reward::default()
        });
        assert_eq!(w.name(), "weighted");
        assert_eq!(w.reward(&o(true, 2, 4)), Some(0.25));
        assert_eq!(w.reward(&o(true, 4, 4)), Some(1.0));
        assert_eq!(w.reward(&Grading::format_error()), Some(-0.1));
    }

    fn term(kind: RewardTermKind, weight: f64, component: Option<&str>) -> RewardTerm {
        RewardTerm { kind, weight, component: component.map(str::to_string) }
    }

    #[test]
    fn python_values_and_components() {
        let py = strategy(&Reward { kind: RewardKind::Python, ..Reward::default() });
        assert_eq!(py.name(), "python");
        let value = Custom::Value(0.75);
        let parts = Custom::Components([("style".to_string(), 0.25), ("tests".to_string(), 0.5)].into());
        // The Python value is the reward as is: no format penalty is added.
        assert_eq!(py.reward(&Grading { custom: Some(&value), ..Grading::format_error() }), Some(0.75));
        // A dict's value is the sum of its components: 0.25 + 0.5.
        assert_eq!(py.reward(&Grading { custom: Some(&parts), ..o(true, 1, 2) }), Some(0.75));
        assert_eq!(py.reward(&Grading { custom: Some(&Custom::Failed), ..o(true, 2, 2) }), None, "a failed call is never scored");
        assert_eq!(py.reward(&o(true, 2, 2)), None, "no call, no score");
        assert_eq!(py.reward(&Grading { custom: Some(&value), infra_error: true, ..o(true, 0, 2) }), None);
    }

    #[test]
    fn weighted_composes_builtin_and_python_terms() {
        let parts = Custom::Components([("style".to_string(), 0.5), ("length".to_string(), -0.25)].into());
        let w = strategy(&Reward {
            kind: RewardKind::Weighted,
            terms: vec![
                term(RewardTermKind::TestsFraction, 1.0, None),
                term(RewardTermKind::Python, 0.2, Some("style")),
                term(RewardTermKind::Python, 0.4, None),
            ],
            ..Reward::default()
        });
        // 1.0 × 3/4 + 0.2 × 0.5 + 0.4 × (0.5 − 0.25) = 0.75 + 0.1 + 0.1 = 0.95
        let r = w.reward(&Grading { custom: Some(&parts), ..o(true, 3, 4) }).unwrap();
        assert!((r - 0.95).abs() < 1e-12, "{r}");
        // A component the function did not return, a number where a component is named, and a
        // failed call are not scored.
        let missing = Custom::Components([("length".to_string(), 1.0)].into());
        assert_eq!(w.reward(&Grading { custom: Some(&missing), ..o(true, 3, 4) }), None);
        assert_eq!(w.reward(&Grading { custom: Some(&Custom::Value(1.0)), ..o(true, 3, 4) }), None);
        assert_eq!(w.reward(&Grading { custom: Some(&Custom::Failed), ..o(true, 3, 4) }), None);
        assert!(uses_python(&Reward { kind: RewardKind::Weighted, terms: vec![term(RewardTermKind::Python, 1.0, None)], ..Reward::default() }));
        assert!(!uses_python(&Reward { kind: RewardKind::Weighted, terms: vec![term(RewardTermKind::Format, 1.0, None)], ..Reward::default() }));
        assert!(!uses_python(&Reward::default()));
    }
}
