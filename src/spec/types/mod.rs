//! The experiment spec as typed data: one struct per section of design §4.
//!
//! These types are the contract between users and every later stage. Their doc comments are the
//! user reference: `rlx schema` turns them into `schemas/experiment.schema.json`, which editors use
//! for completion and hover docs, and which [`super::schema`] uses to validate a YAML tree before
//! serde sees it (so that every error in a file is reported at once, with its location).
//!
//! Conventions: every struct denies unknown fields; variants are internally tagged by `kind`;
//! nothing is cast implicitly; defaults live in `Default` impls and `default_*` functions so the
//! schema shows them. Relative paths are resolved against the directory of the file that wrote
//! them (the spec's directory for values in the spec, the current directory for command-line
//! overrides).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod backend;
mod data;
mod eval;
mod grpo;
mod log;
mod model;
mod optimizer;
mod prompt;
mod reward;
mod rollout;
mod sampling;
mod sandbox;
mod schedule;
mod stages;
mod sweep;

pub use super::language::{Checker, Language};
pub use backend::{Backend, OpenaiApi, PromptEncoding, SampleWeights, TinkerServer};
pub use data::{Data, DataFormat, RowLimits, Source};
pub use eval::Eval;
pub use grpo::{
    Advantage, CorrectionMode, Distill, DynamicSampling, DynamicSamplingMetric, Grpo, Kl, KlEstimator, KlForm, Loss, LossAgg,
    Overlong, ResolvedTeacher, RolloutCorrection, Teacher,
};
pub use log::{Log, MlflowSink, RolloutLog, Sinks, TensorboardSink, WandbMode, WandbSink};
pub use model::{Finetune, Lora, LoraTarget, Model};
pub use optimizer::Optimizer;
pub use prompt::Prompt;
pub use reward::{Reward, RewardKind, RewardTerm, RewardTermKind};
pub use rollout::{OnLimit, ParseErrorPolicy, Rollout, Tool, ToolLimits};
pub use sampling::Sampling;
pub use sandbox::{CwReuse, CwSandbox, Sandbox, SandboxKind};
pub use schedule::Schedule;
pub use stages::{DistillStage, GrpoStage, LrDecay, Sft, Stage, TrainOn};
pub use sweep::{Launcher, SlurmLaunch, SweepLaunch};

/// An rlx experiment: what to train, on which problems, how to reward it, and how long.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "rlx experiment spec")]
pub struct Spec {
    /// Experiment name; the run id is this name plus a hash of the resolved spec.
    /// Letters, digits, `.`, `_` and `-`. Example: `qwen3-4b-deepcoder`.
    pub name: String,
    /// Free text for humans; not part of the run id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Seed for data shuffling, sampling and initialisation. Default `0`. Sweeping `seed` makes
    /// replicate runs.
    #[serde(default)]
    pub seed: u64,
    /// The policy model.
    pub model: Model,
    /// Where sampling and training happen.
    pub backend: Backend,
    /// Training and evaluation problems.
    pub data: Data,
    /// Prompt templates (Jinja, rendered with minijinja).
    pub prompt: Prompt,
    /// Sampling parameters for training rollouts.
    #[serde(default)]
    pub sampling: Sampling,
    /// Group-relative policy optimisation: batch shape, advantages, loss.
    #[serde(default)]
    pub grpo: Grpo,
    /// Multi-turn rollouts with error feedback.
    #[serde(default)]
    pub rollout: Rollout,
    /// How a graded completion becomes a scalar reward.
    #[serde(default)]
    pub reward: Reward,
    /// Where model-written code runs.
    #[serde(default)]
    pub sandbox: Sandbox,
    /// Adam(W) parameters, as Tinker's `AdamParams`.
    #[serde(default)]
    pub optimizer: Optimizer,
    /// Length of the run, evaluation and checkpoint cadence.
    #[serde(default)]
    pub schedule: Schedule,
    /// Held-out evaluation (pass@k).
    #[serde(default)]
    pub eval: Eval,
    /// Where the run directory goes and what is logged.
    #[serde(default)]
    pub log: Log,
    /// Run-health signals checked after each step and eval (the reference's troubleshooting
    /// table): thresholds and what each does when it fires.
    #[serde(default, skip_serializing_if = "crate::spec::health::Health::is_default")]
    pub diagnostics: crate::spec::health::Health,
    /// How `rlx sweep` launches this spec's runs: on this machine or as a Slurm job array.
    /// Not part of the run id: where a run executes does not change the experiment, so a sweep
    /// can move between a workstation and a cluster and keep its runs.
    #[serde(default, skip_serializing_if = "SweepLaunch::is_default")]
    pub sweep: SweepLaunch,
    /// Training stages in order (for example `sft`, then `grpo`), sharing the model, the run
    /// directory and one step counter; each trainer checkpoint carries into the next stage.
    /// Absent: one GRPO stage, the rest of the spec.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<Stage>,
}

impl Spec {
    /// Completions sampled per training step.
    pub fn completions_per_step(&self) -> u64 {
        u64::from(self.grpo.prompts_per_step) * u64::from(self.grpo.group_size)
    }
}
