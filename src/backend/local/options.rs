//! The local trainer's knobs, apart from the trainer so that its saved state (`state`), which
//! records them, does not import the trainer that imports it.

use super::model::Tuning;
use super::quant::SampleWeights;

/// Knobs of the local trainer that are not part of the model.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TrainerOptions {
    /// Full fine-tuning or LoRA.
    pub tuning: Tuning,
    /// Seed for new LoRA adapters.
    pub seed: u64,
    /// Largest padded micro-batch (`batch × seq` tokens) per forward/backward pass.
    pub max_tokens_per_microbatch: usize,
    /// The weights `LocalTrainer::sampler` snapshots sample with.
    #[serde(default)]
    pub sample_weights: SampleWeights,
    /// The temperature log-probabilities are scored at (`forward`, `forward_backward`, the KL
    /// reference): the LM head's logits are divided by it. 1 scores the model's own
    /// distribution; the sampling temperature scores the policy the samples came from.
    #[serde(default = "one")]
    pub temperature: f32,
}

fn one() -> f32 {
    1.0
}

impl Default for TrainerOptions {
    fn default() -> Self {
        Self { tuning: Tuning::Full, seed: 0, max_tokens_per_microbatch: 4096, sample_weights: SampleWeights::F32, temperature: 1.0 }
    }
}

