//! Sampling groups of trajectories and stepping their environment, shared by training steps and
//! evaluation: the one rollout loop over any environment ([`super::env`]).
//!
//! Prompts are sampled in batches (several prompts decode together, see [`Sampler::sample`]),
//! several batches in flight at once; a batch's first turns are stepped (graded, or their tool
//! calls run) while the next ones sample. Every trajectory the environment did not end gets its
//! next turn, all of the phase's sampled together, until each has ended; a trajectory keeps all
//! its turns. With `rollout.max_attempts` the environment is the feedback one, with
//! `rollout.tools` the tool one.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use crate::backend::{ChatRequest, Pending, Sampler};
use crate::seam::{SampleRequest, SampledSequence, SamplingParams, StopReason};
use crate::data::Problem;
use crate::sandbox::{AnyGrader, GradeOptions};
use crate::prompt::Message;

use super::env::feedback::Feedback;
use super::env::tools::ToolEnv;
use super::env::{Ending, Env, Reply, Step, TurnTools};
use super::grading::Graded;
use super::prompting::{Prompting, Rendered};
use super::control::StopSignal;
use super::error::Error;
use super::event::{Event, EventSink};
use super::problems;

/// One turn: the prompt it saw, what was sampled, its grade, and what the environment did.
#[derive(Debug)]
pub(crate) struct Turn {
    /// The prompt of this turn (the whole conversation so far).
    pub prompt: Rendered,
    /// The sampled completion.
    pub seq: SampledSequence,
    /// Its decoded text.
    pub text: String,
    /// Its grade (for a tool-calling turn that did not end the trajectory, a placeholder).
    pub graded: Graded,
    /// Its tool calls, parse error and mask.
    pub tools: TurnTools,
    /// The messages the environment appended after it (feedback, tool results).
    pub append: Vec<Message>,
}

/// One sample of a group: its turns in order; the last one's grade counts.
#[derive(Debug)]
pub(crate) struct Trajectory {
    /// The turns, at least one.
    pub turns: Vec<Turn>,
    /// Why it ended (`None` only while it runs).
    pub ending: Option<Ending>,
}

impl Trajectory {
    /// The attempt whose grade counts.
    pub(crate) fn last(&self) -> &Turn {
        self.turns.last().expect("a trajectory has at least one turn")
    }
}

/// One problem's group after sampling and grading.
#[derive(Debug)]
pub(crate) struct Group {
    /// The problem.
    pub problem: Arc<Problem>,
    /// One trajectory per sample.
    pub trajectories: Vec<Trajectory>,
}

/// Wall-clock split of a rollout phase, and the groups it lost.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Timing {
    /// Seconds spent sampling.
    pub sample_s: f64,
    /// Seconds spent waiting for grades after sampling (grading not hidden by sampling).
    pub grade_s: f64,
    /// Groups dropped because sampling failed with an infrastructure error that survived the
    /// sampler's retries (a server down or answering garbage): left out, never scored.
    pub sampler_dropped: usize,
}

/// What a rollout phase needs besides the sampler.
pub(crate) struct Ctx<'a> {
    /// Prompt pipeline (for decoding and feedback turns).
    pub prompting: &'a Arc<Prompting>,
    /// The grader.
    pub grader: &'a Arc<AnyGrader>,
    /// Grading options.
    pub opts: &'a GradeOptions,
    /// Infra retries per completion.
    pub retries: u32,
    /// Events.
    pub sink: &'a dyn EventSink,
    /// Stop request.
    pub stop: &'a StopSignal,
}

/// A sampler's reply: per request, its completions.
type Completions = Vec<Vec<SampledSequence>>;

/// A prompt to sample a group for: the problem, its first-turn prompt, the group's seed.
pub(crate) type GroupPrompt = (Arc<Problem>, Rendered, u64);

/// What a rollout phase samples, besides its prompts: completions per prompt, sampling
/// parameters, attempts, and the name and step its events carry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Phase<'a> {
    /// Completions per prompt (a group's size).
    pub n: usize,
    /// Greedy completions per prompt beside the `n` sampled ones, at the end of each group's
    /// trajectories (eval's second protocol, one attempt): asked in the same call, so that a
    /// local sampler prefills each prompt once for both protocols.
    pub greedy: usize,
    /// Sampling parameters (seeds are per prompt).
    pub params: &'a SamplingParams,
    /// Attempts per trajectory (1: no feedback turns).
    pub max_attempts: u32,
    /// The phase's name in events (`sample`, `eval`).
    pub name: &'static str,
    /// The step it belongs to (−1: the baseline eval).
    pub step: i64,
}

/// The groups of a phase between turns: which were lost to sampler failures, their seeds and
/// start times, and the time spent.
struct Retrying<'g> {
    groups: &'g mut [Group],
    lost: &'g mut [bool],
    seeds: &'g [u64],
    started: &'g [Instant],
    timing: &'g mut Timing,
}

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

/// The environment of a phase: the tool one under `rollout.tools`, else the feedback one with
/// the phase's attempts (one: the single-turn rollout).
fn environment(max_attempts: u32, cx: &Ctx<'_>) -> Arc<dyn Env> {
    match &cx.prompting.tools {
        Some(set) => Arc::new(ToolEnv { prompting: cx.prompting.clone(), set: set.clone(), grader: cx.grader.clone(), opts: cx.opts.clone(), retries: cx.retries }),
        None => Arc::new(Feedback { prompting: cx.prompting.clone(), grader: cx.grader.clone(), opts: cx.opts.clone(), retries: cx.retries, max_attempts }),
    }
}

/// The first prompt of `problem`: its environment's first messages, rendered.
///
/// # Errors
/// Template or tokenizer failures.
pub(crate) fn first_prompt(problem: &Problem, cx: &Ctx<'_>) -> Result<Rendered, Error> {
    cx.prompting.render(environment(1, cx).start(problem)?)
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

/// Samples `n` completions per prompt (seeded per prompt), steps the environment on them, and
/// gives every trajectory it did not end its next turn, until each has ended.
///
/// Batches of prompts are submitted ahead, up to [`Sampler::max_in_flight`] at once, and each
/// batch's first turns are stepped as soon as their completions arrive, so grading overlaps
/// sampling. Returns the groups in prompt order and the timing; `None` when a stop was requested
/// mid-way (replies still in flight are discarded).
///
/// # Errors
/// Sampler, template or tokenizer failures.
pub(crate) async fn run(sampler: &dyn Sampler, prompts: Vec<GroupPrompt>, ph: &Phase<'_>, cx: &Ctx<'_>) -> Result<(Option<Vec<Group>>, Timing), Error> {
    let Phase { n, greedy, params, max_attempts, name: phase, step } = *ph;
    debug_assert!(greedy == 0 || max_attempts == 1, "greedy answers are single attempts");
    let env = environment(max_attempts, cx);
    let per_turn = turn_params(params, cx);
    let params = per_turn.as_ref().unwrap_or(params);
    let per_prompt = n + greedy;
    cx.sink.event(Event::Phase { step, phase, total: (prompts.len() * per_prompt) as u64 });
    let mut timing = Timing::default();
    let total = prompts.len();
    let mut last_infra = None;
    // At most `batch_rows` completions per call, so grading of a batch overlaps sampling of the
    // next (the local sampler decodes a call's rows together).
    let per_batch = (sampler.batch_rows() / per_prompt.max(1)).max(1);
    let in_flight = sampler.max_in_flight().max(1);
    let mut pending: Vec<Stepping> = Vec::with_capacity(prompts.len());
    let mut rest = prompts.into_iter().peekable();
    let mut queue: VecDeque<(Vec<GroupPrompt>, Instant, Pending<Completions>)> = VecDeque::new();
    let t = Instant::now();
    loop {
        if cx.stop.requested() {
            return Ok((None, timing));
        }
        // Keep the sampler busy: the next batches are queued while this one is awaited.
        while queue.len() < in_flight && rest.peek().is_some() {
            let batch: Vec<GroupPrompt> = rest.by_ref().take(per_batch).collect();
            let mut requests = Vec::with_capacity(batch.len() * 2);
            for (_, r, seed) in &batch {
                requests.push(chat_request(r, n, *seed, false, cx));
                if greedy > 0 {
                    requests.push(chat_request(r, greedy, *seed, true, cx));
                }
            }
            let reply = sampler.sample_chat(requests, params);
            queue.push_back((batch, Instant::now(), reply));
        }
        let Some((batch, started, reply)) = queue.pop_front() else { break };
        let out = match reply.await {
            Ok(out) => out,
            Err(e) if dropped(&e, batch.len(), cx, phase, step) => {
                timing.sampler_dropped += batch.len();
                cx.sink.event(Event::Progress { phase, done: (batch.len() * per_prompt) as u64 });
                last_infra = Some(e);
                continue;
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
        for ((problem, prompt, seed), seqs) in batch.into_iter().zip(out) {
            cx.sink.event(Event::Progress { phase, done: seqs.len() as u64 });
            let texts = seqs.iter().map(|s| cx.prompting.tokenizer.decode(&s.tokens, true)).collect::<Result<Vec<String>, _>>()?;
            let steps = texts.iter().zip(&seqs).map(|(text, seq)| step_of(None, 1, text.clone(), seq, started)).collect();
            let handle = tokio::spawn(env.clone().step(problem.clone(), steps));
            pending.push((problem, prompt, seed, started, seqs, texts, handle));
        }
    }
    if let Some(e) = last_infra
        && pending.is_empty()
        && total > 0
    {
        // Not one group sampled: the server is down, not flaky; the run stops and says so.
        return Err(e.into());
    }
    timing.sample_s += t.elapsed().as_secs_f64();
    let t = Instant::now();
    let (mut groups, seeds, starts) = first_turns(pending).await?;
    timing.grade_s += t.elapsed().as_secs_f64();

    let mut lost = vec![false; groups.len()];
    for turn in 2..=env.max_turns() {
        if cx.stop.requested() {
            return Ok((None, timing));
        }
        let mut state = Retrying { groups: &mut groups, lost: &mut lost, seeds: &seeds, started: &starts, timing: &mut timing };
        if !next_turns(sampler, &env, &mut state, turn, (ph, params), cx).await? {
            break;
        }
    }
    finish(&env, &mut groups, &lost).await?;
    let mut lost = lost.into_iter();
    groups.retain(|_| !lost.next().unwrap_or(false));
    Ok((Some(groups), timing))
}

/// A group whose first turns were sampled: the problem, its prompt, seed and start, the
/// completions, their texts, and the environment's step of them under way.
type Stepping = (Arc<Problem>, Rendered, u64, Instant, Vec<SampledSequence>, Vec<String>, tokio::task::JoinHandle<Result<Vec<Reply>, Error>>);

/// The groups of the first turns as their steps finish, with their seeds and start times.
async fn first_turns(pending: Vec<Stepping>) -> Result<(Vec<Group>, Vec<u64>, Vec<Instant>), Error> {
    let mut groups = Vec::with_capacity(pending.len());
    let mut seeds = Vec::with_capacity(pending.len());
    let mut starts = Vec::with_capacity(pending.len());
    for (problem, prompt, seed, started, seqs, texts, handle) in pending {
        seeds.push(seed);
        starts.push(started);
        let replies = handle.await??;
        let trajectories = seqs
            .into_iter()
            .zip(texts)
            .zip(replies)
            .map(|((seq, text), reply)| {
                let (turn, ending) = turn_of(prompt.clone(), seq, text, reply);
                Trajectory { turns: vec![turn], ending }
            })
            .collect();
        groups.push(Group { problem, trajectories });
    }
    Ok((groups, seeds, starts))
}

/// Sampling parameters of a tool turn: `limits.max_tokens_per_turn` when it is lower.
fn turn_params(params: &SamplingParams, cx: &Ctx<'_>) -> Option<SamplingParams> {
    let m = cx.prompting.tools.as_ref()?.limits.max_tokens_per_turn? as usize;
    (m < params.max_tokens).then(|| SamplingParams { max_tokens: m, ..params.clone() })
}

/// Every trajectory ended: one still going after the last turn ran out of turns; one that ended
/// on a limit gets the environment's limit grade, if it gives one.
async fn finish(env: &Arc<dyn Env>, groups: &mut [Group], lost: &[bool]) -> Result<(), Error> {
    let mut handles = vec![];
    for (gi, g) in groups.iter_mut().enumerate() {
        for (ti, t) in g.trajectories.iter_mut().enumerate() {
            let ending = *t.ending.get_or_insert(Ending::MaxTurns);
            if lost[gi] || ending == Ending::Completed {
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

/// The next turn of every trajectory the environment did not end (none of a lost group), its
/// prompt extending the last one token for token where the template allows. Returns whether
/// anything was sampled.
async fn next_turns(sampler: &dyn Sampler, env: &Arc<dyn Env>, state: &mut Retrying<'_>, turn: u32, (ph, params): (&Phase<'_>, &SamplingParams), cx: &Ctx<'_>) -> Result<bool, Error> {
    let Retrying { groups, lost, seeds, started, timing } = state;
    let (step, phase) = (ph.step, env.continuation());
    let mut todo = vec![];
    for (gi, g) in groups.iter_mut().enumerate() {
        if lost[gi] {
            continue;
        }
        for (ti, t) in g.trajectories.iter_mut().enumerate() {
            if t.ending.is_some() {
                continue;
            }
            let last = t.last();
            let next = cx.prompting.next_turn(&last.prompt, &last.seq.tokens, &last.text, last.append.clone())?;
            if env.max_prompt_tokens().is_some_and(|m| next.tokens.len() > m) {
                t.ending = Some(Ending::ContextOverflow);
                continue;
            }
            todo.push((gi, ti, next));
        }
    }
    if todo.is_empty() {
        return Ok(false);
    }
    cx.sink.event(Event::Phase { step, phase, total: todo.len() as u64 });
    // Calls of whole groups, up to `batch_rows` completions each (one call for the local
    // sampler, as before), all submitted before the first is awaited.
    let t = Instant::now();
    let mut calls: Vec<(Vec<usize>, Pending<Completions>)> = vec![];
    let mut start = 0;
    while start < todo.len() {
        let mut end = start + 1;
        while end < todo.len() && (todo[end].0 == todo[end - 1].0 || end - start < sampler.batch_rows()) {
            end += 1;
        }
        // A greedy trajectory (eval's second protocol) stays greedy.
        let requests: Vec<ChatRequest> = todo[start..end].iter().map(|(gi, ti, next)| chat_request(next, 1, problems::derive_seed(seeds[*gi], i64::from(turn), *ti as u64), *ti >= ph.n, cx)).collect();
        calls.push(((start..end).collect(), sampler.sample_chat(requests, params)));
        start = end;
    }
    let mut out: Vec<Option<Vec<SampledSequence>>> = (0..todo.len()).map(|_| None).collect();
    for (rows, reply) in calls {
        match reply.await {
            Ok(got) => {
                check_reply(&vec![1; rows.len()], &got)?;
                for (i, seqs) in rows.into_iter().zip(got) {
                    out[i] = Some(seqs);
                }
            }
            Err(e) => {
                // A trajectory cut short by the server would be scored on a turn the model was
                // not done with: its group is dropped instead.
                let hit: std::collections::BTreeSet<usize> = rows.iter().map(|&i| todo[i].0).collect();
                if !dropped(&e, hit.len(), cx, phase, step) {
                    return Err(e.into());
                }
                for gi in hit {
                    lost[gi] = true;
                    timing.sampler_dropped += 1;
                }
            }
        }
    }
    timing.sample_s += t.elapsed().as_secs_f64();
    cx.sink.event(Event::Progress { phase, done: todo.len() as u64 });
    let mut handles = Vec::with_capacity(todo.len());
    for ((gi, ti, next), seqs) in todo.into_iter().zip(out) {
        // A group dropped mid-way keeps no further turn, even from its calls that worked.
        let Some(mut seqs) = seqs.filter(|_| !lost[gi]) else { continue };
        let seq = seqs.pop().expect("checked: one completion per request");
        let text = cx.prompting.tokenizer.decode(&seq.tokens, true)?;
        let s = step_of(Some(&groups[gi].trajectories[ti]), turn, text.clone(), &seq, started[gi]);
        // Each trajectory stepped on its own task, so one's tool calls never wait for another's.
        let handle = tokio::spawn(env.clone().step(groups[gi].problem.clone(), vec![s]));
        handles.push((gi, ti, next, seq, text, handle));
    }
    let t = Instant::now();
    for (gi, ti, prompt, seq, text, handle) in handles {
        let reply = handle.await??.pop().expect("one reply per step");
        let (turn, ending) = turn_of(prompt, seq, text, reply);
        let traj = &mut groups[gi].trajectories[ti];
        traj.turns.push(turn);
        traj.ending = ending;
    }
    timing.grade_s += t.elapsed().as_secs_f64();
    Ok(true)
}

/// Fraction of sampled turns that hit `max_tokens`.
pub(crate) fn truncation_rate(groups: &[Group]) -> f64 {
    let (mut len, mut all) = (0usize, 0usize);
    for t in groups.iter().flat_map(|g| &g.trajectories) {
        for turn in &t.turns {
            all += 1;
            len += usize::from(turn.seq.stop_reason == StopReason::Length);
        }
    }
    if all == 0 { 0.0 } else { len as f64 / all as f64 }
}

