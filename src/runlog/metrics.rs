//! `metrics.jsonl`: the metric names rlx writes and [`MetricsLine`], one line of the file.
//!
//! A line is flat: `{"step": 3, "train/loss": 0.12, "time/sample_s": 41.0, ...}`, keys namespaced
//! by `/` (design §5). Every name is a constant here, so the writer (the engine), the console and
//! `compare` cannot disagree over a spelling: a typo is a compile error instead of a column of
//! zeros. Eval metrics sit in the line of the step they followed; the baseline eval is a line of
//! its own at step −1.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The key of the step index in every line. −1 is the baseline evaluation.
pub const STEP: &str = "step";

/// The index (in `stages:`) of the stage a line's step belongs to, on a staged run's supervised
/// steps.
pub const STAGE: &str = "stage";

/// The policy update of a step. Every name but [`train::DATUMS`] is written only when the step
/// trained (at least one datum); [`train::CORRECT_FIRST_ATTEMPT`] and [`train::ATTEMPTS_MEAN`]
/// only when `rollout.max_attempts > 1`.
pub mod train {
    /// The loss as a token-level sum over the step's action tokens (Tinker's `loss:sum`).
    pub const LOSS: &str = "train/loss";
    /// [`LOSS`] divided by [`ACTION_TOKENS`].
    pub const LOSS_PER_TOKEN: &str = "train/loss_per_token";
    /// Mean importance ratio `exp(logp_train − logp_sample)` over action tokens; 1 on-policy.
    pub const RATIO_MEAN: &str = "train/ratio_mean";
    /// Largest importance ratio of the step.
    pub const RATIO_MAX: &str = "train/ratio_max";
    /// Fraction (0–1) of action tokens whose ratio lay outside the clip range (ppo, cispo).
    pub const CLIP_FRACTION: &str = "train/clip_fraction";
    /// Mean `logp_sample − logp_train` per action token, in nats (Tinker's `kl_sample_train_v1`).
    pub const KL_SAMPLE_TRAIN: &str = "train/kl_sample_train";
    /// Datums (training sequences) in the step; 0 when every group was skipped or dropped.
    pub const DATUMS: &str = "train/datums";
    /// Tokens the loss was taken over.
    pub const ACTION_TOKENS: &str = "train/action_tokens";
    /// A supervised step's mean negative log-likelihood per trained token, in nats.
    pub const NLL: &str = "train/nll";

    /// Mean reward over the step's scored completions, in the units of the spec's reward.
    pub const REWARD_MEAN: &str = "train/reward_mean";
    /// Fraction (0–1) of completions whose last attempt passed every test.
    pub const CORRECT_MEAN: &str = "train/correct_mean";
    /// Fraction (0–1) of completions whose last attempt had a code block (no format error).
    pub const FORMAT_RATE: &str = "train/format_rate";
    /// Fraction (0–1) of completions whose first attempt passed every test.
    pub const CORRECT_FIRST_ATTEMPT: &str = "train/correct_first_attempt";
    /// Attempts per completion, averaged (1 to `rollout.max_attempts`).
    pub const ATTEMPTS_MEAN: &str = "train/attempts_mean";
    /// Tool turns (`rollout.tools`, written only then): assistant turns per trajectory, averaged.
    pub const TURNS_MEAN: &str = "train/turns_mean";
    /// Tool turns: tool calls per trajectory, averaged.
    pub const TOOL_CALLS_MEAN: &str = "train/tool_calls_mean";
    /// Tool turns: fraction (0–1) of the tool calls run whose tool failed (timed out, crashed).
    pub const TOOL_ERROR_RATE: &str = "train/tool_error_rate";
    /// Tool turns: fraction (0–1) of turns whose tool call was malformed.
    pub const PARSE_ERROR_RATE: &str = "train/parse_error_rate";
    /// Tool turns: fraction (0–1) of trajectories that ended on a limit or a parse error (any
    /// stop reason but `completed`).
    pub const LIMIT_STOP_RATE: &str = "train/limit_stop_rate";
    /// Tool turns: the fraction (0–1) of trajectories that ended with each stop reason is
    /// `train/stop_<reason>` ([`stop_key`]).
    pub const STOP_PREFIX: &str = "train/stop_";

    /// The metric of stop reason `reason` (`completed`, `max_turns`, ...).
    pub fn stop_key(reason: &str) -> String {
        format!("{STOP_PREFIX}{reason}")
    }
    /// Groups (one prompt, `group_size` completions) sampled in the step.
    pub const GROUPS: &str = "train/groups";
    /// Groups not trained because their advantages were all zero (`grpo.skip_degenerate`).
    pub const GROUPS_SKIPPED: &str = "train/groups_skipped";
    /// Groups whose advantages were all zero (every reward equal), skipped or not: with
    /// `grpo.skip_degenerate: false` they are trained, and teach nothing.
    pub const GROUPS_DEGENERATE: &str = "train/groups_degenerate";
    /// Groups dropped because sandbox infrastructure errors survived the retries.
    pub const GROUPS_INFRA_DROPPED: &str = "train/groups_infra_dropped";
    /// Groups dropped because a call of the Python reward failed (the user's bug, never scored).
    pub const GROUPS_REWARD_DROPPED: &str = "train/groups_reward_dropped";
    /// Calls of the Python reward that failed in the step (raised, timed out, returned something
    /// else); a run stops once more than `reward.max_failures` have failed.
    pub const REWARD_FAILURES: &str = "train/reward_failures";
    /// Groups dropped because sampling failed with infrastructure errors (a server down, timing
    /// out or answering garbage) that survived the sampler's retries.
    pub const GROUPS_SAMPLER_DROPPED: &str = "train/groups_sampler_dropped";
    /// How many steps older than the trained weights the sampling weights were (0 or 1).
    pub const OFF_POLICY_STEPS: &str = "train/off_policy_steps";
    /// Fraction (0–1) of sampled turns that stopped at `max_tokens`.
    pub const TRUNCATED_RATE: &str = "train/truncated_rate";
    /// Sampled tokens per turn, averaged over every attempt of every completion.
    pub const COMPLETION_TOKENS_MEAN: &str = "train/completion_tokens_mean";
    /// First-turn prompt tokens per group, averaged.
    pub const PROMPT_TOKENS_MEAN: &str = "train/prompt_tokens_mean";
    /// Sampled tokens in the step, every attempt counted.
    pub const COMPLETION_TOKENS: &str = "train/completion_tokens";
    /// Entropy estimate of the sampling policy: −mean of the sampler's log-probabilities of its
    /// sampled tokens (every completion of the step; the tempered, truncated distribution it drew
    /// from). Absent when the sampler returns no log-probabilities.
    pub const ENTROPY: &str = "train/entropy";
    /// `grpo.kl`: the KL estimate (k1 or k3) to the reference, per sampled token of the trained
    /// datums.
    pub const KL_REFERENCE: &str = "train/kl_reference";
    /// `grpo.distill`: the mean of log p_student − log p_teacher over the trained datums' sampled
    /// tokens (a Monte Carlo estimate of the reverse KL to the teacher, per token).
    pub const TEACHER_KL: &str = "train/teacher_kl";
    /// Dynamic sampling: problems drawn by the step (`prompts_per_step` and the refills).
    pub const PROBLEMS_DRAWN: &str = "train/problems_drawn";
    /// Dynamic sampling: groups set aside because every completion scored the same (or a group
    /// was dropped).
    pub const GROUPS_DISCARDED: &str = "train/groups_discarded";
    /// Dynamic sampling: sampling rounds of the step (1: no refill).
    pub const SAMPLE_ROUNDS: &str = "train/sample_rounds";
    /// `grpo.overlong: {kind: mask}`: completions left out of the update for hitting
    /// `max_tokens`.
    pub const OVERLONG_MASKED: &str = "train/overlong_masked";
    /// Streaming on a remote backend: mean over the step's groups of (step − the policy version
    /// that sampled the group).
    pub const STALENESS_MEAN: &str = "train/staleness_mean";
    /// Streaming: the largest staleness among the step's groups (at most
    /// `grpo.max_steps_off_policy`).
    pub const STALENESS_MAX: &str = "train/staleness_max";
    /// Streaming: groups set aside because their staleness passed `grpo.max_steps_off_policy`.
    pub const GROUPS_STALE: &str = "train/groups_stale";
    /// Fraction (0–1) of the step's judged attempts in a compiled language (C++, C) that did
    /// not compile; written only for steps that graded such attempts.
    pub const COMPILE_ERROR_RATE: &str = "train/compile_error_rate";
}

/// The optimizer step. [`optim::GRAD_NORM`] comes from every trainer; the others are the local
/// trainer's own.
pub mod optim {
    /// Global L2 norm of the accumulated gradient, before clipping.
    pub const GRAD_NORM: &str = "optim/grad_norm";
    /// 1 when clipping scaled the gradient down, else 0.
    pub const CLIPPED: &str = "optim/clipped";
    /// Learning rate of the step.
    pub const LR: &str = "optim/lr";
}

/// Grading in the sandbox during a training step.
pub mod sandbox {
    /// Sandbox infrastructure failures, each retry counted.
    pub const INFRA_ERRORS: &str = "sandbox/infra_errors";
    /// Median grading latency of completions with code, in milliseconds (0 when none).
    pub const P50_MS: &str = "sandbox/p50_ms";
    /// 95th-percentile grading latency of completions with code, in milliseconds (0 when none).
    pub const P95_MS: &str = "sandbox/p95_ms";
    /// Tests run in the step (every attempt's, fail-fast cut-offs not counted).
    pub const TESTS: &str = "sandbox/tests";
    /// Fraction (0–1) of the tests run that hit the time limit.
    pub const TIMEOUT_RATE: &str = "sandbox/timeout_rate";
    /// Fraction (0–1) of the tests run that raised, exited non-zero or ran out of memory.
    pub const RUNTIME_ERROR_RATE: &str = "sandbox/runtime_error_rate";
    /// Fraction (0–1) of the tests run that printed or returned a wrong answer.
    pub const WRONG_ANSWER_RATE: &str = "sandbox/wrong_answer_rate";
    /// Fraction (0–1) of the step's graded attempts with code whose grading failed for
    /// infrastructure reasons after retries (never scored as the model's failure).
    pub const INFRA_RATE: &str = "sandbox/infra_rate";
}

/// Wall-clock time, in seconds.
pub mod time {
    /// Sampling the step's groups.
    pub const SAMPLE_S: &str = "time/sample_s";
    /// Grading left to wait for once sampling finished (grading overlaps sampling).
    pub const GRADE_S: &str = "time/grade_s";
    /// Sampling idle between turns: no sampler call in flight while trajectories waited on
    /// their environment step (tool calls, a feedback turn's grading) before their next turn.
    pub const TOOL_WAIT_S: &str = "time/tool_wait_s";
    /// The forward-backward pass and optimizer step.
    pub const TRAIN_S: &str = "time/train_s";
    /// The whole step, from its start to its metrics line (an eval after it excluded).
    pub const STEP_S: &str = "time/step_s";
    /// One evaluation.
    pub const EVAL_S: &str = "time/eval_s";
    /// Streaming: the trainer's wait for the step's groups (0 when they were ready).
    pub const TRAINER_WAIT_S: &str = "time/trainer_wait_s";
    /// Streaming: time since the previous step with no group being sampled (the sampling side
    /// idle: the stream full, or waiting for a fresher sampler).
    pub const SAMPLER_WAIT_S: &str = "time/sampler_wait_s";
}

/// The components of a Python reward that returns a dict: `reward/<name>`, the component's mean
/// over the step's completions whose call returned it.
pub mod reward {
    /// What every component's name starts with.
    pub const PREFIX: &str = "reward/";

    /// `reward/<name>`.
    pub fn component(name: &str) -> String {
        format!("{PREFIX}{name}")
    }
}

/// Evaluation on the held-out problems (single attempts).
pub mod eval {
    /// What every pass@k name starts with; the rest is `k`.
    pub const PASS_AT_PREFIX: &str = "eval/pass@";
    /// Fraction (0–1) of eval completions with a code block.
    pub const FORMAT_RATE: &str = "eval/format_rate";
    /// A supervised stage's held-out rows: mean negative log-likelihood per trained token, nats.
    pub const NLL: &str = "eval/nll";
    /// Problems evaluated.
    pub const PROBLEMS: &str = "eval/problems";
    /// Eval samples lost to sandbox infrastructure errors (left out of pass@k's `n`).
    pub const INFRA_ERRORS: &str = "eval/infra_errors";
    /// Problems left out because sampling them failed with infrastructure errors that survived
    /// the sampler's retries (not counted in `eval/problems` nor in pass@k).
    pub const PROBLEMS_DROPPED: &str = "eval/problems_dropped";
    /// Fraction (0–1) of the eval's judged completions in a compiled language that did not
    /// compile; written only when the eval graded such completions.
    pub const COMPILE_ERROR_RATE: &str = "eval/compile_error_rate";

    /// Greedy pass@1 (0–1): one completion per problem at temperature 0 (`eval.greedy`), or
    /// the main eval's pass@1 when that already is greedy (`eval.temperature: 0`).
    pub const GREEDY_PASS_AT_1: &str = "eval/greedy/pass@1";
    /// Fraction (0–1) of the greedy completions with a code block.
    pub const GREEDY_FORMAT_RATE: &str = "eval/greedy/format_rate";
    /// Problems the greedy eval graded.
    pub const GREEDY_PROBLEMS: &str = "eval/greedy/problems";
    /// What the greedy metrics' names start with: not an eval source (`check` reserves it).
    pub const GREEDY_PREFIX: &str = "eval/greedy/";

    /// `eval/pass@{k}`: the unbiased pass@k estimate averaged over problems (0–1).
    pub fn pass_at(k: u32) -> String {
        format!("{PASS_AT_PREFIX}{k}")
    }

    /// The `k` of an `eval/pass@{k}` name; `None` for any other name.
    pub fn parse_pass_at(name: &str) -> Option<u32> {
        name.strip_prefix(PASS_AT_PREFIX)?.parse().ok()
    }

    /// `eval/{source}/pass@{k}`: pass@k over one eval source's problems, written beside the
    /// pooled `eval/pass@{k}` when the spec has two or more eval sources.
    pub fn source_pass_at(source: &str, k: u32) -> String {
        format!("eval/{source}/pass@{k}")
    }

    /// `eval/{source}/problems`: that source's problems evaluated.
    pub fn source_problems(source: &str) -> String {
        format!("eval/{source}/problems")
    }

    /// The source and `k` of an `eval/{source}/pass@{k}` name; `None` for any other name
    /// (the pooled `eval/pass@{k}` included).
    pub fn parse_source_pass_at(name: &str) -> Option<(&str, u32)> {
        let (source, k) = name.strip_prefix("eval/")?.rsplit_once("/pass@")?;
        Some((source, k.parse().ok()?)).filter(|(s, _)| !s.is_empty() && *s != "greedy")
    }
}

/// One line of `metrics.jsonl`: a step and its metrics.
///
/// Serialises flat, `step` first and then the metrics in name order, which is byte for byte what
/// earlier versions wrote from a `serde_json::Map`. A NaN value is written as `null` and read back
/// as NaN (see `nan.rs`). Reading ignores nothing: a key other than `step` whose value is not a
/// number or `null` makes the line corrupt.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsLine {
    /// The step (−1 for the baseline evaluation).
    pub step: i64,
    /// Metric name → value. Never holds [`STEP`].
    pub values: BTreeMap<String, f64>,
}

impl MetricsLine {
    /// A line for `step` with `values`. A `step` key among them is dropped: the line has one.
    pub fn new(step: i64, mut values: BTreeMap<String, f64>) -> MetricsLine {
        values.remove(STEP);
        MetricsLine { step, values }
    }

    /// The value of metric `name`, if the line has it.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.values.get(name).copied()
    }

    /// `eval/pass@{k}`, if the line has it.
    pub fn pass_at(&self, k: u32) -> Option<f64> {
        self.get(&eval::pass_at(k))
    }

    /// Every `eval/pass@{k}` of the line as `(k, value)`, by increasing `k`.
    pub fn pass_at_all(&self) -> Vec<(u32, f64)> {
        let mut v: Vec<(u32, f64)> = self.values.iter().filter_map(|(n, &x)| Some((eval::parse_pass_at(n)?, x))).collect();
        v.sort_by_key(|&(k, _)| k);
        v
    }
}

impl Serialize for MetricsLine {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.values.len() + 1))?;
        map.serialize_entry(STEP, &self.step)?;
        for (k, v) in self.values.iter().filter(|(k, _)| k.as_str() != STEP) {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for MetricsLine {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<MetricsLine, D::Error> {
        // A value that is a number or `null` (a NaN written by serde_json).
        struct Value(f64);
        impl<'de> Deserialize<'de> for Value {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
                super::nan::f64_or_null(d).map(Value)
            }
        }
        struct Line;
        impl<'de> Visitor<'de> for Line {
            type Value = MetricsLine;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object with `step` and numeric metrics")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MetricsLine, A::Error> {
                let mut step = None;
                let mut values = BTreeMap::new();
                while let Some(key) = map.next_key::<String>()? {
                    if key == STEP {
                        if step.is_some() {
                            return Err(de::Error::duplicate_field(STEP));
                        }
                        step = Some(map.next_value::<i64>()?);
                    } else {
                        let Value(v) = map.next_value()?;
                        values.insert(key, v);
                    }
                }
                Ok(MetricsLine { step: step.ok_or_else(|| de::Error::missing_field(STEP))?, values })
            }
        }
        d.deserialize_map(Line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What the engine wrote before this type existed (src/engine/mod.rs: a `serde_json::Map`
    /// with `step`, then the `BTreeMap` of metrics).
    fn old_line(step: i64, metrics: &BTreeMap<String, f64>) -> String {
        let mut line = serde_json::Map::new();
        line.insert("step".into(), json!(step));
        for (k, v) in metrics {
            line.insert(k.clone(), json!(v));
        }
        serde_json::to_string(&line).unwrap()
    }

    fn sample() -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        for (k, v) in [
            (train::REWARD_MEAN, -0.1),
            (train::DATUMS, 6.0),
            (train::LOSS, 0.125),
            (time::SAMPLE_S, 41.25),
            (sandbox::P95_MS, 12.0),
            (optim::GRAD_NORM, 1e-7),
            (train::RATIO_MEAN, f64::NAN),
        ] {
            m.insert(k.to_string(), v);
        }
        m.insert(eval::pass_at(10), 0.5);
        m.insert(eval::pass_at(1), 0.25);
        m
    }

    #[test]
    fn serialises_byte_for_byte_as_before() {
        for step in [-1, 0, 7] {
            let m = sample();
            let new = serde_json::to_string(&MetricsLine::new(step, m.clone())).unwrap();
            assert_eq!(new, old_line(step, &m));
        }
        assert_eq!(serde_json::to_string(&MetricsLine::new(2, BTreeMap::new())).unwrap(), r#"{"step":2}"#);
    }

    #[test]
    fn round_trips_with_nan_as_null() {
        let line = MetricsLine::new(3, sample());
        let text = serde_json::to_string(&line).unwrap();
        assert!(text.contains(r#""train/ratio_mean":null"#), "{text}");
        let back: MetricsLine = serde_json::from_str(&text).unwrap();
        assert_eq!(back.step, 3);
        assert!(back.get(train::RATIO_MEAN).unwrap().is_nan());
        let (mut a, mut b) = (line.values.clone(), back.values.clone());
        a.remove(train::RATIO_MEAN);
        b.remove(train::RATIO_MEAN);
        assert_eq!(a, b);
        assert_eq!(serde_json::to_string(&back).unwrap(), text);
    }

    #[test]
    fn typed_getters() {
        let line: MetricsLine = serde_json::from_str(r#"{"train/loss": 1.5, "step": -1, "eval/pass@5": 0.5, "eval/pass@1": 0.25}"#).unwrap();
        assert_eq!(line.step, -1);
        assert_eq!(line.get(train::LOSS), Some(1.5));
        assert_eq!(line.get(train::REWARD_MEAN), None);
        assert_eq!(line.pass_at(5), Some(0.5));
        assert_eq!(line.pass_at_all(), vec![(1, 0.25), (5, 0.5)]);
    }

    #[test]
    fn malformed_lines_are_errors() {
        assert!(serde_json::from_str::<MetricsLine>(r#"{"train/loss": 1}"#).is_err(), "no step");
        assert!(serde_json::from_str::<MetricsLine>(r#"{"step": 1, "train/loss": "x"}"#).is_err());
        assert!(serde_json::from_str::<MetricsLine>(r#"{"step": 1, "step": 2}"#).is_err());
        assert!(serde_json::from_str::<MetricsLine>("[1]").is_err());
    }

    #[test]
    fn names() {
        assert_eq!(eval::pass_at(8), "eval/pass@8");
        assert_eq!(eval::parse_pass_at("eval/pass@8"), Some(8));
        assert_eq!(eval::parse_pass_at("eval/pass@"), None);
        assert_eq!(eval::parse_pass_at(train::LOSS), None);
    }
}
