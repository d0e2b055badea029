//! The `diagnostics:` section: which run-health signals are checked after each step and eval,
//! their thresholds, and what a firing signal does. The signals and their remedies are the
//! reference workflow's troubleshooting table; the thresholds are ours (docs/diagnostics.md says
//! how each was chosen). The checks themselves are `crate::health`'s: each key below names a
//! row of its table (`health::signals::SIGNALS`: what the signal reads, its check and message,
//! its remedy), and a test there fails when a row and a key lack each other. A new signal is its
//! row there and its key here, with its default, in one line of [`Health`]'s declaration.

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

/// Declares [`Health`] from one row per key (doc comment, key, type, default): the struct, its
/// `Default`, and through the container's `#[serde(default)]` the serde and schema defaults, so
/// a signal's configuration is written once. The rejected alternative, a struct plus a
/// `Default` impl plus one default function per field, put each signal's default in three places.
macro_rules! section {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$attr:meta])* $key:ident: $ty:ty = $default:expr,)* }) => {
        $(#[$meta])*
        pub struct $name {
            $($(#[$attr])* pub $key: $ty,)*
        }

        impl Default for $name {
            fn default() -> Self {
                $name { $($key: $default,)* }
            }
        }
    };
}

section! {
    /// Run-health signals, checked after every step and every eval. Each fires once when its
    /// condition becomes true (again only after it was false), prints one warning line with its
    /// evidence and remedy, and is recorded in `events.jsonl`; `rlx doctor` lists them afterwards.
    /// Not part of the run id: watching a run does not change it.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields, default)]
    pub struct Health {
        /// Steps a signal looks back over (means, medians, rises). Default `5`.
        #[schemars(range(min = 2))]
        window: u32 = 5,
        /// No completion passed (`train/correct_mean` 0) for `steps` steps in a row: the problems are
        /// too hard. Default `{steps: 5}`.
        reward_flat_zero: Streak = Streak { steps: 5, action: Action::Warn },
        /// Every completion passed for `steps` steps in a row: the problems are too easy.
        /// Default `{steps: 5}`.
        reward_flat_one: Streak = Streak { steps: 5, action: Action::Warn },
        /// Every group of a step degenerate (all its rewards equal, nothing to learn) for `steps`
        /// steps in a row. Default `{steps: 3}`.
        groups_degenerate: Streak = Streak { steps: 3, action: Action::Warn },
        /// `train/format_rate` fell by more than `drop` below its best of the window.
        /// Default `{drop: 0.15}`.
        format_rate_falling: Drop = Drop { drop: 0.15, action: Action::Warn },
        /// Train reward rose by at least `reward_rise` (mean of the first `window` steps to mean of
        /// the last `window`) while eval pass@1 gained less than `eval_gain` over the baseline: the
        /// reward may be hacked. Checked after each eval. Default `{reward_rise: 0.1, eval_gain: 0.02}`.
        reward_without_eval_gain: Hacking = Hacking { reward_rise: 0.1, eval_gain: 0.02, action: Action::Warn },
        /// The loss or the gradient norm is not finite, or the gradient norm or the mean importance
        /// ratio is above `factor` times its median over the window (the loss itself, a sum of
        /// advantage-weighted terms, swings 40× between healthy steps of the quickstart).
        /// Default `{factor: 10}`.
        loss_exploding: Exploding = Exploding { factor: 10.0, action: Action::Warn },
        /// More than `rate` of the step's tests hit the time limit (`sandbox/timeout_rate`):
        /// timeouts dominate. Default `{rate: 0.5}`.
        sandbox_timeouts: Rate = Rate { rate: 0.5, action: Action::Warn },
        /// More than `rate` of the step's gradings failed for infrastructure reasons after retries
        /// (`sandbox/infra_rate`). Default `{rate: 0.05}`.
        infra_errors: Rate = Rate { rate: 0.05, action: Action::Warn },
        /// More than `rate` of the completions cut off by `max_tokens`, averaged over the window
        /// (`train/truncated_rate`). Default `{rate: 0.5}`.
        truncation: Rate = Rate { rate: 0.5, action: Action::Warn },
        /// Tool turns: more than `rate` of the trajectories ended on a limit or a malformed tool
        /// call rather than a final answer (`train/limit_stop_rate`), averaged over the window.
        /// Default `{rate: 0.5}`.
        tool_limit_stops: Rate = Rate { rate: 0.5, action: Action::Warn },
        /// Sampler and learner disagree: `train/kl_sample_train` averaged over the window above `rate`
        /// (nats per token). Default `{rate: 0.1}`.
        logprob_divergence: Rate = Rate { rate: 0.1, action: Action::Warn },
        /// The loss clips most of what it trains on: `train/clip_fraction` averaged over the window
        /// above `rate` (PPO/CISPO outside their band, GSPO's clipped sequences, tokens truncated or
        /// masked by `grpo.rollout_correction`). Default `{rate: 0.5}`.
        clipping_dominant: Rate = Rate { rate: 0.5, action: Action::Warn },
        /// Greedy pass@1 below the baseline's beyond noise: the exact McNemar test on each
        /// problem's greedy pass/fail, the baseline eval against this one, has p below `p` and more
        /// problems lost than gained. Checked after each eval with greedy results (`eval.greedy`, or
        /// a main eval at temperature 0). Default `{p: 0.05}`.
        greedy_below_baseline: Significance = Significance { p: 0.05, action: Action::Warn },
        /// Coverage collapse: pass@k at the largest k of `eval.k` (k > 1) fell by more than `drop`
        /// below the baseline's while pass@1 rose: the policy sharpened onto fewer answers.
        /// Checked after each eval. Default `{drop: 0.05}`.
        coverage_collapse: Drop = Drop { drop: 0.05, action: Action::Warn },
        /// `train/entropy` averaged over the last `window` steps fell below `fraction` of its mean
        /// over the run's first `window` steps: the sampling policy is collapsing onto one answer.
        /// Default `{fraction: 0.25}`.
        entropy_collapse: Collapse = Collapse { fraction: 0.25, action: Action::Warn },
        /// `train/completion_tokens_mean` averaged over the last `window` steps fell below
        /// `fraction` of its mean over the first `window` steps: completions are shrinking (often
        /// toward degenerate one-liners). Default `{fraction: 0.5}`.
        length_collapse: Collapse = Collapse { fraction: 0.5, action: Action::Warn },
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
