//! The signals as a table: one row each, with its name (its key in the spec's `diagnostics:`
//! section and in `events.jsonl`), what it reads (the steps, or the evals), the thresholds it
//! reads from its setting (their defaults are the spec's, `crate::spec::health`), its check,
//! which returns the evidence it prints when it holds, and the reference workflow's remedy.
//!
//! A new signal is a row here, its key in `spec::health` and its test; `every_row_has_a_key`
//! (below) fails until the row and the key both exist. Rows are checked in table order, step
//! rows after each step and eval rows after each eval, so the order here is the order of the
//! warning lines.

use std::fmt;

use crate::runlog::metrics::{sandbox, train};

use super::evals;
use super::history::{Evidence, Seen};
use super::steps::{collapse, exploding, format_falling, streak, window_above};
use super::text::{fmt, pct};

/// When a signal is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reads {
    /// After each step, over the steps' metrics.
    Step,
    /// After each eval (the baseline's too), over the evals and the steps so far.
    Eval,
}

/// A check: the evidence when the signal's condition holds.
pub(crate) type Check = fn(&Seen<'_>) -> Option<Evidence>;

/// One row of the table.
pub struct Signal {
    name: &'static str,
    pub(crate) reads: Reads,
    /// The setting's thresholds the check reads (besides the section's `window`).
    pub(crate) thresholds: &'static [&'static str],
    pub(crate) check: Check,
    remedy: &'static str,
}

impl Signal {
    /// The name in the spec and in `events.jsonl`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// What to do about it: the reference workflow's remedy, in rlx's keys.
    pub fn remedy(&self) -> &'static str {
        self.remedy
    }

    /// When it is checked.
    pub fn reads(&self) -> Reads {
        self.reads
    }

    /// A row (tests add their own to [`SIGNALS`]).
    pub(crate) const fn new(name: &'static str, reads: Reads, thresholds: &'static [&'static str], check: Check, remedy: &'static str) -> Signal {
        Signal { name, reads, thresholds, check, remedy }
    }
}

// Rows are told apart by name: two rows with one name would share a spec key.
impl PartialEq for Signal {
    fn eq(&self, other: &Signal) -> bool {
        self.name == other.name
    }
}

impl fmt::Debug for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// The signals, in the order they are checked.
pub(crate) const SIGNALS: &[Signal] = &[
    Signal::new(
        "reward_flat_zero",
        Reads::Step,
        &["steps"],
        |s| {
            let reward = s.last().and_then(|p| p.get(train::REWARD_MEAN)).unwrap_or(0.0);
            streak(s, |p| p.get(train::CORRECT_MEAN).map(|c| c <= 0.0)).map(|r| format!("no completion passed for {} steps ({r}); train/reward_mean {}", s.t("steps"), fmt(reward)).into())
        },
        "problems too hard, no positive signal: filter easier problems (data.train.*.difficulty) or increase grpo.group_size",
    ),
    Signal::new(
        "reward_flat_one",
        Reads::Step,
        &["steps"],
        |s| streak(s, |p| p.get(train::CORRECT_MEAN).map(|c| c >= 1.0)).map(|r| format!("every completion passed for {} steps ({r})", s.t("steps")).into()),
        "too easy, the model already solves everything: use a harder subset",
    ),
    Signal::new(
        "groups_degenerate",
        Reads::Step,
        &["steps"],
        |s| {
            streak(s, |p| {
                let groups = p.get(train::GROUPS)?;
                // Runs before `groups_degenerate` counted only the skipped ones.
                let degenerate = p.get(train::GROUPS_DEGENERATE).or_else(|| p.get(train::GROUPS_SKIPPED))?;
                Some(groups > 0.0 && degenerate >= groups)
            })
            .map(|r| format!("every group degenerate (all rewards equal, so every advantage zero) for {} steps ({r}): nothing learned", s.t("steps")).into())
        },
        "group size too small or difficulty too uniform: increase grpo.group_size or diversify the dataset",
    ),
    Signal::new(
        "format_rate_falling",
        Reads::Step,
        &["drop"],
        |s| format_falling(s).map(Evidence::from),
        "the model is degenerating: check the chat template and prompt, reduce optimizer.learning_rate",
    ),
    Signal::new(
        "loss_exploding",
        Reads::Step,
        &["factor"],
        |s| exploding(s).map(Evidence::from),
        "learning rate too high: reduce optimizer.learning_rate (the reference suggests 1e-5)",
    ),
    Signal::new(
        "sandbox_timeouts",
        Reads::Step,
        &["rate"],
        |s| {
            let p = s.last()?;
            let rate = p.get(sandbox::TIMEOUT_RATE)?;
            (rate > s.t("rate")).then(|| format!("{} of the step's {} tests timed out (threshold {})", pct(rate), p.get(sandbox::TESTS).unwrap_or(0.0), pct(s.t("rate"))).into())
        },
        "code with infinite loops or deep recursion: lower reward.test_timeout_s (normal early in training)",
    ),
    Signal::new(
        "infra_errors",
        Reads::Step,
        &["rate"],
        |s| {
            let rate = s.last()?.get(sandbox::INFRA_RATE)?;
            (rate > s.t("rate")).then(|| format!("{} of the step's gradings failed for infrastructure reasons after retries (threshold {})", pct(rate), pct(s.t("rate"))).into())
        },
        "the sandbox is failing: check that it runs (Sandbox Fusion's server, or logs.log for the local workers), lower sandbox.concurrency",
    ),
    Signal::new(
        "truncation",
        Reads::Step,
        &["rate"],
        |s| {
            window_above(s, train::TRUNCATED_RATE).map(|m| format!("{} of completions cut off by max_tokens over the last {} steps (threshold {})", pct(m), s.window, pct(s.t("rate"))).into())
        },
        "completions hit sampling.max_tokens: raise it, or shape length (grpo.overlong)",
    ),
    Signal::new(
        "tool_limit_stops",
        Reads::Step,
        &["rate"],
        |s| {
            window_above(s, train::LIMIT_STOP_RATE).map(|m| {
                format!("{} of tool-using trajectories ended on a limit or a malformed tool call, not an answer, over the last {} steps (threshold {})", pct(m), s.window, pct(s.t("rate"))).into()
            })
        },
        "the model rarely reaches a final answer: read the train/stop_* rates and the conversations (`rlx show`), raise rollout.limits (max_turns, max_tokens_per_turn), or state the tool-call format in the prompt",
    ),
    Signal::new(
        "logprob_divergence",
        Reads::Step,
        &["rate"],
        |s| {
            window_above(s, train::KL_SAMPLE_TRAIN).map(|m| format!("train/kl_sample_train {} nats/token over the last {} steps (threshold {})", fmt(m), s.window, s.t("rate")).into())
        },
        "sampler and learner disagree: try backend.sample_weights: f32 to rule out quantization, and check grpo.max_steps_off_policy",
    ),
    Signal::new(
        "clipping_dominant",
        Reads::Step,
        &["rate"],
        |s| {
            window_above(s, train::CLIP_FRACTION).map(|m| format!("train/clip_fraction {} of action tokens over the last {} steps (threshold {})", pct(m), s.window, pct(s.t("rate"))).into())
        },
        "most tokens take the clipped, gradient-free branch, so only the rest train (GSPO at a narrow band trains positive-advantage sequences only): let the learner score at the sampling temperature (grpo.learner_temperature), sample with backend.sample_weights: f32, or widen the clip band",
    ),
    Signal::new(
        "entropy_collapse",
        Reads::Step,
        &["fraction"],
        |s| collapse(s, train::ENTROPY).map(Evidence::from),
        "the sampling policy is collapsing onto one answer: lower optimizer.learning_rate, anchor to the base (grpo.kl), raise sampling.temperature",
    ),
    Signal::new(
        "length_collapse",
        Reads::Step,
        &["fraction"],
        |s| collapse(s, train::COMPLETION_TOKENS_MEAN).map(Evidence::from),
        "completions are shrinking: read them with `rlx show`; check the loss aggregation (grpo.loss_agg) and length shaping (grpo.overlong)",
    ),
    Signal::new(
        "reward_without_eval_gain",
        Reads::Eval,
        &["reward_rise", "eval_gain"],
        evals::reward_without_eval_gain,
        "possible reward hacking (hard-coded outputs): inspect the leads with `rlx show`",
    ),
    Signal::new(
        "greedy_below_baseline",
        Reads::Eval,
        &["p"],
        evals::greedy_below,
        "training made the model's greedy answers worse: see both protocols with `rlx compare RUN_DIR --steps -1,last`; lower optimizer.learning_rate, anchor to the base (grpo.kl), keep the best checkpoint",
    ),
    Signal::new(
        "coverage_collapse",
        Reads::Eval,
        &["drop"],
        |s| evals::coverage(s).map(Evidence::from),
        "the policy sharpens onto fewer answers: lower optimizer.learning_rate, anchor to the base (grpo.kl), check that the learner scores the temperature the samples were drawn at",
    ),
];

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;
    use crate::health::Monitor;
    use crate::health::steps::window_mean;
    use crate::health::settings::{Setting, Settings};
    use crate::spec::health::{Action, Health};

    #[test]
    fn every_row_has_a_key_and_every_key_a_row() {
        let settings = Settings::of(&Health::default());
        let rows: Vec<&str> = SIGNALS.iter().map(Signal::name).collect();
        assert_eq!(rows.iter().collect::<BTreeSet<_>>().len(), rows.len(), "two rows share a name: {rows:?}");
        assert_eq!(rows.iter().copied().collect::<BTreeSet<_>>(), settings.keys().collect::<BTreeSet<_>>(), "rows and `diagnostics:` keys differ");
        for row in SIGNALS {
            let keys: BTreeSet<&str> = settings.get(row.name()).unwrap().keys().collect();
            assert_eq!(keys, row.thresholds.iter().copied().collect(), "{}: the row's thresholds are not its key's", row.name());
        }
    }

    #[test]
    fn the_docs_list_every_signal() {
        let doc = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/diagnostics.md")).unwrap();
        for row in SIGNALS {
            assert!(doc.contains(&format!("\n| `{}` |", row.name())), "docs/diagnostics.md's table has no row for `{}`", row.name());
        }
    }

    /// A metric of the test's own, as a tool-turn run would write its share of trajectories
    /// ended by a limit.
    const LIMIT_RATE: &str = "test/limit_rate";

    /// The row a new signal is: nothing else names it.
    static LIMITS: Signal = Signal::new(
        "limits_dominate",
        Reads::Step,
        &["rate"],
        |s| window_mean(s, LIMIT_RATE).filter(|&m| m > s.t("rate")).map(|m| format!("{} of trajectories ended on a limit (threshold {})", pct(m), pct(s.t("rate"))).into()),
        "raise the limits",
    );

    /// Steps 0–5 at a limit rate of 0.6, then 0: what fired, by step.
    fn run(setting: Option<serde_json::Value>) -> Vec<(i64, String, Action, String)> {
        let mut settings = Settings::of(&Health::default());
        if let Some(v) = setting {
            settings.set("limits_dominate", Setting::from_json(&v).unwrap());
        }
        let mut m = Monitor::with(settings, SIGNALS.iter().chain([&LIMITS]).collect());
        let mut out = vec![];
        for step in 0..8u32 {
            let metrics = BTreeMap::from([(LIMIT_RATE.to_owned(), if step < 6 { 0.6 } else { 0.0 })]);
            out.extend(m.step(step, &metrics, []).into_iter().map(|f| (f.step, f.signal.name().to_owned(), f.action, f.line())));
        }
        out
    }

    #[test]
    fn a_signal_added_as_one_row_fires_by_name_and_is_configured_by_its_key() {
        // Over a 5-step window at 0.6 against 0.5: fires after step 4, once.
        let fired = run(Some(serde_json::json!({"rate": 0.5})));
        assert_eq!(fired.len(), 1, "{fired:?}");
        let (step, name, action, line) = &fired[0];
        assert_eq!((*step, name.as_str(), *action), (4, "limits_dominate", Action::Warn));
        assert_eq!(line, "step 4: limits_dominate: 60.0% of trajectories ended on a limit (threshold 50.0%); remedy: raise the limits");
        // Its threshold is read from its setting: above 0.6 nothing fires.
        assert!(run(Some(serde_json::json!({"rate": 0.7}))).is_empty());
        // Its action too.
        let stopped = run(Some(serde_json::json!({"rate": 0.5, "action": "stop"})));
        assert_eq!(stopped[0].2, Action::Stop);
        assert!(stopped[0].3.contains("limits_dominate (diagnostics action: stop)"), "{}", stopped[0].3);
        assert!(run(Some(serde_json::json!({"rate": 0.5, "action": "off"}))).is_empty());
        // Without a setting (or without the threshold it reads) the row is not checked.
        assert!(run(None).is_empty());
        assert!(run(Some(serde_json::json!({"fraction": 0.5}))).is_empty());
    }

    #[test]
    fn tool_limit_stops_fires_when_most_trajectories_end_on_a_limit() {
        // Default settings: 5-step window, rate 0.5. Runs without tools write no limit rate.
        let fire = |rates: &[f64]| {
            let mut m = Monitor::with(Settings::of(&Health::default()), SIGNALS.iter().collect());
            let mut out = vec![];
            for (step, &r) in rates.iter().enumerate() {
                let metrics = BTreeMap::from([(train::LIMIT_STOP_RATE.to_owned(), r)]);
                out.extend(m.step(step as u32, &metrics, []).into_iter().filter(|f| f.signal.name() == "tool_limit_stops").map(|f| (f.step, f.line())));
            }
            out
        };
        let fired = fire(&[0.8, 0.7, 0.6, 0.9, 0.6, 0.1]);
        assert_eq!(fired.len(), 1, "{fired:?}");
        assert_eq!(fired[0].0, 4);
        assert!(fired[0].1.contains("72.0% of tool-using trajectories ended on a limit"), "{}", fired[0].1);
        assert!(fire(&[0.5, 0.4, 0.5, 0.5, 0.5, 0.5]).is_empty(), "half or fewer: an answer is the rule");
    }
}
