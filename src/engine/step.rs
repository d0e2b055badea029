//! One GRPO training step: problems → groups → rewards → advantages → datums → optimizer step.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use crate::backend::{AdamParams, LossFn, SamplingParams, Trainer};
use crate::rl::advantage::{AdvantageStrategy, should_skip};
use crate::rl::datum::{make_datum, train_step};
use crate::rl::reward::{Outcome, RewardStrategy};
use crate::sandbox::VerdictStatus;
use crate::spec::types::RolloutLog;

use super::grading::Graded;
use super::rollout::{self, Ctx, percentile, truncation_rate};
use super::{Error, problems};

/// What a finished step produced.
pub struct StepResult {
    /// The metrics line (without `step`).
    pub metrics: BTreeMap<String, f64>,
    /// Records for rollouts.jsonl.
    pub rollouts: Vec<Value>,
}

/// Inputs of a step that do not change between steps.
pub struct StepConfig<'a> {
    /// The run's spec.
    pub spec: &'a crate::spec::Spec,
    /// Training problems (already in run order).
    pub train: &'a [Arc<crate::data::Problem>],
    /// Advantage strategy.
    pub advantage: &'a dyn AdvantageStrategy,
    /// Reward strategy.
    pub reward: &'a dyn RewardStrategy,
    /// Loss.
    pub loss: &'a LossFn,
    /// Optimizer.
    pub adam: &'a AdamParams,
    /// Sampling parameters (seed set per problem).
    pub sampling: &'a SamplingParams,
}

/// The outcome the reward strategies see.
pub fn outcome(g: &Graded) -> Outcome {
    Outcome {
        format_ok: g.verdict.status != VerdictStatus::FormatError,
        tests_passed: g.verdict.tests_passed as u32,
        tests_total: g.verdict.tests_total as u32,
        infra_error: g.verdict.status == VerdictStatus::InfraError,
    }
}

/// Runs training step `step` starting at problem `cursor`. Returns the trainer back, and `None`
/// when a stop was requested before training (the step is then abandoned whole: no update).
///
/// # Errors
/// Sampler, prompt or trainer failures.
pub async fn run<T>(mut trainer: T, step: u32, cursor: u64, cfg: &StepConfig<'_>, cx: &Ctx<'_>) -> Result<(T, Option<StepResult>), Error>
where
    T: Trainer + 'static,
    T::Sampler: 'static,
{
    let spec = cfg.spec;
    let t_step = Instant::now();
    let n_problems = cfg.train.len() as u64;
    let mut prompts = vec![];
    for j in 0..u64::from(spec.grpo.prompts_per_step) {
        let problem = cfg.train[((cursor + j) % n_problems) as usize].clone();
        let rendered = cx.prompting.first_turn(&problem)?;
        prompts.push((problem, rendered, problems::derive_seed(spec.seed, i64::from(step), j)));
    }
    let (t2, sampler) = rollout::sampler_of(trainer).await?;
    trainer = t2;
    let (_, groups, timing) = rollout::run(sampler, prompts, spec.grpo.group_size as usize, cfg.sampling, cx, "sample", i64::from(step)).await?;
    let Some(groups) = groups else { return Ok((trainer, None)) };
    if cx.stop.requested() {
        return Ok((trainer, None));
    }

    // Rewards and advantages per group.
    let mut datums = vec![];
    let mut rollouts = vec![];
    let (mut rewards_all, mut correct, mut formatted, mut total) = (vec![], 0usize, 0usize, 0usize);
    let (mut skipped, mut infra_dropped, mut infra_errors) = (0u32, 0u32, 0u32);
    let mut latencies = vec![];
    let (mut completion_tokens, mut prompt_tokens) = (0usize, 0usize);
    for (gi, g) in groups.iter().enumerate() {
        infra_errors += g.graded.iter().map(|x| x.infra_errors).sum::<u32>();
        latencies.extend(g.graded.iter().filter(|x| x.code.is_some()).map(|x| x.latency_ms));
        let rewards: Option<Vec<f64>> = g.graded.iter().map(|x| cfg.reward.reward(&outcome(x))).collect();
        let Some(rewards) = rewards else {
            // Infrastructure failure that survived retries: the group says nothing about the
            // model, so it is dropped rather than scored.
            infra_dropped += 1;
            cx.sink.event(super::Event::Warning(format!("step {step}: group of `{}` dropped after sandbox infrastructure errors", g.problem.id)));
            continue;
        };
        let adv = cfg.advantage.advantages(&rewards);
        let skip = spec.grpo.skip_degenerate && should_skip(&adv);
        skipped += u32::from(skip);
        prompt_tokens += g.prompt.tokens.len();
        for (k, ((seq, graded), (&r, &a))) in g.seqs.iter().zip(&g.graded).zip(rewards.iter().zip(&adv)).enumerate() {
            total += 1;
            correct += usize::from(graded.verdict.passed);
            formatted += usize::from(graded.verdict.status != VerdictStatus::FormatError);
            completion_tokens += seq.tokens.len();
            rewards_all.push(r);
            if !skip && !seq.tokens.is_empty() {
                let mut tokens = g.prompt.tokens.clone();
                tokens.extend_from_slice(&seq.tokens);
                datums.push(make_datum(&tokens, &seq.logprobs, g.prompt.tokens.len(), a));
            }
            let log = match spec.log.rollouts {
                RolloutLog::All => true,
                RolloutLog::Sample => gi == 0,
                RolloutLog::None => false,
            };
            if log {
                rollouts.push(json!({
                    "step": step, "problem_id": g.problem.id, "group": gi, "sample": k,
                    "text": g.texts[k], "code": graded.code, "status": graded.verdict.status,
                    "tests_passed": graded.verdict.tests_passed, "tests_total": graded.verdict.tests_total,
                    "reward": r, "advantage": a, "skipped": skip, "stop_reason": seq.stop_reason,
                    "tokens": seq.tokens.len(),
                }));
            }
        }
    }

    // Train.
    let t_train = Instant::now();
    let mut m = BTreeMap::new();
    if !datums.is_empty() {
        let (loss, adam) = (cfg.loss.clone(), *cfg.adam);
        let (t2, out) = tokio::task::spawn_blocking(move || {
            let r = train_step(&mut trainer, &datums, &loss, &adam).map(|o| (o, datums.len()));
            (trainer, r)
        })
        .await
        .map_err(|e| Error::Setup(format!("trainer thread failed: {e}")))?;
        trainer = t2;
        let ((fb, opt), n) = out?;
        m.insert("train/loss".into(), fb.loss);
        m.insert("train/loss_per_token".into(), if fb.stats.tokens > 0 { fb.loss / fb.stats.tokens as f64 } else { 0.0 });
        m.insert("train/ratio_mean".into(), fb.stats.ratio_mean);
        m.insert("train/ratio_max".into(), fb.stats.ratio_max);
        m.insert("train/clip_fraction".into(), fb.stats.clip_fraction);
        m.insert("train/kl_sample_train".into(), fb.stats.kl_sample_train);
        m.insert("train/datums".into(), n as f64);
        m.insert("train/action_tokens".into(), fb.stats.tokens as f64);
        m.insert("optim/grad_norm".into(), opt.grad_norm);
        for (k, v) in opt.metrics {
            m.entry(k).or_insert(v);
        }
    } else {
        m.insert("train/datums".into(), 0.0);
    }
    let train_s = t_train.elapsed().as_secs_f64();

    let groups_total = groups.len() as f64;
    let mean = |xs: &[f64]| if xs.is_empty() { 0.0 } else { xs.iter().sum::<f64>() / xs.len() as f64 };
    m.insert("train/reward_mean".into(), mean(&rewards_all));
    m.insert("train/correct_mean".into(), if total == 0 { 0.0 } else { correct as f64 / total as f64 });
    m.insert("train/format_rate".into(), if total == 0 { 0.0 } else { formatted as f64 / total as f64 });
    m.insert("train/groups".into(), groups_total);
    m.insert("train/groups_skipped".into(), f64::from(skipped));
    m.insert("train/groups_infra_dropped".into(), f64::from(infra_dropped));
    m.insert("train/truncated_rate".into(), truncation_rate(&groups));
    m.insert("train/completion_tokens_mean".into(), if total == 0 { 0.0 } else { completion_tokens as f64 / total as f64 });
    m.insert("train/prompt_tokens_mean".into(), if groups.is_empty() { 0.0 } else { prompt_tokens as f64 / groups_total });
    m.insert("train/completion_tokens".into(), completion_tokens as f64);
    m.insert("sandbox/infra_errors".into(), f64::from(infra_errors));
    m.insert("sandbox/p50_ms".into(), percentile(&mut latencies.clone(), 50.0));
    m.insert("sandbox/p95_ms".into(), percentile(&mut latencies, 95.0));
    m.insert("time/sample_s".into(), timing.sample_s);
    m.insert("time/grade_s".into(), timing.grade_s);
    m.insert("time/train_s".into(), train_s);
    m.insert("time/step_s".into(), t_step.elapsed().as_secs_f64());
    Ok((trainer, Some(StepResult { metrics: m, rollouts })))
}
