//! One GRPO training step: problems → groups → rewards → advantages → datums → optimizer step.
//! [`run`] does it on-policy; the pipelined loop calls [`rollouts`] and [`learn`] itself.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;


use crate::backend::{Sampler, Trainer};
use crate::quantile::quantile;
use crate::rl::advantage::{AdvantageStrategy, should_skip};
use crate::seam::{AdamParams, Datum, ForwardBackwardOutput, LossFn, OptimStepOutput, SamplingParams, make_multiturn_datum};
use crate::rl::reward::{Custom, Outcome, RewardStrategy};
use crate::sandbox::VerdictStatus;
use crate::runlog::metrics::{optim, sandbox, time, train};
use crate::runlog::{Attempt, RolloutRecord};
use crate::spec::types::RolloutLog;

use super::grading::Graded;
use super::rollout::{self, Ctx, Group, GroupPrompt, Timing, Trajectory, truncation_rate};
use super::{Error, problems};

/// What a finished step produced.
pub(crate) struct StepResult {
    /// The metrics line (without `step`).
    pub metrics: BTreeMap<String, f64>,
    /// Records for rollouts.jsonl.
    pub rollouts: Vec<RolloutRecord>,
}

/// Inputs of a step that do not change between steps.
pub(crate) struct StepConfig<'a> {
    /// The run's plan (batch shape, loss, optimizer, logging).
    pub plan: &'a crate::plan::Plan,
    /// Training problems (already in run order).
    pub train: &'a [Arc<crate::data::Problem>],
    /// Advantage strategy.
    pub advantage: &'a dyn AdvantageStrategy,
    /// Reward strategy.
    pub reward: &'a dyn RewardStrategy,
    /// The Python reward function, when the reward calls one.
    pub python: Option<&'a super::pyreward::PythonRewards>,
    /// Sampling parameters (seed set per problem).
    pub sampling: &'a SamplingParams,
}

/// The outcome the reward strategies see.
pub(crate) fn outcome<'a>(g: &Graded, custom: Option<&'a Custom>) -> Outcome<'a> {
    Outcome {
        format_ok: g.verdict.status != VerdictStatus::FormatError,
        tests_passed: g.verdict.tests_passed as u32,
        tests_total: g.verdict.tests_total as u32,
        infra_error: g.verdict.status == VerdictStatus::InfraError,
        custom,
    }
}

/// The group prompts of training step `step`, starting at problem `cursor` (cycling).
///
/// # Errors
/// Template or tokenizer failures.
pub(crate) fn prompts(step: u32, cursor: u64, cfg: &StepConfig<'_>, cx: &Ctx<'_>) -> Result<Vec<GroupPrompt>, Error> {
    let plan = cfg.plan;
    let n_problems = cfg.train.len() as u64;
    let mut prompts = vec![];
    for j in 0..u64::from(plan.grpo.prompts_per_step) {
        let problem = cfg.train[((cursor + j) % n_problems) as usize].clone();
        let rendered = cx.prompting.first_turn(&problem)?;
        prompts.push((problem, rendered, problems::derive_seed(plan.seed, i64::from(step), j)));
    }
    Ok(prompts)
}

/// Samples and grades the groups of step `step` on `sampler`; `None` when a stop was requested.
///
/// # Errors
/// Sampler, template or tokenizer failures.
pub(crate) async fn rollouts(sampler: &dyn Sampler, step: u32, cursor: u64, cfg: &StepConfig<'_>, cx: &Ctx<'_>) -> Result<Option<(Vec<Group>, Timing)>, Error> {
    let prompts = prompts(step, cursor, cfg, cx)?;
    let plan = cfg.plan;
    let (groups, timing) = rollout::run(sampler, prompts, plan.grpo.group_size as usize, cfg.sampling, cx, "sample", i64::from(step), plan.rollout.max_attempts).await?;
    Ok(groups.map(|g| (g, timing)))
}

/// Runs training step `step` on-policy: sample on the current weights, grade, train. `None`
/// when a stop was requested before training (the step is then abandoned whole: no update).
///
/// # Errors
/// Sampler, prompt or trainer failures.
pub(crate) async fn run(trainer: &dyn Trainer, step: u32, cursor: u64, cfg: &StepConfig<'_>, cx: &Ctx<'_>) -> Result<Option<StepResult>, Error> {
    let sampler = trainer.sampler().await?;
    let Some((groups, timing)) = rollouts(&*sampler, step, cursor, cfg, cx).await? else { return Ok(None) };
    if cx.stop.requested() {
        return Ok(None);
    }
    Ok(Some(learn(Some(trainer), step, &groups, timing, 0, cfg, cx).await?))
}

/// The datums of one trajectory: one per run of attempts whose prompts start with the previous
/// attempt's prompt and answer (all of them, unless the chat template rewrote history; see
/// [`super::prompting::Prompting::next_turn`]).
fn trajectory_datums(t: &Trajectory, advantage: f64) -> Vec<Datum> {
    let mut out = vec![];
    // The tokens of the conversation so far and where each answer in it starts.
    type Chain<'a> = (Vec<u32>, Vec<(usize, &'a [f32])>);
    let mut chain: Option<Chain<'_>> = None;
    for turn in &t.turns {
        let start = turn.prompt.tokens.len();
        match chain.as_mut() {
            Some((tokens, segments)) if turn.prompt.tokens.starts_with(tokens) => {
                tokens.clone_from(&turn.prompt.tokens);
                tokens.extend_from_slice(&turn.seq.tokens);
                segments.push((start, &turn.seq.logprobs));
            }
            _ => {
                if let Some((tokens, segments)) = chain.take() {
                    out.push((tokens, segments));
                }
                let mut tokens = turn.prompt.tokens.clone();
                tokens.extend_from_slice(&turn.seq.tokens);
                chain = Some((tokens, vec![(start, &turn.seq.logprobs)]));
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
            Some(make_multiturn_datum(&tokens, &segments, advantage))
        })
        .collect()
}

/// Rewards, advantages, datums and the optimizer step for graded `groups` of step `step`,
/// sampled `off_policy` steps behind the weights being trained. Without a trainer (a dry run)
/// everything but the optimizer step: the datums are built and counted, not trained on.
///
/// # Errors
/// Trainer failures.
pub(crate) async fn learn(trainer: Option<&dyn Trainer>, step: u32, groups: &[Group], timing: Timing, off_policy: u32, cfg: &StepConfig<'_>, cx: &Ctx<'_>) -> Result<StepResult, Error> {
    let plan = cfg.plan;
    let mut datums = vec![];
    let mut rollouts = vec![];
    let (mut rewards_all, mut correct, mut first_correct, mut formatted, mut total) = (vec![], 0usize, 0usize, 0usize, 0usize);
    let (mut skipped, mut infra_dropped, mut infra_errors) = (0u32, 0u32, 0u32);
    let mut latencies = vec![];
    let (mut completion_tokens, mut prompt_tokens, mut turns_all) = (0usize, 0usize, 0usize);
    let scores = match cfg.python {
        Some(python) => python.score(step, groups, cx.sink).await?,
        None => super::pyreward::Scores::default(),
    };
    for (gi, g) in groups.iter().enumerate() {
        for t in g.trajectories.iter().flat_map(|t| &t.turns) {
            infra_errors += t.graded.infra_errors;
            if t.graded.code.is_some() {
                latencies.push(t.graded.latency_ms);
            }
        }
        let rewards: Option<Vec<f64>> = g.trajectories.iter().enumerate().map(|(k, t)| cfg.reward.reward(&outcome(&t.last().graded, scores.custom(gi, k)))).collect();
        let Some(rewards) = rewards else {
            if scores.failed(gi) {
                // The user's reward failed (already reported and counted): not the model's doing.
                continue;
            }
            // Infrastructure failure that survived retries: the group says nothing about the
            // model, so it is dropped rather than scored.
            infra_dropped += 1;
            cx.sink.event(super::Event::Warning(format!("step {step}: group of `{}` dropped after sandbox infrastructure errors", g.problem.id)));
            continue;
        };
        let adv = cfg.advantage.advantages(&rewards);
        let skip = plan.grpo.skip_degenerate && should_skip(&adv);
        skipped += u32::from(skip);
        if let Some(t) = g.trajectories.first() {
            prompt_tokens += t.turns[0].prompt.tokens.len();
        }
        for (k, (t, (&r, &a))) in g.trajectories.iter().zip(rewards.iter().zip(&adv)).enumerate() {
            let last = t.last();
            total += 1;
            correct += usize::from(last.graded.verdict.passed);
            first_correct += usize::from(t.turns[0].graded.verdict.passed);
            formatted += usize::from(last.graded.verdict.status != VerdictStatus::FormatError);
            turns_all += t.turns.len();
            completion_tokens += t.turns.iter().map(|x| x.seq.tokens.len()).sum::<usize>();
            rewards_all.push(r);
            if !skip {
                datums.extend(trajectory_datums(t, a));
            }
            let log = match plan.log.rollouts {
                RolloutLog::All => true,
                RolloutLog::Sample => gi == 0,
                RolloutLog::None => false,
            };
            if log {
                // Earlier attempts and the feedback each got.
                let turns = if t.turns.len() > 1 {
                    t.turns
                        .iter()
                        .map(|x| Attempt {
                            prompt_last_message: x.prompt.messages.last().map(|m| m.content.clone()),
                            text: x.text.clone(),
                            status: super::record_status(x.graded.verdict.status),
                            tests_passed: x.graded.verdict.tests_passed,
                        })
                        .collect()
                } else {
                    vec![]
                };
                let rec = RolloutRecord {
                    step,
                    problem_id: g.problem.id.clone(),
                    group: gi,
                    sample: k,
                    text: last.text.clone(),
                    code: last.graded.code.clone(),
                    status: super::record_status(last.graded.verdict.status),
                    tests_passed: last.graded.verdict.tests_passed,
                    tests_total: last.graded.verdict.tests_total,
                    reward: r,
                    advantage: a,
                    skipped: skip,
                    stop_reason: super::record_stop(last.seq.stop_reason),
                    tokens: last.seq.tokens.len(),
                    attempts: t.turns.len(),
                    turns,
                };
                rollouts.push(rec);
            }
        }
    }

    // Train.
    let t_train = Instant::now();
    let mut m = BTreeMap::new();
    if let Some(trainer) = trainer.filter(|_| !datums.is_empty()) {
        let n = datums.len();
        let (fb, opt) = train_step(trainer, datums, plan.grpo.loss, plan.adam).await?;
        m.insert(train::LOSS.into(), fb.loss);
        m.insert(train::LOSS_PER_TOKEN.into(), if fb.stats.tokens > 0 { fb.loss / fb.stats.tokens as f64 } else { 0.0 });
        m.insert(train::RATIO_MEAN.into(), fb.stats.ratio_mean);
        m.insert(train::RATIO_MAX.into(), fb.stats.ratio_max);
        m.insert(train::CLIP_FRACTION.into(), fb.stats.clip_fraction);
        m.insert(train::KL_SAMPLE_TRAIN.into(), fb.stats.kl_sample_train);
        m.insert(train::DATUMS.into(), n as f64);
        m.insert(train::ACTION_TOKENS.into(), fb.stats.tokens as f64);
        m.insert(optim::GRAD_NORM.into(), opt.grad_norm);
        for (k, v) in opt.metrics {
            m.entry(k).or_insert(v);
        }
    } else {
        m.insert(train::DATUMS.into(), datums.len() as f64);
    }
    let train_s = t_train.elapsed().as_secs_f64();

    let groups_total = groups.len() as f64;
    let frac = |x: usize| if total == 0 { 0.0 } else { x as f64 / total as f64 };
    let mean = |xs: &[f64]| if xs.is_empty() { 0.0 } else { xs.iter().sum::<f64>() / xs.len() as f64 };
    m.insert(train::REWARD_MEAN.into(), mean(&rewards_all));
    m.insert(train::CORRECT_MEAN.into(), frac(correct));
    m.insert(train::FORMAT_RATE.into(), frac(formatted));
    if plan.rollout.max_attempts > 1 {
        m.insert(train::CORRECT_FIRST_ATTEMPT.into(), frac(first_correct));
        m.insert(train::ATTEMPTS_MEAN.into(), frac(turns_all));
    }
    m.insert(train::GROUPS.into(), groups_total);
    m.insert(train::GROUPS_SKIPPED.into(), f64::from(skipped));
    m.insert(train::GROUPS_INFRA_DROPPED.into(), f64::from(infra_dropped));
    m.extend(scores.metrics());
    m.insert(train::GROUPS_SAMPLER_DROPPED.into(), timing.sampler_dropped as f64);
    m.insert(train::OFF_POLICY_STEPS.into(), f64::from(off_policy));
    m.insert(train::TRUNCATED_RATE.into(), truncation_rate(groups));
    m.insert(train::COMPLETION_TOKENS_MEAN.into(), if turns_all == 0 { 0.0 } else { completion_tokens as f64 / turns_all as f64 });
    m.insert(train::PROMPT_TOKENS_MEAN.into(), if groups.is_empty() { 0.0 } else { prompt_tokens as f64 / groups_total });
    m.insert(train::COMPLETION_TOKENS.into(), completion_tokens as f64);
    m.insert(sandbox::INFRA_ERRORS.into(), f64::from(infra_errors));
    m.insert(sandbox::P50_MS.into(), quantile(&mut latencies.clone(), 0.5));
    m.insert(sandbox::P95_MS.into(), quantile(&mut latencies, 0.95));
    m.insert(time::SAMPLE_S.into(), timing.sample_s);
    m.insert(time::GRADE_S.into(), timing.grade_s);
    m.insert(time::TRAIN_S.into(), train_s);
    Ok(StepResult { metrics: m, rollouts })
}

/// One optimizer step over `datums`: `forward_backward` and `optim_step` submitted back to back
/// (a remote backend runs them without a round trip in between), then both replies awaited.
///
/// # Errors
/// Backend failures. When `forward_backward` fails nothing is accumulated, so the `optim_step`
/// behind it finds no gradient and applies nothing; its error is the forward/backward one.
async fn train_step(trainer: &dyn Trainer, datums: Vec<Datum>, loss: LossFn, adam: AdamParams) -> crate::backend::Result<(ForwardBackwardOutput, OptimStepOutput)> {
    let fb = trainer.forward_backward(datums, loss);
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
    use crate::sandbox::Verdict;

    fn turn(prompt: &[u32], sampled: &[u32]) -> Turn {
        Turn {
            prompt: Rendered { messages: vec![], tokens: prompt.to_vec() },
            seq: SampledSequence { tokens: sampled.to_vec(), logprobs: vec![-0.5; sampled.len()], stop_reason: StopReason::Stop },
            text: String::new(),
            graded: Graded { verdict: Verdict::format_error("p", 1), code: None, latency_ms: 0.0, infra_errors: 0 },
        }
    }

    #[test]
    fn an_extending_conversation_is_one_datum_with_every_answer_trained() {
        let t = Trajectory { turns: vec![turn(&[1, 2], &[30, 31]), turn(&[1, 2, 30, 31, 4, 5], &[60])] };
        let d = trajectory_datums(&t, 1.5);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].model_input, vec![1, 2, 30, 31, 4, 5]);
        assert_eq!(d[0].loss_fn_inputs.advantages.as_deref(), Some(&[0.0, 1.5, 1.5, 0.0, 0.0, 1.5][..]));
    }

    #[test]
    fn a_rewritten_history_trains_each_attempt_in_its_own_context() {
        // The template rewrote the first answer: the second prompt does not extend the first turn.
        let t = Trajectory { turns: vec![turn(&[1, 2], &[30, 31]), turn(&[1, 2, 39, 4, 5], &[60]), turn(&[1, 2, 39, 4, 5, 60, 7], &[])] };
        let d = trajectory_datums(&t, -1.0);
        assert_eq!(d.len(), 2, "empty answers add nothing");
        assert_eq!(d[0].model_input, vec![1, 2, 30]);
        assert_eq!(d[1].model_input, vec![1, 2, 39, 4, 5]);
        assert_eq!(d[1].loss_fn_inputs.advantages.as_deref(), Some(&[0.0, 0.0, 0.0, 0.0, -1.0][..]));
    }
}
