//! `schedule:` length of the run, evaluation and checkpoint cadence.
//!
//! Part of the spec types ([`super`]); the doc comments are the user reference and generate
//! `schemas/experiment.schema.json`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Length of the run and the cadence of evaluation and checkpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    /// Training steps. `0` runs only the baseline evaluation. Default `100`.
    #[serde(default = "default_max_steps")]
    pub max_steps: u32,
    /// Evaluate every this many steps; `0` evaluates only at the start and the end. Default `10`.
    #[serde(default = "ten")]
    pub eval_every: u32,
    /// Checkpoint every this many steps; `0` saves only at the end. Default `10`.
    #[serde(default = "ten")]
    pub save_every: u32,
    /// Evaluate before the first step (step −1, the baseline). Default `true`.
    #[serde(default = "crate::spec::defaults::yes")]
    pub eval_at_start: bool,
    /// Dry run: every step samples, grades, scores and computes advantages (all metrics and
    /// rollouts are written) but nothing is trained and no checkpoint is saved, so it works on
    /// sampling-only backends too. `rlx run --dry-run` sets it. Default `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

fn default_max_steps() -> u32 {
    100
}
fn ten() -> u32 {
    10
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule { max_steps: default_max_steps(), eval_every: 10, save_every: 10, eval_at_start: true, dry_run: false }
    }
}
