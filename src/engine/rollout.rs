//! Sampling groups of completions and grading them, shared by training steps and evaluation.
//!
//! Prompts are sampled in batches (several prompts decode together, see [`Sampler::sample`]),
//! several batches in flight at once; a batch is graded while the next ones sample. With
//! `rollout.max_attempts` > 1, every failed answer gets the feedback turn and another attempt,
//! all failing trajectories of the phase sampled together; a trajectory keeps all its turns.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use crate::backend::{ChatRequest, Pending, Sampler};
use crate::seam::{SampleRequest, SampledSequence, SamplingParams, StopReason};
use crate::data::Problem;
use crate::sandbox::{AnyGrader, GradeOptions, VerdictStatus};

use super::grading::{Graded, grade_group};
use super::prompting::{Prompting, Rendered};
use super::control::StopSignal;
use super::error::Error;
use super::event::{Event, EventSink};
use super::{feedback, problems};

/// One attempt: the prompt it saw, what was sampled, and its grade.
#[derive(Debug)]
pub(crate) struct Turn {
    /// The prompt of this attempt (the whole conversation so far).
    pub prompt: Rendered,
    /// The sampled completion.
    pub seq: SampledSequence,
    /// Its decoded text.
    pub text: String,
    /// Its grade.
    pub graded: Graded,
}

/// One sample of a group: its attempts in order; the last one's grade counts.
#[derive(Debug)]
pub(crate) struct Trajectory {
    /// The attempts, at least one.
    pub turns: Vec<Turn>,
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

/// The groups of a phase between retry rounds: which were lost to sampler failures, their
/// seeds, and the time spent.
struct Retrying<'g> {
    groups: &'g mut [Group],
    lost: &'g mut [bool],
    seeds: &'g [u64],
    timing: &'g mut Timing,
}

/// A sample request with the conversation it renders (for samplers that take messages).
fn chat_request(prompt: &Rendered, num_samples: usize, seed: u64, greedy: bool) -> ChatRequest {
    ChatRequest { request: SampleRequest { prompt: prompt.tokens.clone(), num_samples, seed: Some(seed), greedy }, messages: prompt.messages.clone() }
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

/// Samples `n` completions per prompt (seeded per prompt), grades them, and gives failed ones
/// up to `max_attempts - 1` more attempts with feedback.
///
/// Batches of prompts are submitted ahead, up to [`Sampler::max_in_flight`] at once, and each
/// batch's grading starts as soon as its completions arrive, so grading overlaps sampling.
/// Returns the groups in prompt order and the timing; `None` when a stop was requested mid-way
/// (replies still in flight are discarded).
///
/// # Errors
/// Sampler, template or tokenizer failures.
pub(crate) async fn run(sampler: &dyn Sampler, prompts: Vec<GroupPrompt>, ph: &Phase<'_>, cx: &Ctx<'_>) -> Result<(Option<Vec<Group>>, Timing), Error> {
    let Phase { n, greedy, params, max_attempts, name: phase, step } = *ph;
    debug_assert!(greedy == 0 || max_attempts == 1, "greedy answers are single attempts");
    let per_prompt = n + greedy;
    cx.sink.event(Event::Phase { step, phase, total: (prompts.len() * per_prompt) as u64 });
    let mut timing = Timing::default();
    let total = prompts.len();
    let mut last_infra = None;
    // At most `batch_rows` completions per call, so grading of a batch overlaps sampling of the
    // next (the local sampler decodes a call's rows together).
    let per_batch = (sampler.batch_rows() / per_prompt.max(1)).max(1);
    let in_flight = sampler.max_in_flight().max(1);
    let mut pending = Vec::with_capacity(prompts.len());
    let mut rest = prompts.into_iter().peekable();
    let mut queue: VecDeque<(Vec<GroupPrompt>, Pending<Completions>)> = VecDeque::new();
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
                requests.push(chat_request(r, n, *seed, false));
                if greedy > 0 {
                    requests.push(chat_request(r, greedy, *seed, true));
                }
            }
            let reply = sampler.sample_chat(requests, params);
            queue.push_back((batch, reply));
        }
        let Some((batch, reply)) = queue.pop_front() else { break };
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
            let handle = tokio::spawn(grade_group(cx.grader.clone(), problem.clone(), cx.prompting.chat.submitted(&texts), cx.opts.clone(), cx.retries));
            pending.push((problem, prompt, seed, seqs, texts, handle));
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
    let mut groups = Vec::with_capacity(pending.len());
    let mut seeds = Vec::with_capacity(pending.len());
    for (problem, prompt, seed, seqs, texts, handle) in pending {
        seeds.push(seed);
        let graded = handle.await?;
        let trajectories = seqs
            .into_iter()
            .zip(texts)
            .zip(graded)
            .map(|((seq, text), graded)| Trajectory { turns: vec![Turn { prompt: prompt.clone(), seq, text, graded }] })
            .collect();
        groups.push(Group { problem, trajectories });
    }
    timing.grade_s += t.elapsed().as_secs_f64();

    let mut lost = vec![false; groups.len()];
    for attempt in 2..=max_attempts {
        if cx.stop.requested() {
            return Ok((None, timing));
        }
        let mut state = Retrying { groups: &mut groups, lost: &mut lost, seeds: &seeds, timing: &mut timing };
        if !retry_failed(sampler, &mut state, attempt, ph, cx).await? {
            break;
        }
    }
    let mut lost = lost.into_iter();
    groups.retain(|_| !lost.next().unwrap_or(false));
    Ok((Some(groups), timing))
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

/// One more attempt for every trajectory whose last attempt failed (infrastructure failures
/// excepted: those say nothing about the answer). Returns whether anything was retried.
async fn retry_failed(sampler: &dyn Sampler, state: &mut Retrying<'_>, attempt: u32, ph: &Phase<'_>, cx: &Ctx<'_>) -> Result<bool, Error> {
    let Retrying { groups, lost, seeds, timing } = state;
    let (params, max_attempts, step) = (ph.params, ph.max_attempts, ph.step);
    let mut todo = vec![];
    for (gi, g) in groups.iter().enumerate() {
        if lost[gi] {
            continue;
        }
        for (ti, t) in g.trajectories.iter().enumerate() {
            let last = t.last();
            if last.graded.verdict.passed || last.graded.verdict.status == VerdictStatus::InfraError {
                continue;
            }
            let fb = feedback::describe(&g.problem, &last.graded.verdict);
            let message = cx.prompting.templates.feedback(&g.problem, &fb, attempt, max_attempts)?;
            let next = cx.prompting.next_turn(&last.prompt, &last.seq.tokens, &last.text, message)?;
            todo.push((gi, ti, next));
        }
    }
    if todo.is_empty() {
        return Ok(false);
    }
    cx.sink.event(Event::Phase { step, phase: "retry", total: todo.len() as u64 });
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
        let requests: Vec<ChatRequest> = todo[start..end].iter().map(|(gi, ti, next)| chat_request(next, 1, problems::derive_seed(seeds[*gi], i64::from(attempt), *ti as u64), false)).collect();
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
                // A trajectory cut short by the server would be scored on an attempt the model
                // was not done with: its group is dropped instead.
                let hit: std::collections::BTreeSet<usize> = rows.iter().map(|&i| todo[i].0).collect();
                if !dropped(&e, hit.len(), cx, "retry", step) {
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
    cx.sink.event(Event::Progress { phase: "retry", done: todo.len() as u64 });
    let mut handles = Vec::with_capacity(todo.len());
    for ((gi, ti, next), seqs) in todo.into_iter().zip(out) {
        // A group dropped mid-way keeps no further attempt, even from its calls that worked.
        let Some(mut seqs) = seqs.filter(|_| !lost[gi]) else { continue };
        let seq = seqs.pop().expect("checked: one completion per request");
        let text = cx.prompting.tokenizer.decode(&seq.tokens, true)?;
        let handle = tokio::spawn(grade_group(cx.grader.clone(), groups[gi].problem.clone(), cx.prompting.chat.submitted(std::slice::from_ref(&text)), cx.opts.clone(), cx.retries));
        handles.push((gi, ti, next, seq, text, handle));
    }
    let t = Instant::now();
    for (gi, ti, prompt, seq, text, handle) in handles {
        let mut graded = handle.await?;
        let graded = graded.pop().expect("one grade per text");
        groups[gi].trajectories[ti].turns.push(Turn { prompt, seq, text, graded });
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

