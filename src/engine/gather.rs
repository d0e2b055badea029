//! Where a step's groups come from: the driver's one seam ([`Source`]), with two
//! implementations, chosen from the plan and a capability of the trainer
//! ([`crate::backend::Trainer::runs_elsewhere`]), never from a backend's name:
//!
//! - [`Rounds`]: a step samples its groups in rounds on the weights it trains (on-policy), with
//!   dynamic sampling drawing the shortfall as further rounds. With `grpo.max_steps_off_policy`
//!   ≥ 1 on a trainer that shares this machine, the next step's rounds are sampled on the
//!   weights before this step's update while it trains (one step ahead: the sampler and the
//!   trainer share the cores, so a deeper queue would only make samples staler). A dry run is
//!   rounds without an update.
//! - [`Pipe`]: on a trainer that runs elsewhere, groups stream in k steps deep
//!   (engine/stream.rs).
//!
//! Both sample through [`batch::sample`] and decide that a step is full by [`Fill`]'s one rule.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Instant;

use crate::backend::{Policy, Sampler, Trainer};
use crate::runlog::metrics::time;

use super::error::Error;
use super::eval::{self, EvalResult, EvalSet};
use super::batch;
use super::fill::Fill;
use super::rollout::Ctx;
use super::scoring::StepConfig;
use super::step::StepResult;
use super::stream::Pipe;
use super::problems;

/// A step's groups sampled in rounds on one sampler (the module's doc).
pub(crate) struct Rounds<'b> {
    cfg: &'b StepConfig<'b>,
    cx: &'b Ctx<'b>,
    policy: &'b Policy,
    eval_set: &'b EvalSet,
    eval_sampling: &'b crate::seam::SamplingParams,
    /// Sample the next step while this one trains.
    ahead: bool,
    /// Set by [`Rounds::gather`]: the step to sample one ahead during the coming update, and
    /// where its problems start.
    look_ahead: Option<(u32, u64)>,
    /// The next step's groups, sampled while this one trained. Whatever is here at a stop or
    /// crash is discarded: the data cursor in a checkpoint counts trained steps only.
    next: Option<Fill>,
    evals: BTreeMap<u32, Option<EvalResult>>,
    /// When the step being gathered started (`time/step_s`: its sampling and update).
    started: Instant,
}

impl<'b> Rounds<'b> {
    /// Rounds on `policy`'s samplers, one step ahead when `ahead`.
    pub(crate) fn new(cfg: &'b StepConfig<'b>, cx: &'b Ctx<'b>, policy: &'b Policy, eval: (&'b EvalSet, &'b crate::seam::SamplingParams), ahead: bool) -> Self {
        Rounds { cfg, cx, policy, eval_set: eval.0, eval_sampling: eval.1, ahead, look_ahead: None, next: None, evals: BTreeMap::new(), started: Instant::now() }
    }

    async fn gather(&mut self, s: u32, cursor: u64) -> Result<Option<Fill>, Error> {
        self.started = Instant::now();
        let fill = match self.next.take() {
            Some(f) => f,
            None => {
                let sampler = self.policy.sampler().await?;
                match rounds(&*sampler, s, cursor, 0, self.cfg, self.cx).await? {
                    Some(f) => f,
                    None => return Ok(None),
                }
            }
        };
        if self.cx.stop.requested() {
            // Abandoned whole: no update for a step stopped while it sampled.
            return Ok(None);
        }
        if self.ahead && s + 1 < self.cfg.plan.schedule.max_steps {
            // This step's draws are known (its groups are complete): the next starts after them.
            self.look_ahead = Some((s + 1, cursor + fill.drawn()));
        }
        Ok(Some(fill))
    }

    async fn during<T>(&mut self, work: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
        let Some((next, cursor)) = self.look_ahead.take() else { return work.await };
        // The snapshot is requested before the update (`work` has not been polled, so nothing
        // of it is submitted yet), and the trainer serves its requests in order.
        let sampler = self.policy.sampler().await?;
        let (done, ahead) = tokio::join!(work, rounds(&*sampler, next, cursor, 1, self.cfg, self.cx));
        self.next = ahead?;
        done
    }

    async fn trained(&mut self, s: u32, eval_due: bool) -> Result<(), Error> {
        if eval_due {
            let sampler = self.policy.sampler().await?;
            // `None`: stopped during the eval; the step itself is complete and is kept.
            let ev = eval::run(&*sampler, i64::from(s), self.cfg.plan, self.eval_set, self.eval_sampling, self.cx).await?;
            self.evals.insert(s, ev);
        }
        Ok(())
    }
}

/// Samples and grades the groups of step `step` on `sampler` in rounds, drawing problems from
/// `cursor` (slot j of the step is problem `cursor + j`, seeded by (seed, step, j)) until
/// [`Fill::wants`] nothing more. `None` when a stop was requested mid-round.
async fn rounds(sampler: &dyn Sampler, step: u32, cursor: u64, staleness: u32, cfg: &StepConfig<'_>, cx: &Ctx<'_>) -> Result<Option<Fill>, Error> {
    let mut fill = Fill::new(cfg);
    loop {
        let want = fill.wants();
        if want == 0 {
            break;
        }
        if fill.rounds > 0 {
            if cx.stop.requested() {
                break;
            }
            tracing::info!(step, round = fill.rounds + 1, problems = want, "dynamic sampling: drawing more problems");
        }
        let first = fill.drawn();
        let slots: Vec<(u64, u64)> = (first..first + want as u64).map(|j| (cursor + j, problems::derive_seed(cfg.plan.seed, i64::from(step), j))).collect();
        let Some(batch) = batch::sample(sampler, &slots, step, cfg, cx).await? else { return Ok(None) };
        let consumed: Vec<u64> = slots.iter().map(|&(slot, _)| slot).collect();
        fill.add(batch, &consumed, staleness, cfg);
        fill.rounds += 1;
    }
    Ok(Some(fill))
}

/// Where a step's groups come from (the module's doc).
pub(crate) enum Source<'b> {
    /// Rounds on this machine.
    Rounds(Box<Rounds<'b>>),
    /// A stream k steps deep.
    Stream(Box<Pipe<'b>>),
}

impl<'b> Source<'b> {
    /// The source the plan and the trainer call for: the stream on a trainer that runs
    /// elsewhere with `grpo.max_steps_off_policy` ≥ 1, rounds otherwise (one ahead with
    /// `max_steps_off_policy` ≥ 1, on-policy without, without updates with no trainer).
    pub(crate) fn streams(trainer: &dyn Trainer, cfg: &StepConfig<'_>) -> bool {
        trainer.runs_elsewhere() && cfg.plan.grpo.max_steps_off_policy >= 1
    }

    /// The rollout context the source's steps report through.
    pub(crate) fn cx(&self) -> &'b Ctx<'b> {
        match self {
            Source::Rounds(r) => r.cx,
            Source::Stream(p) => p.cx(),
        }
    }

    /// The groups of step `s`, drawing from `cursor`; `None` when a stop was requested.
    pub(crate) async fn gather(&mut self, s: u32, cursor: u64) -> Result<Option<Fill>, Error> {
        match self {
            Source::Rounds(r) => r.gather(s, cursor).await,
            Source::Stream(p) => p.gather(s).await,
        }
    }

    /// Awaits `work` (an update, a checkpoint's save) while the source keeps sampling: the
    /// stream takes groups, samplers and evals in; rounds one ahead sample the next step beside
    /// the first work after [`Source::gather`].
    pub(crate) async fn during<T>(&mut self, work: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
        match self {
            Source::Rounds(r) => r.during(work).await,
            Source::Stream(p) => p.while_pumping(work).await,
        }
    }

    /// After step `s`'s update: the eval due after it (rounds run it now; the stream on the
    /// next sampler, beside training), the stream's next sampler and its own records.
    pub(crate) async fn trained(&mut self, s: u32, eval_due: bool, res: &mut StepResult, fill: &Fill) -> Result<(), Error> {
        match self {
            Source::Rounds(r) => {
                res.metrics.insert(time::STEP_S.into(), r.started.elapsed().as_secs_f64());
                r.trained(s, eval_due).await
            }
            Source::Stream(p) => {
                p.trained(s, eval_due, res, fill);
                Ok(())
            }
        }
    }

    /// Finished evals by the step they follow.
    pub(crate) fn evals(&mut self) -> &mut BTreeMap<u32, Option<EvalResult>> {
        match self {
            Source::Rounds(r) => &mut r.evals,
            Source::Stream(p) => p.evals(),
        }
    }

    /// Waits for the next eval (or anything else the source has in flight) at the end of the
    /// run, launching nothing new; `false` when there is nothing to wait for (rounds evaluate
    /// before they return).
    pub(crate) async fn drain(&mut self) -> Result<bool, Error> {
        match self {
            Source::Rounds(_) => Ok(false),
            Source::Stream(p) => p.drain().await.map(|()| true),
        }
    }
}
