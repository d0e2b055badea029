//! The signals: each a condition over the recent steps (or evals), the evidence it prints, and
//! the reference workflow's remedy. One function per signal; [`Signal`] names them.

use crate::runlog::metrics::{optim, sandbox, train};
use crate::spec::health::{Action, Health};

use super::{History, Point};

/// The signals, in the order they are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Signal {
    /// No completion passed for N steps.
    RewardFlatZero,
    /// Every completion passed for N steps.
    RewardFlatOne,
    /// Every group degenerate for N steps.
    GroupsDegenerate,
    /// Format rate fell.
    FormatRateFalling,
    /// Loss or gradient norm exploding.
    LossExploding,
    /// Tests timing out.
    SandboxTimeouts,
    /// Grading failing for infrastructure reasons.
    InfraErrors,
    /// Completions cut off by `max_tokens`.
    Truncation,
    /// Sampler and learner log-probabilities disagree.
    LogprobDivergence,
    /// The loss's clip (or truncation, or mask) acts on most action tokens.
    ClippingDominant,
    /// Train reward up, eval pass@1 flat.
    RewardWithoutEvalGain,
    /// Greedy pass@1 below the baseline's beyond noise (exact McNemar).
    GreedyBelowBaseline,
    /// pass@k at the largest k falling while pass@1 rises.
    CoverageCollapse,
    /// `train/entropy` far below its first steps.
    EntropyCollapse,
    /// `train/completion_tokens_mean` far below its first steps.
    LengthCollapse,
}

impl Signal {
    /// Those checked after an eval.
    pub(crate) const EVAL: [Signal; 3] = [Signal::RewardWithoutEvalGain, Signal::GreedyBelowBaseline, Signal::CoverageCollapse];

    /// Those checked after a step.
    pub(crate) const STEP: [Signal; 12] = [
        Signal::RewardFlatZero,
        Signal::RewardFlatOne,
        Signal::GroupsDegenerate,
        Signal::FormatRateFalling,
        Signal::LossExploding,
        Signal::SandboxTimeouts,
        Signal::InfraErrors,
        Signal::Truncation,
        Signal::LogprobDivergence,
        Signal::ClippingDominant,
        Signal::EntropyCollapse,
        Signal::LengthCollapse,
    ];

    /// The name in the spec and in `events.jsonl`.
    pub fn name(self) -> &'static str {
        match self {
            Signal::RewardFlatZero => "reward_flat_zero",
            Signal::RewardFlatOne => "reward_flat_one",
            Signal::GroupsDegenerate => "groups_degenerate",
            Signal::FormatRateFalling => "format_rate_falling",
            Signal::LossExploding => "loss_exploding",
            Signal::SandboxTimeouts => "sandbox_timeouts",
            Signal::InfraErrors => "infra_errors",
            Signal::Truncation => "truncation",
            Signal::LogprobDivergence => "logprob_divergence",
            Signal::ClippingDominant => "clipping_dominant",
            Signal::RewardWithoutEvalGain => "reward_without_eval_gain",
            Signal::GreedyBelowBaseline => "greedy_below_baseline",
            Signal::CoverageCollapse => "coverage_collapse",
            Signal::EntropyCollapse => "entropy_collapse",
            Signal::LengthCollapse => "length_collapse",
        }
    }

    /// What to do about it: the reference workflow's remedy, in rlx's keys.
    pub fn remedy(self) -> &'static str {
        match self {
            Signal::RewardFlatZero => "problems too hard, no positive signal: filter easier problems (data.train.*.difficulty) or increase grpo.group_size",
            Signal::RewardFlatOne => "too easy, the model already solves everything: use a harder subset",
            Signal::GroupsDegenerate => "group size too small or difficulty too uniform: increase grpo.group_size or diversify the dataset",
            Signal::FormatRateFalling => "the model is degenerating: check the chat template and prompt, reduce optimizer.learning_rate",
            Signal::LossExploding => "learning rate too high: reduce optimizer.learning_rate (the reference suggests 1e-5)",
            Signal::SandboxTimeouts => "code with infinite loops or deep recursion: lower reward.test_timeout_s (normal early in training)",
            Signal::InfraErrors => "the sandbox is failing: check that it runs (Sandbox Fusion's server, or logs.log for the local workers), lower sandbox.concurrency",
            Signal::Truncation => "completions hit sampling.max_tokens: raise it, or shape length (grpo.overlong)",
            Signal::LogprobDivergence => "sampler and learner disagree: try backend.sample_weights: f32 to rule out quantization, and check grpo.max_steps_off_policy",
            Signal::ClippingDominant => "most tokens take the clipped, gradient-free branch, so only the rest train (GSPO at a narrow band trains positive-advantage sequences only): let the learner score at the sampling temperature (grpo.learner_temperature), sample with backend.sample_weights: f32, or widen the clip band",
            Signal::RewardWithoutEvalGain => "possible reward hacking (hard-coded outputs): inspect the leads with `rlx show`",
            Signal::GreedyBelowBaseline => "training made the model's greedy answers worse: see both protocols with `rlx compare RUN_DIR --steps -1,last`; lower optimizer.learning_rate, anchor to the base (grpo.kl), keep the best checkpoint",
            Signal::CoverageCollapse => "the policy sharpens onto fewer answers: lower optimizer.learning_rate, anchor to the base (grpo.kl), check that the learner scores the temperature the samples were drawn at",
            Signal::EntropyCollapse => "the sampling policy is collapsing onto one answer: lower optimizer.learning_rate, anchor to the base (grpo.kl), raise sampling.temperature",
            Signal::LengthCollapse => "completions are shrinking: read them with `rlx show`; check the loss aggregation (grpo.loss_agg) and length shaping (grpo.overlong)",
        }
    }

    /// The spec's action for it.
    pub(crate) fn action(self, h: &Health) -> Action {
        match self {
            Signal::RewardFlatZero => h.reward_flat_zero.action,
            Signal::RewardFlatOne => h.reward_flat_one.action,
            Signal::GroupsDegenerate => h.groups_degenerate.action,
            Signal::FormatRateFalling => h.format_rate_falling.action,
            Signal::LossExploding => h.loss_exploding.action,
            Signal::SandboxTimeouts => h.sandbox_timeouts.action,
            Signal::InfraErrors => h.infra_errors.action,
            Signal::Truncation => h.truncation.action,
            Signal::LogprobDivergence => h.logprob_divergence.action,
            Signal::ClippingDominant => h.clipping_dominant.action,
            Signal::RewardWithoutEvalGain => h.reward_without_eval_gain.action,
            Signal::GreedyBelowBaseline => h.greedy_below_baseline.action,
            Signal::CoverageCollapse => h.coverage_collapse.action,
            Signal::EntropyCollapse => h.entropy_collapse.action,
            Signal::LengthCollapse => h.length_collapse.action,
        }
    }

    /// Checks the signal after the last step of `h`: the evidence when it holds.
    pub(crate) fn check_step(self, cfg: &Health, h: &History) -> Option<String> {
        match self {
            Signal::RewardFlatZero => streak(h, cfg.reward_flat_zero.steps, |p| p.get(train::CORRECT_MEAN).map(|c| c <= 0.0))
                .map(|r| format!("no completion passed for {} steps ({r}); train/reward_mean {}", cfg.reward_flat_zero.steps, fmt(h.last().and_then(|p| p.get(train::REWARD_MEAN)).unwrap_or(0.0)))),
            Signal::RewardFlatOne => streak(h, cfg.reward_flat_one.steps, |p| p.get(train::CORRECT_MEAN).map(|c| c >= 1.0))
                .map(|r| format!("every completion passed for {} steps ({r})", cfg.reward_flat_one.steps)),
            Signal::GroupsDegenerate => streak(h, cfg.groups_degenerate.steps, |p| {
                let groups = p.get(train::GROUPS)?;
                // Runs before `groups_degenerate` counted only the skipped ones.
                let degenerate = p.get(train::GROUPS_DEGENERATE).or_else(|| p.get(train::GROUPS_SKIPPED))?;
                Some(groups > 0.0 && degenerate >= groups)
            })
            .map(|r| format!("every group degenerate (all rewards equal, so every advantage zero) for {} steps ({r}): nothing learned", cfg.groups_degenerate.steps)),
            Signal::FormatRateFalling => format_falling(cfg, h),
            Signal::LossExploding => exploding(cfg, h),
            Signal::SandboxTimeouts => {
                let p = h.last()?;
                let rate = p.get(sandbox::TIMEOUT_RATE)?;
                (rate > cfg.sandbox_timeouts.rate).then(|| format!("{} of the step's {} tests timed out (threshold {})", pct(rate), p.get(sandbox::TESTS).unwrap_or(0.0), pct(cfg.sandbox_timeouts.rate)))
            }
            Signal::InfraErrors => {
                let rate = h.last()?.get(sandbox::INFRA_RATE)?;
                (rate > cfg.infra_errors.rate).then(|| format!("{} of the step's gradings failed for infrastructure reasons after retries (threshold {})", pct(rate), pct(cfg.infra_errors.rate)))
            }
            Signal::Truncation => window_mean(h, cfg.window, train::TRUNCATED_RATE)
                .filter(|&m| m > cfg.truncation.rate)
                .map(|m| format!("{} of completions cut off by max_tokens over the last {} steps (threshold {})", pct(m), cfg.window, pct(cfg.truncation.rate))),
            Signal::LogprobDivergence => window_mean(h, cfg.window, train::KL_SAMPLE_TRAIN)
                .filter(|&m| m > cfg.logprob_divergence.rate)
                .map(|m| format!("train/kl_sample_train {} nats/token over the last {} steps (threshold {})", fmt(m), cfg.window, cfg.logprob_divergence.rate)),
            Signal::ClippingDominant => window_mean(h, cfg.window, train::CLIP_FRACTION)
                .filter(|&m| m > cfg.clipping_dominant.rate)
                .map(|m| format!("train/clip_fraction {} of action tokens over the last {} steps (threshold {})", pct(m), cfg.window, pct(cfg.clipping_dominant.rate))),
            Signal::EntropyCollapse => collapse(h, cfg.window, train::ENTROPY, cfg.entropy_collapse.fraction),
            Signal::LengthCollapse => collapse(h, cfg.window, train::COMPLETION_TOKENS_MEAN, cfg.length_collapse.fraction),
            Signal::RewardWithoutEvalGain | Signal::GreedyBelowBaseline | Signal::CoverageCollapse => None,
        }
    }
}

/// `name`'s mean over the last `window` steps below `fraction` of its mean over the first
/// `window` (the two windows apart: at least 2·window steps with the metric).
fn collapse(h: &History, window: u32, name: &str, fraction: f64) -> Option<String> {
    let w = window as usize;
    let xs: Vec<(i64, f64)> = h.steps.iter().filter_map(|p| Some((p.step, p.get(name)?))).filter(|x| x.1.is_finite()).collect();
    if w == 0 || xs.len() < 2 * w {
        return None;
    }
    let mean = |s: &[(i64, f64)]| s.iter().map(|x| x.1).sum::<f64>() / s.len() as f64;
    let (first, last) = (&xs[..w], &xs[xs.len() - w..]);
    let (a, b) = (mean(first), mean(last));
    (a > 0.0 && b < fraction * a).then(|| {
        format!(
            "{name} {} over steps {}–{}, {} of its {} over steps {}–{} (threshold {})",
            fmt(b),
            last[0].0,
            last[w - 1].0,
            pct(b / a),
            fmt(a),
            first[0].0,
            first[w - 1].0,
            pct(fraction)
        )
    })
}

/// `fits` held at each of the last `n` steps (a step without the metric breaks the streak): the
/// steps' range, `3–7`.
fn streak(h: &History, n: u32, fits: impl Fn(&Point) -> Option<bool>) -> Option<String> {
    let n = n as usize;
    let last = h.steps.len().checked_sub(n)?;
    let run = &h.steps[last..];
    run.iter().all(|p| fits(p) == Some(true)).then(|| format!("steps {}–{}", run[0].step, run[n - 1].step))
}

/// The mean of `name` over the last `window` steps, when every one of them has it.
fn window_mean(h: &History, window: u32, name: &str) -> Option<f64> {
    let start = h.steps.len().checked_sub(window as usize)?;
    let xs: Option<Vec<f64>> = h.steps[start..].iter().map(|p| p.get(name)).collect();
    let xs = xs?;
    Some(xs.iter().sum::<f64>() / xs.len() as f64)
}

fn format_falling(cfg: &Health, h: &History) -> Option<String> {
    let start = h.steps.len().saturating_sub(cfg.window as usize);
    let now = h.last()?.get(train::FORMAT_RATE)?;
    let (best_step, best) = h.steps[start..].iter().filter_map(|p| Some((p.step, p.get(train::FORMAT_RATE)?))).fold((0, f64::MIN), |a, b| if b.1 > a.1 { b } else { a });
    (best - now > cfg.format_rate_falling.drop).then(|| format!("train/format_rate fell from {} at step {best_step} to {} (more than {})", pct(best), pct(now), pct(cfg.format_rate_falling.drop)))
}

fn exploding(cfg: &Health, h: &History) -> Option<String> {
    let p = h.last()?;
    let earlier = &h.steps[h.steps.len().saturating_sub(cfg.window as usize + 1)..h.steps.len() - 1];
    for name in [train::LOSS, optim::GRAD_NORM] {
        if let Some(now) = p.get(name)
            && !now.is_finite()
        {
            return Some(format!("{name} is {now}"));
        }
    }
    // The gradient norm and the mean importance ratio against their medians, not the loss: it
    // is a sum of advantage-weighted terms whose size swings with the step's advantages (40×
    // between two healthy quickstart steps). The mean ratio stays within 0.98–1.05 there.
    for name in [optim::GRAD_NORM, train::RATIO_MEAN] {
        let Some(now) = p.get(name) else { continue };
        let mut prev: Vec<f64> = earlier.iter().filter_map(|q| q.get(name)).filter(|x| x.is_finite()).map(f64::abs).collect();
        // A median of fewer than three steps is one noisy step.
        if prev.len() < 3 {
            continue;
        }
        let median = crate::quantile::quantile(&mut prev, 0.5);
        if median > 0.0 && now.abs() > cfg.loss_exploding.factor * median {
            return Some(format!("{name} {} is {:.1}× its median over the previous {} steps ({})", fmt(now), now.abs() / median, prev.len(), fmt(median)));
        }
    }
    None
}

/// A rate as a percentage, `37.5%`.
pub(crate) fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// A number with four significant digits.
pub(crate) fn fmt(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return x.to_string();
    }
    let digits = (3 - x.abs().log10().floor() as i32).max(0) as usize;
    format!("{x:.digits$}")
}
