//! A group's rewards and advantages, computed once, when the group arrives: the step's rule for
//! "is it full" ([`super::fill`]) needs them to know which groups carry a signal, and the update
//! ([`super::step::learn`]) trains on the same numbers rather than computing them again.

use std::sync::Arc;

use crate::rl::advantage::{AdvantageStrategy, should_skip};
use crate::rl::reward::{Custom, Grading, RewardStrategy};
use crate::rl::shaping;
use crate::sandbox::VerdictStatus;
use crate::seam::SamplingParams;
use crate::spec::types::{DynamicSamplingMetric, Overlong};

use super::grading::Graded;
use super::pyreward::Scores;
use super::rollout::Group;

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

/// A group's score: its rewards and advantages, or why it has none.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GroupScore {
    /// Per trajectory; `None` when a grade hit an infrastructure error or the Python reward
    /// failed (the group says nothing about the model and is dropped, never trained on).
    pub rewards: Option<Vec<f64>>,
    /// The advantage strategy's output for `rewards` (empty without rewards).
    pub advantages: Vec<f64>,
    /// Whether the group carries a learning signal: scored, not every advantage zero, and with
    /// dynamic sampling by `metric: correct`, its completions neither all passing nor all
    /// failing.
    pub informative: bool,
}

/// The outcome the reward strategies see.
pub(crate) fn outcome<'a>(g: &Graded, custom: Option<&'a Custom>) -> Grading<'a> {
    Grading {
        format_ok: g.verdict.status != VerdictStatus::FormatError,
        tests_passed: g.verdict.tests_passed as u32,
        tests_total: g.verdict.tests_total as u32,
        infra_error: g.verdict.status == VerdictStatus::InfraError,
        custom,
    }
}

/// A tool-using trajectory's reward from its last turn's `reward`: `0` when it ended on a limit
/// under `on_limit: zero`, less `parse_error.penalty` per malformed turn. Unchanged without tools.
fn tool_reward(reward: f64, t: &super::rollout::Trajectory, plan: &crate::plan::Plan) -> f64 {
    use crate::spec::types::OnLimit;
    if plan.rollout.tools.is_empty() {
        return reward;
    }
    let limits = plan.rollout.limits.clone().unwrap_or_default();
    let ended_on_limit = t.ending.is_some_and(|e| e != super::env::Ending::Completed);
    let base = if ended_on_limit && limits.on_limit == OnLimit::Zero { 0.0 } else { reward };
    let malformed = t.turns.iter().filter(|x| x.tools.parse_error.is_some()).count();
    base - limits.parse_error.penalty * malformed as f64
}

/// Scores group `gi` of a batch whose Python reward values are `scores`: each trajectory's
/// reward is its last attempt's (with the Python reward's value when there is one), plus the
/// overlong penalty when `grpo.overlong` asks for it.
pub(crate) fn score(g: &Group, gi: usize, scores: &Scores, cfg: &StepConfig<'_>) -> GroupScore {
    let max_tokens = cfg.plan.sampling.max_tokens;
    let rewards: Option<Vec<f64>> = g
        .trajectories
        .iter()
        .enumerate()
        .map(|(k, t)| {
            let last = t.last();
            let r = tool_reward(cfg.reward.reward(&outcome(&last.graded, scores.custom(gi, k)))?, t, cfg.plan);
            let shaped = match cfg.plan.grpo.overlong {
                Some(Overlong::SoftPenalty { cache_tokens, penalty }) => shaping::overlong_penalty(last.seq.tokens.len(), max_tokens, cache_tokens as usize, penalty),
                _ => 0.0,
            };
            Some(r + shaped)
        })
        .collect();
    let advantages = rewards.as_deref().map(|r| cfg.advantage.advantages(r)).unwrap_or_default();
    let passed = g.trajectories.iter().filter(|t| t.last().graded.verdict.passed).count();
    let mixed = passed > 0 && passed < g.trajectories.len();
    let by_correctness = matches!(cfg.plan.grpo.dynamic_sampling, Some(d) if d.metric == DynamicSamplingMetric::Correct);
    let informative = rewards.is_some() && !should_skip(&advantages) && (mixed || !by_correctness);
    GroupScore { rewards, advantages, informative }
}
