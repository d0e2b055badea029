//! Semantic checks: rules that span fields or touch the file system, run after the schema
//! accepted the tree and before anything expensive starts.
//!
//! Each check reports against the located tree, so a rule broken by a default points at the
//! section that omitted the value, and one broken by an override points into the command line.

use std::path::{Path, PathBuf};

use crate::data::filter::is_day;
use crate::prompt::chat::BUILTINS as BUILTIN_CHAT_TEMPLATES;
use crate::seam::{ModelSource, SourceError, looks_like_path};
use crate::spec::diagnostic::Diagnostic;
use crate::spec::node::Node;
use crate::spec::source::{Source, Span};
use crate::spec::types::{Finetune, Reward, RewardKind, RewardTermKind, SandboxKind, Spec, Tool};

/// A template file named by the spec, with its role (`prompt.user`, ...).
#[derive(Debug, Clone)]
pub(crate) struct TemplateRef {
    /// Which key names it.
    pub role: String,
    /// Absolute path.
    pub path: PathBuf,
    /// Its text.
    pub text: String,
}

/// Files found and read during checking, handed on to the plan.
#[derive(Debug, Default)]
pub(crate) struct CheckedFiles {
    /// Templates that exist and compile.
    pub templates: Vec<TemplateRef>,
}

struct Ctx<'a> {
    tree: &'a Node,
    out: Vec<Diagnostic>,
}

impl Ctx<'_> {
    fn span(&self, path: &str) -> Span {
        let segs: Vec<&str> = path.split('.').collect();
        self.tree.span_of(&segs)
    }

    fn err(&mut self, path: &str, message: String) -> &mut Diagnostic {
        self.out.push(self.tree.error_at(path, message));
        self.out.last_mut().expect("just pushed")
    }

    /// Resolves a path written at `key` against the directory of the text that wrote it.
    fn resolve_path(&self, key: &str, written: &Path) -> PathBuf {
        let base = self.span(key).source.base_dir.clone();
        let joined = if written.is_absolute() { written.to_path_buf() } else { base.join(written) };
        std::path::absolute(&joined).map(|p| normalize(&p)).unwrap_or(joined)
    }
}

/// The `reward` section's rules beyond the schema: terms only for `weighted`, a Python file
/// for `python` rewards and terms (and Python keys only for them); on success `reward.path` is
/// made absolute.
// `!(x > 0.0)` rather than `x <= 0.0`: NaN must fail too.
#[allow(clippy::neg_cmp_op_on_partial_ord)]
fn check_reward(cx: &mut Ctx<'_>, reward: &mut Reward) {
    match (reward.kind, reward.terms.is_empty()) {
        (RewardKind::Weighted, true) => {
            cx.err("reward.terms", "`reward.kind: weighted` needs `reward.terms`".into())
                .hints
                .push("for example `terms: [{kind: tests_fraction, weight: 1.0}, {kind: format, weight: 0.1}]`".into());
        }
        (RewardKind::TestsAllPass | RewardKind::TestsFraction | RewardKind::Python, false) => {
            cx.err("reward.terms", "`reward.terms` is only used with `reward.kind: weighted`".into());
        }
        _ => {}
    }
    for (i, t) in reward.terms.iter().enumerate() {
        match (&t.component, t.kind) {
            (Some(_), k) if k != RewardTermKind::Python => {
                cx.err(&format!("reward.terms.{i}.component"), "`component` names a component of the Python reward; it is only used in a `python` term".into());
            }
            (Some(c), _) if c.is_empty() || c.contains('/') || c.chars().count() > 64 => {
                cx.err(&format!("reward.terms.{i}.component"), format!("a component name has 1 to 64 characters without `/`, found `{c}`"));
            }
            _ => {}
        }
    }
    if !crate::rl::reward::uses_python(reward) {
        let set = [("path", reward.path.is_some()), ("function", reward.function.is_some()), ("call_timeout_s", reward.call_timeout_s.is_some()), ("max_failures", reward.max_failures.is_some())];
        for (key, _) in set.iter().filter(|(_, is_set)| *is_set) {
            cx.err(&format!("reward.{key}"), format!("`reward.{key}` is only used by a Python reward (`reward.kind: python`, or a `python` term of `weighted`)"));
        }
        return;
    }
    if let Some(f) = &reward.function
        && !is_identifier(f)
    {
        cx.err("reward.function", format!("`reward.function` must be a Python function name, found `{f}`"));
    }
    if let Some(t) = reward.call_timeout_s
        && !(t.is_finite() && t > 0.0)
    {
        cx.err("reward.call_timeout_s", format!("`reward.call_timeout_s` must be > 0, found {t}"));
    }
    let Some(written) = reward.path.clone() else {
        let key = if reward.kind == RewardKind::Python { "reward.kind" } else { "reward.terms" };
        cx.err(key, "a Python reward needs `reward.path`, the file that defines its function".into())
            .hints
            .push("for example `reward: {kind: python, path: ../rewards/example_reward.py, function: reward}` (see docs/rewards.md)".into());
        return;
    };
    let abs = cx.resolve_path("reward.path", Path::new(&written));
    if !abs.is_file() {
        let what = if abs.exists() { "is not a file" } else { "does not exist" };
        cx.err("reward.path", format!("reward file `{written}` {what}")).label = format!("resolved to {}", abs.display());
        return;
    }
    if abs.extension().and_then(|e| e.to_str()) != Some("py") {
        cx.err("reward.path", format!("reward file `{written}` must be a Python file (`.py`)"));
        return;
    }
    // The reward's directory travels with every batch; a large one is almost surely not meant.
    let dir_bytes: u64 = abs
        .parent()
        .and_then(|d| std::fs::read_dir(d).ok())
        .map(|rd| rd.filter_map(Result::ok).filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum())
        .unwrap_or(0);
    if dir_bytes > crate::sandbox::reward::MAX_DIR_BYTES {
        cx.err("reward.path", format!("the directory of `{written}` holds {} KiB of files; at most {} MiB are shipped into the sandbox with the reward", dir_bytes >> 10, crate::sandbox::reward::MAX_DIR_BYTES >> 20))
            .hints
            .push("keep the reward file in a directory of its own (with the files it reads)".into());
        return;
    }
    reward.path = Some(abs.display().to_string());
}

/// A Python identifier (ASCII; what `getattr` on the module will find).
fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_') && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Removes `.` and `..` components lexically (the path need not exist).
pub(crate) fn normalize(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            c => out.push(c.as_os_str()),
        }
    }
    out
}

/// Runs every semantic check; on success rewrites relative paths in `spec` to absolute ones.
/// `checkpoints` finds the run checkpoint a teacher reference names (the command line's).
pub(crate) fn check(spec: &mut Spec, tree: &Node, checkpoints: Option<&dyn super::distill::Checkpoints>) -> Result<CheckedFiles, Vec<Diagnostic>> {
    let mut cx = Ctx { tree, out: vec![] };
    check_name(&mut cx, spec);
    check_batch(&mut cx, spec);
    check_ranges(&mut cx, spec);
    check_eval(&mut cx, spec);
    check_backend(&mut cx, spec);
    check_grpo_variants(&mut cx, spec);
    check_rollout_reward_sandbox(&mut cx, spec);
    check_reward(&mut cx, &mut spec.reward);
    check_trackers(&mut cx, spec);
    check_data(&mut cx, spec);
    check_model(&mut cx, spec);
    let templates = check_templates(&mut cx, &mut spec.prompt);
    for (i, stage) in spec.stages.iter_mut().enumerate() {
        if let crate::spec::types::Stage::Distill(d) = stage
            && let Some(train) = d.train.as_mut()
        {
            check_sources(&mut cx, &format!("stages.{i}.train"), train);
        }
    }
    cx.out.extend(super::stages::check(spec, tree, checkpoints));
    cx.out.extend(super::distill::check(spec, tree, checkpoints));
    if cx.out.is_empty() { Ok(CheckedFiles { templates }) } else { Err(cx.out) }
}

/// `name` names the run directory.
fn check_name(cx: &mut Ctx<'_>, spec: &Spec) {
    if spec.name.is_empty() || !spec.name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) || spec.name.starts_with('.') {
        cx.err("name", format!("`name` must be letters, digits, `.`, `_` or `-` (it names the run directory), found `{}`", spec.name));
    }
}

/// Batch arithmetic.
fn check_batch(cx: &mut Ctx<'_>, spec: &Spec) {
    let g = &spec.grpo;
    if g.group_size < 2 && spec.schedule.max_steps > 0 {
        cx.err("grpo.group_size", format!("`grpo.group_size` must be at least 2 to train, found {}", g.group_size))
            .hints
            .push("advantages compare the completions of one problem with each other; a group of one has no baseline".into());
    }
    if let Some(b) = g.batch_size {
        let product = u64::from(g.prompts_per_step) * u64::from(g.group_size);
        if u64::from(b) != product {
            cx.err(
                "grpo.batch_size",
                format!("`grpo.batch_size` is {b}, but `prompts_per_step` × `group_size` = {} × {} = {product}", g.prompts_per_step, g.group_size),
            )
            .hints
            .extend([
                "in rlx `group_size` is completions per problem (the G of GRPO) and `prompts_per_step` is problems per step".to_string(),
                format!("for {b} completions in groups of {}, set `prompts_per_step: {}`", g.group_size, b / g.group_size.max(1)),
            ]);
        }
    }
}

/// Numeric ranges the schema cannot say.
// `!(x > 0.0)` rather than `x <= 0.0`: NaN must fail these checks too.
#[allow(clippy::neg_cmp_op_on_partial_ord)]
fn check_ranges(cx: &mut Ctx<'_>, spec: &Spec) {
    let o = &spec.optimizer;
    if let Err(reason) = crate::seam::AdamParams::check_learning_rate(o.learning_rate, crate::seam::LearningRateRule::Run) {
        cx.err("optimizer.learning_rate", format!("`optimizer.learning_rate` {reason}"));
    }
    for (key, v) in [("optimizer.beta1", o.beta1), ("optimizer.beta2", o.beta2)] {
        if v >= 1.0 {
            cx.err(key, format!("`{key}` must be < 1, found {v}"));
        }
    }
    if !(spec.sampling.top_p > 0.0) {
        cx.err("sampling.top_p", format!("`sampling.top_p` must be > 0, found {}", spec.sampling.top_p));
    }
    if spec.reward.test_timeout_s <= 0.0 {
        cx.err("reward.test_timeout_s", format!("`reward.test_timeout_s` must be > 0, found {}", spec.reward.test_timeout_s));
    }
}

/// Evaluation: pass@k against the samples drawn.
fn check_eval(cx: &mut Ctx<'_>, spec: &Spec) {
    let e = &spec.eval;
    let n = e.samples.unwrap_or_else(|| e.k.iter().copied().max().unwrap_or(1));
    for (i, &k) in e.k.iter().enumerate() {
        if k == 0 {
            cx.err(&format!("eval.k.{i}"), "pass@k needs k ≥ 1, found 0".into());
        } else if k > n {
            cx.err(&format!("eval.k.{i}"), format!("pass@{k} needs at least {k} samples per problem, but `eval.samples` is {n}"));
        }
    }
    if e.temperature == 0.0 && n > 1 {
        cx.err("eval.temperature", format!("`eval.temperature` is 0 (greedy) with {n} samples per problem: every sample would be the same"))
            .hints
            .push(if e.k.iter().all(|&k| k <= 1) {
                "greedy decoding gives one completion per problem: set `eval.samples: 1` (`eval.samples=1` on the command line)".into()
            } else {
                "greedy decoding gives one completion per problem: set `eval.samples: 1` and `eval.k: [1]`, or `eval.temperature` > 0 for pass@k with k > 1".into()
            });
    }
}

/// Options the chosen backend cannot honour.
fn check_backend(cx: &mut Ctx<'_>, spec: &mut Spec) {
    let kind = spec.backend.kind();
    let trains = spec.schedule.max_steps > 0 && !spec.schedule.dry_run;
    if let crate::spec::types::Backend::Openai { api: crate::spec::types::OpenaiApi::Chat, .. } = &spec.backend
        && trains
    {
        // Said first and on its own: even a backend that could train behind a chat endpoint
        // could not be trained from it.
        cx.err("backend.api", format!("`backend.api: chat` cannot serve training (`schedule.max_steps` is {})", spec.schedule.max_steps))
            .hints
            .push("a chat endpoint returns text, not the sampled token ids and their log-probabilities that the policy-gradient loss needs; use it for evaluation (`schedule.max_steps: 0`, `rlx eval`) or a dry run (`rlx run --dry-run`)".into());
    } else if !spec.backend.can_train() && trains {
        cx.err("backend.kind", format!("the `{kind}` backend can only sample, but `schedule.max_steps` is {}", spec.schedule.max_steps))
            .hints
            .push("use `backend.kind: local` or `tinker` to train, set `schedule.max_steps: 0` for an evaluation-only run, or `rlx run --dry-run` for rollouts without training".into());
    }
    if let crate::spec::types::Backend::Openai { base_url, timeout_s, .. } = &spec.backend {
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            cx.err("backend.base_url", format!("`backend.base_url` must be an http(s) URL, found `{base_url}`"))
                .hints
                .push("for example `http://127.0.0.1:8000/v1`".into());
        }
        if let Some(t) = timeout_s
            && !(t.is_finite() && *t > 0.0)
        {
            cx.err("backend.timeout_s", format!("`backend.timeout_s` must be > 0, found {t}"));
        }
    }
    if !spec.backend.trains_full_weights() && spec.model.finetune == Finetune::Full && trains {
        cx.err("model.finetune", format!("the `{kind}` backend trains LoRA adapters only; `model.finetune: full` needs `backend.kind: local`"));
    }
    if let crate::spec::types::Backend::Tinker { model_path: Some(path), .. } = &spec.backend {
        if !path.starts_with("tinker://") {
            cx.err("backend.model_path", format!("`backend.model_path` must be a `tinker://` path, found `{path}`"));
        } else if spec.schedule.max_steps > 0 {
            cx.err("backend.model_path", format!("`backend.model_path` names fixed sampler weights, but `schedule.max_steps` is {}", spec.schedule.max_steps))
                .hints
                .push("set `schedule.max_steps: 0` to evaluate them, or remove `backend.model_path` to train from `model.base`".into());
        }
    }
    let max_steps = spec.schedule.max_steps;
    if let crate::spec::types::Backend::Local { model_path: Some(path), .. } = &mut spec.backend {
        check_local_model_path(cx, path, max_steps);
    }
    if matches!(spec.backend, crate::spec::types::Backend::Tinker { .. }) && spec.model.finetune == Finetune::Lora {
        // Tinker's `lora_config` has one switch for all attention projections and one for all
        // MLP projections; a subset cannot be expressed, and silently widening it would train
        // another model than the spec describes.
        use crate::spec::types::LoraTarget::*;
        let t = &spec.model.lora.targets;
        for (group, members) in [("attention", &[QProj, KProj, VProj, OProj][..]), ("MLP", &[GateProj, UpProj, DownProj][..])] {
            let n = members.iter().filter(|m| t.contains(m)).count();
            if n != 0 && n != members.len() {
                let names: Vec<&str> = members.iter().map(|m| m.module_name()).collect();
                cx.err("model.lora.targets", format!("Tinker adapts all {group} projections or none, but `model.lora.targets` names only some of {}", names.join(", ")))
                    .hints
                    .push(format!("list all of {} or none of them", names.join(", ")));
            }
        }
    }
}

/// Multi-attempt rollouts, the sandbox's URL (the reward's rules are [`check_reward`]'s).
fn check_rollout_reward_sandbox(cx: &mut Ctx<'_>, spec: &Spec) {
    if spec.rollout.max_attempts > 1 && spec.prompt.feedback.is_none() {
        cx.err("rollout.max_attempts", format!("`rollout.max_attempts` is {} but `prompt.feedback` is not set", spec.rollout.max_attempts))
            .hints
            .push("the feedback template renders the failing test for the next attempt; see prompts/feedback.j2".into());
    }
    check_tools(cx, spec);
    if spec.sandbox.kind == SandboxKind::Fusion && !(spec.sandbox.url.starts_with("http://") || spec.sandbox.url.starts_with("https://")) {
        cx.err("sandbox.url", format!("`sandbox.url` must be an http(s) URL, found `{}`", spec.sandbox.url));
    }
}

/// Tool turns: one multi-turn environment per run, limits that can be met.
fn check_tools(cx: &mut Ctx<'_>, spec: &Spec) {
    let r = &spec.rollout;
    if r.tools.is_empty() {
        if r.limits.is_some() {
            cx.err("rollout.limits", "`rollout.limits` bounds tool turns, but `rollout.tools` is empty".into()).hints.push("list the tools, e.g. `tools: [check_solution]`, or remove `rollout.limits`".into());
        }
        return;
    }
    if r.max_attempts > 1 {
        cx.err("rollout.max_attempts", format!("`rollout.max_attempts` is {} but `rollout.tools` is set: a rollout is feedback attempts or tool turns, not both", r.max_attempts))
            .hints
            .push("give the model `check_solution` instead of feedback attempts".into());
    }
    for (i, t) in r.tools.iter().enumerate() {
        if r.tools[..i].contains(t) {
            cx.err(&format!("rollout.tools.{i}"), format!("tool `{}` is listed twice", t.name()));
        }
        // A shell needs a container that outlives one command: only a remote service's
        // sandbox is one (the local and Fusion sandboxes run each program fresh).
        if *t == Tool::Bash && spec.sandbox.kind != SandboxKind::Cwsandbox {
            let kind = serde_json::to_value(spec.sandbox.kind).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
            cx.err(&format!("rollout.tools.{i}"), format!("`rollout.tools` lists `bash`, which needs a remote sandbox, but `sandbox.kind` is `{kind}`"))
                .hints
                .push("set `sandbox.kind: cwsandbox` (CoreWeave Sandbox, or `rlx sandbox serve --protocol cwsandbox` locally), or drop `bash` for `python`".into());
        }
    }
    let Some(l) = &r.limits else { return };
    if let Some(m) = l.max_tokens_per_turn
        && (m == 0 || m > spec.sampling.max_tokens)
    {
        cx.err("rollout.limits.max_tokens_per_turn", format!("`rollout.limits.max_tokens_per_turn` must be between 1 and `sampling.max_tokens` ({}), found {m}", spec.sampling.max_tokens));
    }
    for (key, v) in [("timeout_s", l.timeout_s), ("tool_timeout_s", l.tool_timeout_s)] {
        if !(v.is_finite() && v > 0.0) {
            cx.err(&format!("rollout.limits.{key}"), format!("`rollout.limits.{key}` must be a positive number of seconds, found {v}"));
        }
    }
    if !(l.parse_error.penalty.is_finite() && l.parse_error.penalty >= 0.0) {
        cx.err("rollout.limits.parse_error.penalty", format!("`rollout.limits.parse_error.penalty` must be 0 or more, found {}", l.parse_error.penalty));
    }
}

/// Trackers: what their services would refuse, caught before the run rather than mid-run.
fn check_trackers(cx: &mut Ctx<'_>, spec: &Spec) {
    if let Some(uri) = spec.log.sinks.mlflow.as_ref().and_then(|m| m.tracking_uri.as_ref())
        && !(uri.starts_with("http://") || uri.starts_with("https://"))
    {
        cx.err("log.sinks.mlflow.tracking_uri", format!("`log.sinks.mlflow.tracking_uri` must be an http(s) URL, found `{uri}`"))
            .hints
            .push("rlx speaks MLflow's REST API; start a server with `mlflow server --host 127.0.0.1 --port 5000`".into());
    }
    if let Some(w) = &spec.log.sinks.wandb {
        for (i, t) in w.tags.iter().enumerate() {
            if t.is_empty() || t.chars().count() > 64 {
                cx.err(&format!("log.sinks.wandb.tags.{i}"), format!("a W&B tag has 1 to 64 characters, found {} in `{t}`", t.chars().count()));
            }
        }
        for (key, v) in [("project", &w.project), ("entity", &w.entity), ("name", &w.name)] {
            if v.as_deref().is_some_and(|v| v.trim().is_empty()) {
                cx.err(&format!("log.sinks.wandb.{key}"), format!("`log.sinks.wandb.{key}` is empty; leave it out for the default"));
            }
        }
    }
}

/// Data sources: files exist and have a known format (made absolute), `hf://` URIs parse, dates are days.
fn check_data(cx: &mut Ctx<'_>, spec: &mut Spec) {
    for (split, sources) in [("train", &mut spec.data.train), ("eval", &mut spec.data.eval)] {
        check_sources(cx, &format!("data.{split}"), sources);
    }
    check_labels(cx, spec);
}

/// The sources at `at` (`data.train`, a stage's `train`): paths that exist (made absolute),
/// Hugging Face URIs the loader reads, dates.
fn check_sources(cx: &mut Ctx<'_>, at: &str, sources: &mut [crate::spec::types::Source]) {
    for (i, src) in sources.iter_mut().enumerate() {
        let key = format!("{at}.{i}.path");
        if src.path.starts_with("hf://") {
            // The loader's own parser decides what it accepts; its reason, without its own
            // "invalid dataset" prefix, which the message below already says.
            let why = crate::data::hf::Uri::parse(&src.path).err().map(|e| match e {
                crate::data::hf::Error::BadUri { reason, .. } => reason,
                other => other.to_string(),
            });
            if let Some(why) = why {
                cx.err(&key, format!("invalid dataset `{}`: {why}", src.path))
                    .hints
                    .push("write `hf://owner/name`, `hf://owner/name/config` or `hf://owner/name/config:split`".into());
            }
        } else {
            let abs = cx.resolve_path(&key, Path::new(&src.path));
            let ext = abs.extension().and_then(|e| e.to_str()).unwrap_or("");
            if !abs.is_file() {
                let what = if abs.exists() { "is not a file" } else { "does not exist" };
                cx.err(&key, format!("dataset `{}` {what}", src.path)).label = format!("resolved to {}", abs.display());
            } else if !["jsonl", "json", "parquet"].contains(&ext) {
                cx.err(&key, format!("dataset `{}` must be .jsonl, .json or .parquet", src.path));
            } else {
                src.path = abs.display().to_string();
            }
        }
        for (which, date) in [("date_from", &src.date_from), ("date_to", &src.date_to)] {
            if let Some(d) = date
                && !is_day(d)
            {
                cx.err(&format!("{at}.{i}.{which}"), format!("`{which}` must be a date `YYYY-MM-DD`, found `{d}`"));
            }
        }
        if let (Some(a), Some(b)) = (&src.date_from, &src.date_to)
            && is_day(a)
            && is_day(b)
            && a > b
        {
            cx.err(&format!("{at}.{i}.date_to"), format!("`date_to` ({b}) is before `date_from` ({a})"));
        }
    }
}

/// Per-source eval metrics are keyed by the label: two sources under one name would mix.
fn check_labels(cx: &mut Ctx<'_>, spec: &Spec) {
    let mut seen: Vec<(String, usize)> = vec![];
    for (i, src) in spec.data.eval.iter().enumerate() {
        let label = src.label();
        if label == "greedy" && spec.data.eval.len() > 1 {
            let key = if src.name.is_some() { format!("data.eval.{i}.name") } else { format!("data.eval.{i}.path") };
            cx.err(&key, "an eval source called `greedy` would write `eval/greedy/pass@k`, the greedy protocol's metrics (`eval.greedy`)".into())
                .hints
                .push(format!("give it another `name:` (data.eval.{i}.name)"));
        }
        if let Some((_, first)) = seen.iter().find(|(l, _)| *l == label) {
            let key = if src.name.is_some() { format!("data.eval.{i}.name") } else { format!("data.eval.{i}.path") };
            cx.err(&key, format!("eval sources {first} and {i} are both called `{label}` (eval metrics are written per source, as `eval/{label}/pass@k`)"))
                .hints
                .push(format!("give one of them a `name:` (data.eval.{i}.name)"));
        } else {
            seen.push((label, i));
        }
    }
}

/// Model files written as paths must exist (made absolute); the chat template is a builtin or a file that compiles.
fn check_model(cx: &mut Ctx<'_>, spec: &mut Spec) {
    let base = spec.model.base.clone();
    match ModelSource::parse(&base, None) {
        Ok(ModelSource::Path(p)) => {
            let abs = cx.resolve_path("model.base", &p);
            if abs.exists() {
                spec.model.base = abs.display().to_string();
            } else if !looks_like_path(&base) && let Ok(cwd_relative) = std::path::absolute(&p) {
                // `owner/name` that exists as a directory here: a local model, as it always was.
                spec.model.base = cwd_relative.display().to_string();
            } else {
                cx.err("model.base", format!("model `{base}` does not exist")).label = format!("resolved to {}", abs.display());
            }
        }
        Ok(_) => {}
        Err(e @ SourceError::Pypi(_)) => {
            cx.err("model.base", format!("`model.base` {e}"));
        }
        Err(e @ SourceError::NotARepo(_)) => {
            cx.err("model.base", format!("`model.base` {e}")).hints.push("write a local path with `./` or `/` at the start, e.g. `./models/tiny`".into());
        }
    }
    let ct = spec.model.chat_template.clone();
    if ct != "auto" && !BUILTIN_CHAT_TEMPLATES.contains(&ct.as_str()) {
        if looks_like_path(&ct) || ct.ends_with(".j2") || ct.ends_with(".jinja") {
            let abs = cx.resolve_path("model.chat_template", Path::new(&ct));
            match std::fs::read_to_string(&abs) {
                Ok(text) => {
                    compile_template(cx, "model.chat_template", &abs, &text);
                    spec.model.chat_template = abs.display().to_string();
                }
                Err(e) => {
                    cx.err("model.chat_template", format!("chat template `{ct}` cannot be read: {e}")).label = format!("resolved to {}", abs.display());
                }
            }
        } else {
            let names = std::iter::once("auto").chain(BUILTIN_CHAT_TEMPLATES.iter().copied()).map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
            let d = cx.err("model.chat_template", format!("unknown chat template `{ct}`; expected {names} or a path to a Jinja file"));
            if let Some(m) = crate::spec::diagnostic::did_you_mean(&ct, std::iter::once("auto").chain(BUILTIN_CHAT_TEMPLATES.iter().copied())) {
                d.hints.push(format!("did you mean `{m}`?"));
            }
        }
    }
}

/// Prompt templates must exist and compile; returns those that do (made absolute in `prompt`).
fn check_templates(cx: &mut Ctx<'_>, prompt: &mut crate::spec::types::Prompt) -> Vec<TemplateRef> {
    let mut found = vec![];
    let mut templates = vec![("prompt.user", Some(prompt.user.clone()))];
    templates.push(("prompt.system", prompt.system.clone()));
    templates.push(("prompt.feedback", prompt.feedback.clone()));
    for (key, path) in templates {
        let Some(path) = path else { continue };
        let abs = cx.resolve_path(key, &path);
        match std::fs::read_to_string(&abs) {
            Ok(text) => {
                if compile_template(cx, key, &abs, &text) {
                    found.push(TemplateRef { role: key.to_string(), path: abs.clone(), text });
                }
                match key {
                    "prompt.user" => prompt.user = abs,
                    "prompt.system" => prompt.system = Some(abs),
                    _ => prompt.feedback = Some(abs),
                }
            }
            Err(e) => {
                let why = if e.kind() == std::io::ErrorKind::NotFound { "does not exist".to_string() } else { e.to_string() };
                cx.err(key, format!("template `{}` {why}", path.display())).label = format!("resolved to {}", abs.display());
            }
        }
    }
    found
}

/// GSPO's sequence ratio is taken against the sampler's log-probabilities. A tempered sampler
/// or quantised sampler weights put it far from 1 on-policy (the quickstart at T 0.7 with its
/// GGUF's blocks: 0.94–0.97, from `train/kl_sample_train` 0.026–0.062 nats per token), outside
/// a band as narrow as the paper's [0.9997, 1.0004], so every negative-advantage sequence would
/// take the clipped, gradient-free branch and only positive ones would train. Refused rather
/// than run wrong; a band wide enough to hold that gap (the user's choice) is let through.
fn check_gspo_band(cx: &mut Ctx<'_>, spec: &Spec) {
    use crate::spec::types::{Backend, Loss, SampleWeights};
    let Loss::Gspo { clip_low_threshold: lo, clip_high_threshold: hi } = spec.grpo.loss else { return };
    let quantised = matches!(spec.backend, Backend::Local { sample_weights, .. } if sample_weights != Some(SampleWeights::F32));
    // Scored at the sampling temperature (the embedded trainer's default), a tempered sampler
    // is the learner's own distribution.
    let tempered = spec.sampling.temperature != 1.0 && super::resolve::learner_temperature(spec) != spec.sampling.temperature;
    if !(quantised || tempered) || (lo <= 0.9 && hi >= 1.1) {
        return;
    }
    let why = match (tempered, quantised) {
        (true, true) => format!("tempered (`sampling.temperature: {}`) and from quantised weights", spec.sampling.temperature),
        (true, false) => format!("tempered (`sampling.temperature: {}`)", spec.sampling.temperature),
        _ => "from quantised weights (`backend.sample_weights` is not `f32`)".to_string(),
    };
    cx.err("grpo.loss", format!("GSPO's clip band [{lo}, {hi}] cannot hold its sequence ratio against this sampler, whose log-probabilities are {why}")).hints.extend([
        "on-policy the ratio is then not 1 but about 0.94–0.97 (measured on the quickstart), so every negative-advantage sequence is clipped and only positive ones train".to_string(),
        "let the learner score at the sampling temperature (leave `grpo.learner_temperature` out) with `backend.sample_weights: f32` (the ratio is 1 on-policy), or widen the band to at least [0.9, 1.1] (`clip_low_threshold`, `clip_high_threshold`) and watch `train/clip_fraction`".to_string(),
    ]);
}

/// The GRPO variants (docs/variants.md): combinations a backend cannot run or that contradict
/// each other, refused before the run with what to use instead.
fn check_grpo_variants(cx: &mut Ctx<'_>, spec: &Spec) {
    use crate::spec::types::{Backend, Loss, LossAgg, Overlong};
    let g = &spec.grpo;
    let tinker = matches!(spec.backend, Backend::Tinker { .. });
    check_tinker_server(cx, spec);
    if tinker && matches!(g.loss, Loss::Gspo { .. }) {
        let on = match spec.backend {
            Backend::Tinker { server: Some(s), .. } => {
                let name = super::resolve::tinker_server(s).name();
                format!("the `{name}` Tinker server (`backend.server: {name}`)")
            }
            _ => "Tinker".to_string(),
        };
        cx.err("grpo.loss.kind", format!("`grpo.loss: {{kind: gspo}}` cannot run on {on}")).hints.extend([
            "Tinker's protocol names a `gspo` loss without defining it, its built-in losses are token-level (a sequence ratio couples a datum's tokens), and a custom loss needs a torch.fx graph upload that rlx does not implement".to_string(),
            "use `backend.kind: local` for GSPO, or `grpo.loss: {kind: ppo, clip_high_threshold: 1.28}` (clip-higher) on Tinker".to_string(),
        ]);
    }
    check_gspo_band(cx, spec);
    check_learner_temperature(cx, spec);
    check_rollout_correction(cx, spec);
    if matches!(g.loss, Loss::Dro { .. }) && g.loss_agg != LossAgg::Sum {
        cx.err("grpo.loss_agg", "`grpo.loss_agg` other than `sum` cannot be used with `grpo.loss: {kind: dro}`".into()).hints.push(
            "rlx aggregates by scaling each sequence's advantages, and DRO's quadratic penalty does not scale with the advantage; keep `loss_agg: {kind: sum}` and choose `beta`, or use `ppo`".into(),
        );
    }
    if let Some(Overlong::SoftPenalty { cache_tokens, penalty }) = g.overlong {
        if cache_tokens >= spec.sampling.max_tokens {
            cx.err("grpo.overlong.cache_tokens", format!("`grpo.overlong.cache_tokens` ({cache_tokens}) must be below `sampling.max_tokens` ({})", spec.sampling.max_tokens))
                .hints
                .push("the penalty ramps over the last `cache_tokens` tokens before `max_tokens`; DAPO used 4096 of 20480".into());
        }
        if !(penalty.is_finite() && penalty >= 0.0) {
            cx.err("grpo.overlong.penalty", format!("`grpo.overlong.penalty` must be ≥ 0, found {penalty}"));
        }
    }
    if g.dynamic_sampling.is_some() && !g.skip_degenerate {
        cx.err("grpo.skip_degenerate", "`grpo.dynamic_sampling` sets degenerate groups aside, but `grpo.skip_degenerate` is false".into())
            .hints
            .push("remove `skip_degenerate: false`, or `dynamic_sampling` to train on every group".into());
    }
    if let Some(kl) = g.kl {
        if !(kl.coef.is_finite() && kl.coef >= 0.0) {
            cx.err("grpo.kl.coef", format!("`grpo.kl.coef` must be ≥ 0, found {}", kl.coef));
        }
        check_kl_form(cx, spec, kl);
        if matches!(spec.backend, Backend::Openai { .. }) && spec.schedule.max_steps > 0 && !spec.schedule.dry_run {
            cx.err("grpo.kl", format!("`grpo.kl` is not available on the `{}` backend", spec.backend.kind())).hints.push(
                "the reference log-probabilities come from the trainer's base model (the embedded trainer, or a Tinker sampling client of the base model); use `backend.kind: local` or `tinker`, or leave `grpo.kl` out".into(),
            );
        }
    }
}

/// `grpo.kl`'s form against its estimator and backend: k3 has no correct advantage form, a loss
/// term needs a trainer whose loss can take one, and the cookbook's discount and centring shape
/// the advantage penalty only.
fn check_kl_form(cx: &mut Ctx<'_>, spec: &Spec, kl: crate::spec::types::Kl) {
    use crate::spec::types::{Backend, KlEstimator, KlForm};
    let form = super::resolve::kl_form(spec);
    let tinker = matches!(spec.backend, Backend::Tinker { .. });
    if form == KlForm::Advantage && kl.estimator == KlEstimator::K3 {
        let why = if tinker { "Tinker's fixed losses can carry the KL term only" } else { "`grpo.kl.form: advantage` puts it" };
        cx.err("grpo.kl.estimator", format!("k3 cannot be applied as an advantage penalty, where {why}")).hints.extend([
            "on sampled tokens the penalty's expected gradient is then ∇KL(π‖ref) − ∇KL(ref‖π), which cancels near the reference: k3 barely regularises (0.01–0.14× the true gradient's norm on small categoricals)".to_string(),
            if tinker { "use `estimator: k1` on Tinker (exact in the advantage form), or `backend.kind: local` for k3 as a loss term".to_string() } else { "leave `form` out (k3 as a loss term), or use `estimator: k1`".to_string() },
        ]);
    }
    if form == KlForm::Loss && tinker {
        cx.err("grpo.kl.form", "`grpo.kl.form: loss` cannot run on Tinker, whose losses are fixed".into()).hints.push("use `form: advantage` with `estimator: k1` on Tinker".into());
    }
    if form == KlForm::Loss && (kl.discount != 0.0 || kl.centre) {
        let key = if kl.discount != 0.0 { "grpo.kl.discount" } else { "grpo.kl.centre" };
        cx.err(key, format!("`{key}` shapes the advantage penalty; the KL term here is a loss term")).hints.push("use `estimator: k1` (the advantage form) for tinker-cookbook's discount and centring, or leave the key out".into());
    }
    if !(0.0..=1.0).contains(&kl.discount) {
        cx.err("grpo.kl.discount", format!("`grpo.kl.discount` must be in [0, 1], found {}", kl.discount));
    }
}

/// `grpo.rollout_correction` replaces the ratio of `importance_sampling` (a clipped loss already
/// bounds it its own way); its masks are rlx's losses, which Tinker does not compute.
fn check_rollout_correction(cx: &mut Ctx<'_>, spec: &Spec) {
    use crate::spec::types::{Backend, CorrectionMode, Loss};
    let Some(c) = spec.grpo.rollout_correction else { return };
    if spec.grpo.loss != Loss::ImportanceSampling {
        cx.err("grpo.rollout_correction", format!("`grpo.rollout_correction` weights `importance_sampling`'s ratio, not `{}`'s", super::resolve::written_loss(&spec.grpo.loss).name()))
            .hints
            .push("use `loss: {kind: importance_sampling}` with it (token_truncate is then CISPO on [0, cap]), or leave it out and keep the loss's own clipping".into());
    }
    if !(c.cap.is_finite() && c.cap >= 1.0) {
        cx.err("grpo.rollout_correction.cap", format!("`grpo.rollout_correction.cap` must be at least 1, found {}", c.cap));
    }
    if c.mode != CorrectionMode::TokenTruncate && matches!(spec.backend, Backend::Tinker { .. }) {
        cx.err("grpo.rollout_correction.mode", "masked importance weights cannot run on Tinker, whose losses are fixed".into())
            .hints
            .push("use `mode: token_truncate` (Tinker's `cispo` on [0, cap]) on Tinker, or `backend.kind: local`".into());
    }
}

/// Tinker's learner scores at temperature 1 and takes no temperature: asked for another, or
/// sampling at T ≠ 1 without saying so, every importance ratio would carry the temperature
/// (on the quickstart, up to ~15 on rare tokens) and the loss's clip would act on it.
fn check_learner_temperature(cx: &mut Ctx<'_>, spec: &Spec) {
    use crate::spec::types::Backend;
    if !matches!(spec.backend, Backend::Tinker { .. }) || spec.schedule.max_steps == 0 || spec.schedule.dry_run {
        return;
    }
    let t = spec.sampling.temperature;
    match spec.grpo.learner_temperature {
        Some(l) if l != 1.0 => {
            cx.err("grpo.learner_temperature", format!("Tinker's learner scores log-probabilities at temperature 1, not {l}")).hints.push(
                "Tinker's forward_backward takes no temperature; use `backend.kind: local` (or `rlx serve`) to score at the sampling temperature, or `learner_temperature: 1`".into(),
            );
        }
        None if t != 1.0 && t != 0.0 => {
            cx.err("sampling.temperature", format!("sampling at temperature {t} on Tinker, whose learner scores at temperature 1")).hints.extend([
                format!("every importance ratio then compares π^(1/{t}) with π, not the update: PPO's and CISPO's clips act on the temperature (verl and TRL score at the sampling temperature)"),
                "sample at `sampling.temperature: 1` (tinker-cookbook's default), or write `grpo.learner_temperature: 1` to run it knowingly".into(),
            ]);
        }
        _ => {}
    }
}

/// What the declared Tinker server (`backend.server`) lacks: a loss it does not compute (GSPO is
/// refused on every server below), a LoRA rank above its limit. Without `backend.server` the
/// same checks run at first contact, against the server found at the URL.
fn check_tinker_server(cx: &mut Ctx<'_>, spec: &Spec) {
    use crate::spec::types::{Backend, Loss};
    let Backend::Tinker { server: Some(server), .. } = spec.backend else { return };
    let profile = super::resolve::tinker_server(server).profile();
    let name = profile.server.name();
    let loss = super::resolve::loss_fn(&spec.grpo);
    if !matches!(spec.grpo.loss, Loss::Gspo { .. }) && !loss.is_sequence_level() && !profile.supports_loss(loss.name()) {
        let d = cx.err("grpo.loss.kind", format!("`grpo.loss: {{kind: {}}}` cannot run on the `{name}` Tinker server (`backend.server: {name}`)", loss.name()));
        d.hints.push(format!("its losses are {}", profile.losses.join(", ")));
    }
    if let Some(max) = profile.max_lora_rank.filter(|_| matches!(spec.model.finetune, crate::spec::types::Finetune::Lora))
        && spec.model.lora.rank > max
    {
        cx.err("model.lora.rank", format!("LoRA rank {} is above the `{name}` Tinker server's default `max_lora_rank` of {max} (`backend.server: {name}`)", spec.model.lora.rank))
            .hints
            .push(format!("lower `model.lora.rank` to {max} or less, or start the server with a larger `max_lora_rank` (docs/self-hosting.md)"));
    }
}

/// `backend.model_path` of the local backend: a trainer state directory (made absolute), for
/// evaluation-only runs.
fn check_local_model_path(cx: &mut Ctx<'_>, path: &mut String, max_steps: u32) {
    let abs = cx.resolve_path("backend.model_path", Path::new(path.as_str()));
    if abs.join("state.json").is_file() {
        *path = abs.display().to_string();
    } else {
        let what = if abs.is_dir() { "has no `state.json`: it is not an rlx checkpoint" } else { "does not exist" };
        cx.err("backend.model_path", format!("checkpoint `{path}` {what}")).label = format!("resolved to {}", abs.display());
    }
    if max_steps > 0 {
        cx.err("backend.model_path", format!("`backend.model_path` names a checkpoint to evaluate, but `schedule.max_steps` is {max_steps}"))
            .hints
            .push("set `schedule.max_steps: 0` to evaluate it (`rlx eval RUN_DIR[@STEP]` does), or `rlx run --resume RUN_DIR` to go on training".into());
    }
}

/// Compiles a template with the same environment rendering uses; reports a syntax error with its
/// location in the template file. Returns whether it compiled.
fn compile_template(cx: &mut Ctx<'_>, key: &str, path: &Path, text: &str) -> bool {
    // The same environment rendering uses, so what compiles here renders there.
    let env = crate::prompt::chat::hf_environment();
    match env.template_from_str(text) {
        Ok(_) => true,
        Err(e) => {
            let source = Source::file(path, text.to_string());
            let span = e.range().or_else(|| {
                e.line().map(|l| {
                    let start: usize = text.split_inclusive('\n').take(l.saturating_sub(1)).map(str::len).sum();
                    let len = text[start..].find('\n').unwrap_or(text.len() - start);
                    start..start + len
                })
            });
            let span = span.map(|r| Span::new(&source, r));
            let msg = format!("template `{}` does not compile: {}", path.display(), e.detail().unwrap_or(&e.kind().to_string()));
            let named_at = cx.span(key).location();
            cx.out.push(Diagnostic::new(msg, span).at(key).label("here").hint(format!("named by `{key}` at {named_at}")));
            false
        }
    }
}



#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_uris() {
        assert!(is_day("2024-08-01"));
        assert!(!is_day("2024-13-01"));
        assert!(!is_day("24-08-01"));
        let hf = |rest: &str| crate::data::hf::Uri::parse(&format!("hf://{rest}"));
        assert!(hf("agentica-org/DeepCoder-Preview-Dataset/taco:train").is_ok());
        assert!(hf("a/b").is_ok());
        assert!(hf("a").is_err());
        assert!(hf("a/b:").is_err());
        assert!(hf("a//b").is_err());
    }

    #[test]
    fn normalize_is_lexical() {
        assert_eq!(normalize(Path::new("/a/b/../c/./d")), PathBuf::from("/a/c/d"));
    }
}
