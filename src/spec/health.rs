//! The `diagnostics:` section: which run-health signals are checked after each step and eval,
//! their thresholds, and what a firing signal does. The signals and their remedies are the
//! reference workflow's troubleshooting table; the thresholds are ours (docs/diagnostics.md says
//! how each was chosen). The checks themselves are `crate::health`'s.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a firing signal does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Print a warning line and record the event; the run goes on.
    #[default]
    Warn,
    /// As `warn`, then end the run as failed after saving a checkpoint (resumable).
    Stop,
    /// Do not check this signal.
    Off,
}

/// Run-health signals, checked after every step and every eval. Each fires once when its
/// condition becomes true (again only after it was false), prints one warning line with its
/// evidence and remedy, and is recorded in `events.jsonl`; `rlx doctor` lists them afterwards.
/// Not part of the run id: watching a run does not change it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Health {
    /// Steps a signal looks back over (means, medians, rises). Default `5`.
    #[serde(default = "d::window")]
    #[schemars(range(min = 2))]
    pub window: u32,
    /// No completion passed (`train/correct_mean` 0) for `steps` steps in a row: the problems are
    /// too hard. Default `{steps: 5}`.
    #[serde(default = "d::flat")]
    pub reward_flat_zero: Streak,
    /// Every completion passed for `steps` steps in a row: the problems are too easy.
    /// Default `{steps: 5}`.
    #[serde(default = "d::flat")]
    pub reward_flat_one: Streak,
    /// Every group of a step degenerate (all its rewards equal, nothing to learn) for `steps`
    /// steps in a row. Default `{steps: 3}`.
    #[serde(default = "d::degenerate")]
    pub groups_degenerate: Streak,
    /// `train/format_rate` fell by more than `drop` below its best of the window.
    /// Default `{drop: 0.15}`.
    #[serde(default = "d::format")]
    pub format_rate_falling: Drop,
    /// Train reward rose by at least `reward_rise` (mean of the first `window` steps to mean of
    /// the last `window`) while eval pass@1 gained less than `eval_gain` over the baseline: the
    /// reward may be hacked. Checked after each eval. Default `{reward_rise: 0.1, eval_gain: 0.02}`.
    #[serde(default = "d::hacking")]
    pub reward_without_eval_gain: Hacking,
    /// The loss or the gradient norm is not finite, or the gradient norm or the mean importance
    /// ratio is above `factor` times its median over the window (the loss itself, a sum of
    /// advantage-weighted terms, swings 40× between healthy steps of the quickstart).
    /// Default `{factor: 10}`.
    #[serde(default = "d::exploding")]
    pub loss_exploding: Exploding,
    /// More than `rate` of the step's tests hit the time limit (`sandbox/timeout_rate`):
    /// timeouts dominate. Default `{rate: 0.5}`.
    #[serde(default = "d::timeouts")]
    pub sandbox_timeouts: Rate,
    /// More than `rate` of the step's gradings failed for infrastructure reasons after retries
    /// (`sandbox/infra_rate`). Default `{rate: 0.05}`.
    #[serde(default = "d::infra")]
    pub infra_errors: Rate,
    /// More than `rate` of the completions cut off by `max_tokens`, averaged over the window
    /// (`train/truncated_rate`). Default `{rate: 0.5}`.
    #[serde(default = "d::truncation")]
    pub truncation: Rate,
    /// Sampler and learner disagree: `train/kl_sample_train` averaged over the window above `rate`
    /// (nats per token). Default `{rate: 0.1}`.
    #[serde(default = "d::divergence")]
    pub logprob_divergence: Rate,
    /// The loss clips most of what it trains on: `train/clip_fraction` averaged over the window
    /// above `rate` (PPO/CISPO outside their band, GSPO's clipped sequences, tokens truncated or
    /// masked by `grpo.rollout_correction`). Default `{rate: 0.5}`.
    #[serde(default = "d::clipping")]
    pub clipping_dominant: Rate,
    /// Greedy pass@1 below the baseline's beyond noise: the exact McNemar test on each
    /// problem's greedy pass/fail, the baseline eval against this one, has p below `p` and more
    /// problems lost than gained. Checked after each eval with greedy results (`eval.greedy`, or
    /// a main eval at temperature 0). Default `{p: 0.05}`.
    #[serde(default = "d::greedy")]
    pub greedy_below_baseline: Significance,
    /// Coverage collapse: pass@k at the largest k of `eval.k` (k > 1) fell by more than `drop`
    /// below the baseline's while pass@1 rose: the policy sharpened onto fewer answers.
    /// Checked after each eval. Default `{drop: 0.05}`.
    #[serde(default = "d::coverage")]
    pub coverage_collapse: Drop,
    /// `train/entropy` averaged over the last `window` steps fell below `fraction` of its mean
    /// over the run's first `window` steps: the sampling policy is collapsing onto one answer.
    /// Default `{fraction: 0.25}`.
    #[serde(default = "d::entropy")]
    pub entropy_collapse: Collapse,
    /// `train/completion_tokens_mean` averaged over the last `window` steps fell below
    /// `fraction` of its mean over the first `window` steps: completions are shrinking (often
    /// toward degenerate one-liners). Default `{fraction: 0.5}`.
    #[serde(default = "d::length")]
    pub length_collapse: Collapse,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            window: d::window(),
            reward_flat_zero: d::flat(),
            reward_flat_one: d::flat(),
            groups_degenerate: d::degenerate(),
            format_rate_falling: d::format(),
            reward_without_eval_gain: d::hacking(),
            loss_exploding: d::exploding(),
            sandbox_timeouts: d::timeouts(),
            infra_errors: d::infra(),
            truncation: d::truncation(),
            logprob_divergence: d::divergence(),
            clipping_dominant: d::clipping(),
            greedy_below_baseline: d::greedy(),
            coverage_collapse: d::coverage(),
            entropy_collapse: d::entropy(),
            length_collapse: d::length(),
        }
    }
}

impl Health {
    /// Whether nothing is set (then the spec as written leaves the section out).
    pub fn is_default(&self) -> bool {
        *self == Health::default()
    }
}

/// A condition that must hold for `steps` steps in a row.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Streak {
    /// Steps in a row.
    #[schemars(range(min = 1))]
    pub steps: u32,
    /// What firing does. Default `warn`.
    #[serde(default)]
    pub action: Action,
}

/// A fall below the window's best.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Drop {
    /// The fall (0–1) that fires.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub drop: f64,
    /// What firing does. Default `warn`.
    #[serde(default)]
    pub action: Action,
}

/// Train reward up, eval flat.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Hacking {
    /// Rise of the train reward's window mean that counts as rising.
    #[schemars(range(min = 0.0))]
    pub reward_rise: f64,
    /// Eval pass@1 gain over the baseline below which eval counts as flat.
    pub eval_gain: f64,
    /// What firing does. Default `warn`.
    #[serde(default)]
    pub action: Action,
}

/// A value far above its recent median.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Exploding {
    /// Multiple of the window's median that fires.
    #[schemars(range(min = 1.0))]
    pub factor: f64,
    /// What firing does. Default `warn`.
    #[serde(default)]
    pub action: Action,
}

/// A rate above a threshold.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Rate {
    /// The threshold.
    #[schemars(range(min = 0.0))]
    pub rate: f64,
    /// What firing does. Default `warn`.
    #[serde(default)]
    pub action: Action,
}

/// A paired test's p-value below a threshold.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Significance {
    /// The p-value below which the change counts as beyond noise.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub p: f64,
    /// What firing does. Default `warn`.
    #[serde(default)]
    pub action: Action,
}

/// A window mean fallen to a fraction of the run's first.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Collapse {
    /// The fraction (0–1) of the first window's mean below which the last window's fires.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub fraction: f64,
    /// What firing does. Default `warn`.
    #[serde(default)]
    pub action: Action,
}

/// The defaults, named once.
mod d {
    use super::*;

    pub(super) fn window() -> u32 {
        5
    }
    pub(super) fn flat() -> Streak {
        Streak { steps: 5, action: Action::Warn }
    }
    pub(super) fn degenerate() -> Streak {
        Streak { steps: 3, action: Action::Warn }
    }
    pub(super) fn format() -> Drop {
        Drop { drop: 0.15, action: Action::Warn }
    }
    pub(super) fn hacking() -> Hacking {
        Hacking { reward_rise: 0.1, eval_gain: 0.02, action: Action::Warn }
    }
    pub(super) fn exploding() -> Exploding {
        Exploding { factor: 10.0, action: Action::Warn }
    }
    pub(super) fn timeouts() -> Rate {
        Rate { rate: 0.5, action: Action::Warn }
    }
    pub(super) fn infra() -> Rate {
        Rate { rate: 0.05, action: Action::Warn }
    }
    pub(super) fn truncation() -> Rate {
        Rate { rate: 0.5, action: Action::Warn }
    }
    pub(super) fn divergence() -> Rate {
        Rate { rate: 0.1, action: Action::Warn }
    }
    pub(super) fn clipping() -> Rate {
        Rate { rate: 0.5, action: Action::Warn }
    }
    pub(super) fn greedy() -> Significance {
        Significance { p: 0.05, action: Action::Warn }
    }
    pub(super) fn coverage() -> Drop {
        Drop { drop: 0.05, action: Action::Warn }
    }
    pub(super) fn entropy() -> Collapse {
        Collapse { fraction: 0.25, action: Action::Warn }
    }
    pub(super) fn length() -> Collapse {
        Collapse { fraction: 0.5, action: Action::Warn }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_descriptions_quote_the_defaults() {
        let schema = serde_json::to_value(schemars::schema_for!(Health)).unwrap();
        let props = &schema["properties"];
        let def = serde_json::to_value(Health::default()).unwrap();
        for (key, value) in def.as_object().unwrap() {
            let desc = props[key]["description"].as_str().unwrap_or_else(|| panic!("{key} has no description"));
            let quoted = match value {
                serde_json::Value::Object(m) => m
                    .iter()
                    .filter(|(k, _)| *k != "action")
                    .map(|(k, v)| format!("{k}: {}", v.as_f64().unwrap()))
                    .collect::<Vec<_>>(),
                v => vec![format!("Default `{v}`")],
            };
            let default = desc.split("Default `").nth(1).unwrap_or_else(|| panic!("{key}: `{desc}` quotes no default"));
            for q in quoted {
                let q = q.trim_start_matches("Default `");
                assert!(default.contains(q), "{key}: `{desc}` does not say {q}");
            }
        }
    }
}
