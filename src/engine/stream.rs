//! The stream, one of the driver's two group sources (engine/gather.rs): with
//! `grpo.max_steps_off_policy` = k ≥ 1 on a trainer that runs elsewhere (Tinker, `rlx serve`:
//! [`crate::backend::Trainer::runs_elsewhere`]), groups stream in and steps train as soon as they
//! have theirs, with sampling up to k policy versions behind.
//!
//! - **Streaming.** Problems are drawn in order, one group per task, each sampled on the newest
//!   sampler weights published so far and graded as soon as its completions arrive. While step
//!   s trains, the groups of steps s + 1 … s + k are sampled (k · `prompts_per_step` groups in
//!   flight or waiting, plus one for each group a step consumes without using it); a group
//!   that would train more than k versions after the newest sampler waits for the next one
//!   when that is on its way; a step takes groups as they arrive until it is full by the one rule
//!   of engine/fill.rs (with dynamic sampling the first informative ones, drawing more as groups
//!   are set aside).
//! - **Versions and staleness.** Version v is the weights after v optimizer steps. After step s
//!   trains, the sampler for version s + 1 is requested (`save_weights_for_sampler`) without
//!   anyone waiting for it; groups sampled until it is ready use the previous version. A group
//!   of version v trains at step s only if s − v ≤ k; older ones are set aside and counted
//!   (`train/groups_stale`). The losses' importance ratios use each datum's own sampler
//!   log-probabilities, so a stale datum is corrected like any off-policy one.
//! - **Evals beside training.** An eval due after step s runs on the version-(s + 1) sampler
//!   while training goes on, and is recorded at step s.
//! - **Records in step order** (the driver's, engine/driver.rs): a step's records are written
//!   once its eval, if any, has finished; its trainer state is saved right after it trains.
//! - **Resume.** A checkpoint records the data cursor (every problem before it consumed) and
//!   the problems consumed beyond it (groups finish out of order); a resumed run draws from the
//!   cursor and skips those. Groups in flight at a crash are lost and their problems drawn
//!   again.
//!
//! Why not on the embedded backend: there the sampler and the trainer share this machine's
//! cores, so deeper queues only make samples staler (docs/engine.md, "Pipelining").

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use futures_util::stream::{FuturesUnordered, StreamExt};

use crate::backend::{Sampler, Trainer};
use crate::runlog::metrics::{time, train};
use crate::seam::SamplingParams;

use super::error::Error;
use super::eval::{self, EvalResult, EvalSet};
use super::event::{Event, EventSink};
use super::batch::{self, Batch};
use super::fill::Fill;
use super::rollout::{Ctx, Timing};
use super::scoring::StepConfig;
use super::step::StepResult;
use super::problems;

/// Sampling seeds of streamed groups derive from (seed, this, problem slot): a group's seed does
/// not depend on which step it lands in, which a stream does not know when it samples.
const STREAM_SEED_STEP: i64 = -2;

type Boxed<'b, T> = Pin<Box<dyn Future<Output = T> + Send + 'b>>;
/// A sampler requested after a step.
type Publication = tokio::task::JoinHandle<crate::backend::Result<Arc<dyn Sampler>>>;
/// An eval's step and result.
type EvalDone = (u32, Result<Option<EvalResult>, Error>);

/// One group as it came back.
struct Sampled {
    slot: u64,
    version: u32,
    /// `None`: the sampler dropped it after infrastructure errors, or a stop was requested.
    batch: Option<Batch>,
    /// Why the sampler dropped it.
    dropped: Option<crate::backend::Error>,
}

/// Passes warnings on and drops progress: groups stream in one at a time, and a progress bar
/// per group would only flicker.
pub(crate) struct Quiet<'s>(pub &'s dyn EventSink);

impl EventSink for Quiet<'_> {
    fn event(&self, e: Event) {
        if let Event::Warning(_) = e {
            self.0.event(e);
        }
    }
}

/// Samples, grades and scores the group of problem `slot` on `sampler` (version `version`).
fn sample_group<'b>(slot: u64, version: u32, sampler: Arc<dyn Sampler>, cfg: &'b StepConfig<'b>, cx: &'b Ctx<'b>) -> Boxed<'b, Result<Sampled, Error>> {
    Box::pin(async move {
        let seed = problems::derive_seed(cfg.plan.seed, STREAM_SEED_STEP, slot);
        match batch::sample(&*sampler, &[(slot, seed)], version, cfg, cx).await {
            Ok(batch) => Ok(Sampled { slot, version, batch, dropped: None }),
            // One group lost to the sampler's infrastructure errors (already warned about).
            Err(Error::Backend(e)) if e.is_infrastructure() => {
                let batch = Batch { timing: Timing { sampler_dropped: 1, ..Timing::default() }, ..Batch::default() };
                Ok(Sampled { slot, version, batch: Some(batch), dropped: Some(e) })
            }
            Err(e) => Err(e),
        }
    })
}

/// Takes `g` into step `s`'s `fill` (or consumes its problem without a group, when it is too
/// stale or never came back); keeps the sampler failure a dropped group met.
fn offer(fill: &mut Fill, g: Sampled, s: u32, cfg: &StepConfig<'_>, last_drop: &mut Option<crate::backend::Error>) {
    if g.dropped.is_some() {
        *last_drop = g.dropped;
    }
    // `None`: a stop was requested while it sampled; no groups: the sampler dropped it.
    let Some(batch) = g.batch else {
        fill.lose(g.slot, Timing::default(), false);
        return;
    };
    if batch.groups.is_empty() {
        fill.lose(g.slot, batch.timing, false);
        return;
    }
    let staleness = s.saturating_sub(g.version);
    if staleness > cfg.plan.grpo.max_steps_off_policy {
        fill.lose(g.slot, batch.timing, true);
        return;
    }
    fill.add(batch, &[g.slot], staleness, cfg);
}
/// The stream's moving parts, borrowed from the run for `'b`.
pub(crate) struct Pipe<'b> {
    cfg: &'b StepConfig<'b>,
    /// The rollout context with [`Quiet`] events.
    cx: &'b Ctx<'b>,
    trainer: &'b dyn Trainer,
    eval_set: &'b EvalSet,
    eval_sampling: &'b SamplingParams,
    /// `grpo.max_steps_off_policy` and `prompts_per_step`.
    k: usize,
    p: usize,
    /// The step being gathered or trained, and which.
    step_now: u32,
    training: bool,
    /// Groups that count for the step being gathered, and groups it consumed without using
    /// (stale, dropped, set aside by dynamic sampling): each of those is drawn again.
    have: usize,
    extra: usize,
    /// No more launches (the run is ending).
    closed: bool,
    next_slot: u64,
    skip: BTreeSet<u64>,
    inflight: FuturesUnordered<Boxed<'b, Result<Sampled, Error>>>,
    ready: VecDeque<Sampled>,
    latest: (u32, Arc<dyn Sampler>),
    /// Samplers requested after each step, oldest first: (version, its request).
    publishing: VecDeque<(u32, Publication)>,
    /// Versions whose sampler an eval waits for: version s + 1 for an eval due after step s.
    eval_wanted: BTreeSet<u32>,
    evals: FuturesUnordered<Boxed<'b, EvalDone>>,
    eval_done: BTreeMap<u32, Option<EvalResult>>,
    /// Since when no group has been in flight: the sampling side idle, waiting for room or for
    /// a fresher sampler.
    idle_since: Option<Instant>,
    sampler_waited_s: f64,
    /// How long the last gathered step waited for its groups.
    trainer_waited_s: f64,
    /// When the previous step trained (`time/step_s` runs from there).
    since: Instant,
}

/// What a stream borrows from the run.
pub(crate) struct Borrowed<'b> {
    /// The steps' inputs.
    pub cfg: &'b StepConfig<'b>,
    /// The rollout context (with [`Quiet`] events).
    pub cx: &'b Ctx<'b>,
    /// The trainer, which runs elsewhere.
    pub trainer: &'b dyn Trainer,
    /// The held-out problems and their sampling parameters.
    pub eval: (&'b EvalSet, &'b SamplingParams),
}

impl<'b> Pipe<'b> {
    /// An empty stream for step `first_step` on, drawing from `cursor` (skipping `skip`),
    /// sampling on the trainer's current weights first.
    ///
    /// # Errors
    /// The trainer's sampler.
    pub(crate) async fn start(b: Borrowed<'b>, first_step: u32, cursor: u64, skip: BTreeSet<u64>) -> Result<Self, Error> {
        let g = &b.cfg.plan.grpo;
        let latest = (first_step, b.trainer.sampler().await?);
        Ok(Pipe {
            cfg: b.cfg,
            cx: b.cx,
            trainer: b.trainer,
            eval_set: b.eval.0,
            eval_sampling: b.eval.1,
            k: g.max_steps_off_policy as usize,
            p: g.prompts_per_step as usize,
            step_now: latest.0,
            training: false,
            have: 0,
            extra: 0,
            closed: false,
            next_slot: cursor,
            skip,
            inflight: FuturesUnordered::new(),
            ready: VecDeque::new(),
            latest,
            publishing: VecDeque::new(),
            eval_wanted: BTreeSet::new(),
            evals: FuturesUnordered::new(),
            eval_done: BTreeMap::new(),
            idle_since: None,
            sampler_waited_s: 0.0,
            trainer_waited_s: 0.0,
            since: Instant::now(),
        })
    }

    /// The rollout context the stream's steps report through.
    pub(crate) fn cx(&self) -> &'b Ctx<'b> {
        self.cx
    }

    /// Finished evals by the step they follow.
    pub(crate) fn evals(&mut self) -> &mut BTreeMap<u32, Option<EvalResult>> {
        &mut self.eval_done
    }

    /// Groups that may be in flight or waiting now: while step s trains, those of steps s + 1 …
    /// s + k (sampled on version ≤ s, they train at most k versions behind); while it gathers,
    /// those plus one for each group it consumed without using.
    fn capacity(&self) -> usize {
        if self.closed {
            return 0;
        }
        self.k * self.p + self.extra
    }

    /// The step a group launched now will most likely train in (groups are taken in about the
    /// order they are launched).
    fn lands(&self) -> u32 {
        let queued = self.inflight.len() + self.ready.len() + self.have;
        self.step_now + u32::from(self.training) + (queued / self.p) as u32
    }

    /// Launches groups until the stream is at capacity (or until the next would come back too
    /// stale); time with nothing in flight is the sampler's wait.
    fn top_up(&mut self) {
        if self.cx.stop.requested() {
            return;
        }
        loop {
            if self.inflight.len() + self.ready.len() >= self.capacity() {
                break;
            }
            // The step this group will most likely train in; sampled on a version more than k
            // behind it, it would come back only to be set aside: wait for the next sampler
            // (measured: at k = 1, launching anyway set 2 groups in 32 aside, benches/pipeline.rs).
            if self.lands() as usize > self.latest.0 as usize + self.k && !self.publishing.is_empty() {
                break;
            }
            // Nothing for steps after the run's last: those groups would only be thrown away.
            if self.lands() >= self.cfg.plan.schedule.max_steps {
                break;
            }
            if let Some(t) = self.idle_since.take() {
                self.sampler_waited_s += t.elapsed().as_secs_f64();
            }
            while self.skip.remove(&self.next_slot) {
                self.next_slot += 1;
            }
            let (version, sampler) = (self.latest.0, self.latest.1.clone());
            self.inflight.push(sample_group(self.next_slot, version, sampler, self.cfg, self.cx));
            self.next_slot += 1;
        }
        if self.inflight.is_empty() {
            self.idle_since.get_or_insert_with(Instant::now);
        }
    }

    /// The eval after step `step` on `sampler` (the version-(step + 1) weights).
    fn evaluate(&self, step: u32, sampler: Arc<dyn Sampler>) -> Boxed<'b, EvalDone> {
        let (plan, set, params, cx) = (self.cfg.plan, self.eval_set, self.eval_sampling, self.cx);
        Box::pin(async move { (step, eval::run(&*sampler, i64::from(step), plan, set, params, cx).await) })
    }

    /// Waits for the next group, published sampler or finished eval, and takes it in.
    async fn pump(&mut self) -> Result<(), Error> {
        self.top_up();
        let Pipe { inflight, publishing, evals, .. } = self;
        let next = {
            let publication = async {
                match publishing.front_mut() {
                    Some((_, handle)) => handle.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                Some(g) = inflight.next() => Next::Group(g),
                p = publication => Next::Published(p),
                Some(e) = evals.next() => Next::Eval(e),
            }
        };
        match next {
            Next::Group(g) => {
                self.ready.push_back(g?);
                if self.inflight.is_empty() {
                    self.idle_since.get_or_insert_with(Instant::now);
                }
            }
            Next::Published(p) => {
                let (version, _) = self.publishing.pop_front().expect("a publication was awaited");
                let sampler = p??;
                if self.eval_wanted.remove(&version) {
                    let ev = self.evaluate(version - 1, sampler.clone());
                    self.evals.push(ev);
                }
                self.latest = (version, sampler);
            }
            Next::Eval((step, ev)) => {
                self.eval_done.insert(step, ev?);
            }
        }
        Ok(())
    }

    /// The groups of step `s`, as they arrive; `None` when a stop was requested.
    pub(crate) async fn gather(&mut self, s: u32) -> Result<Option<Fill>, Error> {
        let t_wait = Instant::now();
        let mut fill = Fill::new(self.cfg);
        let mut last_drop = None;
        (self.step_now, self.training) = (s, false);
        loop {
            while fill.wants() > 0
                && let Some(g) = self.ready.pop_front()
            {
                offer(&mut fill, g, s, self.cfg, &mut last_drop);
            }
            if fill.groups.is_empty() && fill.timing.sampler_dropped >= self.p
                && let Some(e) = last_drop.take()
            {
                // A step's worth of groups lost and not one sampled: the sampler is down, not
                // flaky; the run stops and says so (as rounds would).
                return Err(e.into());
            }
            if self.cx.stop.requested() {
                return Ok(None);
            }
            if fill.wants() == 0 {
                (self.training, self.have, self.extra) = (true, 0, 0);
                fill.rounds = 1;
                self.trainer_waited_s = t_wait.elapsed().as_secs_f64();
                return Ok(Some(fill));
            }
            self.have = fill.counted();
            self.extra = fill.consumed.len() - self.have;
            self.pump().await?;
        }
    }

    /// Awaits `work` (a step's update, a checkpoint's save) while groups, samplers and evals
    /// keep coming in.
    pub(crate) async fn while_pumping<T>(&mut self, work: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
        tokio::pin!(work);
        loop {
            tokio::select! {
                r = &mut work => return r,
                r = self.pump() => r?,
            }
        }
    }

    /// After step `s` trained on `fill`: the next version's sampler is requested, queued behind
    /// the update (nobody waits for it); an eval due after the step waits for that sampler. The
    /// step's records get each completion's policy version and the stream's metrics.
    pub(crate) fn trained(&mut self, s: u32, eval_due: bool, res: &mut StepResult, fill: &Fill) {
        let publication = self.trainer.sampler();
        self.publishing.push_back((s + 1, tokio::spawn(publication)));
        if eval_due {
            self.eval_wanted.insert(s + 1);
        }
        for r in &mut res.rollouts {
            r.policy_version = fill.staleness.get(r.group).map(|&x| s - x);
        }
        let m = &mut res.metrics;
        let staleness = &fill.staleness;
        let n = staleness.len().max(1) as f64;
        m.insert(train::STALENESS_MEAN.into(), staleness.iter().map(|&x| f64::from(x)).sum::<f64>() / n);
        m.insert(train::STALENESS_MAX.into(), f64::from(fill.off_policy()));
        m.insert(train::GROUPS_STALE.into(), fill.stale as f64);
        m.insert(time::TRAINER_WAIT_S.into(), self.trainer_waited_s);
        m.insert(time::SAMPLER_WAIT_S.into(), std::mem::take(&mut self.sampler_waited_s));
        m.insert(time::STEP_S.into(), self.since.elapsed().as_secs_f64());
        self.since = Instant::now();
    }

    /// Launches nothing more and waits for the next thing in flight (an eval the run's last
    /// records wait for).
    pub(crate) async fn drain(&mut self) -> Result<(), Error> {
        self.closed = true;
        self.pump().await
    }
}

/// What [`Pipe::pump`] woke up for.
enum Next {
    Group(Result<Sampled, Error>),
    Published(Result<crate::backend::Result<Arc<dyn Sampler>>, tokio::task::JoinError>),
    Eval(EvalDone),
}
