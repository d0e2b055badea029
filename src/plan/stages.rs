//! `stages:` checked and laid out on the run's one step counter.
//!
//! One counter rather than a stage-qualified one (`sft/3`): the run directory's records
//! (`metrics.jsonl`, `checkpoints.jsonl`, `rollouts.jsonl`), the resume rule (drop what follows
//! the last checkpoint), `rlx compare`'s curves and `runs/<id>@STEP` all key on one integer
//! step; a stage-qualified step would have changed each of them. Each stage owns a contiguous
//! range of it, and every metrics line names its stage (`stage`).
//!
//! The checks here run with the other semantic checks (`check::check` calls [`check`]) and
//! report against the located tree; this file names nothing of `check`, so no cycle forms.

use std::path::{Path, PathBuf};

use crate::data::sft::{SftRow, load_sft};
use crate::prompt::Message;
use crate::prompt::chat::ChatTemplateChoice;
use crate::prompt::sft::weighted_tokens;
use crate::seam::ModelSource;
use crate::spec::diagnostic::Diagnostic;
use crate::spec::node::Node;
use crate::spec::types::{Distill, DistillStage, Sft, Source, Spec, Stage, TrainOn};

use super::distill::{Checkpoints, SCORERS, Scorer, check_teacher, student_vocab};

/// A stage on the step counter.
#[derive(Debug, Clone, PartialEq)]
pub struct StagePlan {
    /// Its name (unique in the run).
    pub name: String,
    /// Its first step.
    pub first_step: u32,
    /// Its number of steps.
    pub steps: u32,
    /// What it runs.
    pub kind: StageKind,
}

/// What a stage runs.
#[derive(Debug, Clone, PartialEq)]
pub enum StageKind {
    /// Supervised fine-tuning.
    Sft {
        /// The stage as written, paths absolute.
        spec: Sft,
        /// Rows in its `train` file.
        rows: usize,
        /// The peak learning rate (the stage's, else `optimizer.learning_rate`).
        peak_lr: f64,
    },
    /// On-policy distillation: GRPO with the teacher's advantage, on a plan of its own (the
    /// engine's `distill::stage_plan`).
    Distill {
        /// `grpo.distill` as the stage sets it (the teacher resolved by the checks).
        distill: Distill,
        /// Its learning rate (the stage's, else `optimizer.learning_rate`).
        learning_rate: f64,
        /// Its training problems (absolute paths), when not `data.train`.
        train: Option<Vec<Source>>,
        /// Its evaluation cadence, in its own steps.
        eval_every: u32,
    },
    /// GRPO on the rest of the spec.
    Grpo,
}

impl StagePlan {
    /// The steps it owns.
    pub fn range(&self) -> std::ops::Range<u32> {
        self.first_step..self.first_step + self.steps
    }
}

/// The stages' rules beyond the schema: a `grpo` stage only last, distinct names, `sft` files
/// that exist and hold reference completions, a `distill` stage's teacher (each error names the
/// stage and key). On success the stages' paths are absolute. (A `distill` stage's `train`
/// sources are `check::check_sources`'s, as `data.train`'s are.)
pub(crate) fn check(spec: &mut Spec, tree: &Node, checkpoints: Option<&dyn Checkpoints>) -> Vec<Diagnostic> {
    let mut out = vec![];
    let err = |key: &str, message: String| tree.error_at(key, message);
    let n = spec.stages.len();
    let mut names: Vec<String> = vec![];
    let model = spec.model.clone();
    let student = spec.stages.iter().any(|s| matches!(s, Stage::Distill(_))).then(|| student_vocab(spec)).flatten();
    let (backend, scorer) = (spec.backend.kind(), Scorer::of(spec));
    for (i, stage) in spec.stages.iter_mut().enumerate() {
        let name = stage.name().to_owned();
        if names.contains(&name) {
            let key = if matches!(stage, Stage::Sft(Sft { name: Some(_), .. })) { format!("stages.{i}.name") } else { format!("stages.{i}") };
            out.push(err(&key, format!("stage {i} is named `{name}` like an earlier stage; stage names must differ (metrics name their stage)")).hint("give each stage a `name`"));
        }
        names.push(name.clone());
        if let Stage::Distill(d) = stage {
            if scorer.is_none() {
                out.push(err(&format!("stages.{i}"), format!("stage `{name}`: a `distill` stage is not available on the `{backend}` backend")).hint(SCORERS));
            }
            out.extend(check_distill(d, i, &name, tree, student.as_ref(), checkpoints, scorer.as_ref().unwrap_or(&Scorer::Local)));
            continue;
        }
        let Stage::Sft(sft) = stage else {
            if i + 1 != n {
                out.push(err(&format!("stages.{i}.kind"), format!("stage `{name}`: a `grpo` stage must be the last stage")));
            }
            continue;
        };
        if sft.learning_rate.is_some_and(|lr| lr.is_nan() || lr <= 0.0) {
            out.push(err(&format!("stages.{i}.learning_rate"), format!("stage `{name}`: `learning_rate` must be > 0")));
        }
        if sft.max_steps == Some(0) {
            out.push(err(&format!("stages.{i}.max_steps"), format!("stage `{name}`: `max_steps` must be at least 1 (leave it out for every batch of every epoch)")));
        }
        for (key, path) in [("train", Some(&mut sft.train)), ("eval", sft.eval.as_mut())] {
            let Some(path) = path else { continue };
            let at = format!("stages.{i}.{key}");
            let base = tree.span_of(&at.split('.').collect::<Vec<_>>()).source.base_dir.clone();
            *path = absolute(&base, path);
            match load_sft(path) {
                Err(e) => out.push(err(&at, format!("stage `{name}`: {}", crate::causes::causes(&e).join(": ")))),
                Ok(rows) if rows.is_empty() => out.push(err(&at, format!("stage `{name}`: `{}` has no rows", path.display()))),
                Ok(rows) if key == "train" => {
                    if let Some(why) = template_shortfall(&model, &rows, sft.train_on, path) {
                        out.push(err(&format!("stages.{i}.train_on"), format!("stage `{name}`: {why}")).hint("`train_on: last_assistant` needs only the last turn's context"));
                    }
                }
                Ok(_) => {}
            }
        }
    }
    out
}

/// A `distill` stage's own rules: a teacher (checked as `grpo.distill.teacher` is), a
/// coefficient ≥ 0, a positive learning rate.
fn check_distill(d: &mut DistillStage, i: usize, name: &str, tree: &Node, student: Option<&std::collections::HashMap<String, u32>>, checkpoints: Option<&dyn Checkpoints>, scorer: &Scorer) -> Vec<Diagnostic> {
    let err = |key: String, message: String| tree.error_at(&key, message);
    let mut out = vec![];
    match d.teacher.as_mut() {
        None => out.push(err(format!("stages.{i}"), format!("stage `{name}`: a `distill` stage needs a `teacher`")).hint("`teacher: {base: runs/<id>@STEP}`, or a model in `model.base` form")),
        Some(t) => {
            for mut e in check_teacher(t, tree, &format!("stages.{i}.teacher.base"), student, checkpoints, scorer) {
                e.message = format!("stage `{name}`: {}", e.message);
                out.push(e);
            }
        }
    }
    if !(d.coef.is_finite() && d.coef >= 0.0) {
        out.push(err(format!("stages.{i}.coef"), format!("stage `{name}`: `coef` must be ≥ 0, found {}", d.coef)));
    }
    if d.learning_rate.is_some_and(|lr| lr.is_nan() || lr <= 0.0) {
        out.push(err(format!("stages.{i}.learning_rate"), format!("stage `{name}`: `learning_rate` must be > 0")));
    }
    out
}

/// Rows of `train` checked against the chat template at validation (the run checks every row at
/// set-up).
const ROWS_CHECKED: usize = 256;

/// Why the model's chat template cannot weight `rows` as `train_on` asks, when it cannot. Only
/// for a model on this machine (`model.base` a path): validation fetches nothing, and a model
/// elsewhere is checked by the run's set-up. A template that cannot be read is
/// `check_model`'s to report, not this check's.
fn template_shortfall(model: &crate::spec::types::Model, rows: &[SftRow], train_on: TrainOn, path: &Path) -> Option<String> {
    let source = ModelSource::parse(&model.base, None).ok().filter(|s| matches!(s, ModelSource::Path(_)))?;
    let tokenizer = model.tokenizer.as_deref().map(|t| ModelSource::parse(t, None)).transpose().ok()?;
    let files = crate::backend::model_source::prompt_files(&source, tokenizer.as_ref(), &ChatTemplateChoice::parse(&model.chat_template)).ok()?;
    // A reference solution is one user turn and the answer (the prompt templates' text does not
    // change what the template can express).
    let solution = vec![Message::new("user", "a problem"), Message::new("assistant", "```python\npass\n```")];
    for (i, row) in rows.iter().take(ROWS_CHECKED).enumerate() {
        let messages = match row {
            SftRow::Chat(m) => m.iter().map(|(r, c)| Message::new(r, c.clone())).collect(),
            SftRow::Solution { .. } => solution.clone(),
        };
        let name = serde_json::to_value(train_on).ok()?.as_str()?.to_owned();
        match weighted_tokens(&files.chat, &files.tokenizer, &messages, train_on) {
            Ok(Err(why)) => return Some(format!("`train_on: {name}` on row {i} of `{}`: {why}", path.display())),
            Err(e) => return Some(format!("row {i} of `{}` cannot be rendered: {}", path.display(), crate::causes::causes(&e).join(": "))),
            Ok(Ok(_)) => {}
        }
    }
    None
}

fn absolute(base: &Path, written: &Path) -> PathBuf {
    let joined = if written.is_absolute() { written.to_path_buf() } else { base.join(written) };
    std::path::absolute(&joined).unwrap_or(joined)
}

/// The stages on the step counter, and the run's total steps. No stages (or an evaluation-only
/// run, `schedule.max_steps: 0`, as `rlx eval` plans a checkpoint) is one GRPO stage, the run
/// as it always was: nothing laid out, the total `schedule.max_steps`.
pub(crate) fn lay_out(spec: &Spec) -> (Vec<StagePlan>, u32) {
    if spec.stages.is_empty() || spec.schedule.max_steps == 0 {
        return (vec![], spec.schedule.max_steps);
    }
    let mut out = vec![];
    let mut next = 0u32;
    for stage in &spec.stages {
        let (steps, kind) = match stage {
            Stage::Sft(sft) => {
                // The checks loaded the file; a file gone since plans a stage of no steps.
                let rows = load_sft(&sft.train).map(|r| r.len()).unwrap_or(0);
                let per_epoch = rows.div_ceil(sft.batch_size.max(1) as usize);
                let all = u32::try_from(per_epoch * sft.epochs as usize).unwrap_or(u32::MAX);
                let steps = sft.max_steps.map_or(all, |m| m.min(all));
                let peak_lr = sft.learning_rate.unwrap_or(spec.optimizer.learning_rate);
                (steps, StageKind::Sft { spec: sft.clone(), rows, peak_lr })
            }
            Stage::Distill(d) => {
                let distill = Distill {
                    // The checks refused a stage without one; an unchecked spec's is a path the
                    // trainer then fails to find.
                    teacher: d.teacher.clone().unwrap_or_else(|| crate::spec::types::Teacher { base: String::new(), base_url: None, resolved: None }),
                    coef: d.coef,
                    task_reward: d.task_reward,
                };
                let kind = StageKind::Distill { distill, learning_rate: d.learning_rate.unwrap_or(spec.optimizer.learning_rate), train: d.train.clone(), eval_every: d.eval_every };
                (d.max_steps, kind)
            }
            Stage::Grpo(_) => (spec.schedule.max_steps, StageKind::Grpo),
        };
        out.push(StagePlan { name: stage.name().to_owned(), first_step: next, steps, kind });
        next = next.saturating_add(steps);
    }
    (out, next)
}

/// The stage that owns `step`.
pub fn stage_of(stages: &[StagePlan], step: u32) -> Option<&StagePlan> {
    stages.iter().find(|s| s.range().contains(&step))
}

