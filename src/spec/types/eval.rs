//! `eval:` held-out evaluation.
//!
//! Part of the spec types ([`super`]); the doc comments are the user reference and generate
//! `schemas/experiment.schema.json`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Held-out evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Eval {
    /// The k of pass@k to report. Default `[1]`.
    #[serde(default = "default_ks")]
    #[schemars(length(min = 1))]
    pub k: Vec<u32>,
    /// Completions per eval problem (n of the unbiased pass@k estimator). Default: the largest k.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub samples: Option<u32>,
    /// Sampling temperature for evaluation; `0` is greedy. Default `0`.
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 10.0))]
    pub temperature: f64,
    /// Maximum new tokens per eval completion. Default: `sampling.max_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tokens: Option<u32>,
    /// Also evaluate greedily at each eval: one completion per problem at temperature 0, same
    /// prompts, recorded as `eval/greedy/pass@1` and `eval/greedy/format_rate` and tagged
    /// `protocol: greedy` in `eval_results.jsonl` and `eval_rollouts.jsonl`. Default: on when
    /// `eval.temperature` > 0 (at 0 the main eval already is greedy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub greedy: Option<bool>,
}

fn default_ks() -> Vec<u32> {
    vec![1]
}

impl Default for Eval {
    fn default() -> Self {
        Eval { k: default_ks(), samples: None, temperature: 0.0, max_tokens: None, greedy: None }
    }
}
