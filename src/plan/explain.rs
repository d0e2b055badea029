//! What a plan will cost: steps, completions, token bounds, evaluation count, and the expected
//! share of groups that carry no learning signal. `rlx validate --explain` prints it.

use serde::Serialize;

use super::Plan;

/// Arithmetic about a plan, computed without loading data or models.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Estimate {
    /// Training steps.
    pub steps: u32,
    /// Problems per step.
    pub prompts_per_step: u32,
    /// Completions per problem (G).
    pub group_size: u32,
    /// Completions per step.
    pub completions_per_step: u64,
    /// Upper bound on sampled tokens per training step (every completion hits `max_tokens`).
    pub max_tokens_per_step: u64,
    /// Upper bound on sampled training tokens over the run.
    pub max_train_tokens: u64,
    /// Evaluations over the run (baseline, periodic, final); 0 without eval data.
    pub evals: u32,
    /// Completions per eval problem.
    pub eval_samples: u32,
    /// Upper bound on sampled tokens per eval problem over the run.
    pub max_eval_tokens_per_problem: u64,
    /// With a pilot pass rate p: the expected share of groups whose rewards are all equal
    /// (p^G + (1-p)^G under a binary reward), which carry no gradient.
    pub zero_advantage_share: Option<f64>,
    /// Expected problems per step that carry signal: prompts_per_step × (1 − share).
    pub expected_useful_groups: Option<f64>,
}

/// Number of evaluations: the baseline (if `eval_at_start`), after every `eval_every` steps, and
/// after the last step (once, even when it falls on the cadence).
pub(crate) fn eval_count(max_steps: u32, eval_every: u32, eval_at_start: bool) -> u32 {
    let periodic = max_steps.checked_div(eval_every).unwrap_or(0);
    let last_on_cadence = eval_every != 0 && max_steps.is_multiple_of(eval_every) && max_steps > 0;
    let final_eval = u32::from(max_steps > 0 && !last_on_cadence);
    u32::from(eval_at_start) + periodic + final_eval
}

/// p^G + (1-p)^G: the chance that all G completions of a problem with pass rate p agree.
pub(crate) fn zero_advantage_share(p: f64, group_size: u32) -> f64 {
    let g = i32::try_from(group_size).unwrap_or(i32::MAX);
    p.powi(g) + (1.0 - p).powi(g)
}

/// Computes the estimate of a plan, optionally with a pilot pass rate.
pub(crate) fn estimate(plan: &Plan, pilot_pass_rate: Option<f64>) -> Estimate {
    let (g, sched) = (&plan.grpo, &plan.schedule);
    let completions = u64::from(g.prompts_per_step) * u64::from(g.group_size);
    let max_tokens = plan.sampling.max_tokens as u64;
    let evals = if plan.data.eval.is_empty() { 0 } else { eval_count(sched.max_steps, sched.eval_every, sched.eval_at_start) };
    let eval_samples = plan.eval.samples;
    let eval_max_tokens = plan.eval.sampling.max_tokens as u64;
    let share = pilot_pass_rate.map(|p| zero_advantage_share(p, g.group_size));
    // Only the GRPO and distillation stages sample: a staged run's supervised steps train on
    // their rows.
    let sampling_steps = if plan.stages.is_empty() {
        sched.max_steps
    } else {
        plan.stages.iter().filter(|s| matches!(s.kind, super::stages::StageKind::Grpo | super::stages::StageKind::Distill { .. })).map(|s| s.steps).sum()
    };
    Estimate {
        steps: sched.max_steps,
        prompts_per_step: g.prompts_per_step,
        group_size: g.group_size,
        completions_per_step: completions,
        max_tokens_per_step: completions * max_tokens,
        max_train_tokens: completions * max_tokens * u64::from(sampling_steps),
        evals,
        eval_samples,
        max_eval_tokens_per_problem: u64::from(evals) * u64::from(eval_samples) * eval_max_tokens,
        zero_advantage_share: share,
        expected_useful_groups: share.map(|z| f64::from(g.prompts_per_step) * (1.0 - z)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eval_counts() {
        assert_eq!(eval_count(100, 10, true), 11); // -1, 9, 19, ..., 99
        assert_eq!(eval_count(25, 10, true), 4); // -1, 9, 19, 24
        assert_eq!(eval_count(25, 0, true), 2); // -1, 24
        assert_eq!(eval_count(0, 10, true), 1); // baseline only
        assert_eq!(eval_count(20, 10, false), 2);
    }

    #[test]
    fn zero_advantage() {
        assert!((zero_advantage_share(0.5, 2) - 0.5).abs() < 1e-12);
        assert!((zero_advantage_share(0.0, 16) - 1.0).abs() < 1e-12);
        assert!((zero_advantage_share(0.1, 8) - (0.1f64.powi(8) + 0.9f64.powi(8))).abs() < 1e-12);
    }
}
