//! `sampling:` sampling parameters for training rollouts.
//!
//! Part of the spec types ([`super`]); the doc comments are the user reference and generate
//! `schemas/experiment.schema.json`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Sampling parameters for training rollouts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Sampling {
    /// Maximum new tokens per completion. Default `1024`.
    #[serde(default = "default_max_tokens")]
    #[schemars(range(min = 1))]
    pub max_tokens: u32,
    /// Softmax temperature; `0` is greedy. Default `1.0`. Range 0..=10.
    #[serde(default = "one")]
    #[schemars(range(min = 0.0, max = 10.0))]
    pub temperature: f64,
    /// Nucleus sampling mass. Default `1.0` (off). Range (0, 1].
    #[serde(default = "one")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub top_p: f64,
    /// Keep only the k most likely tokens; `0` is off. Default `0`.
    #[serde(default)]
    pub top_k: u32,
    /// Extra stop strings, besides the model's end-of-turn tokens.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
}

fn default_max_tokens() -> u32 {
    1024
}
fn one() -> f64 {
    1.0
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling { max_tokens: default_max_tokens(), temperature: 1.0, top_p: 1.0, top_k: 0, stop: vec![] }
    }
}
