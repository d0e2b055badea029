//! The supervised stages of a staged run (`stages:`), run in their place among the others on the
//! same trainer, run directory and step counter (`distill` and `grpo` stages run the step loop,
//! `engine/run.rs`).
//!
//! A stage's step i trains batch i mod ⌈rows / batch_size⌉ of epoch ⌊i / that⌋, each epoch's
//! order a seeded shuffle of (seed, stage, epoch): the batch of a step follows from the step
//! alone, so a stage resumed from any checkpoint trains exactly the steps that remain, with no
//! data cursor to record. Each step is one `forward_backward` with the `cross_entropy` loss and
//! one `optim_step` at the stage's scheduled rate. The weights are divided by the batch's trained
//! tokens, so the loss is the batch's mean negative log-likelihood per trained token and the rate
//! means the same whatever the batch's length (rejected: Tinker's plain sum, whose gradient
//! grows with the batch's tokens). The stage's last step always checkpoints, so the next stage
//! starts from a recorded state and a resume crosses the boundary once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use crate::backend::Trainer;
use crate::data::sft::load_sft;
use crate::plan::{Plan, StageKind, StagePlan};
use crate::rng::SplitMix64;
use crate::runlog::metrics::{self, optim, time, train};
use crate::runlog::{self, CheckpointRecord, JsonlWriter, MetricsLine, RunDir, Status, files};
use crate::seam::{AdamParams, LossFn};
use crate::spec::types::Sft;

use super::control::RunOutcome;
use super::driver::checkpoint_name;
use super::error::Error;
use super::eval::{self, EvalResult};
use super::event::{self, Event};
use super::rollout::Ctx;
use super::setup::Setup;
use super::sft::{self, Example};

/// What the supervised stages write to.
struct Logs {
    metrics: JsonlWriter,
    eval: JsonlWriter,
    eval_rollouts: JsonlWriter,
    checkpoints: JsonlWriter,
}

/// One supervised stage, ready to train.
struct Stage<'a> {
    plan: &'a StagePlan,
    index: usize,
    spec: &'a Sft,
    peak_lr: f64,
    train: Vec<Example>,
    held_out: Vec<Example>,
}

/// Runs the steps of the supervised stage `index` of `plan.stages` from `first_step` (a resumed
/// run skips what it trained). `Some` when the run ends in it (a stop request).
///
/// # Errors
/// Rows the chat template cannot express ([`Error::Stage`]), trainer and run-log failures.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run(plan: &Plan, setup: &Setup, dir: &RunDir, cx: &Ctx<'_>, status: &mut Status, first_step: u32, sinks: &mut runlog::sinks::Sinks, index: usize) -> Result<Option<RunOutcome>, Error> {
    let Some(trainer) = setup.trainer.as_ref() else { return Ok(None) };
    let Some(stage) = plan.stages.get(index) else { return Ok(None) };
    let StageKind::Sft { spec, peak_lr, .. } = &stage.kind else { return Ok(None) };
    let end = stage.first_step + stage.steps;
    if first_step >= end {
        return Ok(None);
    }
    let mut logs = Logs { metrics: dir.jsonl(files::METRICS)?, eval: dir.jsonl(files::EVAL_RESULTS)?, eval_rollouts: dir.jsonl(files::EVAL_ROLLOUTS)?, checkpoints: dir.jsonl(files::CHECKPOINTS)? };
    let st = Stage { plan: stage, index, spec, peak_lr: *peak_lr, train: examples(setup, &stage.name, spec, &spec.train)?, held_out: match &spec.eval {
        Some(p) => examples(setup, &stage.name, spec, p)?,
        None => vec![],
    } };
    tracing::info!(stage = %stage.name, first = stage.first_step, steps = stage.steps, rows = st.train.len(), "supervised stage");
    for s in first_step.max(stage.first_step)..end {
        if cx.stop.requested() {
            save_unsaved(trainer, dir, &mut logs, cx, s).await?;
            return Ok(Some(RunOutcome::Interrupted { steps: s }));
        }
        step(plan, setup, trainer, dir, cx, &st, s, &mut logs, sinks).await?;
        status.steps_done = s + 1;
        dir.set_status(status)?;
    }
    Ok(None)
}

/// The baseline's share of a staged run: the first supervised stage's held-out `eval/nll`
/// under the starting weights, so its evaluations have a "before". Empty without one.
///
/// # Errors
/// As [`run`].
pub(crate) async fn baseline_metrics(plan: &Plan, setup: &Setup) -> Result<BTreeMap<String, f64>, Error> {
    let mut m = BTreeMap::new();
    let first = plan.stages.iter().find_map(|s| match &s.kind {
        StageKind::Sft { spec, .. } => Some((s, spec)),
        StageKind::Distill { .. } | StageKind::Grpo => None,
    });
    if let (Some((stage, spec)), Some(trainer)) = (first, setup.trainer.as_ref())
        && let Some(path) = &spec.eval
        && let Some(v) = held_out_nll(trainer, &examples(setup, &stage.name, spec, path)?).await?
    {
        m.insert(metrics::eval::NLL.into(), v);
    }
    Ok(m)
}

/// A file's rows as examples.
fn examples(setup: &Setup, stage: &str, spec: &Sft, path: &std::path::Path) -> Result<Vec<Example>, Error> {
    let bad = |reason: String| Error::Stage { stage: stage.to_owned(), reason };
    let rows = load_sft(path).map_err(|e| bad(crate::causes::causes(&e).join(": ")))?;
    let mut out = Vec::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        let messages = sft::messages(&setup.prompting, row)?;
        out.push(sft::example(&setup.prompting, &messages, spec.train_on)?.map_err(|why| bad(format!("`train_on: {}` on row {i} of `{}`: {why}", train_on_name(spec), path.display())))?);
    }
    Ok(out)
}

fn train_on_name(spec: &Sft) -> String {
    serde_json::to_value(spec.train_on).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

/// The rows of step `i` of a stage: batch `i mod per_epoch` of its epoch's seeded order.
pub(crate) fn batch_rows(seed: u64, stage: usize, rows: usize, batch_size: u32, i: u32) -> Vec<usize> {
    let bs = batch_size.max(1) as usize;
    let per_epoch = rows.div_ceil(bs).max(1);
    let (epoch, b) = (i as usize / per_epoch, i as usize % per_epoch);
    let mut order: Vec<usize> = (0..rows).collect();
    let mut rng = SplitMix64::stream(seed ^ 0x5f7a_6e11, ((stage as u64) << 32) | epoch as u64);
    for k in (1..rows).rev() {
        let j = rng.below(k as u64 + 1) as usize;
        order.swap(k, j);
    }
    order.into_iter().skip(b * bs).take(bs).collect()
}

/// The datums of `batch` with weights divided by its trained tokens (the module's doc).
fn datums(batch: &[&Example]) -> (Vec<crate::seam::Datum>, f64) {
    let tokens: f64 = batch.iter().map(|e| e.trained()).sum();
    let scale = if tokens > 0.0 { (1.0 / tokens) as f32 } else { 0.0 };
    let datums = batch
        .iter()
        .map(|e| {
            let mut d = e.datum();
            if let Some(w) = d.loss_fn_inputs.weights.as_mut() {
                w.iter_mut().for_each(|x| *x *= scale);
            }
            d
        })
        .collect();
    (datums, tokens)
}

/// Mean negative log-likelihood per trained token of `batch`, from the learner's log-probs.
fn nll(batch: &[&Example], logprobs: &[Vec<f32>]) -> f64 {
    let (mut sum, mut tokens) = (0.0, 0.0);
    for (e, lp) in batch.iter().zip(logprobs) {
        for (w, l) in e.weights[1..].iter().zip(lp) {
            sum -= f64::from(*w) * f64::from(*l);
            tokens += f64::from(*w);
        }
    }
    if tokens > 0.0 { sum / tokens } else { f64::NAN }
}

/// One supervised step: update, evaluation when due, records, checkpoint when due.
#[allow(clippy::too_many_arguments)]
async fn step(plan: &Plan, setup: &Setup, trainer: &Arc<dyn Trainer>, dir: &RunDir, cx: &Ctx<'_>, st: &Stage<'_>, s: u32, logs: &mut Logs, sinks: &mut runlog::sinks::Sinks) -> Result<(), Error> {
    let i = s - st.plan.first_step;
    let t = Instant::now();
    let picked = batch_rows(plan.seed, st.index, st.train.len(), st.spec.batch_size, i);
    let batch: Vec<&Example> = picked.iter().map(|&k| &st.train[k]).collect();
    let (data, tokens) = datums(&batch);
    let out = trainer.forward_backward(data, LossFn::CrossEntropy).await?;
    let lr = st.spec.lr_at(i, st.plan.steps, st.peak_lr);
    let opt = trainer.optim_step(AdamParams { learning_rate: lr, ..plan.adam }).await?;
    let logprobs: Vec<Vec<f32>> = out.outputs.into_iter().map(|o| o.logprobs).collect();
    let mut m: BTreeMap<String, f64> = BTreeMap::new();
    m.insert(metrics::STAGE.into(), st.index as f64);
    m.insert(train::NLL.into(), nll(&batch, &logprobs));
    m.insert(train::DATUMS.into(), batch.len() as f64);
    m.insert(train::ACTION_TOKENS.into(), tokens);
    m.insert(optim::LR.into(), lr);
    if let Some(g) = opt.grad_norm {
        m.insert(optim::GRAD_NORM.into(), g);
    }
    m.insert(time::TRAIN_S.into(), t.elapsed().as_secs_f64());
    let last = i + 1 == st.plan.steps;
    if last || (st.spec.eval_every > 0 && (i + 1).is_multiple_of(st.spec.eval_every)) {
        if let Some(v) = held_out_nll(trainer, &st.held_out).await? {
            m.insert(metrics::eval::NLL.into(), v);
        }
        if !setup.eval_set.is_empty() {
            let sampler = setup.policy.sampler().await?;
            if let Some(ev) = eval::run(&*sampler, i64::from(s), plan, &setup.eval_set, &setup.eval_sampling, cx).await? {
                write_eval(logs, &ev)?;
                cx.sink.event(Event::Eval { step: i64::from(s), metrics: ev.metrics.clone() });
                m.extend(ev.metrics);
            }
        }
    }
    logs.metrics.append(&MetricsLine::new(i64::from(s), m.clone()))?;
    logs.metrics.sync()?;
    event::warn(cx.sink, sinks.poke());
    cx.sink.event(Event::Step { step: s, metrics: m });
    // `schedule.save_every` counts the stage's own steps, as it does the GRPO stage's.
    let every = plan.schedule.save_every;
    let run_end = s + 1 == plan.schedule.max_steps;
    if last || (every > 0 && (i + 1).is_multiple_of(every)) {
        let kind = if run_end { "final" } else if last { "stage" } else { "periodic" };
        let state = trainer.save_state(&checkpoint_name(s)).await?;
        record_checkpoint(dir, logs, cx, s, &state.0, kind)?;
    }
    Ok(())
}

/// `eval/nll`: the held-out rows' mean negative log-likelihood per trained token, scored by a
/// `forward` (no gradient) in batches of the same size as training's.
async fn held_out_nll(trainer: &Arc<dyn Trainer>, rows: &[Example]) -> Result<Option<f64>, Error> {
    if rows.is_empty() {
        return Ok(None);
    }
    let (mut sum, mut tokens) = (0.0, 0.0);
    for chunk in rows.chunks(8) {
        let batch: Vec<&Example> = chunk.iter().collect();
        let data = batch.iter().map(|e| e.datum()).collect();
        let out = trainer.forward(data, LossFn::CrossEntropy).await?;
        let lp: Vec<Vec<f32>> = out.outputs.into_iter().map(|o| o.logprobs).collect();
        let t: f64 = batch.iter().map(|e| e.trained()).sum();
        sum += nll(&batch, &lp) * t;
        tokens += t;
    }
    Ok(Some(sum / tokens))
}

fn write_eval(logs: &mut Logs, ev: &EvalResult) -> Result<(), Error> {
    for r in &ev.records {
        logs.eval.append(r)?;
    }
    for r in &ev.samples {
        logs.eval_rollouts.append(r)?;
    }
    logs.eval.sync()?;
    logs.eval_rollouts.sync()?;
    Ok(())
}

fn record_checkpoint(dir: &RunDir, logs: &mut Logs, cx: &Ctx<'_>, s: u32, state: &str, kind: &str) -> Result<(), Error> {
    let record = CheckpointRecord {
        name: checkpoint_name(s),
        step: s,
        // The GRPO stage's problems: none consumed by a supervised stage.
        data_cursor: 0,
        state_path: Some(dir.relative_state(state)),
        sampler_path: None,
        time: runlog::now(),
        kind: kind.into(),
        consumed_ahead: vec![],
    };
    logs.checkpoints.append(&record)?;
    logs.checkpoints.sync()?;
    cx.sink.event(Event::Checkpoint { step: s, state: state.to_owned() });
    Ok(())
}

/// At a stop before step `s`: checkpoint step `s − 1` unless a checkpoint already has it.
async fn save_unsaved(trainer: &Arc<dyn Trainer>, dir: &RunDir, logs: &mut Logs, cx: &Ctx<'_>, s: u32) -> Result<(), Error> {
    let Some(prev) = s.checked_sub(1) else { return Ok(()) };
    if dir.last_checkpoint()?.is_some_and(|c| c.step == prev) {
        return Ok(());
    }
    let state = trainer.save_state(&checkpoint_name(prev)).await?;
    record_checkpoint(dir, logs, cx, prev, &state.0, "interrupt")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_epoch_visits_every_row_once_in_its_own_order() {
        let (rows, bs) = (10, 4);
        let epoch = |e: u32| -> Vec<usize> { (0..3).flat_map(|b| batch_rows(5, 0, rows, bs, e * 3 + b)).collect() };
        for e in 0..2 {
            let mut seen = epoch(e);
            assert_eq!(seen.len(), rows);
            seen.sort_unstable();
            assert_eq!(seen, (0..rows).collect::<Vec<_>>());
        }
        assert_ne!(epoch(0), epoch(1), "a fresh shuffle each epoch");
        assert_eq!(batch_rows(5, 0, rows, bs, 2).len(), 2, "the epoch's last batch holds the remainder");
        assert_eq!(batch_rows(5, 0, rows, bs, 4), batch_rows(5, 0, rows, bs, 4), "a step's batch follows from the step alone");
    }
}
