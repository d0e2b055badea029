//! What must work before the first sample: the policy opened, problems and prompts loaded, the
//! sandbox (and a Python reward's pool) started, what the run uses recorded in provenance; and
//! where a run starts (after its last checkpoint, whose state the trainer loads).

use std::sync::Arc;

use crate::backend::{self, Policy, Trainer};
use crate::plan::Plan;
use crate::runlog::{Data, DataSet, EventRecord, JsonlWriter, PromptTokens, RunDir, files};
use crate::seam::{self, SamplingParams, StateRef, Stop as StopCond};

use super::control::{PolicySource, StopSignal};
use super::error::Error;
use super::eval;
use super::event::{Event, EventSink};
use super::grading;
use super::prompting;
use super::pyreward;

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
pub(crate) struct Setup {
    pub(crate) policy: Policy,
    /// `None` for a dry run or an evaluation-only run.
    pub(crate) trainer: Option<Arc<dyn Trainer>>,
    pub(crate) train: Vec<Arc<crate::data::Problem>>,
    pub(crate) eval_set: eval::EvalSet,
    pub(crate) prompting: Arc<prompting::Prompting>,
    pub(crate) grader: Arc<crate::sandbox::AnyGrader>,
    pub(crate) opts: crate::sandbox::GradeOptions,
    /// Training and evaluation sampling with the tokenizer's stop tokens.
    pub(crate) sampling: SamplingParams,
    pub(crate) eval_sampling: SamplingParams,
    pub(crate) advantage: Box<dyn crate::rl::advantage::AdvantageStrategy>,
    pub(crate) reward: Box<dyn crate::rl::reward::RewardStrategy>,
    /// The Python reward function, when the reward calls one.
    pub(crate) python: Option<pyreward::PythonRewards>,
}

/// Opens the policy, loads problems and prompts, starts the sandbox: what must work before the
/// first sample. The policy comes first: a backend this build cannot use, or a model that is not
/// there, stops the run before anything else is loaded.
pub(crate) async fn set_up(plan: &Plan, policy: PolicySource, dir: &RunDir, stop: &StopSignal, sink: &dyn EventSink) -> Result<Setup, Error> {
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
    record_prompt_tokens(dir, &prompting, &train, stop)?;

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

/// Prompt lengths over every training problem, as `rlx render` reports them. A stop request
/// ends it unrecorded (rendering every problem can take minutes; the run then stops before its
/// first step).
fn record_prompt_tokens(dir: &RunDir, prompting: &prompting::Prompting, train: &[Arc<crate::data::Problem>], stop: &StopSignal) -> Result<(), Error> {
    let mut lens = Vec::with_capacity(train.len());
    for p in train {
        if stop.requested() {
            return Ok(());
        }
        lens.push(prompting.first_turn(p)?.tokens.len());
    }
    let mean = lens.iter().sum::<usize>() as f64 / lens.len().max(1) as f64;
    let tokens = PromptTokens { min: lens.iter().min().copied(), mean, max: lens.iter().max().copied(), problems: lens.len() };
    dir.update_provenance(|p| p.prompt_tokens = Some(tokens))?;
    Ok(())
}

/// Where a run starts: after its last checkpoint (whose state the trainer loads), else at step
/// 0. Whatever a crashed attempt wrote for later steps is dropped first, so every step appears
/// exactly once. Returns the first step, the data cursor and the problem slots consumed beyond
/// it (by a stream, whose groups finish out of order).
pub(crate) async fn resume_point(dir: &RunDir, trainer: Option<&Arc<dyn Trainer>>, events: &mut JsonlWriter) -> Result<(u32, (u64, Vec<u64>)), Error> {
    let logs = [files::METRICS, files::ROLLOUTS, files::EVAL_RESULTS, files::EVAL_ROLLOUTS];
    match (dir.last_checkpoint()?, trainer) {
        (Some(ck), Some(trainer)) => {
            let state = StateRef(ck.state_path.clone().expect("last_checkpoint has a state"));
            trainer.load_state(&state).await?;
            let keep = |s: i64| s <= i64::from(ck.step);
            let dropped: usize = logs.iter().map(|f| dir.retain_steps(f, keep)).sum::<Result<usize, _>>()?;
            events.append(&EventRecord::resume(&ck.name, ck.step + 1, dropped))?;
            tracing::info!(checkpoint = %ck.name, next_step = ck.step + 1, dropped, "resuming");
            Ok((ck.step + 1, (ck.data_cursor, ck.consumed_ahead)))
        }
        _ => {
            // Nothing to resume from: start clean, even if a crashed attempt left records.
            let dropped: usize = logs.iter().map(|f| dir.retain_steps(f, |_| false)).sum::<Result<usize, _>>()?;
            events.append(&EventRecord::start(dropped))?;
            Ok((0, (0, vec![])))
        }
    }
}
