//! Sampling groups of completions and grading them, shared by training steps and evaluation.
//! Grading of one problem's group runs while the next problem is being sampled.

use std::sync::Arc;
use std::time::Instant;

use crate::backend::{SampledSequence, Sampler, SamplingParams, StopReason};
use crate::data::Problem;
use crate::sandbox::GradeOptions;

use super::grading::{Graded, grade_group};
use crate::sandbox::AnyGrader;
use super::prompting::{Prompting, Rendered};
use super::{Error, Event, EventSink, Stop};

/// One problem's group after sampling and grading.
#[derive(Debug)]
pub struct Group {
    /// The problem.
    pub problem: Arc<Problem>,
    /// Its prompt.
    pub prompt: Rendered,
    /// The sampled sequences.
    pub seqs: Vec<SampledSequence>,
    /// Their decoded text.
    pub texts: Vec<String>,
    /// Their grades.
    pub graded: Vec<Graded>,
}

/// Wall-clock split of a rollout phase.
#[derive(Debug, Default, Clone, Copy)]
pub struct Timing {
    /// Seconds spent sampling.
    pub sample_s: f64,
    /// Seconds spent waiting for grades after the last sample (grading not hidden by sampling).
    pub grade_s: f64,
}

/// What a rollout phase needs besides the sampler.
pub struct Ctx<'a> {
    /// Prompt pipeline (for decoding).
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
    pub stop: &'a Stop,
}

/// Samples `n` completions per prompt (seeded per prompt) and grades them.
///
/// Returns the sampler back (it is moved onto a blocking thread for each prompt), the groups in
/// prompt order, and the timing. Returns `Ok(None)` groups when a stop was requested mid-way.
///
/// # Errors
/// Sampler failures.
pub async fn run<S: Sampler + 'static>(
    mut sampler: S,
    prompts: Vec<(Arc<Problem>, Rendered, u64)>,
    n: usize,
    params: &SamplingParams,
    cx: &Ctx<'_>,
    phase: &'static str,
    step: i64,
) -> Result<(S, Option<Vec<Group>>, Timing), Error> {
    cx.sink.event(Event::Phase { step, phase, total: (prompts.len() * n) as u64 });
    let mut timing = Timing::default();
    let mut pending = Vec::with_capacity(prompts.len());
    for (problem, prompt, seed) in prompts {
        if cx.stop.requested() {
            return Ok((sampler, None, timing));
        }
        let t = Instant::now();
        let mut p = params.clone();
        p.seed = Some(seed);
        let tokens = prompt.tokens.clone();
        let (s, seqs) = tokio::task::spawn_blocking(move || {
            let r = sampler.sample(&tokens, n, &p);
            (sampler, r)
        })
        .await
        .map_err(|e| Error::Setup(format!("sampling thread failed: {e}")))?;
        sampler = s;
        let seqs = seqs?;
        timing.sample_s += t.elapsed().as_secs_f64();
        cx.sink.event(Event::Progress { phase, done: seqs.len() as u64 });
        let texts: Vec<String> = seqs.iter().map(|s| cx.prompting.tokenizer.decode(&s.tokens, true).unwrap_or_default()).collect();
        let handle = tokio::spawn(grade_group(cx.grader.clone(), problem.clone(), texts.clone(), cx.opts.clone(), cx.retries));
        pending.push((problem, prompt, seqs, texts, handle));
    }
    let t = Instant::now();
    let mut groups = Vec::with_capacity(pending.len());
    for (problem, prompt, seqs, texts, handle) in pending {
        let graded = handle.await.map_err(|e| Error::Setup(format!("grading task failed: {e}")))?;
        groups.push(Group { problem, prompt, seqs, texts, graded });
    }
    timing.grade_s = t.elapsed().as_secs_f64();
    Ok((sampler, Some(groups), timing))
}

/// A sampler on the trainer's current weights, taken on a blocking thread; the trainer comes back.
///
/// # Errors
/// Backend failures.
pub async fn sampler_of<T>(mut trainer: T) -> Result<(T, T::Sampler), Error>
where
    T: crate::backend::Trainer + 'static,
    T::Sampler: 'static,
{
    let (trainer, sampler) = tokio::task::spawn_blocking(move || {
        let s = trainer.sampler();
        (trainer, s)
    })
    .await
    .map_err(|e| Error::Setup(format!("trainer thread failed: {e}")))?;
    Ok((trainer, sampler?))
}

/// Fraction of sequences that hit `max_tokens`.
pub fn truncation_rate(groups: &[Group]) -> f64 {
    let (mut len, mut all) = (0usize, 0usize);
    for g in groups {
        for s in &g.seqs {
            all += 1;
            len += usize::from(s.stop_reason == StopReason::Length);
        }
    }
    if all == 0 { 0.0 } else { len as f64 / all as f64 }
}

/// p-th percentile (0..=100) of values, nearest rank; 0 for none.
pub fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * values.len() as f64).ceil().max(1.0) as usize;
    values[rank.min(values.len()) - 1]
}
