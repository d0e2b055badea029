//! Remote backends k steps deep: with `grpo.max_steps_off_policy` = k ≥ 1 on a backend whose
//! sampler and trainer run elsewhere (Tinker), groups stream in and steps train as soon as they
//! have theirs, with sampling up to k policy versions behind.
//!
//! - **Streaming.** Problems are drawn in order, one group per task, each sampled on the newest
//!   sampler weights published so far and graded as soon as its completions arrive. While step
//!   s trains, the groups of steps s + 1 … s + k are sampled (k · `prompts_per_step` groups in
//!   flight or waiting, plus one for each group a step consumes without using it); a group
//!   that would train more than k versions after the newest sampler waits for the next one
//!   when that is on its way; a step takes the first `prompts_per_step` that arrive (with dynamic
//!   sampling, the first informative ones, drawing more as groups are set aside; past
//!   `max_extra_rounds` · `prompts_per_step` set aside, whatever comes).
//! - **Versions and staleness.** Version v is the weights after v optimizer steps. After step s
//!   trains, the sampler for version s + 1 is requested (`save_weights_for_sampler`) without
//!   anyone waiting for it; groups sampled until it is ready use the previous version. A group
//!   of version v trains at step s only if s − v ≤ k; older ones are set aside and counted
//!   (`train/groups_stale`). The losses' importance ratios use each datum's own sampler
//!   log-probabilities, so a stale datum is corrected like any off-policy one.
//! - **Evals beside training.** An eval due after step s runs on the version-(s + 1) sampler
//!   while training goes on, and is recorded at step s.
//! - **Records in step order.** A step's records (rollouts, metrics line, checkpoint record)
//!   are written in step order once its eval, if any, has finished; its trainer state is saved
//!   right after it trains (before the next update), its record later. A crash loses nothing
//!   that a checkpoint record points at: records after the last checkpoint record are dropped
//!   on resume as always.
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
use crate::seam::StateRef;

use super::eval::{self, EvalResult};
use super::fill::Fill;
use super::pyreward::Scores;
use super::rollout::{self, Ctx, Group, Timing};
use super::{Driver, Error, Event, EventSink, RunOutcome, problems, step};

/// Sampling seeds of streamed groups derive from (seed, this, problem slot): a group's seed does
/// not depend on which step it lands in, which a stream does not know when it samples.
const STREAM_SEED_STEP: i64 = -2;

type Boxed<'b, T> = Pin<Box<dyn Future<Output = T> + Send + 'b>>;
/// A sampler requested after a step.
type Publication = tokio::task::JoinHandle<crate::backend::Result<Arc<dyn Sampler>>>;
/// An eval's step and result.
type EvalDone = (u32, Result<Option<EvalResult>, Error>);
/// Starts the eval after a step on that step's sampler.
type Evaluate<'b> = dyn Fn(u32, Arc<dyn Sampler>) -> Boxed<'b, EvalDone> + Sync + 'b;

/// One group as it came back.
struct Sampled {
    slot: u64,
    version: u32,
    /// `None`: the sampler dropped it after infrastructure errors, or a stop was requested.
    group: Option<Group>,
    /// Why the sampler dropped it.
    dropped: Option<crate::backend::Error>,
    scores: Scores,
    timing: Timing,
}

/// Passes warnings on and drops progress: groups stream in one at a time, and a progress bar
/// per group would only flicker.
struct Quiet<'s>(&'s dyn EventSink);

impl EventSink for Quiet<'_> {
    fn event(&self, e: Event) {
        if let Event::Warning(_) = e {
            self.0.event(e);
        }
    }
}

/// Samples, grades and scores the group of problem `slot` on `sampler` (version `version`).
fn sample_group<'b>(slot: u64, version: u32, sampler: Arc<dyn Sampler>, cfg: &'b step::StepConfig<'b>, cx: &'b Ctx<'b>) -> Boxed<'b, Result<Sampled, Error>> {
    Box::pin(async move {
        let plan = cfg.plan;
        let problem = cfg.train[(slot % cfg.train.len() as u64) as usize].clone();
        let rendered = cx.prompting.first_turn(&problem)?;
        let seed = problems::derive_seed(plan.seed, STREAM_SEED_STEP, slot);
        let phase = rollout::Phase { n: plan.grpo.group_size as usize, params: cfg.sampling, max_attempts: plan.rollout.max_attempts, name: "sample", step: i64::from(version) };
        let (groups, timing, dropped) = match rollout::run(&*sampler, vec![(problem, rendered, seed)], &phase, cx).await {
            Ok((groups, timing)) => (groups, timing, None),
            // One group lost to the sampler's infrastructure errors (already warned about).
            Err(Error::Backend(e)) if e.is_infrastructure() => (None, Timing { sampler_dropped: 1, ..Timing::default() }, Some(e)),
            Err(e) => return Err(e),
        };
        let group = groups.and_then(|mut g| g.pop());
        let scores = match (cfg.python, &group) {
            (Some(python), Some(g)) => python.score(version, std::slice::from_ref(g), cx.sink).await?,
            _ => Scores::default(),
        };
        Ok(Sampled { slot, version, group, dropped, scores, timing })
    })
}

/// The groups a step has taken so far.
#[derive(Default)]
struct Take {
    groups: Vec<Group>,
    scores: Scores,
    staleness: Vec<u32>,
    informative: usize,
    set_aside: usize,
    stale: usize,
    consumed: Vec<u64>,
    timing: Timing,
    /// The last sampler failure a dropped group met.
    last_drop: Option<crate::backend::Error>,
}

impl Take {
    /// Takes `g` for step `s` (or sets it aside, counted, when it is too stale).
    fn offer(&mut self, g: Sampled, s: u32, cfg: &step::StepConfig<'_>) {
        self.consumed.push(g.slot);
        self.timing.sample_s += g.timing.sample_s;
        self.timing.grade_s += g.timing.grade_s;
        self.timing.sampler_dropped += g.timing.sampler_dropped;
        if g.dropped.is_some() {
            self.last_drop = g.dropped;
        }
        let Some(group) = g.group else { return };
        let staleness = s.saturating_sub(g.version);
        if staleness > cfg.plan.grpo.max_steps_off_policy {
            self.stale += 1;
            return;
        }
        let informative = step::informative(&group, 0, &g.scores, cfg);
        self.informative += usize::from(informative);
        self.set_aside += usize::from(!informative);
        self.staleness.push(staleness);
        self.groups.push(group);
        self.scores.append(g.scores);
    }

    /// Groups that count toward the step: all it took, or with dynamic sampling the
    /// informative ones.
    fn useful(&self, cfg: &step::StepConfig<'_>) -> usize {
        match cfg.plan.grpo.dynamic_sampling {
            None => self.groups.len(),
            Some(_) => self.informative,
        }
    }

    /// Whether the step can train.
    fn full(&self, cfg: &step::StepConfig<'_>) -> bool {
        let target = cfg.plan.grpo.prompts_per_step as usize;
        match cfg.plan.grpo.dynamic_sampling {
            None => self.groups.len() >= target,
            Some(d) => self.informative >= target || (self.set_aside >= d.max_extra_rounds as usize * target && self.groups.len() >= target),
        }
    }
}

/// The stream's moving parts, borrowed from the run for `'b`.
struct Pipe<'b> {
    cfg: &'b step::StepConfig<'b>,
    /// The rollout context with [`Quiet`] events.
    cx: &'b Ctx<'b>,
    /// `grpo.max_steps_off_policy` and `prompts_per_step`.
    k: usize,
    p: usize,
    /// The step being gathered or trained, and which.
    step_now: u32,
    training: bool,
    /// Useful groups the step being gathered has, and groups it consumed without using (stale,
    /// dropped, set aside by dynamic sampling): each of those is drawn again.
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
    evaluate: &'b Evaluate<'b>,
}

impl<'b> Pipe<'b> {
    /// An empty stream drawing from `cursor` (skipping `skip`), sampling on `latest` first.
    fn new(cfg: &'b step::StepConfig<'b>, cx: &'b Ctx<'b>, latest: (u32, Arc<dyn Sampler>), cursor: u64, skip: BTreeSet<u64>, evaluate: &'b Evaluate<'b>) -> Self {
        let g = &cfg.plan.grpo;
        Pipe {
            cfg,
            cx,
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
            evaluate,
        }
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
                    self.evals.push((self.evaluate)(version - 1, sampler.clone()));
                }
                self.latest = (version, sampler);
            }
            Next::Eval((step, ev)) => {
                self.eval_done.insert(step, ev?);
            }
        }
        Ok(())
    }
}

impl Pipe<'_> {
    /// The groups of step `s`, as they arrive; `None` when a stop was requested.
    async fn gather(&mut self, s: u32) -> Result<Option<Take>, Error> {
        let mut take = Take::default();
        (self.step_now, self.training) = (s, false);
        loop {
            while !take.full(self.cfg)
                && let Some(g) = self.ready.pop_front()
            {
                take.offer(g, s, self.cfg);
            }
            if take.groups.is_empty() && take.timing.sampler_dropped >= self.p
                && let Some(e) = take.last_drop.take()
            {
                // A step's worth of groups lost and not one sampled: the sampler is down, not
                // flaky; the run stops and says so (as a synchronous step would).
                return Err(e.into());
            }
            if self.cx.stop.requested() {
                return Ok(None);
            }
            if take.full(self.cfg) {
                (self.training, self.have, self.extra) = (true, 0, 0);
                return Ok(Some(take));
            }
            self.have = take.useful(self.cfg);
            self.extra = take.consumed.len() - self.have;
            self.pump().await?;
        }
    }

    /// Awaits `work` (a step's update) while groups, samplers and evals keep coming in.
    async fn while_pumping<T>(&mut self, work: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
        tokio::pin!(work);
        loop {
            tokio::select! {
                r = &mut work => return r,
                r = self.pump() => r?,
            }
        }
    }
}

/// What [`Pipe::pump`] woke up for.
enum Next {
    Group(Result<Sampled, Error>),
    Published(Result<crate::backend::Result<Arc<dyn Sampler>>, tokio::task::JoinError>),
    Eval(EvalDone),
}

/// A step trained, waiting for its records to be written in order.
struct Trained {
    res: step::StepResult,
    /// Its trainer state, saved right after it trained, when a checkpoint is due.
    state: Option<StateRef>,
    /// Whether an eval is due after it.
    eval: bool,
    /// The data cursor and the problems consumed beyond it, as of its state.
    cursor: (u64, Vec<u64>),
}

impl<'a> Driver<'a> {
    /// The step loop of a remote backend k steps deep (the module's doc).
    pub(super) async fn drive_stream(&mut self, trainer: &'a dyn Trainer, first_step: u32) -> Result<RunOutcome, Error> {
        let (plan, cfg, setup) = (self.plan, self.cfg, self.setup);
        let quiet = Quiet(self.cx.sink);
        let cx = Ctx { sink: &quiet, ..*self.cx };
        let p = plan.grpo.prompts_per_step as usize;
        let skip: BTreeSet<u64> = match first_step {
            0 => BTreeSet::new(),
            _ => self.dir.last_checkpoint()?.map(|c| c.consumed_ahead.into_iter().collect()).unwrap_or_default(),
        };
        let eval_cx = &cx;
        let evaluate = move |step: u32, sampler: Arc<dyn Sampler>| -> Boxed<'_, EvalDone> {
            Box::pin(async move { (step, eval::run(&*sampler, i64::from(step), plan, &setup.eval_set, &setup.eval_sampling, eval_cx).await) })
        };
        let latest = (first_step, trainer.sampler().await?);
        let mut pipe = Pipe::new(cfg, &cx, latest, self.cursor, skip.clone(), &evaluate);
        // Every slot consumed by a trained step (or set aside for it), for checkpoint cursors;
        // every slot below `base` was consumed before this attempt.
        let base = self.cursor;
        let mut consumed = skip;
        let mut ledger: BTreeMap<u32, Trained> = BTreeMap::new();
        let mut done = first_step;
        let mut t_step = Instant::now();
        let mut outcome = None;
        for s in first_step..plan.schedule.max_steps {
            if cx.stop.requested() {
                break;
            }
            let t_wait = Instant::now();
            let Some(mut take) = pipe.gather(s).await? else { break };
            let trainer_waited_s = t_wait.elapsed().as_secs_f64();
            let staleness = take.staleness.clone();
            let (stale, consumed_now) = (take.stale, std::mem::take(&mut take.consumed));
            let fill = Fill::streamed(p, take.groups, take.informative, consumed_now.len() as u64, take.timing, take.scores);
            let off = staleness.iter().copied().max().unwrap_or(0);
            let mut res = pipe.while_pumping(step::learn(Some(trainer), s, &fill, off, cfg, &cx)).await?;
            if let Some(last) = res.sandbox_down.take() {
                // Nothing trained: the step's problems are not consumed, a resumed run samples
                // them again.
                outcome = Some(Error::SandboxDown { step: s, groups: fill.groups.len(), last });
                break;
            }
            consumed.extend(consumed_now);
            // The next version's sampler, queued behind this step's update; nobody waits for it.
            let publication = trainer.sampler();
            pipe.publishing.push_back((s + 1, tokio::spawn(publication)));
            let eval = !setup.eval_set.is_empty() && self.due(s, plan.schedule.eval_every);
            if eval {
                pipe.eval_wanted.insert(s + 1);
            }
            // The state after exactly this step: saved before the next update is submitted.
            let state = match self.due(s, plan.schedule.save_every) {
                true => Some(pipe.while_pumping(async { Ok(trainer.save_state(&super::checkpoint_name(s)).await?) }).await?),
                false => None,
            };
            for r in &mut res.rollouts {
                r.policy_version = staleness.get(r.group).map(|&x| s - x);
            }
            stream_metrics(&mut res, &staleness, stale, trainer_waited_s, std::mem::take(&mut pipe.sampler_waited_s), t_step);
            t_step = Instant::now();
            ledger.insert(s, Trained { res, state, eval, cursor: cursor_of(base, &consumed) });
            done = s + 1;
            if let Some(e) = self.flush(&mut ledger, &mut pipe.eval_done)? {
                outcome = Some(e);
                break;
            }
        }
        // What is trained gets recorded: evals still due are waited for, unless stopping.
        while !ledger.is_empty() && outcome.is_none() && !cx.stop.requested() {
            pipe.closed = true;
            pipe.pump().await?;
            if let Some(e) = self.flush(&mut ledger, &mut pipe.eval_done)? {
                outcome = Some(e);
            }
        }
        self.flush_all(&mut ledger, &mut pipe.eval_done)?;
        drop(pipe);
        // Groups in flight are dropped with the pipe: their problems are drawn again on resume.
        let (cursor, ahead) = cursor_of(base, &consumed);
        self.cursor = cursor;
        match outcome {
            Some(e) => {
                self.save_unsaved(done, ahead).await?;
                Err(e)
            }
            None if done < plan.schedule.max_steps => {
                self.save_unsaved(done, ahead).await?;
                Ok(RunOutcome::Interrupted { steps: done })
            }
            None => Ok(RunOutcome::Finished { steps: plan.schedule.max_steps }),
        }
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
            self.cursor = t.cursor.0;
            self.record_checkpoint(s, state, self.checkpoint_kind(s), t.cursor.1)?;
        }
        Ok(stop)
    }
}

/// The data cursor (the first problem slot from `base` not consumed) and the slots consumed
/// beyond it.
fn cursor_of(base: u64, consumed: &BTreeSet<u64>) -> (u64, Vec<u64>) {
    let mut cursor = base;
    while consumed.contains(&cursor) {
        cursor += 1;
    }
    (cursor, consumed.range(cursor..).copied().collect())
}

/// A streamed step's own metrics: staleness, stale groups, waits, step time.
fn stream_metrics(res: &mut step::StepResult, staleness: &[u32], stale: usize, trainer_waited_s: f64, sampler_waited_s: f64, since: Instant) {
    let m = &mut res.metrics;
    let n = staleness.len().max(1) as f64;
    m.insert(train::STALENESS_MEAN.into(), staleness.iter().map(|&x| f64::from(x)).sum::<f64>() / n);
    m.insert(train::STALENESS_MAX.into(), f64::from(staleness.iter().copied().max().unwrap_or(0)));
    m.insert(train::GROUPS_STALE.into(), stale as f64);
    m.insert(time::TRAINER_WAIT_S.into(), trainer_waited_s);
    m.insert(time::SAMPLER_WAIT_S.into(), sampler_waited_s);
    m.insert(time::STEP_S.into(), since.elapsed().as_secs_f64());
}
