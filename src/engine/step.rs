//! One GRPO update: a step's groups (gathered by a source, engine/gather.rs, each scored once
//! as it arrived) → datums → optimizer step → the step's metrics and rollout records.
//!
//! [`learn`] builds the datums from the groups' advantages (degenerate groups skipped, truncated
//! trajectories masked when asked), shapes them (the KL penalty, then the loss aggregation:
//! [`crate::rl::shaping`]), trains, and reports.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::backend::Trainer;
use crate::quantile::quantile;
use crate::rl::advantage::should_skip;
use crate::rl::shaping;
use crate::runlog::metrics::{optim, sandbox, time, train};
use crate::runlog::RolloutRecord;
use crate::sandbox::VerdictStatus;
use crate::seam::{AdamParams, Datum, ForwardBackwardOutput, KlKind, KlLoss, LossFn, OptimStepOutput, StopReason, make_multiturn_datum};
use crate::spec::types::{KlEstimator, KlForm, Overlong, RolloutLog};

use super::env::Ending;
use super::error::Error;
use super::event::Event;
use super::fill::Fill;
use super::record;
use super::rollout::{Ctx, Trajectory, truncation_rate};
use super::scoring::StepConfig;

/// What a finished step produced.
pub(crate) struct StepResult {
    /// The metrics line (without `step`).
    pub metrics: BTreeMap<String, f64>,
    /// Records for rollouts.jsonl.
    pub rollouts: Vec<RolloutRecord>,
    /// When every group of the step was dropped for sandbox infrastructure errors: the last
    /// error (the sandbox is down; the engine stops rather than sample on).
    pub sandbox_down: Option<String>,
}

/// A datum and which of its positions predict a sampled token (the rest is context).
#[derive(Debug)]
struct Built {
    datum: Datum,
    sampled: Vec<bool>,
}

impl Built {
    /// Sampled tokens in the datum: L_i of the loss aggregation.
    fn len(&self) -> usize {
        self.sampled.iter().filter(|&&x| x).count()
    }
}

/// The datums of one trajectory: one per run of turns whose prompts start with the previous
/// turn's prompt and answer (all of them, unless the chat template rewrote history; see
/// [`super::prompting::Prompting::next_turn`]). Feedback, tool results and template glue are
/// context; so is a malformed turn under `parse_error.mask_turn`.
fn trajectory_datums(t: &Trajectory, advantage: f64) -> Vec<Built> {
    let mut out = vec![];
    // The tokens of the conversation so far and where each answer in it starts.
    type Chain<'a> = (Vec<u32>, Vec<(usize, &'a [f32])>);
    let mut chain: Option<Chain<'_>> = None;
    for turn in &t.turns {
        let start = turn.prompt.tokens.len();
        // A masked turn is kept as context: no log-probabilities, no loss.
        let lp: &[f32] = if turn.tools.masked { &[] } else { &turn.seq.logprobs };
        match chain.as_mut() {
            Some((tokens, segments)) if turn.prompt.tokens.starts_with(tokens) => {
                tokens.clone_from(&turn.prompt.tokens);
                tokens.extend_from_slice(&turn.seq.tokens);
                segments.push((start, lp));
            }
            _ => {
                if let Some((tokens, segments)) = chain.take() {
                    out.push((tokens, segments));
                }
                let mut tokens = turn.prompt.tokens.clone();
                tokens.extend_from_slice(&turn.seq.tokens);
                chain = Some((tokens, vec![(start, lp)]));
            }
        }
    }
    out.extend(chain);
    out.into_iter()
        .filter_map(|(mut tokens, mut segments)| {
            segments.retain(|(_, lp)| !lp.is_empty());
            // Context after the last answer teaches nothing.
            let &(start, lp) = segments.last()?;
            tokens.truncate(start + lp.len());
            let mut sampled = vec![false; tokens.len() - 1];
            for &(start, lp) in &segments {
                // Position i predicts tokens[i + 1] (make_multiturn_datum's shift).
                sampled[start - 1..start - 1 + lp.len()].fill(true);
            }
            Some(Built { datum: make_multiturn_datum(&tokens, &segments, advantage), sampled })
        })
        .collect()
}

/// Counts over a step's groups, for its metrics line.
#[derive(Debug, Default)]
struct Tally {
    rewards: Vec<f64>,
    correct: usize,
    first_correct: usize,
    formatted: usize,
    total: usize,
    skipped: u32,
    /// Groups whose advantages were all zero, whether or not they were skipped.
    degenerate: u32,
    infra_dropped: u32,
    infra_errors: u32,
    latencies: Vec<f64>,
    completion_tokens: usize,
    prompt_tokens: usize,
    turns: usize,
    /// Trajectories left out of the update by `grpo.overlong: {kind: mask}`.
    overlong_masked: usize,
    tests: Tests,
    /// Tool turns: how the step's trajectories used tools and ended.
    tools: ToolTally,
    /// The last infrastructure error of a dropped group.
    last_infra: Option<String>,
}

/// Tool use and stop reasons over a step's scored trajectories.
#[derive(Debug, Default)]
struct ToolTally {
    trajectories: usize,
    turns: usize,
    calls: usize,
    /// Calls that ran, and those whose tool failed.
    ran: usize,
    errors: usize,
    malformed: usize,
    stops: BTreeMap<&'static str, usize>,
}

impl ToolTally {
    fn add(&mut self, t: &Trajectory) {
        self.trajectories += 1;
        self.turns += t.turns.len();
        for turn in &t.turns {
            self.calls += turn.tools.calls.len();
            self.ran += turn.tools.calls.iter().filter(|c| c.output.is_some()).count();
            self.errors += turn.tools.calls.iter().filter(|c| c.error).count();
            self.malformed += usize::from(turn.tools.parse_error.is_some());
        }
        *self.stops.entry(t.ending.unwrap_or(Ending::Completed).name()).or_default() += 1;
    }

    fn metrics(&self, m: &mut BTreeMap<String, f64>) {
        let of = |x: usize, n: usize| if n == 0 { 0.0 } else { x as f64 / n as f64 };
        m.insert(train::TURNS_MEAN.into(), of(self.turns, self.trajectories));
        m.insert(train::TOOL_CALLS_MEAN.into(), of(self.calls, self.trajectories));
        m.insert(train::TOOL_ERROR_RATE.into(), of(self.errors, self.ran));
        m.insert(train::PARSE_ERROR_RATE.into(), of(self.malformed, self.turns));
        let completed = self.stops.get(Ending::Completed.name()).copied().unwrap_or(0);
        m.insert(train::LIMIT_STOP_RATE.into(), of(self.trajectories - completed, self.trajectories));
        for e in Ending::ALL {
            m.insert(train::stop_key(e.name()), of(self.stops.get(e.name()).copied().unwrap_or(0), self.trajectories));
        }
    }
}

/// How the tests run in a step ended, over every attempt with code.
#[derive(Debug, Default)]
struct Tests {
    run: usize,
    timeouts: usize,
    runtime_errors: usize,
    wrong_answers: usize,
    /// Attempts with code, and those whose grading failed for infrastructure reasons.
    graded: usize,
    infra: usize,
    /// Judged attempts in a compiled language, and those that did not compile.
    compiled: usize,
    compile_errors: usize,
}

impl Tests {
    fn add(&mut self, v: &crate::sandbox::Verdict) {
        use crate::sandbox::TestStatus as T;
        self.graded += 1;
        self.infra += usize::from(v.status == VerdictStatus::InfraError);
        if let Some(failed) = v.compile_failed() {
            (self.compiled, self.compile_errors) = (self.compiled + 1, self.compile_errors + usize::from(failed));
        }
        for t in &v.tests {
            self.run += 1;
            match t.status {
                T::Passed => {}
                T::WrongAnswer => self.wrong_answers += 1,
                T::Timeout => self.timeouts += 1,
                T::RuntimeError | T::MemoryLimit | T::OutputLimit | T::CompileError => self.runtime_errors += 1,
            }
        }
    }

    fn metrics(&self, m: &mut BTreeMap<String, f64>) {
        let of = |x: usize, n: usize| if n == 0 { 0.0 } else { x as f64 / n as f64 };
        m.insert(sandbox::TESTS.into(), self.run as f64);
        m.insert(sandbox::TIMEOUT_RATE.into(), of(self.timeouts, self.run));
        m.insert(sandbox::RUNTIME_ERROR_RATE.into(), of(self.runtime_errors, self.run));
        m.insert(sandbox::WRONG_ANSWER_RATE.into(), of(self.wrong_answers, self.run));
        m.insert(sandbox::INFRA_RATE.into(), of(self.infra, self.graded));
        if self.compiled > 0 {
            m.insert(crate::runlog::metrics::train::COMPILE_ERROR_RATE.into(), of(self.compile_errors, self.compiled));
        }
    }
}

/// A step's groups scored: the datums to train on, the rollout records, the counts.
struct Scored {
    datums: Vec<Built>,
    rollouts: Vec<RolloutRecord>,
    tally: Tally,
}

/// The datums of a step's groups (degenerate groups skipped, truncated trajectories masked when
/// asked), their rollout records and counts, from the rewards and advantages computed when
/// each group arrived.
fn score(step: u32, fill: &Fill, cfg: &StepConfig<'_>, cx: &Ctx<'_>) -> Scored {
    let groups = &fill.groups;
    let plan = cfg.plan;
    let mask_overlong = matches!(plan.grpo.overlong, Some(Overlong::Mask));
    let (mut datums, mut rollouts, mut n) = (vec![], vec![], Tally::default());
    for (gi, (g, scored)) in groups.iter().zip(&fill.scored).enumerate() {
        for t in g.trajectories.iter().flat_map(|t| &t.turns) {
            n.infra_errors += t.graded.infra_errors;
            if t.graded.code.is_some() {
                n.latencies.push(t.graded.latency_ms);
                n.tests.add(&t.graded.verdict);
            }
        }
        let Some(rewards) = &scored.rewards else {
            if fill.scores.failed(gi) {
                // The user's reward failed (already reported and counted): not the model's doing.
                continue;
            }
            // Infrastructure failure that survived retries: the group says nothing about the
            // model, so it is dropped rather than scored.
            n.infra_dropped += 1;
            n.last_infra = g.trajectories.iter().flat_map(|t| &t.turns).filter_map(|t| t.graded.verdict.error.clone()).next_back().or(n.last_infra.take());
            cx.sink.event(Event::Warning(format!("step {step}: group of `{}` dropped after sandbox infrastructure errors", g.problem.id)));
            continue;
        };
        let adv = &scored.advantages;
        // Degenerate, or set aside by dynamic sampling (whose filter may be correctness: an
        // all-wrong group whose rewards differ only by format or length still trains nothing).
        let degenerate = should_skip(adv);
        // Under distillation a group of equal rewards still carries the teacher's signal.
        let skip = (plan.grpo.skip_degenerate && degenerate && plan.grpo.distill.is_none()) || (plan.grpo.dynamic_sampling.is_some() && !scored.informative);
        // `task_reward: false`: the teacher's term alone (the rewards are still graded and reported).
        let task = plan.grpo.distill.as_ref().is_none_or(|d| d.task_reward);
        n.skipped += u32::from(skip);
        n.degenerate += u32::from(degenerate);
        if let Some(t) = g.trajectories.first() {
            n.prompt_tokens += t.turns[0].prompt.tokens.len();
        }
        for (k, (t, (&r, &a))) in g.trajectories.iter().zip(rewards.iter().zip(adv)).enumerate() {
            let last = t.last();
            n.total += 1;
            n.correct += usize::from(last.graded.verdict.passed);
            n.first_correct += usize::from(t.turns[0].graded.verdict.passed);
            n.formatted += usize::from(last.graded.verdict.status != VerdictStatus::FormatError);
            n.turns += t.turns.len();
            n.tools.add(t);
            n.completion_tokens += t.turns.iter().map(|x| x.seq.tokens.len()).sum::<usize>();
            n.rewards.push(r);
            // Overlong filtering: the answer whose reward counts was cut off by max_tokens.
            let masked = mask_overlong && last.seq.stop_reason == StopReason::Length;
            n.overlong_masked += usize::from(masked && !skip);
            if !skip && !masked {
                datums.extend(trajectory_datums(t, if task { a } else { 0.0 }));
            }
            let log = match plan.log.rollouts {
                RolloutLog::All => true,
                RolloutLog::Sample => gi == 0,
                RolloutLog::None => false,
            };
            if log {
                rollouts.push(record::rollout(step, g, gi, k, t, (r, a, skip), !plan.rollout.tools.is_empty()));
            }
        }
    }
    Scored { datums, rollouts, tally: n }
}

/// The KL term (`grpo.kl`) of a step: the reference's log-probabilities of every datum's
/// targets; in the advantage form β·k(t) (centred and discounted when asked) taken off each
/// sampled token's advantage, in the loss form the rows of the loss term (coefficients set once
/// the aggregation factors are known, [`kl_loss`]). Returns the mean estimate per sampled
/// token and the loss form's reference rows; `None` when KL is off or nothing trains.
async fn apply_kl(trainer: Option<&dyn Trainer>, datums: &mut [Built], cfg: &StepConfig<'_>) -> Result<Option<(f64, Option<Vec<Vec<f32>>>)>, Error> {
    let (Some(kl), Some(trainer)) = (cfg.plan.grpo.kl, trainer) else { return Ok(None) };
    if datums.is_empty() {
        return Ok(None);
    }
    let reference = trainer.reference_logprobs(datums.iter().map(|b| b.datum.clone()).collect()).await?;
    let bad = |e: shaping::Error| crate::backend::Error::InvalidArgument { what: "reference logprobs", reason: e.to_string() };
    let estimate = |b: &Built, r: &[f32]| -> f64 {
        let q = b.datum.loss_fn_inputs.logprobs.as_deref().unwrap_or_default();
        (0..q.len().min(r.len())).filter(|&t| b.sampled[t]).map(|t| shaping::kl_estimate(kl.estimator, f64::from(q[t]), f64::from(r[t]))).sum()
    };
    let sum: f64 = datums.iter().zip(&reference).map(|(b, r)| estimate(b, r)).sum();
    let count: usize = datums.iter().map(Built::len).sum();
    let mean = if count == 0 { 0.0 } else { sum / count as f64 };
    if kl.form == Some(KlForm::Loss) {
        return Ok(Some((mean, Some(reference))));
    }
    let penalty = shaping::KlPenalty { estimator: kl.estimator, coef: kl.coef, centre: if kl.centre { mean } else { 0.0 }, discount: kl.discount };
    for (b, r) in datums.iter_mut().zip(&reference) {
        let inputs = &mut b.datum.loss_fn_inputs;
        let (Some(q), Some(a)) = (inputs.logprobs.as_deref(), inputs.advantages.as_mut()) else { continue };
        shaping::apply_kl(a, q, r, &b.sampled, penalty).map_err(bad)?;
    }
    Ok(Some((mean, None)))
}

/// `grpo.distill`: the teacher's log-probabilities of every datum's targets and its term added
/// to each sampled token's advantage ([`super::distill`]). Returns `train/teacher_kl`; `None`
/// when distillation is off or nothing trains.
async fn apply_distill(trainer: Option<&dyn Trainer>, datums: &mut [Built], cfg: &StepConfig<'_>) -> Result<Option<f64>, Error> {
    let (Some(d), Some(source), Some(trainer)) = (cfg.plan.grpo.distill.as_ref(), super::distill::teacher_source(cfg.plan), trainer) else { return Ok(None) };
    if datums.is_empty() {
        return Ok(None);
    }
    let teacher = super::distill::teacher_logprobs(trainer, source, datums.iter().map(|b| b.datum.clone()).collect()).await?;
    let mut rows: Vec<super::distill::Row<'_>> = datums
        .iter_mut()
        .zip(&teacher)
        .filter_map(|(b, p)| {
            let inputs = &mut b.datum.loss_fn_inputs;
            let (Some(q), Some(a)) = (inputs.logprobs.as_deref(), inputs.advantages.as_mut()) else { return None };
            Some(super::distill::Row { logprobs: q, teacher: p, sampled: &b.sampled, advantages: a })
        })
        .collect();
    Ok(Some(super::distill::add_teacher_term(&mut rows, d.coef)?))
}

/// The loss form's KL term: β times each datum's aggregation factor on its sampled tokens.
fn kl_loss(datums: &[Built], reference: Vec<Vec<f32>>, factors: &[f64], cfg: &StepConfig<'_>) -> Option<KlLoss> {
    let kl = cfg.plan.grpo.kl?;
    // `sampled` has one entry per target: the row the trainer checks against the datum.
    let coef = datums.iter().zip(factors).map(|(b, f)| b.sampled.iter().map(|&s| if s { (kl.coef * f) as f32 } else { 0.0 }).collect());
    let estimator = match kl.estimator {
        KlEstimator::K1 => KlKind::K1,
        KlEstimator::K3 => KlKind::K3,
    };
    Some(KlLoss { estimator, coef: coef.collect(), reference })
}

/// `grpo.loss_agg`: each datum's advantages times its aggregation factor; returns the factors.
fn aggregate(datums: &mut [Built], cfg: &StepConfig<'_>) -> Vec<f64> {
    let g = &cfg.plan.grpo;
    if g.loss_agg.is_sum() {
        return vec![1.0; datums.len()];
    }
    let lens: Vec<usize> = datums.iter().map(Built::len).collect();
    let factors = shaping::agg_factors(&g.loss_agg, &lens, g.agg_constant);
    for (b, f) in datums.iter_mut().zip(&factors) {
        if let Some(a) = b.datum.loss_fn_inputs.advantages.as_mut() {
            a.iter_mut().for_each(|x| *x = (f64::from(*x) * f) as f32);
        }
    }
    factors
}

/// Datums and the optimizer step for the groups `fill` collected for step `step` (each sampled
/// [`Fill::staleness`] steps behind the weights being trained). Without a trainer (a dry run)
/// everything but the optimizer step: the datums are built and counted, not trained on.
///
/// # Errors
/// Trainer failures.
pub(crate) async fn learn(trainer: Option<&dyn Trainer>, step: u32, fill: &Fill, cfg: &StepConfig<'_>, cx: &Ctx<'_>) -> Result<StepResult, Error> {
    let plan = cfg.plan;
    let Scored { mut datums, rollouts, tally } = score(step, fill, cfg, cx);
    let t_train = Instant::now();
    let teacher_kl = apply_distill(trainer, &mut datums, cfg).await?;
    let kl = apply_kl(trainer, &mut datums, cfg).await?;
    let factors = aggregate(&mut datums, cfg);
    let (kl, kl_term) = match kl {
        Some((mean, Some(reference))) => (Some(mean), kl_loss(&datums, reference, &factors, cfg)),
        Some((mean, None)) => (Some(mean), None),
        None => (None, None),
    };
    let datums: Vec<Datum> = datums.into_iter().map(|b| b.datum).collect();
    let mut m = BTreeMap::new();
    if let Some(trainer) = trainer.filter(|_| !datums.is_empty()) {
        let n = datums.len();
        let (fb, opt) = train_step(trainer, datums, plan.grpo.loss, kl_term, plan.adam).await?;
        m.insert(train::LOSS.into(), fb.loss);
        m.insert(train::LOSS_PER_TOKEN.into(), if fb.stats.tokens > 0 { fb.loss / fb.stats.tokens as f64 } else { 0.0 });
        m.insert(train::RATIO_MEAN.into(), fb.stats.ratio_mean);
        m.insert(train::RATIO_MAX.into(), fb.stats.ratio_max);
        m.insert(train::CLIP_FRACTION.into(), fb.stats.clip_fraction);
        m.insert(train::KL_SAMPLE_TRAIN.into(), fb.stats.kl_sample_train);
        m.insert(train::DATUMS.into(), n as f64);
        m.insert(train::ACTION_TOKENS.into(), fb.stats.tokens as f64);
        // Absent when the backend reports none; a NaN it reports is kept (an explosion).
        if let Some(g) = opt.grad_norm {
            m.insert(optim::GRAD_NORM.into(), g);
        }
        for (k, v) in opt.metrics {
            m.entry(k).or_insert(v);
        }
    } else {
        m.insert(train::DATUMS.into(), datums.len() as f64);
    }
    m.insert(time::TRAIN_S.into(), t_train.elapsed().as_secs_f64());
    if let Some(kl) = kl {
        m.insert(train::KL_REFERENCE.into(), kl);
    }
    if let Some(v) = teacher_kl {
        m.insert(train::TEACHER_KL.into(), v);
    }
    step_metrics(&mut m, &tally, fill, cfg);
    let all_dropped = !fill.groups.is_empty() && tally.infra_dropped as usize == fill.groups.len();
    let sandbox_down = all_dropped.then(|| tally.last_infra.clone().unwrap_or_else(|| "no message".into()));
    Ok(StepResult { metrics: m, rollouts, sandbox_down })
}

/// The step's metrics besides the loss's: rewards, groups, tokens, sandbox, timing, and the
/// variants' counts.
fn step_metrics(m: &mut BTreeMap<String, f64>, n: &Tally, fill: &Fill, cfg: &StepConfig<'_>) {
    let (plan, groups, timing) = (cfg.plan, &fill.groups, fill.timing);
    let groups_total = groups.len() as f64;
    let frac = |x: usize| if n.total == 0 { 0.0 } else { x as f64 / n.total as f64 };
    let mean = |xs: &[f64]| if xs.is_empty() { 0.0 } else { xs.iter().sum::<f64>() / xs.len() as f64 };
    m.insert(train::REWARD_MEAN.into(), mean(&n.rewards));
    m.insert(train::CORRECT_MEAN.into(), frac(n.correct));
    m.insert(train::FORMAT_RATE.into(), frac(n.formatted));
    if plan.rollout.max_attempts > 1 {
        m.insert(train::CORRECT_FIRST_ATTEMPT.into(), frac(n.first_correct));
        m.insert(train::ATTEMPTS_MEAN.into(), frac(n.turns));
    }
    if !plan.rollout.tools.is_empty() {
        n.tools.metrics(m);
    }
    m.insert(train::GROUPS.into(), groups_total);
    m.insert(train::GROUPS_SKIPPED.into(), f64::from(n.skipped));
    m.insert(train::GROUPS_DEGENERATE.into(), f64::from(n.degenerate));
    m.insert(train::GROUPS_INFRA_DROPPED.into(), f64::from(n.infra_dropped));
    m.extend(fill.scores.metrics());
    m.insert(train::GROUPS_SAMPLER_DROPPED.into(), timing.sampler_dropped as f64);
    m.insert(train::OFF_POLICY_STEPS.into(), f64::from(fill.off_policy()));
    m.insert(train::TRUNCATED_RATE.into(), truncation_rate(groups));
    m.insert(train::COMPLETION_TOKENS_MEAN.into(), if n.turns == 0 { 0.0 } else { n.completion_tokens as f64 / n.turns as f64 });
    m.insert(train::PROMPT_TOKENS_MEAN.into(), if groups.is_empty() { 0.0 } else { n.prompt_tokens as f64 / groups_total });
    m.insert(train::COMPLETION_TOKENS.into(), n.completion_tokens as f64);
    let sampled = groups.iter().flat_map(|g| &g.trajectories).flat_map(|t| &t.turns).map(|x| &x.seq.logprobs[..]);
    if let Some(h) = shaping::entropy_estimate(sampled) {
        m.insert(train::ENTROPY.into(), h);
    }
    if plan.grpo.dynamic_sampling.is_some() {
        m.insert(train::PROBLEMS_DRAWN.into(), fill.drawn() as f64);
        m.insert(train::GROUPS_DISCARDED.into(), fill.discarded() as f64);
        m.insert(train::SAMPLE_ROUNDS.into(), f64::from(fill.rounds));
    }
    if matches!(plan.grpo.overlong, Some(Overlong::Mask)) {
        m.insert(train::OVERLONG_MASKED.into(), n.overlong_masked as f64);
    }
    m.insert(sandbox::INFRA_ERRORS.into(), f64::from(n.infra_errors));
    m.insert(sandbox::P50_MS.into(), quantile(&mut n.latencies.clone(), 0.5));
    m.insert(sandbox::P95_MS.into(), quantile(&mut n.latencies.clone(), 0.95));
    n.tests.metrics(m);
    m.insert(time::SAMPLE_S.into(), timing.sample_s);
    m.insert(time::GRADE_S.into(), timing.grade_s);
    m.insert(time::TOOL_WAIT_S.into(), timing.tool_wait_s);
}

/// One optimizer step over `datums`: `forward_backward` and `optim_step` submitted back to back
/// (a remote backend runs them without a round trip in between), then both replies awaited.
///
/// # Errors
/// Backend failures. When `forward_backward` fails nothing is accumulated, so the `optim_step`
/// behind it finds no gradient and applies nothing; its error is the forward/backward one.
async fn train_step(trainer: &dyn Trainer, datums: Vec<Datum>, loss: LossFn, kl: Option<KlLoss>, adam: AdamParams) -> crate::backend::Result<(ForwardBackwardOutput, OptimStepOutput)> {
    let fb = match kl {
        Some(kl) => trainer.forward_backward_kl(datums, loss, kl),
        None => trainer.forward_backward(datums, loss),
    };
    let opt = trainer.optim_step(adam);
    let fb = fb.await;
    let opt = opt.await;
    Ok((fb?, opt?))
}


#[cfg(test)]
mod tests {
    use super::*;
    use crate::seam::{SampledSequence, StopReason};
    use crate::engine::prompting::Rendered;
    use crate::engine::rollout::Turn;
    use crate::engine::grading::Graded;
    use crate::sandbox::Verdict;

    fn turn(prompt: &[u32], sampled: &[u32]) -> Turn {
        Turn {
            prompt: Rendered { messages: vec![], tokens: prompt.to_vec() },
            seq: SampledSequence { tokens: sampled.to_vec(), logprobs: vec![-0.5; sampled.len()], stop_reason: StopReason::Stop },
            text: String::new(),
            graded: Graded { verdict: Verdict::format_error("p", 1), code: None, latency_ms: 0.0, infra_errors: 0 },
            tools: Default::default(),
            append: vec![],
        }
    }

    #[test]
    fn an_extending_conversation_is_one_datum_with_every_answer_trained() {
        let t = Trajectory { ending: None, turns: vec![turn(&[1, 2], &[30, 31]), turn(&[1, 2, 30, 31, 4, 5], &[60])] };
        let d: Vec<Datum> = trajectory_datums(&t, 1.5).into_iter().map(|b| {
            assert_eq!(b.len(), 3, "two answers of 2 and 1 tokens");
            b.datum
        }).collect();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].model_input, vec![1, 2, 30, 31, 4, 5]);
        assert_eq!(d[0].loss_fn_inputs.advantages.as_deref(), Some(&[0.0, 1.5, 1.5, 0.0, 0.0, 1.5][..]));
    }

    #[test]
    fn a_masked_turn_is_context_and_the_trajectory_stays_one_datum() {
        // A malformed tool call under `mask_turn`, its error as a tool result, then an answer.
        let mut bad = turn(&[1, 2], &[30, 31]);
        bad.tools.masked = true;
        let t = Trajectory { ending: None, turns: vec![bad, turn(&[1, 2, 30, 31, 4, 5], &[60, 61])] };
        let built = trajectory_datums(&t, 2.0);
        assert_eq!(built.len(), 1);
        assert_eq!(built[0].len(), 2, "only the answer's tokens train");
        assert_eq!(built[0].datum.model_input, vec![1, 2, 30, 31, 4, 5, 60]);
        // Independently: targets are tokens[1..]; a target trains iff it is a token of an
        // unmasked turn, at that turn's position in the sequence.
        let expected: Vec<f32> = (1..8).map(|i| if (6..8).contains(&i) { 2.0 } else { 0.0 }).collect();
        assert_eq!(built[0].datum.loss_fn_inputs.advantages.as_deref(), Some(&expected[..]));
        // Every turn masked: nothing to train.
        let mut only = turn(&[1], &[9]);
        only.tools.masked = true;
        assert!(trajectory_datums(&Trajectory { ending: None, turns: vec![only] }, 1.0).is_empty());
    }

    #[test]
    fn a_rewritten_history_trains_each_attempt_in_its_own_context() {
        // The template rewrote the first answer: the second prompt does not extend the first turn.
        let t = Trajectory { ending: None, turns: vec![turn(&[1, 2], &[30, 31]), turn(&[1, 2, 39, 4, 5], &[60]), turn(&[1, 2, 39, 4, 5, 60, 7], &[])] };
        let built = trajectory_datums(&t, -1.0);
        assert_eq!(built[1].sampled, vec![false, false, false, false, true]);
        let d: Vec<Datum> = built.into_iter().map(|b| b.datum).collect();
        assert_eq!(d.len(), 2, "empty answers add nothing");
        assert_eq!(d[0].model_input, vec![1, 2, 30]);
        assert_eq!(d[1].model_input, vec![1, 2, 39, 4, 5]);
        assert_eq!(d[1].loss_fn_inputs.advantages.as_deref(), Some(&[0.0, 0.0, 0.0, 0.0, -1.0][..]));
    }
}
