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
use crate::runlog::{EvalResultRecord, EvalSampleRecord, PassAtK, Protocol};
use crate::spec::types::RolloutLog;
use crate::plan::Plan;

use super::rollout::{self, Ctx};
use super::error::Error;
use super::problems;
use super::record;

/// An evaluation's metrics and per-problem records.
pub(crate) struct EvalResult {
    /// `eval/pass@k`, `eval/format_rate`, `eval/problems`, `time/eval_s`, with two or more
    /// sources `eval/<source>/pass@k` and `eval/<source>/problems`, and the greedy protocol's
    /// `eval/greedy/pass@1`, `eval/greedy/format_rate`, `eval/greedy/problems`.
    pub metrics: BTreeMap<String, f64>,
    /// One record per problem and protocol for eval_results.jsonl (the greedy ones tagged).
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
/// parameters `params` (the spec's `eval` section, stop tokens included) and, when
/// `eval.greedy` is on, greedily too (one more completion per problem at temperature 0, same
/// prompts, asked in the same calls). `None` when a stop was requested mid-way.
///
/// # Errors
/// Sampler or prompt failures.
pub(crate) async fn run(sampler: &dyn Sampler, step: i64, plan: &Plan, eval: &EvalSet, params: &SamplingParams, cx: &Ctx<'_>) -> Result<Option<EvalResult>, Error> {
    let t = Instant::now();
    let Some((main, greedy)) = pass(sampler, step, plan, eval, params, cx).await? else { return Ok(None) };
    let mut metrics = BTreeMap::new();
    let pass1 = pass_means(&main.records.iter().collect::<Vec<_>>(), &plan.eval.k);
    for &(k, mean) in &pass1 {
        metrics.insert(names::pass_at(k), mean);
    }
    if eval.sources.len() > 1 {
        for (label, _) in &eval.sources {
            let mine: Vec<&EvalResultRecord> = main.records.iter().filter(|r| r.source.as_deref() == Some(label)).collect();
            for (k, mean) in pass_means(&mine, &plan.eval.k) {
                metrics.insert(names::source_pass_at(label, k), mean);
            }
            metrics.insert(names::source_problems(label), mine.len() as f64);
        }
    }
    metrics.insert(names::FORMAT_RATE.into(), main.format_rate());
    metrics.insert(names::PROBLEMS.into(), main.records.len() as f64);
    metrics.insert(names::INFRA_ERRORS.into(), main.infra as f64);
    metrics.insert(names::PROBLEMS_DROPPED.into(), main.dropped as f64);
    if main.compiled > 0 {
        metrics.insert(names::COMPILE_ERROR_RATE.into(), main.compile_errors as f64 / main.compiled as f64);
    }
    let (mut records, mut samples) = (main.records, main.samples);
    if let Some(g) = greedy {
        metrics.insert(names::GREEDY_PASS_AT_1.into(), pass_means(&g.records.iter().collect::<Vec<_>>(), &[1])[0].1);
        metrics.insert(names::GREEDY_FORMAT_RATE.into(), g.format_rate());
        metrics.insert(names::GREEDY_PROBLEMS.into(), g.records.len() as f64);
        records.extend(g.records);
        samples.extend(g.samples);
    } else if params.temperature == 0.0 && plan.eval.samples == 1 {
        // The main eval is the greedy protocol: named as such too, so that every run that
        // evaluates has `eval/greedy/pass@1`.
        let mine: Vec<&EvalResultRecord> = records.iter().collect();
        metrics.insert(names::GREEDY_PASS_AT_1.into(), pass_means(&mine, &[1])[0].1);
        metrics.insert(names::GREEDY_FORMAT_RATE.into(), metrics[names::FORMAT_RATE]);
        metrics.insert(names::GREEDY_PROBLEMS.into(), metrics[names::PROBLEMS]);
    }
    metrics.insert(time::EVAL_S.into(), t.elapsed().as_secs_f64());
    Ok(Some(EvalResult { metrics, records, samples }))
}

/// One protocol's evaluation: per-problem records and kept completions, and its counts.
struct Pass {
    records: Vec<EvalResultRecord>,
    samples: Vec<EvalSampleRecord>,
    /// Completions with a code block, and all completions.
    formatted: usize,
    total: usize,
    /// Samples lost to sandbox infrastructure errors.
    infra: usize,
    /// Problems the sampler dropped.
    dropped: usize,
    /// Judged completions in a compiled language, and those that did not compile.
    compiled: usize,
    compile_errors: usize,
}

impl Pass {
    fn format_rate(&self) -> f64 {
        if self.total == 0 { 0.0 } else { self.formatted as f64 / self.total as f64 }
    }
}

/// Samples and grades every eval problem `eval.samples` times with `params` and, with
/// `eval.greedy`, once greedily: each protocol's records and counts.
async fn pass(sampler: &dyn Sampler, step: i64, plan: &Plan, eval: &EvalSet, params: &SamplingParams, cx: &Ctx<'_>) -> Result<Option<(Pass, Option<Pass>)>, Error> {
    let labels = eval.labels();
    let mut prompts = vec![];
    for (i, p) in eval.problems.iter().enumerate() {
        if cx.stop.requested() {
            return Ok(None);
        }
        // Eval seeds do not depend on the step, so differences between evals are the weights'.
        prompts.push((p.clone(), rollout::first_prompt(p, cx)?, problems::derive_seed(plan.seed ^ 0xE7A1, -1, i as u64)));
    }
    // Which source each problem came from, by id (groups dropped by the sampler leave gaps).
    let source_of: BTreeMap<&str, &str> = eval.problems.iter().zip(&labels).map(|(p, l)| (p.id.as_str(), *l)).collect();
    // Single attempts: pass@k means what it means in every leaderboard.
    let n = plan.eval.samples as usize;
    let phase = rollout::Phase { n, greedy: usize::from(plan.eval.greedy), params, max_attempts: 1, name: "eval", step };
    let (groups, timing) = rollout::run(sampler, prompts, &phase, cx).await?;
    let Some(groups) = groups else { return Ok(None) };
    let new = || Pass { records: vec![], samples: vec![], formatted: 0, total: 0, infra: 0, dropped: timing.sampler_dropped, compiled: 0, compile_errors: 0 };
    let (mut main, mut greedy) = (new(), plan.eval.greedy.then(new));
    let tools = !plan.rollout.tools.is_empty();
    for g in &groups {
        let source = source_of.get(g.problem.id.as_str()).map(|s| (*s).to_owned());
        // A group's greedy answer follows its sampled ones.
        let (sampled, greedy_one) = g.trajectories.split_at(n.min(g.trajectories.len()));
        main.add(&g.problem, &source, sampled, (step, None, &plan.eval.k), (plan.log.rollouts, tools));
        if let Some(out) = &mut greedy {
            out.add(&g.problem, &source, greedy_one, (step, Some(Protocol::Greedy), &[1]), (plan.log.rollouts, tools));
        }
    }
    Ok(Some((main, greedy)))
}

impl Pass {
    /// Adds one problem's trajectories under one protocol (`ks`: the pass@k values it reports;
    /// `tools`: the records keep every turn).
    fn add(&mut self, problem: &Problem, source: &Option<String>, trajectories: &[rollout::Trajectory], (step, protocol, ks): (i64, Option<Protocol>, &[u32]), (log, tools): (RolloutLog, bool)) {
        let n = trajectories.len() as u32;
        let keep = match log {
            RolloutLog::All => trajectories.len(),
            RolloutLog::Sample => 1,
            RolloutLog::None => 0,
        };
        self.samples.extend(trajectories.iter().take(keep).enumerate().map(|(k, t)| EvalSampleRecord { protocol, ..record::eval_sample(step, source, k, t, tools) }));
        let graded: Vec<&super::grading::Graded> = trajectories.iter().map(|t| &t.last().graded).collect();
        let c = graded.iter().filter(|x| x.verdict.passed).count() as u32;
        let graded_n = graded.iter().filter(|x| x.verdict.status != VerdictStatus::InfraError).count() as u32;
        self.infra += (n - graded_n) as usize;
        self.formatted += graded.iter().filter(|x| x.verdict.status != VerdictStatus::FormatError).count();
        self.total += graded.len();
        let compile: Vec<bool> = graded.iter().filter_map(|x| x.verdict.compile_failed()).collect();
        (self.compiled, self.compile_errors) = (self.compiled + compile.len(), self.compile_errors + compile.iter().filter(|&&f| f).count());
        // Infra-failed samples are left out of n rather than counted as wrong.
        let per = ks.iter().map(|&k| (k, pass_at_k(graded_n, c, k))).collect();
        self.records.push(EvalResultRecord {
            step,
            protocol,
            problem_id: problem.id.clone(),
            source: source.clone(),
            category: problem.category().map(str::to_owned),
            n: graded_n,
            correct: c,
            statuses: graded.iter().map(|x| record::status(x.verdict.status)).collect(),
            tests_passed: graded.iter().map(|x| x.verdict.tests_passed).collect(),
            metrics: PassAtK(per),
        });
    }
}

/// Each `k`'s pass@k averaged over `records`' problems (0 for none).
fn pass_means(records: &[&EvalResultRecord], ks: &[u32]) -> Vec<(u32, f64)> {
    let n = records.len().max(1) as f64;
    ks.iter().map(|&k| (k, records.iter().filter_map(|r| r.metrics.get(k)).sum::<f64>() / n)).collect()
}
