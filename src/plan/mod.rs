//! The plan: a spec resolved into the one set of values the engine, the backends and the commands
//! read. Every default is applied here, once (named in [`crate::spec::defaults`]); nothing after the plan reads the
//! spec as written except provenance and the run id ([`Written`]).
//!
//! The pipeline: read → parse to a located tree → apply overrides → schema-validate the tree →
//! deserialise → semantic checks ([`check`]: files, templates, cross-field rules) → resolve
//! ([`resolve`]) → hash ([`hash`]). Problems of every stage before deserialisation are collected
//! together, so a user sees all of them at once.
//!
//! - [`record`]: `resolved.json`, written from the plan, and the reader of older versions.
//! - [`sweep`]: grids of plans; [`explain`]: what a plan will cost (`rlx validate --explain`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::backend::{BackendChoice, OpenOptions};
use crate::prompt::chat::ChatTemplateChoice;
use crate::seam::{AdamParams, Finetune, LossFn, ModelSource, SamplingParams};
use crate::spec::diagnostic::{Diagnostic, Diagnostics};
use crate::spec::node::{self, Node};
use crate::spec::overrides::{self, Override};
use crate::spec::schema::Validator;
use crate::spec::source::Source;
use crate::spec::types::{Advantage, Data, DynamicSampling, Kl, Log, LossAgg, Overlong, Prompt, Reward, Rollout, Sandbox, Schedule, Spec};

pub(crate) mod check;
pub(crate) mod explain;
pub(crate) mod hash;
pub mod record;
mod resolve;
pub(crate) mod sweep;

use check::{TemplateRef, normalize};
pub use hash::sha256_hex;

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
/// program uses. Sections whose spec types are already complete values (data sources, prompt
/// templates, reward, sandbox, schedule, log) are carried as they are.
#[derive(Debug, Clone)]
pub struct Plan {
    /// `name`.
    pub name: String,
    /// `seed`.
    pub seed: u64,
    /// Short hash of the spec after overrides and defaults (what makes two runs the same
    /// experiment; [`hash::spec_hash`]).
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
    pub log: Log,
    /// How `rlx sweep` launches the runs of this spec (local processes or Slurm).
    pub sweep: crate::spec::types::SweepLaunch,
    /// Run-health signals (`diagnostics:`), defaults filled in.
    pub diagnostics: crate::spec::health::Health,
    /// What the user wrote, for provenance and the run id.
    pub written: Written,
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
            seed: self.seed,
            eval_only: self.schedule.max_steps == 0,
            stop_text: stop_text(&self.sampling) || stop_text(&self.eval.sampling),
            labels: vec![("rlx_run".into(), self.run_id.clone()), ("rlx_spec".into(), self.name.clone())],
        }
    }
}

/// Loads, overrides, validates and resolves a spec file.
///
/// # Errors
/// [`Error::Read`] when the file cannot be read; [`Error::Invalid`] with every problem found.
pub fn plan(path: &Path, overrides: &[Override]) -> Result<Plan, Error> {
    let text = crate::spec::source::read_spec(path).map_err(|source| Error::Read { path: path.to_path_buf(), source })?;
    plan_text(path, text, overrides)
}

/// Like [`plan`], for spec text already in memory (`path` names it in messages and anchors
/// relative paths).
pub fn plan_text(path: &Path, text: String, overrides: &[Override]) -> Result<Plan, Error> {
    let abs = std::path::absolute(path).map(|p| normalize(&p)).unwrap_or_else(|_| path.to_path_buf());
    let invalid = |diagnostics: Vec<Diagnostic>| Error::Invalid { path: path.to_path_buf(), diagnostics: Diagnostics(diagnostics) };
    // Messages name the file as the user wrote it; relative paths inside resolve from its directory.
    let mut source = Source::file(path, text.clone());
    if let Some(s) = Arc::get_mut(&mut source) {
        s.base_dir = abs.parent().map(Path::to_path_buf).unwrap_or_default();
    }
    let mut tree = node::parse(&source).map_err(invalid)?;
    let mut diags = vec![];
    for ov in overrides {
        if let Err(d) = overrides::apply(&mut tree, ov) {
            diags.push(d);
        }
    }
    diags.extend(Validator::new().validate(&tree));
    if !diags.is_empty() {
        diags.extend(semantic_despite_schema_errors(&tree, &diags));
        return Err(invalid(diags));
    }
    let mut spec: Spec = serde_json::from_value(tree.to_json()).map_err(|e| {
        invalid(vec![Diagnostic::new(format!("spec does not match its schema: {e}"), Some(tree.span.clone()))])
    })?;
    let checked = check::check(&mut spec, &tree).map_err(invalid)?;
    let templates: Vec<Template> = checked.templates.into_iter().map(template).collect();
    // The Python reward's text is part of the experiment, as the templates' are (only specs
    // with one hash it, so every other run id stays as it was).
    let mut hashed = templates.clone();
    if let Some(path) = spec.reward.path.as_deref().filter(|_| crate::rl::reward::uses_python(&spec.reward)) {
        let text = std::fs::read(path).unwrap_or_default();
        hashed.push(Template { role: "reward.path".into(), path: path.into(), sha256: sha256_hex(&text), text: String::new() });
    }
    let hash = hash::spec_hash(&spec, &abs, &hashed);
    let written = Written { spec, path: abs, text, overrides: overrides.iter().map(Override::canonical).collect(), templates };
    resolve::resolve(written, hash).map_err(|e| invalid(vec![Diagnostic::new(format!("`model`: {e}"), Some(tree.span.clone()))]))
}

fn template(t: TemplateRef) -> Template {
    Template { role: t.role, sha256: sha256_hex(t.text.as_bytes()), path: t.path, text: t.text }
}

/// Runs the semantic checks on the tree with the schema's offending values removed (so defaults
/// take their place), so that a file's problems of both kinds show up in one report. When the
/// pruned tree still cannot be read (a required section is broken), there is nothing to add.
fn semantic_despite_schema_errors(tree: &Node, schema_diags: &[Diagnostic]) -> Vec<Diagnostic> {
    let mut pruned = tree.clone();
    let mut removed: Vec<String> = vec![];
    for d in schema_diags {
        let Some(p) = &d.path else { return vec![] };
        let dotted = p.replace('[', ".").replace(']', "");
        let segs: Vec<&str> = dotted.split('.').collect();
        pruned.remove(&segs);
        removed.push(dotted);
    }
    let Ok(mut spec) = serde_json::from_value::<Spec>(pruned.to_json()) else { return vec![] };
    let touches = |d: &Diagnostic| {
        d.path.as_ref().is_some_and(|p| {
            let p = p.replace('[', ".").replace(']', "");
            removed.iter().any(|r| p.starts_with(r.as_str()) || r.starts_with(p.as_str()))
        })
    };
    match check::check(&mut spec, &pruned) {
        Ok(_) => vec![],
        Err(sem) => sem.into_iter().filter(|d| !touches(d)).collect(),
    }
}

/// Parses the located tree of a spec file after overrides, without checking it (for sweeps,
/// which need to know what a key holds before forming the grid).
pub fn tree(path: &Path) -> Result<Node, Error> {
    let text = crate::spec::source::read_spec(path).map_err(|source| Error::Read { path: path.to_path_buf(), source })?;
    let source = Source::file(path, text);
    node::parse(&source).map_err(|d| Error::Invalid { path: path.to_path_buf(), diagnostics: Diagnostics(d) })
}

