//! A run from its plan to its status file: the run directory locked, trackers attached, the
//! setup, the resume point, the baseline eval and the driver's steps; how it ended recorded.

use crate::plan::Plan;
use crate::runlog::sinks::{End, RunInfo, Sinks};
use crate::runlog::{self, EventRecord, RunDir, State, Status, files};

use super::control::{PolicySource, RunOutcome, StopSignal};
use super::driver::{Driver, Logs, Start};
use super::error::Error;
use super::event::{self, Event, EventSink};
use super::rollout::Ctx;
use super::scoring::StepConfig;
use super::setup::{Setup, resume_point, set_up};

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
    let info = RunInfo { run_id: plan.run_id.clone(), config: crate::plan::record::to_json(plan) };
    let mut sinks = Sinks::for_plan(&dir, &info, &plan.log.trackers);
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
            Some(w) => event::warn(sink, vec![w]),
            None => tracing::info!(tracker = report.name, lines = report.mirrored, "mirrored to {}", report.location),
        }
    }
    runlog::logfile::detach();
    result
}

async fn run_in(plan: &Plan, policy: PolicySource, dir: &RunDir, stop: &StopSignal, sink: &dyn EventSink, sinks: &mut Sinks) -> Result<RunOutcome, Error> {
    let setup = set_up(plan, policy, dir, stop, sink).await?;
    let result = run_set_up(plan, &setup, dir, stop, sink, sinks).await;
    // Sandboxes a remote pool keeps for reuse are stopped on every way out.
    setup.grader.close().await;
    result
}

async fn run_set_up(plan: &Plan, setup: &Setup, dir: &RunDir, stop: &StopSignal, sink: &dyn EventSink, sinks: &mut Sinks) -> Result<RunOutcome, Error> {
    let mut events = dir.jsonl(files::EVENTS)?;
    let (first_step, cursor) = resume_point(dir, setup.trainer.as_ref(), &mut events).await?;
    // The signals look back over recent steps: a resumed run's monitor sees the steps it kept.
    let mut monitor = crate::health::Monitor::new(plan.diagnostics.clone());
    if first_step > 0 {
        crate::health::replay(&mut monitor, &dir.metrics()?.rows, &dir.rollouts()?.rows, &dir.eval_results()?.rows);
    }
    let mut status = dir.status()?.unwrap_or_else(|| Status::new(plan));
    status.state = State::Running;
    status.steps_done = first_step;
    status.pid = Some(std::process::id());
    status.reason = None;
    dir.set_status(&status)?;
    let max_steps = plan.schedule.max_steps;
    sink.event(Event::Started { run_id: plan.run_id.clone(), dir: dir.path().to_path_buf(), first_step, max_steps, problems: (setup.train.len(), setup.eval_set.problems.len()) });
    event::warn(sink, sinks.started().await);

    let logs = open_logs(dir, events)?;
    let cx = Ctx { prompting: &setup.prompting, grader: &setup.grader, opts: &setup.opts, retries: plan.rollout.infra_retries, sink, stop };
    let cfg = StepConfig {
        plan,
        train: &setup.train,
        advantage: setup.advantage.as_ref(),
        reward: setup.reward.as_ref(),
        python: setup.python.as_ref(),
        sampling: &setup.sampling,
    };
    let start = Start { status, logs, first_step, cursor: cursor.clone(), monitor };
    let mut driver = Driver::new(plan, setup, &cfg, &cx, (dir, sinks), start);
    if first_step == 0 && (plan.schedule.eval_at_start || max_steps == 0) && !setup.eval_set.is_empty()
        && let Some(stopped) = driver.baseline(super::stages::baseline_metrics(plan, setup).await?).await?
    {
        return Ok(stopped);
    }
    if setup.trainer.is_none() && !plan.schedule.dry_run {
        return Ok(RunOutcome::Finished { steps: 0 });
    }
    if plan.stages.is_empty() {
        return driver.drive(first_step).await;
    }
    // A staged run: each stage in order from the one the run resumes in, the supervised ones
    // writing their own lines, `distill` and `grpo` a step loop (a driver) of their own.
    drop(driver);
    for (index, stage) in plan.stages.iter().enumerate() {
        if first_step >= stage.range().end {
            continue;
        }
        let stopped = match &stage.kind {
            crate::plan::StageKind::Sft { .. } => {
                let mut status = dir.status()?.unwrap_or_else(|| Status::new(plan));
                super::stages::run(plan, setup, dir, &cx, &mut status, first_step, sinks, index).await?
            }
            _ => {
                // Resumed inside a `distill` stage, its problems continue from the checkpoint's
                // cursor; from its start (after another stage's checkpoint), from the first. A
                // `grpo` stage starts its problems at the first, as it always has.
                let inside = first_step > stage.first_step && matches!(stage.kind, crate::plan::StageKind::Distill { .. });
                let at = if inside { cursor.clone() } else { (0, vec![]) };
                loop_stage(plan, setup, dir, &cx, sinks, stage, first_step.max(stage.first_step), at).await?
            }
        };
        if let Some(stopped) = stopped {
            return Ok(stopped);
        }
    }
    Ok(RunOutcome::Finished { steps: max_steps })
}

/// A `distill` or `grpo` stage: the step loop on the stage's plan (the run's for `grpo`,
/// [`super::distill::stage_plan`] for `distill`) and problems, from step `first` with the
/// data cursor `cursor`. `Some` when the run ends in it (a stop, or the run's last step).
#[allow(clippy::too_many_arguments)]
async fn loop_stage(plan: &Plan, setup: &Setup, dir: &RunDir, cx: &Ctx<'_>, sinks: &mut Sinks, stage: &crate::plan::StagePlan, first: u32, cursor: (u64, Vec<u64>)) -> Result<Option<RunOutcome>, Error> {
    let own = super::distill::stage_plan(plan, stage);
    let stage_plan = own.as_ref().unwrap_or(plan);
    let problems = match &own {
        Some(p) if p.data.train != plan.data.train => stage_problems(p).await?,
        _ => setup.train.clone(),
    };
    let cfg = StepConfig {
        plan: stage_plan,
        train: &problems,
        advantage: setup.advantage.as_ref(),
        reward: setup.reward.as_ref(),
        python: setup.python.as_ref(),
        sampling: &setup.sampling,
    };
    let mut monitor = crate::health::Monitor::new(plan.diagnostics.clone());
    crate::health::replay(&mut monitor, &stage_lines(dir.metrics()?.rows, stage.first_step), &dir.rollouts()?.rows, &dir.eval_results()?.rows);
    let status = dir.status()?.unwrap_or_else(|| Status::new(plan));
    let start = Start { status, logs: open_logs(dir, dir.jsonl(files::EVENTS)?)?, first_step: first, cursor, monitor };
    match Driver::new(stage_plan, setup, &cfg, cx, (dir, sinks), start).drive(first).await? {
        RunOutcome::Finished { steps } if steps < plan.schedule.max_steps => Ok(None),
        ended => Ok(Some(ended)),
    }
}

/// The lines a stage's signals look back over: the baseline's and the stage's own. An earlier
/// stage's steps are no yardstick for this one's (another loss): the quickstart's first GRPO
/// step after SFT fired `loss_exploding`, its gradient norm 258× the SFT steps' median.
fn stage_lines(rows: Vec<crate::runlog::MetricsLine>, first_step: u32) -> Vec<crate::runlog::MetricsLine> {
    rows.into_iter().filter(|l| l.step < 0 || l.step >= i64::from(first_step)).collect()
}

/// A `distill` stage's own training problems (`train`), loaded as `data.train` is.
async fn stage_problems(plan: &Plan) -> Result<Vec<std::sync::Arc<crate::data::Problem>>, Error> {
    let (data, seed) = (plan.data.clone(), plan.seed);
    let dataset = tokio::task::spawn_blocking(move || crate::data::load_data(&data, seed, &crate::data::source::Options::from_env())).await?.map_err(Error::Data)?;
    if dataset.train.problems.is_empty() {
        return Err(Error::NoProblems);
    }
    Ok(dataset.train.problems.into_iter().map(std::sync::Arc::new).collect())
}

fn open_logs(dir: &RunDir, events: runlog::JsonlWriter) -> Result<Logs, Error> {
    Ok(Logs {
        metrics: dir.jsonl(files::METRICS)?,
        rollouts: dir.jsonl(files::ROLLOUTS)?,
        eval: dir.jsonl(files::EVAL_RESULTS)?,
        eval_rollouts: dir.jsonl(files::EVAL_ROLLOUTS)?,
        checkpoints: dir.jsonl(files::CHECKPOINTS)?,
        events,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runlog::MetricsLine;

    #[test]
    fn a_stage_looks_back_over_the_baseline_and_its_own_steps_only() {
        let rows: Vec<MetricsLine> = [-1, 0, 8, 9, 10].into_iter().map(|s| MetricsLine { step: s, values: Default::default() }).collect();
        let kept: Vec<i64> = stage_lines(rows, 9).iter().map(|l| l.step).collect();
        assert_eq!(kept, [-1, 9, 10]);
    }
}
