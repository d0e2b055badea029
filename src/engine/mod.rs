//! The GRPO step loop (design §1): select problems, render, sample groups, grade, reward,
//! advantages, skip degenerate groups, build datums, train, log; evaluation at step −1, every
//! `eval_every` steps and at the end; checkpoints every `save_every` steps and at the end;
//! resume from the last checkpoint; graceful stop.
//!
//! - [`prompting`]: problem → prompt tokens.
//! - [`rollout`]: sample groups and grade them (grading overlaps the next group's sampling).
//! - [`step`]: one training step; [`eval`]: pass@k.
//! - [`grading`]: the sandbox behind one grader, infra retries.
//! - [`problems`]: sampling seeds.
//!
//! Resumption rule: a run restarts after its last checkpoint; whatever a crashed attempt wrote
//! for later steps (metrics, rollouts, eval results) is dropped first, so every step appears
//! exactly once. Sampling seeds derive from (seed, step, problem slot), so a resumed step samples
//! what it would have sampled.

mod event;
pub mod eval;
pub mod feedback;
pub mod grading;
pub mod problems;
pub mod prompting;
pub mod rollout;
pub mod step;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::json;

pub use event::{Event, EventSink};

use crate::backend::local::{LocalTrainer, LoraConfig, TrainerOptions, Tuning};
use crate::backend::{AdamParams, LossFn, SamplingParams, Stop as StopCond, Trainer};
use crate::prompt::chat::SpecialTokens;
use crate::runlog::{self, CheckpointRecord, JsonlWriter, RunDir, State, Status, files};
use crate::spec::Plan;
use crate::spec::types::{Backend, Finetune, Loss};

/// Why a run could not proceed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Setting the run up failed (data, model, sandbox).
    #[error("{0}")]
    Setup(String),
    /// The spec asks for something this engine does not do yet.
    #[error("not supported yet: {0}")]
    Unsupported(String),
    /// The sandbox could not start.
    #[error("cannot start the sandbox")]
    Sandbox(#[source] crate::sandbox::Error),
    /// The run directory.
    #[error(transparent)]
    RunLog(#[from] runlog::Error),
    /// The backend.
    #[error(transparent)]
    Backend(#[from] crate::backend::Error),
    /// Prompt rendering or tokenization.
    #[error(transparent)]
    Prompt(#[from] crate::prompt::Error),
}

/// A stop request shared between the signal handler and the engine. Passed explicitly (no
/// global), so tests can stop a run.
#[derive(Debug, Clone, Default)]
pub struct Stop(Arc<AtomicBool>);

impl Stop {
    /// Asks the run to stop at the next safe point.
    pub fn request(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    /// Whether a stop was asked for.
    pub fn requested(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// How a run ended (errors are `Err`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every step ran.
    Finished {
        /// Steps completed.
        steps: u32,
    },
    /// Stopped on request after `steps` completed steps; resumable.
    Interrupted {
        /// Steps completed.
        steps: u32,
    },
}

/// Runs a planned experiment to completion, resuming its run directory if it has one.
///
/// # Errors
/// Setup failures (data, model, sandbox), backend failures; the status file says `failed`.
pub async fn run(plan: &Plan, stop: &Stop, sink: &dyn EventSink) -> Result<Outcome, Error> {
    let dir = RunDir::create(plan)?;
    // Before anything is written: a second process on the same run must not touch its files.
    let _lock = dir.lock()?;
    if let Some(s) = dir.status()?
        && s.state == State::Finished
        && s.steps_done >= plan.spec.schedule.max_steps
    {
        // Re-running a finished experiment (a re-launched sweep) is a no-op.
        return Ok(Outcome::Finished { steps: s.steps_done });
    }
    let _ = runlog::logfile::attach(&dir.file(files::LOG));
    let result = run_in(plan, &dir, stop, sink).await;
    let mut status = dir.status()?.unwrap_or_else(|| Status::new(plan));
    let mut events = dir.jsonl(files::EVENTS)?;
    match &result {
        Ok(Outcome::Finished { steps }) => {
            status.state = State::Finished;
            status.steps_done = *steps;
            status.reason = None;
            events.append(&json!({"event": "finished", "steps": steps, "time": runlog::now()}))?;
        }
        Ok(Outcome::Interrupted { steps }) => {
            status.state = State::Interrupted;
            status.steps_done = *steps;
            status.reason = Some("stopped by a signal".into());
            events.append(&json!({"event": "interrupted", "steps": steps, "time": runlog::now()}))?;
        }
        Err(e) => {
            status.state = State::Failed;
            status.reason = Some(e.to_string());
            events.append(&json!({"event": "failed", "error": e.to_string(), "time": runlog::now()}))?;
            tracing::info!("run failed: {e}");
        }
    }
    status.pid = None;
    dir.set_status(&status)?;
    runlog::logfile::detach();
    result
}

fn loss_fn(loss: &Loss) -> LossFn {
    match *loss {
        Loss::ImportanceSampling => LossFn::ImportanceSampling,
        Loss::Ppo { clip_low_threshold, clip_high_threshold } => LossFn::Ppo { clip_low_threshold, clip_high_threshold },
        Loss::Cispo { clip_low_threshold, clip_high_threshold } => LossFn::Cispo { clip_low_threshold, clip_high_threshold },
        Loss::Dro { beta } => LossFn::Dro { beta },
    }
}

async fn run_in(plan: &Plan, dir: &RunDir, stop: &Stop, sink: &dyn EventSink) -> Result<Outcome, Error> {
    let spec = &plan.spec;
    if !matches!(spec.backend, Backend::Local { .. }) {
        return Err(Error::Unsupported("only `backend.kind: local` runs in this version; the Tinker and OpenAI backends come next".into()));
    }
    // One step of overlap is all one machine can use: the sampler and the trainer share its
    // cores, so a deeper queue would only make samples staler.
    let pipelined = spec.grpo.max_steps_off_policy >= 1;
    if spec.sampling.temperature != 1.0 && matches!(spec.grpo.loss, Loss::ImportanceSampling) {
        // The sampler reports log-probabilities of the tempered distribution it drew from, the
        // trainer scores the untempered policy: on-policy ratios are not 1 (the quickstart saw
        // up to 15 at 0.7), and the unclipped loss follows them.
        let msg = format!(
            "sampling.temperature is {} with the unclipped importance_sampling loss: importance ratios will be far from 1 on rare tokens; consider temperature 1 or `grpo.loss: {{kind: ppo}}`",
            spec.sampling.temperature
        );
        tracing::warn!("{msg}");
        sink.event(Event::Warning(msg));
    }
    if let Backend::Local { threads: Some(t) } = spec.backend {
        // Candle's CPU kernels use rayon's global pool; size it once, before first use.
        let _ = rayon_threads(t as usize);
    }

    // Problems: filters, the seeded train order and fingerprints are data's.
    let data_spec = spec.data.clone();
    let seed = spec.seed;
    let dataset = tokio::task::spawn_blocking(move || crate::data::load_data(&data_spec, seed, &crate::data::source::Options::from_env()))
        .await
        .map_err(|e| Error::Setup(format!("data loading thread failed: {e}")))?
        .map_err(|e| Error::Setup(e.to_string()))?;
    if dataset.train.problems.is_empty() {
        return Err(Error::Setup("no training problems after filters".into()));
    }
    {
        // What the run trains and evaluates on, exactly.
        let mut prov: serde_json::Value = dir.read_json(files::PROVENANCE)?.unwrap_or_default();
        prov["data"] = json!({
            "train": {"fingerprint": dataset.train.fingerprint, "problems": dataset.train.problems.len(), "sources": dataset.train.sources},
            "eval": {"fingerprint": dataset.eval.fingerprint, "problems": dataset.eval.problems.len(), "sources": dataset.eval.sources},
        });
        dir.write_json(files::PROVENANCE, &prov)?;
    }
    let train: Vec<_> = dataset.train.problems.into_iter().map(Arc::new).collect();
    let eval_set: Vec<_> = dataset.eval.problems.into_iter().map(Arc::new).collect();

    // Model, prompts, trainer.
    let (base, revision) = (spec.model.base.clone(), spec.model.revision.clone());
    let loaded = tokio::task::spawn_blocking(move || -> Result<_, crate::backend::Error> {
        let path = crate::backend::model_source::resolve(&base, revision.as_deref())?;
        crate::backend::local::load(&path)
    })
    .await
    .map_err(|e| Error::Setup(format!("model loading thread failed: {e}")))??;
    let special = SpecialTokens { bos_token: loaded.bos_token.clone(), eos_token: loaded.eos_token.clone(), ..SpecialTokens::default() };
    let prompting = Arc::new(prompting::Prompting::new(plan, loaded.tokenizer.clone(), loaded.chat_template.clone(), special)?);
    {
        // Prompt lengths over every training problem, as `rlx render` reports them.
        let mut lens = Vec::with_capacity(train.len());
        for p in &train {
            lens.push(prompting.first_turn(p)?.tokens.len());
        }
        let mean = lens.iter().sum::<usize>() as f64 / lens.len().max(1) as f64;
        let mut prov: serde_json::Value = dir.read_json(files::PROVENANCE)?.unwrap_or_default();
        prov["prompt_tokens"] = json!({"min": lens.iter().min(), "mean": mean, "max": lens.iter().max(), "problems": lens.len()});
        dir.write_json(files::PROVENANCE, &prov)?;
    }
    let tuning = match spec.model.finetune {
        Finetune::Full => Tuning::Full,
        Finetune::Lora => Tuning::Lora(LoraConfig {
            rank: spec.model.lora.rank as usize,
            alpha: spec.model.lora.alpha,
            targets: spec.model.lora.targets.iter().map(|t| serde_json::to_value(t).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()).collect(),
        }),
    };
    // Micro-batches of at most 1,024 tokens: the [tokens, vocab] logits of a 50k-vocabulary model
    // are 200 MB each at this size, and several live at once in the backward pass; 4,096 tokens
    // exhausted 24 GiB on SmolLM2 with 32 completions per step. Gradients are the same either way.
    let options = TrainerOptions { tuning, seed: spec.seed, max_tokens_per_microbatch: 1024 };
    let mut trainer = tokio::task::spawn_blocking(move || LocalTrainer::new(loaded, options))
        .await
        .map_err(|e| Error::Setup(format!("trainer thread failed: {e}")))??;

    // Sandbox.
    let (grader, protection) = grading::Sandboxes::start(spec, sink).await?;
    let grader = Arc::new(grader);
    let opts = grading::Sandboxes::options(spec);
    {
        // Record the isolation actually in force.
        let mut prov: serde_json::Value = dir.read_json(files::PROVENANCE)?.unwrap_or_default();
        prov["sandbox"] = protection;
        dir.write_json(files::PROVENANCE, &prov)?;
    }

    let mut stops: Vec<StopCond> = prompting.tokenizer.stop_ids().iter().map(|&id| StopCond::Token(id)).collect();
    stops.extend(spec.sampling.stop.iter().cloned().map(StopCond::Text));
    let sampling = SamplingParams {
        max_tokens: spec.sampling.max_tokens as usize,
        temperature: spec.sampling.temperature,
        top_p: spec.sampling.top_p,
        top_k: (spec.sampling.top_k > 0).then_some(spec.sampling.top_k as usize),
        stop: stops,
        seed: None,
    };
    let o = &spec.optimizer;
    let adam = AdamParams { learning_rate: o.learning_rate, beta1: o.beta1, beta2: o.beta2, eps: o.eps, weight_decay: o.weight_decay, grad_clip_norm: o.grad_clip_norm };
    let loss = loss_fn(&spec.grpo.loss);
    let advantage = crate::rl::advantage::strategy(&spec.grpo.advantage);
    let reward = crate::rl::reward::strategy(&spec.reward);

    // Resume.
    let mut events = dir.jsonl(files::EVENTS)?;
    let (first_step, mut cursor) = match dir.last_checkpoint()? {
        Some(ck) => {
            let state = ck.state_path.clone().expect("last_checkpoint has a state");
            trainer = tokio::task::spawn_blocking(move || trainer.load_state(&state).map(|()| trainer))
                .await
                .map_err(|e| Error::Setup(format!("trainer thread failed: {e}")))??;
            let keep = |s: i64| s <= i64::from(ck.step);
            let dropped: usize = [files::METRICS, files::ROLLOUTS, files::EVAL_RESULTS].iter().map(|f| dir.retain_steps(f, keep)).sum::<Result<usize, _>>()?;
            events.append(&json!({"event": "resume", "from_checkpoint": ck.name, "next_step": ck.step + 1, "dropped_records": dropped, "time": runlog::now()}))?;
            tracing::info!(checkpoint = %ck.name, next_step = ck.step + 1, dropped, "resuming");
            (ck.step + 1, ck.data_cursor)
        }
        None => {
            // Nothing to resume from: start clean, even if a crashed attempt left records.
            let dropped: usize = [files::METRICS, files::ROLLOUTS, files::EVAL_RESULTS].iter().map(|f| dir.retain_steps(f, |_| false)).sum::<Result<usize, _>>()?;
            let event = if dropped > 0 { "restart" } else { "start" };
            events.append(&json!({"event": event, "dropped_records": dropped, "time": runlog::now()}))?;
            (0, 0)
        }
    };
    let max_steps = spec.schedule.max_steps;
    let mut status = dir.status()?.unwrap_or_else(|| Status::new(plan));
    status.state = State::Running;
    status.steps_done = first_step;
    status.pid = Some(std::process::id());
    status.reason = None;
    dir.set_status(&status)?;
    sink.event(Event::Started { run_id: plan.run_id.clone(), dir: dir.path().to_path_buf(), first_step, max_steps, problems: (train.len(), eval_set.len()) });

    let mut metrics_log = dir.jsonl(files::METRICS)?;
    let mut rollouts_log = dir.jsonl(files::ROLLOUTS)?;
    let mut eval_log = dir.jsonl(files::EVAL_RESULTS)?;
    let mut checkpoints = dir.jsonl(files::CHECKPOINTS)?;
    let cx = rollout::Ctx { prompting: &prompting, grader: &grader, opts: &opts, retries: spec.rollout.infra_retries, sink, stop };
    let cfg = step::StepConfig { spec, train: &train, advantage: advantage.as_ref(), reward: reward.as_ref(), loss: &loss, adam: &adam, sampling: &sampling };

    // Baseline.
    if first_step == 0 && spec.schedule.eval_at_start && !eval_set.is_empty() {
        let (t, res) = eval::run(trainer, -1, spec, &eval_set, &sampling, &cx).await?;
        trainer = t;
        let Some(res) = res else { return Ok(Outcome::Interrupted { steps: 0 }) };
        write_eval(&mut metrics_log, &mut eval_log, -1, &res, BTreeMap::new())?;
        sink.event(Event::Eval { step: -1, metrics: res.metrics });
    }

    let mut last_saved: Option<u32> = first_step.checked_sub(1);
    let pps = u64::from(spec.grpo.prompts_per_step);
    // Pipelined: the groups of the next step, sampled (on the weights before this step's update)
    // while this step trained. Whatever is here at a stop or crash is discarded: the data cursor
    // in a checkpoint counts trained steps only, so a resumed run samples those problems again.
    let mut ahead: Option<(Vec<rollout::Group>, rollout::Timing)> = None;
    for s in first_step..max_steps {
        if stop.requested() {
            return interrupted(trainer, s, cursor, last_saved, dir, &mut checkpoints, sink).await;
        }
        let t_step = std::time::Instant::now();
        let res = if pipelined {
            let (groups, timing, off_policy) = match ahead.take() {
                Some((g, t)) => (g, t, 1),
                None => {
                    let (t, sampler) = rollout::sampler_of(trainer).await?;
                    trainer = t;
                    match step::rollouts(sampler, s, cursor, &cfg, &cx).await? {
                        Some((g, t)) => (g, t, 0),
                        None => return interrupted(trainer, s, cursor, last_saved, dir, &mut checkpoints, sink).await,
                    }
                }
            };
            if s + 1 < max_steps && !stop.requested() {
                // Sample step s+1 on the current weights while step s trains on its groups.
                let (t, sampler) = rollout::sampler_of(trainer).await?;
                let (learned, next) = tokio::join!(step::learn(t, s, &groups, timing, off_policy, &cfg, &cx), step::rollouts(sampler, s + 1, cursor + pps, &cfg, &cx));
                let (t, res) = learned?;
                trainer = t;
                ahead = next?;
                res
            } else {
                let (t, res) = step::learn(trainer, s, &groups, timing, off_policy, &cfg, &cx).await?;
                trainer = t;
                res
            }
        } else {
            let (t, res) = step::run(trainer, s, cursor, &cfg, &cx).await?;
            trainer = t;
            match res {
                Some(res) => res,
                None => return interrupted(trainer, s, cursor, last_saved, dir, &mut checkpoints, sink).await,
            }
        };
        cursor += pps;
        let mut res = res;
        res.metrics.insert("time/step_s".into(), t_step.elapsed().as_secs_f64());
        for r in &res.rollouts {
            rollouts_log.append(r)?;
        }
        let last = s + 1 == max_steps;
        let due_eval = !eval_set.is_empty() && (last || (spec.schedule.eval_every > 0 && (s + 1) % spec.schedule.eval_every == 0));
        let mut metrics = res.metrics;
        if due_eval {
            let (t, ev) = eval::run(trainer, i64::from(s), spec, &eval_set, &sampling, &cx).await?;
            trainer = t;
            // `None`: stopped during the eval; the step itself is complete and is kept.
            if let Some(ev) = ev {
                for r in &ev.records {
                    eval_log.append(r)?;
                }
                sink.event(Event::Eval { step: i64::from(s), metrics: ev.metrics.clone() });
                metrics.extend(ev.metrics);
            }
        }
        let mut line = serde_json::Map::new();
        line.insert("step".into(), json!(s));
        for (k, v) in &metrics {
            line.insert(k.clone(), json!(v));
        }
        metrics_log.append(&line)?;
        metrics_log.sync()?;
        rollouts_log.sync()?;
        sink.event(Event::Step { step: s, metrics });
        status.steps_done = s + 1;
        dir.set_status(&status)?;
        let due_save = last || (spec.schedule.save_every > 0 && (s + 1) % spec.schedule.save_every == 0);
        if due_save {
            trainer = checkpoint(trainer, s, cursor, if last { "final" } else { "periodic" }, dir, &mut checkpoints, sink).await?;
            last_saved = Some(s);
        }
        if stop.requested() {
            return interrupted(trainer, s + 1, cursor, last_saved, dir, &mut checkpoints, sink).await;
        }
    }
    Ok(Outcome::Finished { steps: max_steps })
}

fn write_eval(metrics: &mut JsonlWriter, results: &mut JsonlWriter, step: i64, res: &eval::EvalResult, extra: BTreeMap<String, f64>) -> Result<(), Error> {
    for r in &res.records {
        results.append(r)?;
    }
    let mut line = serde_json::Map::new();
    line.insert("step".into(), json!(step));
    for (k, v) in res.metrics.iter().chain(extra.iter()) {
        line.insert(k.clone(), json!(v));
    }
    metrics.append(&line)?;
    metrics.sync()?;
    Ok(())
}

async fn checkpoint<T: Trainer + 'static>(trainer: T, step: u32, cursor: u64, kind: &str, dir: &RunDir, log: &mut JsonlWriter, sink: &dyn EventSink) -> Result<T, Error> {
    let name = format!("step-{step:06}");
    let rel = dir.checkpoint_path(&name);
    let path = dir.path().join(&rel);
    let p = path.clone();
    let mut trainer = trainer;
    let trainer = tokio::task::spawn_blocking(move || {
        if let Some(parent) = p.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        trainer.save_state(&p).map(|()| trainer)
    })
    .await
    .map_err(|e| Error::Setup(format!("trainer thread failed: {e}")))??;
    log.append(&CheckpointRecord {
        name,
        step,
        data_cursor: cursor,
        state_path: Some(rel),
        sampler_path: None,
        time: runlog::now(),
        kind: kind.into(),
    })?;
    log.sync()?;
    sink.event(Event::Checkpoint { step, path });
    Ok(trainer)
}

/// Saves what the run has (unless the last completed step is already saved) and reports an
/// interruption after `done` completed steps.
async fn interrupted<T: Trainer + 'static>(trainer: T, done: u32, cursor: u64, last_saved: Option<u32>, dir: &RunDir, log: &mut JsonlWriter, sink: &dyn EventSink) -> Result<Outcome, Error> {
    if done > 0 && last_saved != Some(done - 1) {
        checkpoint(trainer, done - 1, cursor, "interrupt", dir, log, sink).await?;
    }
    Ok(Outcome::Interrupted { steps: done })
}

/// Sizes rayon's global pool (candle's CPU kernels run on it). Only the first call in a process
/// takes effect; later ones (a pool already built) are ignored.
fn rayon_threads(n: usize) -> bool {
    rayon::ThreadPoolBuilder::new().num_threads(n).build_global().is_ok()
}
