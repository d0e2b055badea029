//! The GRPO step loop (design §1): select problems, render, sample groups, grade, reward,
//! advantages, skip degenerate groups, build datums, train, log; evaluation at step −1, every
//! `eval_every` steps and at the end; checkpoints every `save_every` steps and at the end;
//! resume from the last checkpoint; graceful stop.
//!
//! The engine works on a [`Policy`] (any backend's `Sampler`/`Trainer`, see [`crate::backend`])
//! and never names a backend: [`run`] opens the spec's through [`crate::backend::open`], or
//! takes one it is given ([`PolicySource::Given`]).
//!
//! - [`prompting`]: problem → prompt tokens.
//! - [`rollout`]: sample groups and grade them (grading overlaps the next batches' sampling).
//! - [`step`]: one training step; [`fill`]: when a step has its groups (dynamic sampling);
//!   [`eval`]: pass@k.
//! - [`grading`]: the sandbox behind one grader, infra retries.
//! - [`problems`]: sampling seeds.
//!
//! Resumption rule: a run restarts after its last checkpoint; whatever a crashed attempt wrote
//! for later steps (metrics, rollouts, eval results) is dropped first, so every step appears
//! exactly once. Sampling seeds derive from (seed, step, problem slot), so a resumed step samples
//! what it would have sampled.

mod event;
pub(crate) mod eval;
pub(crate) mod feedback;
pub(crate) mod fill;
pub(crate) mod grading;
pub(crate) mod pyreward;
pub mod problems;
pub(crate) mod prompting;
pub(crate) mod rollout;
pub(crate) mod step;
mod stream;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

pub use event::{Event, EventSink};

use crate::seam;
use crate::backend::{self, Policy, Trainer};
use crate::seam::{SamplingParams, StateRef, Stop as StopCond};
use crate::runlog::sinks::{End, RunInfo, Sinks};
use crate::runlog::{self, CheckpointRecord, Data, DataSet, EventRecord, JsonlWriter, MetricsLine, PromptTokens, RunDir, State, Status, files, metrics};
use crate::plan::Plan;

/// Why a run could not proceed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The problems could not be loaded.
    #[error("cannot load the problems")]
    Data(#[source] crate::data::source::Error),
    /// Filters left no training problem.
    #[error("no training problems after filters")]
    NoProblems,
    /// The run trains, the backend cannot.
    #[error("`schedule.max_steps` is {steps}, but the backend cannot train")]
    CannotTrain {
        /// Steps asked for.
        steps: u32,
        /// Why the backend cannot.
        #[source]
        source: backend::Error,
    },
    /// The sandbox could not start.
    #[error("cannot start the sandbox")]
    Sandbox(#[source] crate::sandbox::Error),
    /// The run directory.
    #[error(transparent)]
    RunLog(#[from] runlog::Error),
    /// The backend.
    #[error(transparent)]
    Backend(#[from] backend::Error),
    /// Prompt rendering, tokenization or decoding.
    #[error(transparent)]
    Prompt(#[from] crate::prompt::Error),
    /// The Python reward failed more often than `reward.max_failures` allows: the user's bug,
    /// reported with the last failure's traceback.
    #[error(
        "the Python reward `{function}` in `{file}` failed {count} time(s), more than `reward.max_failures` ({max}) allows; the last, on problem `{problem}`, {failure}{}",
        if failure.traceback.is_empty() { String::new() } else { format!("\n{}", failure.traceback.trim_end()) }
    )]
    RewardFailures {
        /// The reward file as the user names it.
        file: String,
        /// The function.
        function: String,
        /// Failed calls so far.
        count: u32,
        /// `reward.max_failures`.
        max: u32,
        /// The problem of the last failure.
        problem: String,
        /// The last failure.
        failure: Box<crate::sandbox::reward::Failure>,
    },
    /// A diagnostic signal with `action: stop` fired; the run saved a checkpoint and can resume.
    #[error("stopped by the diagnostic `{signal}` at step {step} (diagnostics.{signal}.action: stop): {evidence}; remedy: {remedy}")]
    Diagnostic {
        /// The signal.
        signal: &'static str,
        /// The step it fired after.
        step: i64,
        /// What it saw.
        evidence: String,
        /// What to do.
        remedy: &'static str,
    },
    /// Every group of a step was dropped for sandbox infrastructure errors: the sandbox is down,
    /// and sampling on would only spend samples. The step is not counted; the run resumes at it.
    #[error("step {step}: all {groups} groups were dropped after sandbox infrastructure errors; the last: {last}")]
    SandboxDown {
        /// The step.
        step: u32,
        /// Its groups.
        groups: usize,
        /// The last infrastructure error seen.
        last: String,
    },
    /// A task of the run panicked or was cancelled (a bug).
    #[error("an internal task failed")]
    Task(#[from] tokio::task::JoinError),
}

impl Error {
    /// Whether the user can fix it by changing the spec, the data or the model (exit code 2)
    /// rather than it being a failure of rlx or of a service (exit code 3).
    pub fn is_user_error(&self) -> bool {
        match self {
            Error::NoProblems | Error::CannotTrain { .. } | Error::RewardFailures { .. } | Error::Diagnostic { .. } => true,
            Error::SandboxDown { .. } => false,
            Error::Data(e) => e.is_user_error(),
            Error::Sandbox(e) => e.is_user_error(),
            Error::Backend(e) => e.is_user_error(),
            Error::Prompt(e) => e.is_user_error(),
            Error::RunLog(e) => e.is_user_error(),
            Error::Task(_) => false,
        }
    }
}

/// A verdict status as the run log records it (the log's own enum, so a rename in the sandbox
/// cannot change the file format).
pub(crate) fn record_status(s: crate::sandbox::VerdictStatus) -> runlog::VerdictStatus {
    use crate::sandbox::VerdictStatus as V;
    match s {
        V::Passed => runlog::VerdictStatus::Passed,
        V::Failed => runlog::VerdictStatus::Failed,
        V::FormatError => runlog::VerdictStatus::FormatError,
        V::InfraError => runlog::VerdictStatus::InfraError,
    }
}

/// A prompt's messages as the run log records them (once per group or eval problem).
pub(crate) fn record_prompt(prompt: &prompting::Rendered) -> Vec<runlog::PromptMessage> {
    prompt.messages.iter().map(|m| runlog::PromptMessage { role: m.role.clone(), content: m.content.clone() }).collect()
}

/// A stop reason as the run log records it.
pub(crate) fn record_stop(s: seam::StopReason) -> runlog::StopReason {
    match s {
        seam::StopReason::Stop => runlog::StopReason::Stop,
        seam::StopReason::Length => runlog::StopReason::Length,
    }
}

/// Where the run's policy comes from.
pub enum PolicySource {
    /// [`crate::backend::open`] on the plan: what `rlx run` does.
    Open,
    /// A policy opened by the caller (an embedding program, a test backend).
    Given(Policy),
}

/// A stop request shared between the signal handler and the engine. Passed explicitly (no
/// global), so tests can stop a run.
#[derive(Debug, Clone, Default)]
pub struct StopSignal(Arc<AtomicBool>);

impl StopSignal {
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
pub enum RunOutcome {
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
/// Setup failures (data, model, sandbox), backend failures; the status file says `failed`, with
/// the error's causes.
pub async fn run(plan: &Plan, policy: PolicySource, stop: &StopSignal, sink: &dyn EventSink) -> Result<RunOutcome, Error> {
    let dir = RunDir::create(plan)?;
    // Before anything is written: a second process on the same run must not touch its files.
    let _lock = dir.lock()?;
    if let Some(s) = dir.status()?
        && s.state == State::Finished
        && s.steps_done >= plan.schedule.max_steps
    {
        // Re-running a finished experiment (a re-launched sweep) is a no-op.
        return Ok(RunOutcome::Finished { steps: s.steps_done });
    }
    let _ = runlog::logfile::attach(&dir.file(files::LOG));
    // Trackers follow metrics.jsonl: the engine only pokes them after each line it writes and
    // passes their warnings on; none of them can stop or slow the run.
    let info = RunInfo { run_id: plan.run_id.clone(), name: plan.name.clone(), config: crate::plan::record::to_json(plan) };
    let mut sinks = Sinks::for_spec(&dir, &info, &plan.log.sinks);
    let result = run_in(plan, policy, &dir, stop, sink, &mut sinks).await;
    let mut status = dir.status()?.unwrap_or_else(|| Status::new(plan));
    let mut events = dir.jsonl(files::EVENTS)?;
    match &result {
        Ok(RunOutcome::Finished { steps }) => {
            status.state = State::Finished;
            status.steps_done = *steps;
            status.reason = None;
            events.append(&EventRecord::finished(*steps))?;
        }
        Ok(RunOutcome::Interrupted { steps }) => {
            status.state = State::Interrupted;
            status.steps_done = *steps;
            status.reason = Some("stopped by a signal".into());
            events.append(&EventRecord::interrupted(*steps))?;
        }
        Err(e) => {
            let chain = crate::causes::causes(e);
            status.state = State::Failed;
            status.reason = Some(chain.join(": "));
            events.append(&EventRecord::failed(e))?;
            tracing::info!("run failed: {}", chain.join(": "));
        }
    }
    status.pid = None;
    dir.set_status(&status)?;
    let end = match &result {
        Ok(RunOutcome::Finished { .. }) => End::Finished,
        Ok(RunOutcome::Interrupted { .. }) => End::Interrupted,
        Err(_) => End::Failed,
    };
    for report in sinks.finish(end).await {
        match report.warning(dir.path()) {
            Some(w) => warn(sink, vec![w]),
            None => tracing::info!(tracker = report.name, lines = report.mirrored, "mirrored to {}", report.location),
        }
    }
    runlog::logfile::detach();
    result
}

/// Tracker warnings: on the console (through the sink) and in `logs.log`.
fn warn(sink: &dyn EventSink, warnings: Vec<String>) {
    for w in warnings {
        tracing::info!("warning: {w}");
        sink.event(Event::Warning(w));
    }
}

/// Records what the run trains and evaluates on, as read back later by `compare`.
fn record_data(dir: &RunDir, dataset: &crate::data::Dataset) -> Result<(), Error> {
    let set = |s: &crate::data::source::Set| DataSet {
        fingerprint: s.fingerprint.clone(),
        problems: s.problems.len(),
        sources: s.sources.iter().map(|x| serde_json::to_value(x).unwrap_or_default()).collect(),
    };
    dir.update_provenance(|p| p.data = Some(Data { train: set(&dataset.train), eval: set(&dataset.eval) }))?;
    Ok(())
}

/// Everything a run's steps use, loaded and started once by [`set_up`].
struct Setup {
    policy: Policy,
    /// `None` for a dry run or an evaluation-only run.
    trainer: Option<Arc<dyn Trainer>>,
    train: Vec<Arc<crate::data::Problem>>,
    eval_set: eval::EvalSet,
    prompting: Arc<prompting::Prompting>,
    grader: Arc<crate::sandbox::AnyGrader>,
    opts: crate::sandbox::GradeOptions,
    /// Training and evaluation sampling with the tokenizer's stop tokens.
    sampling: SamplingParams,
    eval_sampling: SamplingParams,
    advantage: Box<dyn crate::rl::advantage::AdvantageStrategy>,
    reward: Box<dyn crate::rl::reward::RewardStrategy>,
    /// The Python reward function, when the reward calls one.
    python: Option<pyreward::PythonRewards>,
}

/// Opens the policy, loads problems and prompts, starts the sandbox: what must work before the
/// first sample. The policy comes first: a backend this build cannot use, or a model that is not
/// there, stops the run before anything else is loaded.
async fn set_up(plan: &Plan, policy: PolicySource, dir: &RunDir, sink: &dyn EventSink) -> Result<Setup, Error> {
    warn_tempered_importance_sampling(plan, sink);
    let policy = match policy {
        PolicySource::Given(p) => p,
        PolicySource::Open => backend::open(&plan.backend_options(), &backend::Context { state_dir: dir.path().join(files::CHECKPOINT_DIR) }).await?,
    };
    let max_steps = plan.schedule.max_steps;
    let dry_run = plan.schedule.dry_run;
    // A dry run trains nothing, whatever the backend can do.
    let trainer: Option<Arc<dyn Trainer>> = if dry_run { None } else { policy.trainer().cloned() };
    if max_steps > 0 && trainer.is_none() && !dry_run {
        return Err(Error::CannotTrain { steps: max_steps, source: backend::Error::CannotTrain { kind: plan.backend.kind() } });
    }

    // Problems: filters, the seeded train order and fingerprints are data's.
    let (data, seed) = (plan.data.clone(), plan.seed);
    let dataset = tokio::task::spawn_blocking(move || crate::data::load_data(&data, seed, &crate::data::source::Options::from_env())).await?.map_err(Error::Data)?;
    if dataset.train.problems.is_empty() && max_steps > 0 {
        return Err(Error::NoProblems);
    }
    record_data(dir, &dataset)?;
    let train: Vec<_> = dataset.train.problems.into_iter().map(Arc::new).collect();
    let eval_set = eval::EvalSet {
        problems: dataset.eval.problems.into_iter().map(Arc::new).collect(),
        sources: plan.data.eval.iter().zip(&dataset.eval.sources).map(|(s, summary)| (s.label(), summary.stats.after)).collect(),
    };

    // Prompts: the model's tokenizer and chat template, read without its weights.
    let prompting = {
        let plan = plan.clone();
        Arc::new(tokio::task::spawn_blocking(move || prompting::Prompting::load(&plan)).await??)
    };
    record_prompt_tokens(dir, &prompting, &train)?;

    let (grader, mut protection) = grading::Sandboxes::start(plan, sink).await?;
    let python = match pyreward::PythonRewards::start(plan, &grader, sink).await? {
        Some((python, own)) => {
            // A pool of its own (beside Sandbox Fusion): its isolation is recorded too.
            if let (Some(own), Some(obj)) = (own, protection.as_object_mut()) {
                obj.insert("python_reward".into(), own);
            }
            Some(python)
        }
        None => None,
    };
    // Record the isolation actually in force.
    dir.update_provenance(|p| p.sandbox = Some(protection))?;

    // The spec's stop strings plus the tokenizer's stop tokens, which the spec cannot know.
    let with_stops = |p: &SamplingParams| {
        let mut p = p.clone();
        let mut stops: Vec<StopCond> = prompting.tokenizer.stop_ids().iter().map(|&id| StopCond::Token(id)).collect();
        stops.append(&mut p.stop);
        p.stop = stops;
        p
    };
    let advantage = crate::rl::advantage::strategy(&plan.grpo.advantage);
    let reward = crate::rl::reward::strategy(&plan.reward);
    // In logs.log, so that a run's log says which strategies scored it.
    tracing::info!(advantage = advantage.name(), reward = reward.name(), loss = plan.grpo.loss.name(), "strategies");
    Ok(Setup {
        sampling: with_stops(&plan.sampling),
        eval_sampling: with_stops(&plan.eval.sampling),
        advantage,
        reward,
        python,
        opts: grading::Sandboxes::options(plan),
        grader: Arc::new(grader),
        policy,
        trainer,
        train,
        eval_set,
        prompting,
    })
}

/// The sampler reports log-probabilities of the tempered distribution it drew from, the trainer
/// scores the untempered policy: on-policy ratios are not 1 (the quickstart saw up to 15 at 0.7),
/// and the unclipped loss follows them.
fn warn_tempered_importance_sampling(plan: &Plan, sink: &dyn EventSink) {
    if plan.trains() && plan.sampling.temperature != 1.0 && matches!(plan.grpo.loss, seam::LossFn::ImportanceSampling) {
        let msg = format!(
            "sampling.temperature is {} with the unclipped importance_sampling loss: importance ratios will be far from 1 on rare tokens; consider temperature 1 or `grpo.loss: {{kind: ppo}}`",
            plan.sampling.temperature
        );
        tracing::warn!("{msg}");
        sink.event(Event::Warning(msg));
    }
}

/// Prompt lengths over every training problem, as `rlx render` reports them.
fn record_prompt_tokens(dir: &RunDir, prompting: &prompting::Prompting, train: &[Arc<crate::data::Problem>]) -> Result<(), Error> {
    let mut lens = Vec::with_capacity(train.len());
    for p in train {
        lens.push(prompting.first_turn(p)?.tokens.len());
    }
    let mean = lens.iter().sum::<usize>() as f64 / lens.len().max(1) as f64;
    let tokens = PromptTokens { min: lens.iter().min().copied(), mean, max: lens.iter().max().copied(), problems: lens.len() };
    dir.update_provenance(|p| p.prompt_tokens = Some(tokens))?;
    Ok(())
}

/// Where a run starts: after its last checkpoint (whose state the trainer loads), else at step
/// 0. Whatever a crashed attempt wrote for later steps is dropped first, so every step appears
/// exactly once. Returns the first step and the data cursor.
async fn resume_point(dir: &RunDir, trainer: Option<&Arc<dyn Trainer>>, events: &mut JsonlWriter) -> Result<(u32, u64), Error> {
    let logs = [files::METRICS, files::ROLLOUTS, files::EVAL_RESULTS, files::EVAL_ROLLOUTS];
    match (dir.last_checkpoint()?, trainer) {
        (Some(ck), Some(trainer)) => {
            let state = StateRef(ck.state_path.clone().expect("last_checkpoint has a state"));
            trainer.load_state(&state).await?;
            let keep = |s: i64| s <= i64::from(ck.step);
            let dropped: usize = logs.iter().map(|f| dir.retain_steps(f, keep)).sum::<Result<usize, _>>()?;
            events.append(&EventRecord::resume(&ck.name, ck.step + 1, dropped))?;
            tracing::info!(checkpoint = %ck.name, next_step = ck.step + 1, dropped, "resuming");
            Ok((ck.step + 1, ck.data_cursor))
        }
        _ => {
            // Nothing to resume from: start clean, even if a crashed attempt left records.
            let dropped: usize = logs.iter().map(|f| dir.retain_steps(f, |_| false)).sum::<Result<usize, _>>()?;
            events.append(&EventRecord::start(dropped))?;
            Ok((0, 0))
        }
    }
}

async fn run_in(plan: &Plan, policy: PolicySource, dir: &RunDir, stop: &StopSignal, sink: &dyn EventSink, sinks: &mut Sinks) -> Result<RunOutcome, Error> {
    let setup = set_up(plan, policy, dir, sink).await?;
    let mut events = dir.jsonl(files::EVENTS)?;
    let (first_step, cursor) = resume_point(dir, setup.trainer.as_ref(), &mut events).await?;
    // The signals look back over recent steps: a resumed run's monitor sees the steps it kept.
    let mut monitor = crate::health::Monitor::new(plan.diagnostics.clone());
    if first_step > 0 {
        crate::health::replay(&mut monitor, &dir.metrics()?.rows, &dir.rollouts()?.rows);
    }
    let mut status = dir.status()?.unwrap_or_else(|| Status::new(plan));
    status.state = State::Running;
    status.steps_done = first_step;
    status.pid = Some(std::process::id());
    status.reason = None;
    dir.set_status(&status)?;
    let max_steps = plan.schedule.max_steps;
    sink.event(Event::Started { run_id: plan.run_id.clone(), dir: dir.path().to_path_buf(), first_step, max_steps, problems: (setup.train.len(), setup.eval_set.problems.len()) });
    warn(sink, sinks.started().await);

    let mut logs = Logs {
        metrics: dir.jsonl(files::METRICS)?,
        rollouts: dir.jsonl(files::ROLLOUTS)?,
        eval: dir.jsonl(files::EVAL_RESULTS)?,
        eval_rollouts: dir.jsonl(files::EVAL_ROLLOUTS)?,
        checkpoints: dir.jsonl(files::CHECKPOINTS)?,
        events,
    };
    let cx = rollout::Ctx { prompting: &setup.prompting, grader: &setup.grader, opts: &setup.opts, retries: plan.rollout.infra_retries, sink, stop };
    let cfg = step::StepConfig {
        plan,
        train: &setup.train,
        advantage: setup.advantage.as_ref(),
        reward: setup.reward.as_ref(),
        python: setup.python.as_ref(),
        sampling: &setup.sampling,
    };

    // Baseline.
    if first_step == 0 && (plan.schedule.eval_at_start || max_steps == 0) && !setup.eval_set.is_empty() {
        let sampler = setup.policy.sampler().await?;
        let Some(res) = eval::run(&*sampler, -1, plan, &setup.eval_set, &setup.eval_sampling, &cx).await? else { return Ok(RunOutcome::Interrupted { steps: 0 }) };
        write_eval(&mut logs, -1, &res)?;
        warn(sink, sinks.poke());
        let fired = monitor.eval(-1, &res.metrics);
        sink.event(Event::Eval { step: -1, metrics: res.metrics });
        // A stop signal at the baseline has no step to checkpoint: nothing trained yet.
        if let Some(stop) = report(&fired, &mut logs.events, sink)? {
            return Err(stop);
        }
    }
    if setup.trainer.is_none() && !plan.schedule.dry_run {
        return Ok(RunOutcome::Finished { steps: 0 });
    }
    let mut driver = Driver { plan, setup: &setup, cfg: &cfg, cx: &cx, dir, sinks, status, logs, cursor, last_saved: first_step.checked_sub(1), ahead: None, monitor };
    driver.drive(first_step).await
}

/// The run's append-only logs.
struct Logs {
    metrics: JsonlWriter,
    rollouts: JsonlWriter,
    eval: JsonlWriter,
    eval_rollouts: JsonlWriter,
    checkpoints: JsonlWriter,
    events: JsonlWriter,
}

/// Prints and records the diagnostics that fired; the error to stop with when one of them says
/// `action: stop`.
fn report(fired: &[crate::health::Firing], events: &mut JsonlWriter, sink: &dyn EventSink) -> Result<Option<Error>, Error> {
    let mut stop = None;
    for f in fired {
        tracing::info!("diagnostic: {}", f.line());
        sink.event(Event::Warning(format!("diagnostic {}", f.line())));
        events.append(&f.record())?;
        if f.action == crate::spec::health::Action::Stop && stop.is_none() {
            stop = Some(Error::Diagnostic { signal: f.signal.name(), step: f.step, evidence: f.evidence.clone(), remedy: f.signal.remedy() });
        }
    }
    if !fired.is_empty() {
        events.sync()?;
    }
    Ok(stop)
}

/// The step loop: one [`Driver::step`] after another, each followed by its eval, log lines and
/// checkpoint ([`Driver::finish_step`]).
struct Driver<'a> {
    plan: &'a Plan,
    setup: &'a Setup,
    cfg: &'a step::StepConfig<'a>,
    cx: &'a rollout::Ctx<'a>,
    dir: &'a RunDir,
    sinks: &'a mut Sinks,
    status: Status,
    logs: Logs,
    /// Problems consumed by trained steps.
    cursor: u64,
    last_saved: Option<u32>,
    /// Pipelined: the groups of the next step, sampled (on the weights before this step's
    /// update) while this step trained. Whatever is here at a stop or crash is discarded: the
    /// data cursor in a checkpoint counts trained steps only, so a resumed run samples those
    /// problems again.
    ahead: Option<fill::Fill>,
    /// Run-health signals over the steps so far.
    monitor: crate::health::Monitor,
}

impl<'a> Driver<'a> {
    /// The trainer, borrowed from the setup (not from `self`, whose logs the steps write).
    fn trainer(&self) -> Option<&'a dyn Trainer> {
        self.setup.trainer.as_deref()
    }

    async fn drive(&mut self, first_step: u32) -> Result<RunOutcome, Error> {
        let max_steps = self.plan.schedule.max_steps;
        if let Some(trainer) = self.trainer()
            && self.plan.grpo.max_steps_off_policy >= 1
            && matches!(self.plan.backend, crate::backend::BackendChoice::Tinker { .. })
        {
            // The sampler and the trainer run elsewhere: k steps deep (engine/stream.rs).
            return self.drive_stream(trainer, first_step).await;
        }
        for s in first_step..max_steps {
            if self.cx.stop.requested() {
                return self.interrupted(s).await;
            }
            let t_step = std::time::Instant::now();
            let Some(mut res) = self.step(s).await? else { return self.interrupted(s).await };
            if let Some(last) = res.sandbox_down.take() {
                // The step trained nothing; a resumed run samples it again.
                self.ahead = None;
                self.save_unsaved(s, vec![]).await?;
                return Err(Error::SandboxDown { step: s, groups: res.metrics.get(metrics::train::GROUPS).copied().unwrap_or(0.0) as usize, last });
            }
            // Every problem the step drew, refills included: a resumed run starts after them.
            self.cursor += res.drawn;
            res.metrics.insert(metrics::time::STEP_S.into(), t_step.elapsed().as_secs_f64());
            self.finish_step(s, res).await?;
            if self.cx.stop.requested() {
                return self.interrupted(s + 1).await;
            }
        }
        Ok(RunOutcome::Finished { steps: max_steps })
    }

    /// Step `s`: sampled and trained, pipelined or not; a dry run's without its update. `None`
    /// when a stop was requested before it completed.
    async fn step(&mut self, s: u32) -> Result<Option<step::StepResult>, Error> {
        let (cfg, cx) = (self.cfg, self.cx);
        // One step of overlap is all one machine can use: the sampler and the trainer share its
        // cores, so a deeper queue would only make samples staler.
        let pipelined = self.plan.grpo.max_steps_off_policy >= 1;
        match self.trainer() {
            Some(trainer) if pipelined => self.pipelined_step(trainer, s).await,
            Some(trainer) => step::run(trainer, s, self.cursor, cfg, cx).await,
            None => {
                // Dry run: the step without its optimizer update.
                let sampler = self.setup.policy.sampler().await?;
                match step::rollouts(&*sampler, s, self.cursor, cfg, cx).await? {
                    Some(fill) => Ok(Some(step::learn(None, s, &fill, 0, cfg, cx).await?)),
                    None => Ok(None),
                }
            }
        }
    }

    async fn pipelined_step(&mut self, trainer: &dyn Trainer, s: u32) -> Result<Option<step::StepResult>, Error> {
        let (cfg, cx) = (self.cfg, self.cx);
        let (fill, off_policy) = match self.ahead.take() {
            Some(f) => (f, 1),
            None => {
                let sampler = trainer.sampler().await?;
                match step::rollouts(&*sampler, s, self.cursor, cfg, cx).await? {
                    Some(f) => (f, 0),
                    None => return Ok(None),
                }
            }
        };
        if s + 1 < self.plan.schedule.max_steps && !cx.stop.requested() {
            // Sample step s+1 on the current weights while step s trains on its groups: the
            // snapshot is requested before this step's update, and the trainer serves its
            // requests in order.
            let sampler = trainer.sampler().await?;
            // This step's draws are known (its groups are complete), so the next step's
            // problems start after them.
            let next_cursor = self.cursor + fill.drawn;
            let (learned, next) = tokio::join!(step::learn(Some(trainer), s, &fill, off_policy, cfg, cx), step::rollouts(&*sampler, s + 1, next_cursor, cfg, cx));
            self.ahead = next?;
            Ok(Some(learned?))
        } else {
            Ok(Some(step::learn(Some(trainer), s, &fill, off_policy, cfg, cx).await?))
        }
    }

    /// After step `s`: its rollouts, the eval due at it, its metrics line, status and checkpoint.
    async fn finish_step(&mut self, s: u32, res: step::StepResult) -> Result<(), Error> {
        let plan = self.plan;
        let mut ev = None;
        if !self.setup.eval_set.is_empty() && self.due(s, plan.schedule.eval_every) {
            let sampler = self.setup.policy.sampler().await?;
            // `None`: stopped during the eval; the step itself is complete and is kept.
            ev = eval::run(&*sampler, i64::from(s), plan, &self.setup.eval_set, &self.setup.eval_sampling, self.cx).await?;
        }
        let stop = self.record_step(s, res, ev)?;
        if let (true, Some(trainer)) = (self.due(s, plan.schedule.save_every), self.trainer()) {
            let state = trainer.save_state(&checkpoint_name(s)).await?;
            self.record_checkpoint(s, &state, self.checkpoint_kind(s), vec![])?;
        }
        match stop {
            Some(e) => {
                // Resumable: what the run has is saved before it ends as failed.
                self.save_unsaved(s + 1, vec![]).await?;
                Err(e)
            }
            None => Ok(()),
        }
    }

    /// Step `s`'s records: its rollouts, its eval's (when it had one), its metrics line, the
    /// health signals and the status. Returns the error a diagnostic with `action: stop` asks
    /// the run to end with.
    fn record_step(&mut self, s: u32, res: step::StepResult, ev: Option<eval::EvalResult>) -> Result<Option<Error>, Error> {
        let sink = self.cx.sink;
        for r in &res.rollouts {
            self.logs.rollouts.append(r)?;
        }
        let mut metrics = res.metrics;
        let evaluated = ev.is_some();
        if let Some(ev) = ev {
            write_eval_records(&mut self.logs, &ev)?;
            sink.event(Event::Eval { step: i64::from(s), metrics: ev.metrics.clone() });
            metrics.extend(ev.metrics);
        }
        self.logs.metrics.append(&MetricsLine::new(i64::from(s), metrics.clone()))?;
        self.logs.metrics.sync()?;
        self.logs.rollouts.sync()?;
        warn(sink, self.sinks.poke());
        let mut fired = self.monitor.step(s, &metrics, &res.rollouts);
        if evaluated {
            fired.extend(self.monitor.eval(i64::from(s), &metrics));
        }
        sink.event(Event::Step { step: s, metrics });
        let stop = report(&fired, &mut self.logs.events, sink)?;
        self.status.steps_done = s + 1;
        self.dir.set_status(&self.status)?;
        Ok(stop)
    }

    /// Appends the checkpoint record of step `s`, whose trainer state `state` holds, with the
    /// data cursor (and, on a streaming backend, the problems consumed beyond it).
    fn record_checkpoint(&mut self, s: u32, state: &StateRef, kind: &str, consumed_ahead: Vec<u64>) -> Result<(), Error> {
        let record = CheckpointRecord {
            name: checkpoint_name(s),
            step: s,
            data_cursor: self.cursor,
            // Relative to the run directory when inside it, so a run directory can be moved.
            state_path: Some(self.dir.relative_state(&state.0)),
            sampler_path: None,
            time: runlog::now(),
            kind: kind.into(),
            consumed_ahead,
        };
        self.logs.checkpoints.append(&record)?;
        self.logs.checkpoints.sync()?;
        self.cx.sink.event(Event::Checkpoint { step: s, state: state.0.clone() });
        self.last_saved = Some(s);
        Ok(())
    }

    /// Whether something done every `every` steps (evals, checkpoints) is due after step `s`:
    /// always after the last step.
    fn due(&self, s: u32, every: u32) -> bool {
        s + 1 == self.plan.schedule.max_steps || (every > 0 && (s + 1).is_multiple_of(every))
    }

    /// The `kind` of a due checkpoint after step `s`.
    fn checkpoint_kind(&self, s: u32) -> &'static str {
        if s + 1 == self.plan.schedule.max_steps { "final" } else { "periodic" }
    }

    /// Checkpoints the last of `done` completed steps unless it is saved already; the trainer's
    /// state is that step's (nothing trained after it). `consumed_ahead` as
    /// [`Driver::record_checkpoint`] takes it.
    async fn save_unsaved(&mut self, done: u32, consumed_ahead: Vec<u64>) -> Result<(), Error> {
        if let Some(trainer) = self.trainer()
            && done > 0
            && self.last_saved != Some(done - 1)
        {
            let state = trainer.save_state(&checkpoint_name(done - 1)).await?;
            self.record_checkpoint(done - 1, &state, "interrupt", consumed_ahead)?;
        }
        Ok(())
    }

    /// Saves what the run has (unless the last completed step is already saved) and reports an
    /// interruption after `done` completed steps.
    async fn interrupted(&mut self, done: u32) -> Result<RunOutcome, Error> {
        self.save_unsaved(done, vec![]).await?;
        Ok(RunOutcome::Interrupted { steps: done })
    }
}

/// The baseline eval's records and its own metrics line (later evals join their step's line).
fn write_eval(logs: &mut Logs, step: i64, res: &eval::EvalResult) -> Result<(), Error> {
    write_eval_records(logs, res)?;
    logs.metrics.append(&MetricsLine::new(step, res.metrics.clone()))?;
    logs.metrics.sync()?;
    Ok(())
}

/// An eval's per-problem results and kept completions.
fn write_eval_records(logs: &mut Logs, res: &eval::EvalResult) -> Result<(), Error> {
    for r in &res.records {
        logs.eval.append(r)?;
    }
    for r in &res.samples {
        logs.eval_rollouts.append(r)?;
    }
    logs.eval_rollouts.sync()?;
    Ok(())
}

/// A checkpoint's name: `step-000009`.
fn checkpoint_name(step: u32) -> String {
    format!("step-{step:06}")
}

