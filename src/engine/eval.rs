//! Evaluation: pass@k on held-out problems with the unbiased estimator, per problem and overall.
//! Needs only a [`Sampler`]: a fixed policy (an OpenAI-compatible endpoint) evaluates the same
//! way as a trainer's snapshot.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;


use crate::backend::Sampler;
use crate::seam::SamplingParams;
use crate::data::Problem;
use crate::rl::passk::pass_at_k;
use crate::sandbox::VerdictStatus;
use crate::runlog::metrics::{eval as names, time};
use crate::runlog::{EvalResultRecord, EvalSampleRecord, PassAtK};
use crate::spec::types::RolloutLog;
use crate::plan::Plan;

use super::rollout::{self, Ctx};
use super::{Error, problems};

/// An evaluation's metrics and per-problem records.
pub(crate) struct EvalResult {
    /// `eval/pass@k`, `eval/format_rate`, `eval/problems`, `time/eval_s`, and with two or more
    /// sources `eval/<source>/pass@k` and `eval/<source>/problems`.
    pub metrics: BTreeMap<String, f64>,
    /// One record per problem for eval_results.jsonl.
    pub records: Vec<EvalResultRecord>,
    /// The completions `log.rollouts` keeps, for eval_rollouts.jsonl.
    pub samples: Vec<EvalSampleRecord>,
}

/// The held-out problems and the source each came from.
#[derive(Default)]
pub(crate) struct EvalSet {
    /// The problems, sources concatenated in spec order.
    pub problems: Vec<Arc<Problem>>,
    /// Each source's label ([`crate::spec::types::Source::label`]) and how many problems it gave.
    pub sources: Vec<(String, usize)>,
}

impl EvalSet {
    /// Whether there is nothing to evaluate.
    pub(crate) fn is_empty(&self) -> bool {
        self.problems.is_empty()
    }

    /// The label of each problem's source, in problem order.
    fn labels(&self) -> Vec<&str> {
        self.sources.iter().flat_map(|(label, n)| std::iter::repeat_n(label.as_str(), *n)).collect()
    }
}

/// Evaluates `sampler`'s policy at `step` (−1 for the baseline) with the evaluation sampling
/// parameters `params` (the spec's `eval` section, stop tokens included). `None` when a stop was
/// requested mid-way.
///
/// # Errors
/// Sampler or prompt failures.
pub(crate) async fn run(sampler: &dyn Sampler, step: i64, plan: &Plan, eval: &EvalSet, params: &SamplingParams, cx: &Ctx<'_>) -> Result<Option<EvalResult>, Error> {
    let t = Instant::now();
    let n = plan.eval.samples;
    let labels = eval.labels();
    let mut prompts = vec![];
    for (i, p) in eval.problems.iter().enumerate() {
        // Eval seeds do not depend on the step, so differences between evals are the weights'.
        prompts.push((p.clone(), cx.prompting.first_turn(p)?, problems::derive_seed(plan.seed ^ 0xE7A1, -1, i as u64)));
    }
    // Which source each problem came from, by id (groups dropped by the sampler leave gaps).
    let source_of: BTreeMap<&str, &str> = eval.problems.iter().zip(&labels).map(|(p, l)| (p.id.as_str(), *l)).collect();
    // Single attempts: pass@k means what it means in every leaderboard.
    let phase = rollout::Phase { n: n as usize, params, max_attempts: 1, name: "eval", step };
    let (groups, timing) = rollout::run(sampler, prompts, &phase, cx).await?;
    let Some(groups) = groups else { return Ok(None) };
    let mut metrics = BTreeMap::new();
    let mut records = vec![];
    let mut samples = vec![];
    let (mut formatted, mut total, mut infra) = (0usize, 0usize, 0usize);
    for g in &groups {
        let source = source_of.get(g.problem.id.as_str()).map(|s| (*s).to_owned());
        let keep = match plan.log.rollouts {
            RolloutLog::All => g.trajectories.len(),
            RolloutLog::Sample => 1,
            RolloutLog::None => 0,
        };
        samples.extend(g.trajectories.iter().take(keep).enumerate().map(|(k, t)| sample_record(step, &source, k, t.last())));
        let graded: Vec<&super::grading::Graded> = g.trajectories.iter().map(|t| &t.last().graded).collect();
        let c = graded.iter().filter(|x| x.verdict.passed).count() as u32;
        let graded_n = graded.iter().filter(|x| x.verdict.status != VerdictStatus::InfraError).count() as u32;
        infra += (n - graded_n) as usize;
        formatted += graded.iter().filter(|x| x.verdict.status != VerdictStatus::FormatError).count();
        total += graded.len();
        // Infra-failed samples are left out of n rather than counted as wrong.
        let per = plan.eval.k.iter().map(|&k| (k, pass_at_k(graded_n, c, k))).collect();
        records.push(EvalResultRecord {
            step,
            problem_id: g.problem.id.clone(),
            source,
            n: graded_n,
            correct: c,
            statuses: graded.iter().map(|x| super::record_status(x.verdict.status)).collect(),
            tests_passed: graded.iter().map(|x| x.verdict.tests_passed).collect(),
            metrics: PassAtK(per),
        });
    }
    for (k, mean) in pass_means(&records.iter().collect::<Vec<_>>(), &plan.eval.k) {
        metrics.insert(names::pass_at(k), mean);
    }
    if eval.sources.len() > 1 {
        for (label, _) in &eval.sources {
            let mine: Vec<&EvalResultRecord> = records.iter().filter(|r| r.source.as_deref() == Some(label)).collect();
            for (k, mean) in pass_means(&mine, &plan.eval.k) {
                metrics.insert(names::source_pass_at(label, k), mean);
            }
            metrics.insert(names::source_problems(label), mine.len() as f64);
        }
    }
    metrics.insert(names::FORMAT_RATE.into(), if total == 0 { 0.0 } else { formatted as f64 / total as f64 });
    metrics.insert(names::PROBLEMS.into(), groups.len() as f64);
    metrics.insert(names::INFRA_ERRORS.into(), infra as f64);
    metrics.insert(names::PROBLEMS_DROPPED.into(), timing.sampler_dropped as f64);
    metrics.insert(time::EVAL_S.into(), t.elapsed().as_secs_f64());
    Ok(Some(EvalResult { metrics, records, samples }))
}

/// The eval_rollouts.jsonl record of sample `k` (its prompt on the first sample only).
fn sample_record(step: i64, source: &Option<String>, k: usize, t: &rollout::Turn) -> EvalSampleRecord {
    let v = &t.graded.verdict;
    EvalSampleRecord {
        step,
        problem_id: v.problem_id.clone(),
        source: source.clone(),
        sample: k,
        text: t.text.clone(),
        code: t.graded.code.clone(),
        language: v.language.map(|l| l.name().to_owned()),
        status: super::record_status(v.status),
        tests_passed: v.tests_passed,
        tests_total: v.tests_total,
        tests: v.tests.iter().map(super::step::test_record).collect(),
        error: v.error.clone(),
        prompt: if k == 0 { super::record_prompt(&t.prompt) } else { vec![] },
        stop_reason: super::record_stop(t.seq.stop_reason),
        tokens: t.seq.tokens.len(),
    }
}

/// Each `k`'s pass@k averaged over `records`' problems (0 for none).
fn pass_means(records: &[&EvalResultRecord], ks: &[u32]) -> Vec<(u32, f64)> {
    let n = records.len().max(1) as f64;
    ks.iter().map(|&k| (k, records.iter().filter_map(|r| r.metrics.get(k)).sum::<f64>() / n)).collect()
}
