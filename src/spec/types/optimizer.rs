//! `optimizer:` Adam(W) parameters.
//!
//! Part of the spec types ([`super`]); the doc comments are the user reference and generate
//! `schemas/experiment.schema.json`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Adam(W) parameters, with Tinker's names and defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Optimizer {
    /// Learning rate. Default `1e-5`. Must be > 0. LoRA typically wants ~10× the full
    /// fine-tuning rate (e.g. `4e-5`).
    #[serde(default = "default_lr")]
    pub learning_rate: f64,
    /// First-moment decay. Default `0.9`. Range [0, 1).
    #[serde(default = "default_beta1")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub beta1: f64,
    /// Second-moment decay. Default `0.95`. Range [0, 1).
    #[serde(default = "default_beta2")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub beta2: f64,
    /// Denominator epsilon. Default `1e-12`.
    #[serde(default = "default_adam_eps")]
    #[schemars(range(min = 0.0))]
    pub eps: f64,
    /// Decoupled weight decay (AdamW). Default `0`.
    #[serde(default)]
    #[schemars(range(min = 0.0))]
    pub weight_decay: f64,
    /// Clip the global gradient norm to this value; `0` is off. Default `0`.
    #[serde(default)]
    #[schemars(range(min = 0.0))]
    pub grad_clip_norm: f64,
}

fn default_lr() -> f64 {
    1e-5
}
fn default_beta1() -> f64 {
    0.9
}
fn default_beta2() -> f64 {
    0.95
}
fn default_adam_eps() -> f64 {
    1e-12
}

impl Default for Optimizer {
    fn default() -> Self {
        Optimizer {
            learning_rate: default_lr(),
            beta1: default_beta1(),
            beta2: default_beta2(),
            eps: default_adam_eps(),
            weight_decay: 0.0,
            grad_clip_norm: 0.0,
        }
    }
}
