//! `rollout:` multi-turn rollouts with error feedback.
//!
//! Part of the spec types ([`super`]); the doc comments are the user reference and generate
//! `schemas/experiment.schema.json`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Multi-turn rollouts with error feedback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Rollout {
    /// Attempts per completion. With more than one, a failing attempt gets the feedback turn
    /// (`prompt.feedback`) and tries again; the last attempt's reward counts. Default `1`.
    #[serde(default = "default_attempts")]
    #[schemars(range(min = 1, max = 8))]
    pub max_attempts: u32,
    /// Retries of a completion whose grading hit an infrastructure error before its group is
    /// dropped (never scored as a failure). Default `2`.
    #[serde(default = "default_infra_retries")]
    pub infra_retries: u32,
}

fn default_attempts() -> u32 {
    1
}
fn default_infra_retries() -> u32 {
    2
}

impl Default for Rollout {
    fn default() -> Self {
        Rollout { max_attempts: 1, infra_retries: default_infra_retries() }
    }
}
