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
use crate::runlog::{EvalResultRecord, PassAtK};
use crate::plan::Plan;

use super::rollout::{self, Ctx};
use super::{Error, problems};

/// An evaluation's metrics and per-problem records.
pub(crate) struct EvalResult {
    /// `eval/pass@k`, `eval/format_rate`, `eval/problems`, `time/eval_s`.
    pub metrics: BTreeMap<String, f64>,
    /// One record per problem for eval_results.jsonl.
    pub records: Vec<EvalResultRecord>,
}

/// Evaluates `sampler`'s policy at `step` (−1 for the baseline) with the evaluation sampling
/// parameters `params` (the spec's `eval` section, stop tokens included). `None` when a stop was
/// requested mid-way.
///
/// # Errors
/// Sampler or prompt failures.
pub(crate) async fn run(sampler: &dyn Sampler, step: i64, plan: &Plan, eval: &[Arc<Problem>], params: &SamplingParams, cx: &Ctx<'_>) -> Result<Option<EvalResult>, Error> {
    let t = Instant::now();
    let n = plan.eval.samples;
    let mut prompts = vec![];
    for (i, p) in eval.iter().enumerate() {
        // Eval seeds do not depend on the step, so differences between evals are the weights'.
        prompts.push((p.clone(), cx.prompting.first_turn(p)?, problems::derive_seed(plan.seed ^ 0xE7A1, -1, i as u64)));
    }
    // Single attempts: pass@k means what it means in every leaderboard.
    let phase = rollout::Phase { n: n as usize, params, max_attempts: 1, name: "eval", step };
    let (groups, timing) = rollout::run(sampler, prompts, &phase, cx).await?;
    let Some(groups) = groups else { return Ok(None) };
    let mut metrics = BTreeMap::new();
    let mut records = vec![];
    let mut sums: BTreeMap<u32, f64> = BTreeMap::new();
    let (mut formatted, mut total, mut infra) = (0usize, 0usize, 0usize);
    for g in &groups {
        let graded: Vec<&super::grading::Graded> = g.trajectories.iter().map(|t| &t.last().graded).collect();
        let c = graded.iter().filter(|x| x.verdict.passed).count() as u32;
        let graded_n = graded.iter().filter(|x| x.verdict.status != VerdictStatus::InfraError).count() as u32;
        infra += (n - graded_n) as usize;
        formatted += graded.iter().filter(|x| x.verdict.status != VerdictStatus::FormatError).count();
        total += graded.len();
        let mut per = vec![];
        for &k in &plan.eval.k {
            // Infra-failed samples are left out of n rather than counted as wrong.
            let p = pass_at_k(graded_n, c, k);
            *sums.entry(k).or_default() += p;
            per.push((k, p));
        }
        records.push(EvalResultRecord {
            step,
            problem_id: g.problem.id.clone(),
            n: graded_n,
            correct: c,
            statuses: graded.iter().map(|x| super::record_status(x.verdict.status)).collect(),
            tests_passed: graded.iter().map(|x| x.verdict.tests_passed).collect(),
            metrics: PassAtK(per),
        });
    }
    let problems_n = groups.len().max(1) as f64;
    for (k, s) in sums {
        metrics.insert(names::pass_at(k), s / problems_n);
    }
    metrics.insert(names::FORMAT_RATE.into(), if total == 0 { 0.0 } else { formatted as f64 / total as f64 });
    metrics.insert(names::PROBLEMS.into(), groups.len() as f64);
    metrics.insert(names::INFRA_ERRORS.into(), infra as f64);
    metrics.insert(names::PROBLEMS_DROPPED.into(), timing.sampler_dropped as f64);
    metrics.insert(time::EVAL_S.into(), t.elapsed().as_secs_f64());
    Ok(Some(EvalResult { metrics, records }))
}
