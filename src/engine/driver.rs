//! The one step loop (design §1). Each step: gather its groups from the source
//! (engine/gather.rs: rounds or the stream) → learn (engine/step.rs) → the source evaluates or
//! publishes the next sampler → the trainer state is saved when a checkpoint is due → the
//! step's records are written, in step order, once its eval has finished → stop on a request,
//! a diagnostic with `action: stop`, or a sandbox that is down. The baseline eval comes first.
//!
//! Records: a step's rollouts, its eval's records, its metrics line, then its checkpoint record.
//! A crash loses nothing that a checkpoint record points at: on resume everything after the
//! last checkpoint is dropped (engine/setup.rs `resume_point`).
//!
//! The data cursor: every problem slot a trained step consumed (problems.rs); a checkpoint
//! records the first slot not consumed and the slots consumed beyond it (groups stream in out
//! of order). Groups sampled but not trained (in flight, or a step abandoned at a stop) are not
//! consumed: a resumed run draws them again.

use std::collections::{BTreeMap, BTreeSet};

use crate::backend::Trainer;
use crate::plan::Plan;
use crate::runlog::sinks::Sinks;
use crate::runlog::{self, CheckpointRecord, JsonlWriter, MetricsLine, RunDir, Status};
use crate::seam::StateRef;

use super::control::RunOutcome;
use super::error::Error;
use super::eval::{self, EvalResult};
use super::event::{self, Event, EventSink};
use super::fill::Fill;
use super::gather::{Rounds, Source};
use super::problems::cursor_of;
use super::rollout::Ctx;
use super::scoring::StepConfig;
use super::setup::Setup;
use super::step::{self, StepResult};
use super::stream::{Borrowed, Pipe, Quiet};

/// The run's append-only logs.
pub(crate) struct Logs {
    /// metrics.jsonl.
    pub metrics: JsonlWriter,
    /// rollouts.jsonl.
    pub rollouts: JsonlWriter,
    /// eval_results.jsonl.
    pub eval: JsonlWriter,
    /// eval_rollouts.jsonl.
    pub eval_rollouts: JsonlWriter,
    /// checkpoints.jsonl.
    pub checkpoints: JsonlWriter,
    /// events.jsonl.
    pub events: JsonlWriter,
}

/// A step trained, waiting for its records to be written in order.
struct Trained {
    res: StepResult,
    /// Its trainer state, saved right after it trained, when a checkpoint is due.
    state: Option<StateRef>,
    /// Whether an eval is due after it.
    eval: bool,
    /// The data cursor and the problems consumed beyond it, as of its state.
    cursor: (u64, Vec<u64>),
}

/// The step loop's state (the module's doc).
pub(crate) struct Driver<'a> {
    plan: &'a Plan,
    setup: &'a Setup,
    cfg: &'a StepConfig<'a>,
    cx: &'a Ctx<'a>,
    dir: &'a RunDir,
    sinks: &'a mut Sinks,
    status: Status,
    logs: Logs,
    /// Every problem slot before `base` was consumed before this attempt; `consumed` holds the
    /// slots consumed since (from the start: those a checkpoint recorded beyond its cursor).
    base: u64,
    consumed: BTreeSet<u64>,
    last_saved: Option<u32>,
    /// Run-health signals over the steps so far.
    monitor: crate::health::Monitor,
}

/// What [`Driver::new`] takes besides the run's parts.
pub(crate) struct Start {
    /// The run's status, already `running`.
    pub status: Status,
    /// The run's logs.
    pub logs: Logs,
    /// The first step to run (0, or the step after the last checkpoint).
    pub first_step: u32,
    /// The last checkpoint's data cursor and the slots it consumed beyond it.
    pub cursor: (u64, Vec<u64>),
    /// The health signals, with a resumed run's kept steps replayed.
    pub monitor: crate::health::Monitor,
}

impl<'a> Driver<'a> {
    /// A driver for `plan`'s run.
    pub(crate) fn new(plan: &'a Plan, setup: &'a Setup, cfg: &'a StepConfig<'a>, cx: &'a Ctx<'a>, (dir, sinks): (&'a RunDir, &'a mut Sinks), start: Start) -> Self {
        Driver {
            plan,
            setup,
            cfg,
            cx,
            dir,
            sinks,
            status: start.status,
            logs: start.logs,
            base: start.cursor.0,
            consumed: start.cursor.1.into_iter().collect(),
            last_saved: start.first_step.checked_sub(1),
            monitor: start.monitor,
        }
    }

    /// The trainer, borrowed from the setup (not from `self`, whose logs the steps write).
    fn trainer(&self) -> Option<&'a dyn Trainer> {
        self.setup.trainer.as_deref()
    }

    /// The data cursor and the slots consumed beyond it.
    fn cursor(&self) -> (u64, Vec<u64>) {
        cursor_of(self.base, &self.consumed)
    }

    /// The baseline eval (step −1) with its own metrics line. `Some` when the run ends here: a
    /// stop requested during it.
    ///
    /// # Errors
    /// Sampler failures; a diagnostic with `action: stop` (nothing trained yet, so nothing to
    /// checkpoint).
    /// `extra` joins the line (a staged run's held-out `eval/nll` before its first stage).
    pub(crate) async fn baseline(&mut self, extra: BTreeMap<String, f64>) -> Result<Option<RunOutcome>, Error> {
        let setup = self.setup;
        let sampler = setup.policy.sampler().await?;
        let Some(mut res) = eval::run(&*sampler, -1, self.plan, &setup.eval_set, &setup.eval_sampling, self.cx).await? else { return Ok(Some(RunOutcome::Interrupted { steps: 0 })) };
        res.metrics.extend(extra);
        self.write_eval_records(&res)?;
        self.logs.metrics.append(&MetricsLine::new(-1, res.metrics.clone()))?;
        self.logs.metrics.sync()?;
        event::warn(self.cx.sink, self.sinks.poke());
        let fired = self.monitor.eval(-1, &res.metrics, &res.records);
        self.cx.sink.event(Event::Eval { step: -1, metrics: res.metrics });
        match report(&fired, &mut self.logs.events, self.cx.sink)? {
            Some(stop) => Err(stop),
            None => Ok(None),
        }
    }

    /// Runs the steps from `first_step` on the source the plan and the trainer call for.
    ///
    /// # Errors
    /// Sampler, trainer and run-log failures; a sandbox that is down; a diagnostic with
    /// `action: stop`. What is trained is checkpointed first, so the run can resume.
    pub(crate) async fn drive(&mut self, first_step: u32) -> Result<RunOutcome, Error> {
        let (cfg, setup) = (self.cfg, self.setup);
        let eval = (&setup.eval_set, &setup.eval_sampling);
        let quiet = Quiet(self.cx.sink);
        let quiet_cx = Ctx { sink: &quiet, ..*self.cx };
        let mut source = match self.trainer() {
            Some(trainer) if Source::streams(trainer, cfg) => {
                let (cursor, _) = self.cursor();
                let borrowed = Borrowed { cfg, cx: &quiet_cx, trainer, eval };
                Source::Stream(Box::new(Pipe::start(borrowed, first_step, cursor, self.consumed.clone()).await?))
            }
            trainer => {
                let ahead = trainer.is_some() && self.plan.grpo.max_steps_off_policy >= 1;
                if ahead && self.plan.grpo.max_steps_off_policy > 1 {
                    tracing::info!("grpo.max_steps_off_policy is {}: on a trainer that shares this machine, one step ahead", self.plan.grpo.max_steps_off_policy);
                }
                Source::Rounds(Box::new(Rounds::new(cfg, self.cx, &setup.policy, eval, ahead)))
            }
        };
        self.steps(&mut source, first_step).await
    }

    async fn steps(&mut self, source: &mut Source<'_>, first_step: u32) -> Result<RunOutcome, Error> {
        let schedule = &self.plan.schedule;
        let mut ledger: BTreeMap<u32, Trained> = BTreeMap::new();
        // Why the run ends early, and whether the trainer's state is then exactly the last
        // trained step's (so it can be checkpointed as that step).
        let (mut done, mut outcome): (u32, Option<(Error, Settled)>) = (first_step, None);
        for s in first_step..schedule.max_steps {
            if self.cx.stop.requested() {
                break;
            }
            // Nothing of step `s` is submitted before its groups are in: a failure here leaves
            // the trainer at the last trained step.
            let fill = match source.gather(s, self.cursor().0).await {
                Ok(Some(fill)) => fill,
                Ok(None) => break,
                Err(e) => {
                    outcome = Some((e, Settled::Yes));
                    break;
                }
            };
            match self.train(source, s, &fill, &mut ledger).await {
                Ok(None) => done = s + 1,
                Ok(Some(Ended::SandboxDown(e))) => {
                    outcome = Some((e, Settled::Yes));
                    break;
                }
                Ok(Some(Ended::Stopped(e))) => {
                    done = s + 1;
                    outcome = Some((e, Settled::Yes));
                    break;
                }
                // The update may or may not have been applied (a remote trainer that failed
                // mid-request, a look-ahead that failed beside a finished update).
                Err(e) => {
                    outcome = Some((e, Settled::No));
                    break;
                }
            }
        }
        // What is trained gets recorded: evals still due are waited for, unless stopping.
        while !ledger.is_empty() && outcome.is_none() && !self.cx.stop.requested() {
            match source.drain().await {
                Ok(true) => outcome = self.flush(&mut ledger, source.evals())?.map(|e| (e, Settled::Yes)),
                Ok(false) => break,
                Err(e) => outcome = Some((e, Settled::Yes)),
            }
        }
        // Also on a failure: the steps trained before it are recorded (a resume drops any past
        // its checkpoint).
        self.flush_all(&mut ledger, source.evals())?;
        match outcome {
            Some((e, settled)) => {
                if settled == Settled::Yes
                    && let Err(save) = self.save_unsaved(done).await
                {
                    // The failure that ended the run is the one to report; the last saved
                    // checkpoint still resumes.
                    tracing::warn!("could not checkpoint step {} on the way out: {}", done.saturating_sub(1), crate::causes::causes(&save).join(": "));
                }
                Err(e)
            }
            None if done < schedule.max_steps => {
                self.save_unsaved(done).await?;
                Ok(RunOutcome::Interrupted { steps: done })
            }
            None => Ok(RunOutcome::Finished { steps: schedule.max_steps }),
        }
    }

    /// Trains step `s` on its groups and enters it in `ledger` (recording what is ready):
    /// `Some` when the run ends with it.
    async fn train(&mut self, source: &mut Source<'_>, s: u32, fill: &Fill, ledger: &mut BTreeMap<u32, Trained>) -> Result<Option<Ended>, Error> {
        let schedule = &self.plan.schedule;
        let mut res = source.during(step::learn(self.trainer(), s, fill, self.cfg, source.cx())).await?;
        if let Some(last) = res.sandbox_down.take() {
            // Nothing trained: the step's problems are not consumed, a resumed run samples
            // them again.
            return Ok(Some(Ended::SandboxDown(Error::SandboxDown { step: s, groups: fill.groups.len(), last })));
        }
        self.consumed.extend(fill.consumed.iter().copied());
        let eval = !self.setup.eval_set.is_empty() && self.due(s, schedule.eval_every);
        source.trained(s, eval, &mut res, fill).await?;
        // The state after exactly this step: saved before the next update is submitted.
        let state = match (self.due(s, schedule.save_every), self.trainer()) {
            (true, Some(trainer)) => Some(source.during(async { Ok(trainer.save_state(&checkpoint_name(s)).await?) }).await?),
            _ => None,
        };
        ledger.insert(s, Trained { res, state, eval, cursor: self.cursor() });
        Ok(self.flush(ledger, source.evals())?.map(Ended::Stopped))
    }

    /// Writes the records of the trained steps at the head of `ledger` whose evals are done.
    fn flush(&mut self, ledger: &mut BTreeMap<u32, Trained>, evals: &mut BTreeMap<u32, Option<EvalResult>>) -> Result<Option<Error>, Error> {
        while let Some(entry) = ledger.first_entry() {
            let s = *entry.key();
            if entry.get().eval && !evals.contains_key(&s) {
                break;
            }
            let t = entry.remove();
            if let Some(stop) = self.record_trained(s, t, evals.remove(&s).flatten())? {
                return Ok(Some(stop));
            }
        }
        Ok(None)
    }

    /// Writes every trained step's records, evals not yet done left out (a stop).
    fn flush_all(&mut self, ledger: &mut BTreeMap<u32, Trained>, evals: &mut BTreeMap<u32, Option<EvalResult>>) -> Result<(), Error> {
        while let Some((s, t)) = ledger.pop_first() {
            // A diagnostic stop here changes nothing: the run is ending already.
            let _ = self.record_trained(s, t, evals.remove(&s).flatten())?;
        }
        Ok(())
    }

    fn record_trained(&mut self, s: u32, t: Trained, ev: Option<EvalResult>) -> Result<Option<Error>, Error> {
        let stop = self.record_step(s, t.res, ev)?;
        if let Some(state) = &t.state {
            self.record_checkpoint(s, state, self.checkpoint_kind(s), t.cursor)?;
        }
        Ok(stop)
    }

    /// Step `s`'s records: its rollouts, its eval's (when it had one), its metrics line, the
    /// health signals and the status. Returns the error a diagnostic with `action: stop` asks
    /// the run to end with.
    fn record_step(&mut self, s: u32, res: StepResult, ev: Option<EvalResult>) -> Result<Option<Error>, Error> {
        let sink = self.cx.sink;
        for r in &res.rollouts {
            self.logs.rollouts.append(r)?;
        }
        let mut metrics = res.metrics;
        // A `distill` stage's lines name their stage, as supervised ones do; GRPO's are as before.
        if let Some(i) = self.plan.stages.iter().position(|st| st.range().contains(&s) && st.kind != crate::plan::StageKind::Grpo) {
            metrics.insert(crate::runlog::metrics::STAGE.into(), i as f64);
        }
        if let Some(ev) = &ev {
            self.write_eval_records(ev)?;
            sink.event(Event::Eval { step: i64::from(s), metrics: ev.metrics.clone() });
            metrics.extend(ev.metrics.clone());
        }
        self.logs.metrics.append(&MetricsLine::new(i64::from(s), metrics.clone()))?;
        self.logs.metrics.sync()?;
        self.logs.rollouts.sync()?;
        event::warn(sink, self.sinks.poke());
        let mut fired = self.monitor.step(s, &metrics, &res.rollouts);
        if let Some(ev) = &ev {
            fired.extend(self.monitor.eval(i64::from(s), &metrics, &ev.records));
        }
        sink.event(Event::Step { step: s, metrics });
        let stop = report(&fired, &mut self.logs.events, sink)?;
        self.status.steps_done = s + 1;
        self.dir.set_status(&self.status)?;
        Ok(stop)
    }

    /// An eval's per-problem results and kept completions.
    fn write_eval_records(&mut self, res: &EvalResult) -> Result<(), Error> {
        for r in &res.records {
            self.logs.eval.append(r)?;
        }
        for r in &res.samples {
            self.logs.eval_rollouts.append(r)?;
        }
        self.logs.eval_rollouts.sync()?;
        Ok(())
    }

    /// Appends the checkpoint record of step `s`, whose trainer state `state` holds, with the
    /// data cursor and the problems consumed beyond it.
    fn record_checkpoint(&mut self, s: u32, state: &StateRef, kind: &str, (data_cursor, consumed_ahead): (u64, Vec<u64>)) -> Result<(), Error> {
        let record = CheckpointRecord {
            name: checkpoint_name(s),
            step: s,
            data_cursor,
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
    /// In a staged run the cadence counts the stage's own steps (the same schedule means the
    /// same evaluations whatever stages come first); without stages it starts at step 0. A
    /// `distill` stage's plan ends at the stage's last step, so it is due there too.
    fn due(&self, s: u32, every: u32) -> bool {
        let from = crate::plan::stages::stage_of(&self.plan.stages, s).map_or(0, |st| st.first_step);
        s + 1 == self.plan.schedule.max_steps || (every > 0 && (s + 1).saturating_sub(from).is_multiple_of(every))
    }

    /// The `kind` of a due checkpoint after step `s`: `stage` at the end of a stage that another
    /// follows (a `distill` stage's plan ends there).
    fn checkpoint_kind(&self, s: u32) -> &'static str {
        match () {
            () if s + 1 != self.plan.schedule.max_steps => "periodic",
            () if self.plan.stages.last().is_some_and(|st| st.range().end > s + 1) => "stage",
            () => "final",
        }
    }

    /// Checkpoints the last of `done` completed steps unless it is saved already; the trainer's
    /// state is that step's (nothing trained after it).
    async fn save_unsaved(&mut self, done: u32) -> Result<(), Error> {
        if let Some(trainer) = self.trainer()
            && done > 0
            && self.last_saved != Some(done - 1)
        {
            let state = trainer.save_state(&checkpoint_name(done - 1)).await?;
            self.record_checkpoint(done - 1, &state, "interrupt", self.cursor())?;
        }
        Ok(())
    }
}

/// Whether the trainer's state is exactly the last trained step's when a run ends early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settled {
    Yes,
    No,
}

/// How a step ends the run.
enum Ended {
    /// The sandbox was down for every group: nothing trained.
    SandboxDown(Error),
    /// A diagnostic with `action: stop` fired on it.
    Stopped(Error),
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

/// A checkpoint's name: `step-000009`.
pub(crate) fn checkpoint_name(step: u32) -> String {
    format!("step-{step:06}")
}
