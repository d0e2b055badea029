//! The plan's own types: [`Plan`] and its section plans, what the user wrote ([`Written`]), and
//! why a spec could not be planned ([`Error`]). Kept apart from the code that makes a plan
//! ([`super::pipeline`]) so that the stages (`check`, `resolve`, `hash`, `record`) name these
//! types without naming the module that calls them (no parent↔child import cycle).

use std::path::PathBuf;

use serde::Serialize;

use crate::backend::{BackendChoice, OpenOptions};
use crate::prompt::chat::ChatTemplateChoice;
use crate::seam::{AdamParams, Finetune, LossFn, ModelSource, SamplingParams};
use crate::spec::diagnostic::Diagnostics;
use super::trackers::Trackers;
use crate::spec::types::{Advantage, Data, Distill, DynamicSampling, Kl, LossAgg, Overlong, Prompt, Reward, Rollout, RolloutLog, Sandbox, Schedule, Spec};

/// Why a spec could not be planned.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec file could not be read.
    #[error("cannot read spec `{path}`")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The spec (or an override, or a template) is invalid; every problem found.
    #[error("{} problem(s) in spec `{}`", .diagnostics.0.len(), .path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The problems.
        diagnostics: Diagnostics,
    },
}

/// A template the plan uses, with its content hash (for provenance and the run id).
#[derive(Debug, Clone, Serialize)]
pub struct Template {
    /// The key that names it (`prompt.user`).
    pub role: String,
    /// Absolute path.
    pub path: PathBuf,
    /// SHA-256 of its text, hex.
    pub sha256: String,
    /// Its text.
    #[serde(skip)]
    pub text: String,
}

/// A resolved, checked experiment: everything a run needs to start, each value in the form the
/// program uses. Sections whose spec types are already complete values, or that a lower layer
/// takes as they are (`data`, `sandbox`), are carried as their spec types (docs/architecture.md,
/// "The plan", says which and why).
#[derive(Debug, Clone)]
pub struct Plan {
    /// `name`.
    pub name: String,
    /// `seed`.
    pub seed: u64,
    /// Short hash of the spec after overrides and defaults (what makes two runs the same
    /// experiment; [`super::hash::spec_hash`]).
    pub hash: String,
    /// `<name>-<hash>`: the run directory's name.
    pub run_id: String,
    /// The model and which of its weights train.
    pub model: ModelPlan,
    /// The backend with its settings.
    pub backend: BackendChoice,
    /// Train and eval sources.
    pub data: Data,
    /// Prompt templates (absolute paths) and variables.
    pub prompt: Prompt,
    /// Sampling for training rollouts. Stop strings only: the engine adds the tokenizer's stop
    /// tokens, which the spec cannot know.
    pub sampling: SamplingParams,
    /// GRPO batch shape, advantage, loss and pipelining.
    pub grpo: GrpoPlan,
    /// Multi-turn attempts and infrastructure retries.
    pub rollout: Rollout,
    /// The reward.
    pub reward: Reward,
    /// The Python reward function, when the reward calls one.
    pub python_reward: Option<PythonReward>,
    /// The sandbox.
    pub sandbox: Sandbox,
    /// `optimizer` as Adam parameters.
    pub adam: AdamParams,
    /// Steps, evaluation and checkpoint cadence, dry run.
    pub schedule: Schedule,
    /// Evaluation.
    pub eval: EvalPlan,
    /// Run directory root, rollout logging, trackers.
    pub log: LogPlan,
    /// How `rlx sweep` launches the runs of this spec (local processes or Slurm).
    pub sweep: crate::spec::types::SweepLaunch,
    /// Run-health signals (`diagnostics:`), defaults filled in.
    pub diagnostics: crate::spec::health::Health,
    /// `stages:` on the step counter (empty: one GRPO stage, the run as before). With stages,
    /// `schedule.max_steps` is the run's total over them.
    pub stages: Vec<super::stages::StagePlan>,
    /// What the user wrote, for provenance and the run id.
    pub written: Written,
}

/// The `log` section, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct LogPlan {
    /// Directory holding run directories.
    pub root: PathBuf,
    /// Which completions go to `rollouts.jsonl`.
    pub rollouts: RolloutLog,
    /// The trackers, each with its defaults applied.
    pub trackers: Trackers,
}

/// The model section, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelPlan {
    /// `model.base` as written (absolute when a path): Tinker's base model name, the label users
    /// see.
    pub base: String,
    /// Where the weights come from.
    pub source: ModelSource,
    /// Where the tokenizer comes from, when not from the model.
    pub tokenizer: Option<ModelSource>,
    /// The chat template.
    pub chat_template: ChatTemplateChoice,
    /// Which weights train (`model.finetune`, `model.lora`).
    pub finetune: Finetune,
}

/// The `grpo` section, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct GrpoPlan {
    /// Problems per step.
    pub prompts_per_step: u32,
    /// Completions per problem (G).
    pub group_size: u32,
    /// How rewards become advantages.
    pub advantage: Advantage,
    /// Whether groups whose advantages are all zero are left out of the update.
    pub skip_degenerate: bool,
    /// The loss, as every backend receives it.
    pub loss: LossFn,
    /// Steps a sample may lag the policy that trains on it (0: on-policy).
    pub max_steps_off_policy: u32,
    /// How per-token losses add up (applied to the advantages, see [`crate::rl::shaping`]).
    pub loss_agg: LossAgg,
    /// `loss_agg: constant`'s C in tokens (`sampling.max_tokens` unless the spec gives one).
    pub agg_constant: u32,
    /// Truncated completions: masked, penalised, or (`None`) left alone.
    pub overlong: Option<Overlong>,
    /// DAPO's dynamic sampling, when on.
    pub dynamic_sampling: Option<DynamicSampling>,
    /// The KL penalty to the reference policy, when on.
    pub kl: Option<Kl>,
    /// On-policy distillation, when on (`teacher.base` an absolute directory after checking).
    pub distill: Option<Distill>,
    /// The temperature the trainer scores log-probabilities at (`grpo.learner_temperature`;
    /// by default the sampling temperature, 1 when sampling is greedy; a reopened run's
    /// recorded value where the spec names none: [`super::record::reopened`]). The embedded
    /// trainer applies it; Tinker's learner scores at 1, which the checks require.
    pub learner_temperature: f32,
}

/// A Python reward (`reward.kind: python`, or `python` terms), resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct PythonReward {
    /// The file (absolute).
    pub path: PathBuf,
    /// The file as messages and tracebacks name it: relative to the current directory when
    /// under it, else absolute.
    pub display: String,
    /// The function to call (`reward.function`).
    pub function: String,
    /// Per call (`reward.call_timeout_s`).
    pub call_timeout: std::time::Duration,
    /// Failed calls tolerated (`reward.max_failures`).
    pub max_failures: u32,
    /// Workers of the local pool it runs in when completions are graded elsewhere (Sandbox
    /// Fusion, CoreWeave): `sandbox.concurrency` clamped to 1..=4, else 2.
    pub workers: usize,
}

/// The `eval` section, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalPlan {
    /// pass@k values reported.
    pub k: Vec<u32>,
    /// Completions per problem ([`crate::spec::defaults::eval_samples`] when the spec leaves it out).
    pub samples: u32,
    /// Sampling for evaluation (`eval.temperature`, `eval.max_tokens`, else training's).
    pub sampling: SamplingParams,
    /// The second protocol, greedy pass@1 (`eval.greedy`): beside its sampled completions,
    /// each problem gets one at temperature 0 ([`crate::seam::SampleRequest::greedy`]), with the
    /// same stops and length. False when off, or when the main eval already is greedy.
    pub greedy: bool,
}

/// The spec as the user wrote it: what provenance records and the run id hashes.
#[derive(Debug, Clone)]
pub struct Written {
    /// The spec after overrides and schema defaults, with absolute paths.
    pub spec: Spec,
    /// The spec file (absolute).
    pub path: PathBuf,
    /// The spec file's text.
    pub text: String,
    /// Overrides applied, in order, with aliases expanded (`optimizer.learning_rate=2e-5`).
    pub overrides: Vec<String>,
    /// The templates it renders.
    pub templates: Vec<Template>,
}

impl Plan {
    /// Whether the run trains (steps to take and not a dry run).
    pub fn trains(&self) -> bool {
        self.schedule.max_steps > 0 && !self.schedule.dry_run
    }

    /// The run directory: `<log.root>/<run id>`.
    pub fn run_dir(&self) -> PathBuf {
        self.log.root.join(&self.run_id)
    }

    /// The prompt templates, compiled with `prompt.vars`.
    ///
    /// # Errors
    /// A template that does not compile (the checks compiled each already).
    pub fn prompt_templates(&self) -> Result<crate::prompt::PromptTemplates, crate::prompt::Error> {
        let templates = self.written.templates.iter().map(|t| (t.role.as_str(), t.path.as_path(), t.text.as_str()));
        let vars = serde_json::to_value(&self.prompt.vars).unwrap_or(serde_json::Value::Null);
        crate::prompt::PromptTemplates::compile(templates, vars)
    }

    /// What [`crate::backend::open`] needs to open this plan's policy.
    pub fn backend_options(&self) -> OpenOptions {
        let stop_text = |p: &SamplingParams| p.stop.iter().any(|s| matches!(s, crate::seam::Stop::Text(_)));
        OpenOptions {
            backend: self.backend.clone(),
            model_name: self.model.base.clone(),
            model: self.model.source.clone(),
            tokenizer: self.model.tokenizer.clone(),
            chat_template: self.model.chat_template.clone(),
            finetune: self.model.finetune.clone(),
            learner_temperature: self.grpo.learner_temperature,
            seed: self.seed,
            eval_only: self.schedule.max_steps == 0,
            stop_text: stop_text(&self.sampling) || stop_text(&self.eval.sampling),
            labels: vec![("rlx_run".into(), self.run_id.clone()), ("rlx_spec".into(), self.name.clone())],
        }
    }
}
