//! The rollout loop of a phase ([`run`]): first turns in batches of whole groups, then each
//! trajectory's next turn as soon as its own environment step ended, with up to
//! [`Sampler::max_in_flight`] sampler calls out at once and each step on a task of its own.
//!
//! One loop, one [`Rollout`]: it submits calls while a slot is free (next turns that are ready
//! first, else the next batch of first turns), then takes whichever ends first, a call or a step.
//! A call's completions are stepped at once; a step's turns join their trajectories, each of
//! which ends or joins the [`ReadyQueue`]. Seeds are per (group, turn, trajectory), not per
//! call, and the groups come back in prompt order whatever the order things end in. (The local
//! sampler's log-probabilities still differ in their last bits with the rows a call holds, which
//! is why an environment [in rounds](Env::in_rounds), the feedback one, keeps the calls it
//! always got.)

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use futures_util::FutureExt as _;
use futures_util::StreamExt as _;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;

use crate::backend::{ChatRequest, Sampler};
use crate::data::Problem;
use crate::engine::env::{Ending, Env, Reply, Step};
use crate::engine::error::Error;
use crate::engine::event::Event;
use crate::engine::problems;
use crate::engine::prompting::Rendered;
use crate::seam::{SampleRequest, SampledSequence, SamplingParams, StopReason};

use super::clock::{Clock, Timing};
use super::phase::{Ctx, Group, GroupPrompt, Phase, Trajectory, Turn};
use super::ready::{Ready, ReadyQueue};

/// A sampler's reply: per request, its completions.
type Completions = Vec<Vec<SampledSequence>>;

/// A call that came back: what it asked for, and the sampler's reply.
type Replied = (Asked, crate::backend::Result<Completions>);

/// A sample request with the conversation it renders (for samplers that take messages).
fn chat_request(prompt: &Rendered, num_samples: usize, seed: u64, greedy: bool, cx: &Ctx<'_>) -> ChatRequest {
    // The schemas go with every request, whether or not the chat template lists them: a chat
    // endpoint applies its own template, which takes them from the request's `tools`.
    let tools = cx.prompting.tools.as_ref().map(|t| t.schemas()).unwrap_or_default();
    ChatRequest { request: SampleRequest { prompt: prompt.tokens.clone(), num_samples, seed: Some(seed), greedy }, messages: prompt.messages.clone(), tools }
}

/// Whether a sampler's failure is an infrastructure error to drop groups for (after warning)
/// rather than a reason to stop the run.
fn dropped(e: &crate::backend::Error, groups: usize, cx: &Ctx<'_>, phase: &str, step: i64) -> bool {
    if !e.is_infrastructure() {
        return false;
    }
    let causes = crate::causes::causes(e).join(": ");
    tracing::warn!(step, phase, groups, "sampling failed, groups dropped: {causes}");
    cx.sink.event(Event::Warning(format!("step {step} {phase}: {groups} group(s) dropped after sampler infrastructure errors: {causes}")));
    true
}

/// What an environment needs of trajectory `t` for its next turn.
fn step_of(t: Option<&Trajectory>, turn: u32, text: String, seq: &SampledSequence, started: Instant) -> Step {
    let turns = t.map_or(&[][..], |t| &t.turns[..]);
    Step {
        text,
        turn,
        truncated: seq.stop_reason == StopReason::Length,
        tool_calls: turns.iter().map(|x| x.tools.calls.len() as u32).sum(),
        parse_errors_in_row: turns.iter().rev().take_while(|x| x.tools.parse_error.is_some()).count() as u32,
        elapsed_s: started.elapsed().as_secs_f64(),
        shell: turns.iter().find_map(|x| x.tools.shell.clone()),
    }
}

/// A turn of a trajectory from the environment's reply.
fn turn_of(prompt: Rendered, seq: SampledSequence, text: String, reply: Reply) -> (Turn, Option<Ending>) {
    (Turn { prompt, seq, text, graded: reply.graded, tools: reply.tools, append: reply.append }, reply.done)
}

/// Samples and steps the phase's groups over the environment `env` (see [`super::run`]).
///
/// # Errors
/// Sampler, template or tokenizer failures.
pub(super) async fn run(sampler: &dyn Sampler, env: Arc<dyn Env>, prompts: Vec<GroupPrompt>, ph: &Phase<'_>, cx: &Ctx<'_>) -> Result<(Option<Vec<Group>>, Timing), Error> {
    let per_turn = turn_params(ph.params, cx);
    let params = per_turn.as_ref().unwrap_or(ph.params);
    cx.sink.event(Event::Phase { step: ph.step, phase: ph.name, total: (prompts.len() * (ph.n + ph.greedy)) as u64 });
    Rollout::new(sampler, env, prompts, ph, params, cx).run().await
}

/// A group under way: its problem, seed and start, and its trajectories (`None` until the
/// environment stepped their first turn).
struct Slot {
    problem: Arc<Problem>,
    seed: u64,
    started: Instant,
    trajectories: Vec<Option<Trajectory>>,
    /// Dropped after a sampler infrastructure error: no further turn, never returned.
    lost: bool,
}

/// A sampled turn on its way through the environment: its trajectory, prompt, completion and
/// text.
struct Row {
    ti: usize,
    prompt: Rendered,
    seq: SampledSequence,
    text: String,
}

/// An environment step that ended: its group, its turns, and the environment's replies to them
/// in order.
struct Stepped {
    gi: usize,
    rows: Vec<Row>,
    replies: Result<Result<Vec<Reply>, Error>, tokio::task::JoinError>,
}

/// What a sampler call in flight asked for.
enum Asked {
    /// First turns of whole groups (prompt index and prompt), and when they were asked for.
    First(Vec<(usize, GroupPrompt)>, Instant),
    /// Next turns.
    Next(Vec<Ready>),
}

/// The rollout loop of one phase (see the module docs): the groups under way, the calls and
/// steps in flight, and the trajectories ready for their next turn.
struct Rollout<'a> {
    sampler: &'a dyn Sampler,
    env: Arc<dyn Env>,
    ph: Phase<'a>,
    /// The phase's sampling parameters as a turn takes them.
    params: &'a SamplingParams,
    cx: &'a Ctx<'a>,
    /// The groups by prompt index: `None` until their first turns come back (for good when
    /// their call failed).
    slots: Vec<Option<Slot>>,
    /// First turns not yet asked for, by prompt index.
    rest: std::iter::Peekable<std::iter::Enumerate<std::vec::IntoIter<GroupPrompt>>>,
    /// Calls in flight.
    calls: FuturesUnordered<BoxFuture<'static, Replied>>,
    /// First-turn calls among them.
    first_calls: usize,
    /// Environment steps in flight, each on its own task.
    steps: FuturesUnordered<BoxFuture<'static, Stepped>>,
    ready: ReadyQueue,
    /// Whether the environment's turns go in rounds ([`Env::in_rounds`]).
    rounds: bool,
    /// Trajectories sampled and not yet ended (progress of the turns after the first).
    open: usize,
    /// Whether the progress of the turns after the first is being reported.
    continuing: bool,
    clock: Clock,
    timing: Timing,
    /// The last infrastructure error of a first-turn call (the error when no group came back).
    last_infra: Option<crate::backend::Error>,
}

impl<'a> Rollout<'a> {
    fn new(sampler: &'a dyn Sampler, env: Arc<dyn Env>, prompts: Vec<GroupPrompt>, ph: &Phase<'a>, params: &'a SamplingParams, cx: &'a Ctx<'a>) -> Self {
        let rounds = env.in_rounds();
        Rollout {
            sampler,
            env,
            ph: *ph,
            params,
            cx,
            slots: (0..prompts.len()).map(|_| None).collect(),
            rest: prompts.into_iter().enumerate().peekable(),
            calls: FuturesUnordered::new(),
            first_calls: 0,
            steps: FuturesUnordered::new(),
            ready: ReadyQueue::default(),
            rounds,
            open: 0,
            continuing: false,
            clock: Clock::new(),
            timing: Timing::default(),
            last_infra: None,
        }
    }

    /// The loop: keep the sampler's call slots filled, take what ends first, until nothing is in
    /// flight and nothing waits.
    async fn run(mut self) -> Result<(Option<Vec<Group>>, Timing), Error> {
        loop {
            if self.cx.stop.requested() {
                return Ok((None, self.timing));
            }
            self.submit();
            let (sampling, stepping) = (!self.calls.is_empty(), !self.steps.is_empty());
            if !sampling && !stepping {
                break;
            }
            // Replies first when both are there: they free a call slot and start steps.
            tokio::select! {
                biased;
                Some((asked, reply)) = self.calls.next(), if sampling => {
                    self.clock.tick(&mut self.timing, sampling, stepping);
                    self.replied(asked, reply)?;
                }
                Some(stepped) = self.steps.next(), if stepping => {
                    self.clock.tick(&mut self.timing, sampling, stepping);
                    self.stepped(stepped)?;
                }
                else => {}
            }
        }
        self.end().await
    }

    /// Fills the free call slots: ready next turns first (a trajectory under way is nearer its
    /// end, and its tool calls then overlap the first turns still to come), else the next batch
    /// of first turns. An environment [in rounds](Env::in_rounds) gets its next turns only once
    /// nothing else is out, all at once in trajectory order: the calls rlx always made for it.
    fn submit(&mut self) {
        let batch_rows = self.sampler.batch_rows();
        if self.rounds && !self.ready.is_empty() && self.calls.is_empty() && self.steps.is_empty() && self.rest.peek().is_none() {
            self.ready.sort();
            while !self.ready.is_empty() {
                let rows = self.ready.take_call(batch_rows);
                self.push_call(Asked::Next(rows));
            }
        }
        while self.calls.len() < self.sampler.max_in_flight().max(1) {
            let asked = if !self.rounds && !self.ready.is_empty() {
                Asked::Next(self.ready.take_call(batch_rows))
            } else if self.rest.peek().is_some() {
                // At most `batch_rows` completions per call, so grading of a batch overlaps
                // sampling of the next (the local sampler decodes a call's rows together).
                let per_batch = (batch_rows / (self.ph.n + self.ph.greedy).max(1)).max(1);
                self.first_calls += 1;
                Asked::First(self.rest.by_ref().take(per_batch).collect(), Instant::now())
            } else {
                break;
            };
            self.push_call(asked);
        }
    }

    /// Submits a call.
    fn push_call(&mut self, asked: Asked) {
        self.clock.tick(&mut self.timing, !self.calls.is_empty(), !self.steps.is_empty());
        self.clock.submitted(&mut self.timing);
        let reply = self.sampler.sample_chat(self.requests(&asked), self.params);
        self.calls.push(reply.map(move |r| (asked, r)).boxed());
    }

    /// The requests of a call: per group its sampled completions, then its greedy ones (eval's
    /// second protocol); per next turn one completion, seeded per (group, turn, trajectory) so
    /// that what it samples does not depend on the call it rides in.
    fn requests(&self, asked: &Asked) -> Vec<ChatRequest> {
        let (n, greedy, cx) = (self.ph.n, self.ph.greedy, self.cx);
        match asked {
            Asked::First(batch, _) => {
                let mut requests = Vec::with_capacity(batch.len() * 2);
                for (_, (_, r, seed)) in batch {
                    requests.push(chat_request(r, n, *seed, false, cx));
                    if greedy > 0 {
                        requests.push(chat_request(r, greedy, *seed, true, cx));
                    }
                }
                requests
            }
            Asked::Next(rows) => rows
                .iter()
                .map(|r| {
                    let seed = problems::derive_seed(self.slot(r.gi).seed, i64::from(r.turn), r.ti as u64);
                    // A greedy trajectory (eval's second protocol) stays greedy.
                    chat_request(&r.prompt, 1, seed, r.ti >= n, cx)
                })
                .collect(),
        }
    }

    fn slot(&self, gi: usize) -> &Slot {
        self.slots[gi].as_ref().expect("a group with turns under way")
    }

    fn slot_mut(&mut self, gi: usize) -> &mut Slot {
        self.slots[gi].as_mut().expect("a group with turns under way")
    }

    /// A call came back.
    fn replied(&mut self, asked: Asked, reply: crate::backend::Result<Completions>) -> Result<(), Error> {
        match asked {
            Asked::First(batch, started) => {
                self.first_calls -= 1;
                self.first_turns(batch, started, reply)?;
                self.start_continuing();
            }
            Asked::Next(rows) => self.next_turns(rows, reply)?,
        }
        Ok(())
    }

    /// A first-turn call came back: its groups start, and each trajectory is stepped (a group's
    /// together where the environment wants them so).
    fn first_turns(&mut self, batch: Vec<(usize, GroupPrompt)>, started: Instant, reply: crate::backend::Result<Completions>) -> Result<(), Error> {
        let Phase { n, greedy, name: phase, step, .. } = self.ph;
        let out = match reply {
            Ok(out) => out,
            Err(e) if dropped(&e, batch.len(), self.cx, phase, step) => {
                self.timing.sampler_dropped += batch.len();
                self.cx.sink.event(Event::Progress { phase, done: (batch.len() * (n + greedy)) as u64 });
                self.last_infra = Some(e);
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        let asked: Vec<usize> = if greedy > 0 { batch.iter().flat_map(|_| [n, greedy]).collect() } else { vec![n; batch.len()] };
        check_reply(&asked, &out)?;
        // A prompt's greedy answers follow its sampled ones, in one group.
        let mut replies = out.into_iter();
        let out = std::iter::from_fn(|| {
            let mut seqs = replies.next()?;
            if greedy > 0 {
                seqs.extend(replies.next().unwrap_or_default());
            }
            Some(seqs)
        });
        for ((gi, (problem, prompt, seed)), seqs) in batch.into_iter().zip(out) {
            self.cx.sink.event(Event::Progress { phase, done: seqs.len() as u64 });
            let texts = seqs.iter().map(|s| self.cx.prompting.tokenizer.decode(&s.tokens, true)).collect::<Result<Vec<String>, _>>()?;
            self.open += seqs.len();
            self.slots[gi] = Some(Slot { problem, seed, started, trajectories: seqs.iter().map(|_| None).collect(), lost: false });
            let rows: Vec<Row> = seqs.into_iter().zip(texts).enumerate().map(|(ti, (seq, text))| Row { ti, prompt: prompt.clone(), seq, text }).collect();
            if self.rounds {
                self.spawn_step(gi, rows);
            } else {
                for row in rows {
                    self.spawn_step(gi, vec![row]);
                }
            }
        }
        Ok(())
    }

    /// A next-turn call came back: each turn is stepped; on an infrastructure error the groups
    /// it held are dropped.
    fn next_turns(&mut self, rows: Vec<Ready>, reply: crate::backend::Result<Completions>) -> Result<(), Error> {
        let got = match reply {
            Ok(got) => got,
            Err(e) => {
                // A trajectory cut short by the server would be scored on a turn the model was
                // not done with: its group is dropped instead.
                let hit: BTreeSet<usize> = rows.iter().map(|r| r.gi).filter(|&gi| !self.slot(gi).lost).collect();
                if hit.is_empty() && e.is_infrastructure() {
                    // Groups already dropped by a call that failed before this one.
                    return Ok(());
                }
                if !dropped(&e, hit.len(), self.cx, self.env.continuation(), self.ph.step) {
                    return Err(e.into());
                }
                for gi in hit {
                    self.lose(gi);
                }
                return Ok(());
            }
        };
        check_reply(&vec![1; rows.len()], &got)?;
        for (r, mut seqs) in rows.into_iter().zip(got) {
            // A group dropped mid-way keeps no further turn, even from its calls that worked.
            if self.slot(r.gi).lost {
                continue;
            }
            let seq = seqs.pop().expect("checked: one completion per request");
            let text = self.cx.prompting.tokenizer.decode(&seq.tokens, true)?;
            self.spawn_step(r.gi, vec![Row { ti: r.ti, prompt: r.prompt, seq, text }]);
        }
        Ok(())
    }

    /// Steps `rows` of group `gi` on a task of its own, so that no step waits for another.
    fn spawn_step(&mut self, gi: usize, rows: Vec<Row>) {
        let slot = self.slot(gi);
        let steps = rows
            .iter()
            .map(|r| {
                let t = slot.trajectories[r.ti].as_ref();
                step_of(t, t.map_or(1, |t| t.turns.len() as u32 + 1), r.text.clone(), &r.seq, slot.started)
            })
            .collect();
        let handle = tokio::spawn(self.env.clone().step(slot.problem.clone(), steps));
        self.steps.push(async move { Stepped { gi, rows, replies: handle.await } }.boxed());
    }

    /// A step ended: its turns join their trajectories, each of which ends or is ready for its
    /// next turn.
    fn stepped(&mut self, Stepped { gi, rows, replies }: Stepped) -> Result<(), Error> {
        for (row, reply) in rows.into_iter().zip(replies??) {
            let slot = self.slot_mut(gi);
            if slot.lost {
                continue;
            }
            let (turn, ending) = turn_of(row.prompt, row.seq, row.text, reply);
            let t = slot.trajectories[row.ti].get_or_insert_with(|| Trajectory { turns: vec![], ending: None });
            t.turns.push(turn);
            t.ending = ending;
            self.advance(gi, row.ti)?;
        }
        Ok(())
    }

    /// Trajectory `ti` of group `gi` after a step: ready for its next turn, its prompt extending
    /// the last one token for token where the template allows, unless it ended (the environment
    /// said so, the next prompt would overflow, or no turn is left).
    fn advance(&mut self, gi: usize, ti: usize) -> Result<(), Error> {
        let (max_turns, max_prompt) = (self.env.max_turns() as usize, self.env.max_prompt_tokens());
        let prompting = self.cx.prompting;
        let t = self.slot_mut(gi).trajectories[ti].as_mut().expect("a trajectory just stepped");
        if t.ending.is_none() {
            if t.turns.len() >= max_turns {
                t.ending = Some(Ending::MaxTurns);
            } else {
                let last = t.last();
                let next = prompting.next_turn(&last.prompt, &last.seq.tokens, &last.text, last.append.clone())?;
                if max_prompt.is_some_and(|m| next.tokens.len() > m) {
                    t.ending = Some(Ending::ContextOverflow);
                } else {
                    let turn = t.turns.len() as u32 + 1;
                    self.ready.push(Ready { gi, ti, turn, prompt: next });
                    return Ok(());
                }
            }
        }
        self.ended(1);
        Ok(())
    }

    /// Drops group `gi` after a sampler infrastructure error.
    fn lose(&mut self, gi: usize) {
        self.timing.sampler_dropped += 1;
        self.ready.drop_group(gi);
        let slot = self.slot_mut(gi);
        slot.lost = true;
        let open = slot.trajectories.iter().filter(|t| t.as_ref().is_none_or(|t| t.ending.is_none())).count();
        self.ended(open);
    }

    /// `k` trajectories ended (or were dropped).
    fn ended(&mut self, k: usize) {
        self.open -= k;
        if self.continuing && k > 0 {
            self.cx.sink.event(Event::Progress { phase: self.env.continuation(), done: k as u64 });
        }
    }

    /// Once every first turn is in, the turns after the first get their progress: the
    /// trajectories still going, each counted when it ends.
    fn start_continuing(&mut self) {
        if self.continuing || self.first_calls > 0 || self.rest.peek().is_some() || self.open == 0 || self.env.max_turns() < 2 {
            return;
        }
        self.continuing = true;
        self.cx.sink.event(Event::Phase { step: self.ph.step, phase: self.env.continuation(), total: self.open as u64 });
    }

    /// Nothing in flight: the groups in prompt order, those dropped left out, after the limit
    /// grades.
    async fn end(mut self) -> Result<(Option<Vec<Group>>, Timing), Error> {
        if let Some(e) = self.last_infra.take()
            && self.slots.iter().all(Option::is_none)
            && !self.slots.is_empty()
        {
            // Not one group sampled: the server is down, not flaky; the run stops and says so.
            return Err(e.into());
        }
        self.clock.tick(&mut self.timing, false, false);
        self.clock.ended(&mut self.timing);
        let t = Instant::now();
        let mut groups: Vec<Group> = self
            .slots
            .into_iter()
            .flatten()
            .filter(|s| !s.lost)
            .map(|s| Group { problem: s.problem, trajectories: s.trajectories.into_iter().map(|t| t.expect("every step ended")).collect() })
            .collect();
        finish(&self.env, &mut groups).await?;
        self.timing.grade_s += t.elapsed().as_secs_f64();
        Ok((Some(groups), self.timing))
    }
}

/// Sampling parameters of a tool turn: `limits.max_tokens_per_turn` when it is lower.
fn turn_params(params: &SamplingParams, cx: &Ctx<'_>) -> Option<SamplingParams> {
    let m = cx.prompting.tools.as_ref()?.limits.max_tokens_per_turn? as usize;
    (m < params.max_tokens).then(|| SamplingParams { max_tokens: m, ..params.clone() })
}

/// Every trajectory ended: one that ended on a limit gets the environment's limit grade, if it
/// gives one.
async fn finish(env: &Arc<dyn Env>, groups: &mut [Group]) -> Result<(), Error> {
    let mut handles = vec![];
    for (gi, g) in groups.iter_mut().enumerate() {
        for (ti, t) in g.trajectories.iter_mut().enumerate() {
            if *t.ending.get_or_insert(Ending::MaxTurns) == Ending::Completed {
                continue;
            }
            if let Some(f) = env.clone().on_limit(g.problem.clone(), t.last().text.clone()) {
                handles.push((gi, ti, tokio::spawn(f)));
            }
        }
    }
    for (gi, ti, h) in handles {
        let graded = h.await?;
        if let Some(last) = groups[gi].trajectories[ti].turns.last_mut() {
            last.graded = graded;
        }
    }
    env.cleanup();
    Ok(())
}

/// A sampler must answer every request with as many completions as asked: anything else is a
/// backend bug, reported rather than silently training on fewer samples.
fn check_reply(asked: &[usize], got: &[Vec<SampledSequence>]) -> Result<(), Error> {
    let counts: Vec<usize> = got.iter().map(Vec::len).collect();
    if counts != asked {
        return Err(Error::Backend(crate::backend::Error::InvalidArgument {
            what: "sampler reply",
            reason: format!("asked for {asked:?} completions per request, got {counts:?}"),
        }));
    }
    Ok(())
}
