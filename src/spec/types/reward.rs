//! `reward:` how a graded completion becomes a reward.
//!
//! Part of the spec types ([`super`]); the doc comments are the user reference and generate
//! `schemas/experiment.schema.json`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a graded completion becomes a reward.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Reward {
    /// The reward function. Default `tests_all_pass`.
    #[serde(default)]
    pub kind: RewardKind,
    /// Weight of the format score (−1 without a code block, 0 with one) added to the
    /// correctness score. Default `0.1`, giving −0.1 / 0 / 1.
    #[serde(default = "default_format_coef")]
    #[schemars(range(min = 0.0))]
    pub format_coef: f64,
    /// Terms of a `weighted` reward.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub terms: Vec<RewardTerm>,
    /// Time limit per test, seconds. Default `6`.
    #[serde(default = "default_test_timeout")]
    #[schemars(range(min = 0.0))]
    pub test_timeout_s: f64,
    /// Run at most this many tests per problem when grading rewards (the longest inputs).
    /// Default: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tests: Option<u32>,
    /// The Python file of a `python` reward (or of the `python` terms of a `weighted` one),
    /// relative to the spec. It runs in the sandbox, isolated like submissions; see
    /// docs/rewards.md for the function's arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The function in `path` that scores a completion. Default `reward`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// Time limit per call of the Python function, seconds. Default `10`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub call_timeout_s: Option<f64>,
    /// Failed calls of the Python function (it raised, hung past `call_timeout_s`, or returned
    /// something other than a number or a dict of numbers) that a run tolerates: each is
    /// counted and its group dropped, never scored; the next one stops the run with its
    /// traceback. Default `3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<u32>,
}

fn default_format_coef() -> f64 {
    0.1
}
fn default_test_timeout() -> f64 {
    6.0
}

impl Default for Reward {
    fn default() -> Self {
        Reward {
            kind: RewardKind::default(),
            format_coef: default_format_coef(),
            terms: vec![],
            test_timeout_s: default_test_timeout(),
            max_tests: None,
            path: None,
            function: None,
            call_timeout_s: None,
            max_failures: None,
        }
    }
}

/// Reward functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RewardKind {
    /// 1 when every test passes, else 0; plus `format_coef` × format score.
    #[default]
    TestsAllPass,
    /// Fraction of tests passed; plus `format_coef` × format score.
    TestsFraction,
    /// Σ weight × term over `terms`.
    Weighted,
    /// The Python function `function` in `path`: a number, or the sum of a dict of named
    /// components (each logged as `reward/<name>`).
    Python,
}

/// One term of a weighted reward.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RewardTerm {
    /// The term.
    pub kind: RewardTermKind,
    /// Its weight.
    pub weight: f64,
    /// For a `python` term: the component of the function's dict to weigh. Default: the
    /// function's whole value (the number it returns, or the sum of its components).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
}

/// Terms a weighted reward can combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RewardTermKind {
    /// 1 if every test passes.
    TestsAllPass,
    /// Fraction of tests passed.
    TestsFraction,
    /// 0 with a code block, −1 without.
    Format,
    /// The Python reward function of `reward.path` (or one `component` of it).
    Python,
}
