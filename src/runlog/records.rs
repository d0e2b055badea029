//! The per-record JSONL files: `rollouts.jsonl` ([`RolloutRecord`]), `eval_results.jsonl`
//! ([`EvalResultRecord`]), `eval_rollouts.jsonl` ([`EvalSampleRecord`]) and `checkpoints.jsonl`
//! ([`CheckpointRecord`]). A training rollout and an eval sample are one [`Completion`] each, with
//! what their kind adds around it.
//!
//! These types own the on-disk shape. The engine converts its own types (the sandbox's verdict,
//! the sampler's stop reason) into the small enums here rather than runlog importing them, so a
//! rename in the sandbox or a backend cannot silently change what a run directory says. Field
//! order is the order of the keys on disk. Readers ignore keys they do not know: a newer rlx
//! that adds one (without bumping `schema_version`) stays readable.

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// How grading judged one completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictStatus {
    /// Every test passed.
    Passed,
    /// At least one test failed.
    Failed,
    /// No code block in the completion.
    FormatError,
    /// The sandbox failed; the code was not judged.
    InfraError,
}

/// Why sampling a completion stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StopReason {
    /// A stop token or stop string.
    Stop,
    /// `max_tokens` (or the model's context) was reached.
    Length,
}

/// One graded completion: what a training rollout, an evaluation sample and `rlx show` share.
/// [`RolloutRecord`] and [`EvalSampleRecord`] flatten it, so its keys sit at the top level of
/// their lines, as they did before it existed (a run directory from then reads the same).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    /// The problem's id in its dataset.
    pub problem_id: String,
    /// Index of the completion within its group (training) or among its problem's samples
    /// (evaluation).
    pub sample: usize,
    /// The completion's text (of the last attempt, for a multi-attempt rollout).
    pub text: String,
    /// The code extracted from it; `None` on a format error.
    pub code: Option<String>,
    /// The language it was graded in, when not Python (absent in runs before languages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// The verdict.
    pub status: VerdictStatus,
    /// Tests passed.
    pub tests_passed: usize,
    /// Tests the problem has.
    pub tests_total: usize,
    /// Each test's verdict, in test order (shorter than `tests_total` when grading stopped at
    /// the first failure; empty, and absent on disk, for a format or infrastructure error and in
    /// runs written before it existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tests: Vec<TestRecord>,
    /// For an infrastructure error: what failed (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The prompt's messages as the model saw them (before the chat template), on the first
    /// completion of each group or eval problem only (the others share it); absent elsewhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompt: Vec<PromptMessage>,
    /// Why sampling stopped.
    pub stop_reason: StopReason,
    /// Sampled tokens (of the last attempt).
    pub tokens: usize,
}

/// One line of `rollouts.jsonl`: one completion of a training step, as graded and scored.
///
/// With `rollout.max_attempts > 1` a completion is the last of several attempts; its
/// [`Completion`] describes that last attempt, and [`RolloutRecord::turns`] lists them all.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RolloutRecord {
    /// Training step.
    pub step: u32,
    /// Index of the group within the step.
    pub group: usize,
    /// The completion as graded (`sample` indexes it within the group).
    #[serde(flatten)]
    pub completion: Completion,
    /// Reward (units of the spec's reward); `null` on disk if it was NaN.
    #[serde(deserialize_with = "super::nan::f64_or_null")]
    pub reward: f64,
    /// Advantage the completion was trained with (also when its group was skipped).
    #[serde(deserialize_with = "super::nan::f64_or_null")]
    pub advantage: f64,
    /// Whether its group was skipped as degenerate (all advantages zero).
    pub skipped: bool,
    /// Attempts made (1 without feedback turns).
    pub attempts: usize,
    /// The policy version whose weights sampled it (optimizer steps applied), when groups
    /// stream on a remote backend and may be older than the step; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<u32>,
    /// Every attempt with the feedback it answered; empty (and absent on disk) for a single one.
    /// With tool turns, every turn with its tool calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<Attempt>,
    /// With tool turns (`rollout.tools`): why the trajectory ended (`completed`, `max_turns`,
    /// `max_tokens`, `max_tool_calls`, `context_overflow`, `parse_error`, `timeout`); absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<String>,
}

/// A tool call of a turn, as the model made it and what it was shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    /// The tool.
    pub name: String,
    /// Its arguments, as the model wrote them.
    pub arguments: serde_json::Value,
    /// What the model was shown (clipped); absent when the call was not run (a limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Whether the tool failed (timed out, crashed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub error: bool,
}

/// How one test ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestOutcome {
    /// Output matched.
    Passed,
    /// Ran to completion with the wrong output (or a failed assert).
    WrongAnswer,
    /// Raised, exited non-zero, or was killed by a signal.
    RuntimeError,
    /// Passed the wall-clock or CPU limit.
    Timeout,
    /// Ran out of memory.
    MemoryLimit,
    /// Wrote more than the output limit.
    OutputLimit,
    /// The program did not compile (its `error` is the compiler's output).
    CompileError,
}

/// One test of a graded completion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestRecord {
    /// How it ended.
    pub status: TestOutcome,
    /// Its wall time in milliseconds.
    pub time_ms: u64,
    /// For a wrong answer: what the program printed or returned, clipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub got: Option<String>,
    /// For a failed test: the end of its stderr (the traceback), clipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One message of a prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// Its text.
    pub content: String,
}

/// One attempt of a multi-attempt completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// The last message of the prompt it answered: the problem for the first attempt, the
    /// feedback for later ones; `None` for an empty conversation.
    pub prompt_last_message: Option<String>,
    /// The attempt's text.
    pub text: String,
    /// Its verdict.
    pub status: VerdictStatus,
    /// Tests it passed.
    pub tests_passed: usize,
    /// Tool turns: sampled tokens of the turn (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<usize>,
    /// Tool turns: the tool calls the turn made (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<ToolCallRecord>,
    /// Tool turns: why the turn's tool call was malformed (absent when it was not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parse_error: Option<String>,
    /// Tool turns: the turn was context in training (a malformed turn under `mask_turn`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub masked: bool,
    /// Tool turns: the messages that followed the turn (tool results, errors); absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub appended: Vec<PromptMessage>,
}

/// Which evaluation protocol a record belongs to. The main protocol (the spec's `eval`
/// sampling, pass@k) is written without a tag, so run directories from before the tag read as
/// they did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// `eval.greedy`: one completion per problem at temperature 0 (greedy pass@1).
    Greedy,
}

/// One line of `eval_results.jsonl`: one problem of one evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalResultRecord {
    /// The step the evaluation followed (−1 for the baseline).
    pub step: i64,
    /// The protocol; absent for the main one (and in runs written before protocols).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
    /// The problem's id in its dataset.
    pub problem_id: String,
    /// The eval source it came from (its `name`, or its file's stem); absent in runs written
    /// before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The problem's category (its row's `category`, the list-function task's operation), which
    /// `rlx compare` and `rlx doctor` break pass@1 down by; absent when the row names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// Samples graded (infrastructure failures left out): pass@k's `n`.
    pub n: u32,
    /// Samples that passed every test: pass@k's `c`.
    pub correct: u32,
    /// Each sample's verdict, infrastructure failures included.
    pub statuses: Vec<VerdictStatus>,
    /// Tests each sample passed, in the order of `statuses`.
    pub tests_passed: Vec<usize>,
    /// The problem's pass@k for each `k` of the spec.
    pub metrics: PassAtK,
}

/// One line of `eval_rollouts.jsonl`: one completion of an evaluation, as graded (what
/// `rlx show --eval` prints and the compare report's regressions link to). Which completions are
/// written follows `log.rollouts`, as for training rollouts (`sample`: the first of each problem).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalSampleRecord {
    /// The step the evaluation followed (−1 for the baseline).
    pub step: i64,
    /// The protocol; absent for the main one (and in runs written before protocols).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
    /// The eval source it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The completion as graded (with tool turns: the final answer).
    #[serde(flatten)]
    pub completion: Completion,
    /// With tool turns, every turn (calls, tool outputs, tokens), as in `rollouts.jsonl`; absent
    /// for a single-turn evaluation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<Attempt>,
    /// With tool turns, why the trajectory ended (`completed`, `max_turns`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<String>,
}

/// pass@k values in the order of the spec's `eval.k`, stored as `{"pass@1": 0.5, "pass@5": 0.9}`.
///
/// A list rather than a map so that a run writes its keys in the spec's order, as before this
/// type existed (`[1, 10, 5]` must not come out sorted as text). Reading skips keys that are not
/// `pass@{k}`, as struct readers skip unknown fields.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PassAtK(pub Vec<(u32, f64)>);

impl PassAtK {
    /// pass@`k`, if present.
    pub fn get(&self, k: u32) -> Option<f64> {
        self.0.iter().find(|&&(x, _)| x == k).map(|&(_, v)| v)
    }
}

const PASS_AT: &str = "pass@";

impl Serialize for PassAtK {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(&format!("{PASS_AT}{k}"), v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for PassAtK {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<PassAtK, D::Error> {
        struct Value(f64);
        impl<'de> Deserialize<'de> for Value {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
                super::nan::f64_or_null(d).map(Value)
            }
        }
        struct Map;
        impl<'de> Visitor<'de> for Map {
            type Value = PassAtK;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of `pass@k` numbers")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PassAtK, A::Error> {
                let mut out = vec![];
                while let Some(key) = map.next_key::<String>()? {
                    match key.strip_prefix(PASS_AT).and_then(|k| k.parse().ok()) {
                        Some(k) => {
                            let Value(v) = map.next_value()?;
                            out.push((k, v));
                        }
                        None => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(PassAtK(out))
            }
        }
        d.deserialize_map(Map)
    }
}

/// One line of `checkpoints.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointRecord {
    /// `step-000009`.
    pub name: String,
    /// The last completed step the state includes.
    pub step: u32,
    /// Training problems consumed after that step (where the next step starts).
    pub data_cursor: u64,
    /// Trainer state (weights + optimizer moments), resumable: the backend's opaque state
    /// reference, a local path (relative to the run directory when inside it, so a run
    /// directory can be moved or copied and still resume) or a remote URI (`tinker://…`).
    pub state_path: Option<String>,
    /// Sampler weights for serving, when a backend writes them separately (a path or a URI).
    pub sampler_path: Option<String>,
    /// RFC 3339 time.
    pub time: String,
    /// `periodic`, `final` or `interrupt`.
    pub kind: String,
    /// Problems beyond `data_cursor` already consumed (trained on, or set aside) when the state
    /// was saved: a streaming run (`grpo.max_steps_off_policy` on a remote backend) finishes
    /// groups out of order, and a resumed run skips these. Empty, and absent on disk, otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumed_ahead: Vec<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A rollout line as src/engine/step.rs wrote it with `json!` before these types.
    fn old_rollout(turns: bool) -> serde_json::Value {
        let mut rec = json!({
            "step": 3, "problem_id": "apps/17", "group": 0, "sample": 2,
            "text": "```python\nprint(1)\n```", "code": "print(1)", "status": "failed",
            "tests_passed": 1, "tests_total": 4,
            "reward": -0.5, "advantage": 0.25, "skipped": false, "stop_reason": "stop",
            "tokens": 12, "attempts": if turns { 2 } else { 1 },
        });
        if turns {
            rec["turns"] = json!([
                {"prompt_last_message": "solve it", "text": "no code", "status": "format_error", "tests_passed": 0},
                {"prompt_last_message": null, "text": "```python\nprint(1)\n```", "status": "failed", "tests_passed": 1},
            ]);
        }
        rec
    }

    #[test]
    fn rollout_round_trips_key_for_key() {
        for turns in [false, true] {
            let old = old_rollout(turns);
            let rec: RolloutRecord = serde_json::from_str(&old.to_string()).unwrap();
            assert_eq!(rec.turns.len(), if turns { 2 } else { 0 });
            // The same keys and values; the order is the struct's (the completion's keys after
            // `step` and `group`), which no reader depends on.
            let written: serde_json::Value = serde_json::from_str(&serde_json::to_string(&rec).unwrap()).unwrap();
            let sorted = |v: &serde_json::Value| v.as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.clone())).collect::<std::collections::BTreeMap<_, _>>();
            assert_eq!(sorted(&written), sorted(&old));
        }
        let rec: RolloutRecord = serde_json::from_value(old_rollout(true)).unwrap();
        assert_eq!(rec.completion.status, VerdictStatus::Failed);
        assert_eq!(rec.completion.stop_reason, StopReason::Stop);
        assert_eq!(rec.turns[0].status, VerdictStatus::FormatError);
        assert_eq!(rec.turns[1].prompt_last_message, None);
        // No code block: `code` is written as null, not left out.
        let mut none = rec.clone();
        none.completion.code = None;
        assert!(serde_json::to_string(&none).unwrap().contains(r#""code":null"#));
    }

    #[test]
    fn eval_result_round_trips_keeping_the_order_of_k() {
        let old = json!({
            "step": -1, "problem_id": "he/0", "n": 10, "correct": 3,
            "statuses": ["passed", "failed", "infra_error", "format_error"],
            "tests_passed": [5, 2, 0, 0],
            "metrics": {"pass@1": 0.3, "pass@10": 1.0, "pass@5": 0.916_666_666_666_666_6},
        });
        let text = serde_json::to_string(&old).unwrap();
        let rec: EvalResultRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(rec.metrics.0.iter().map(|&(k, _)| k).collect::<Vec<_>>(), vec![1, 10, 5]);
        assert_eq!(rec.metrics.get(10), Some(1.0));
        assert_eq!(rec.metrics.get(2), None);
        assert_eq!(rec.statuses[2], VerdictStatus::InfraError);
        assert_eq!(serde_json::to_string(&rec).unwrap(), text);
        // No tag: the main protocol; the greedy protocol's records say so.
        assert_eq!(rec.protocol, None);
        let greedy = EvalResultRecord { protocol: Some(Protocol::Greedy), ..rec.clone() };
        let tagged = serde_json::to_string(&greedy).unwrap();
        assert!(tagged.contains(r#""step":-1,"protocol":"greedy","problem_id""#), "{tagged}");
        assert_eq!(serde_json::from_str::<EvalResultRecord>(&tagged).unwrap(), greedy);
        // A NaN estimate is null on disk and NaN again when read.
        let nan = EvalResultRecord { metrics: PassAtK(vec![(1, f64::NAN)]), ..rec };
        let text = serde_json::to_string(&nan).unwrap();
        assert!(text.contains(r#""metrics":{"pass@1":null}"#), "{text}");
        let back: EvalResultRecord = serde_json::from_str(&text).unwrap();
        assert!(back.metrics.get(1).unwrap().is_nan());
    }

    #[test]
    fn readers_skip_keys_a_newer_rlx_added() {
        let mut v = old_rollout(false);
        v["new_field"] = json!({"x": 1});
        assert!(serde_json::from_value::<RolloutRecord>(v).is_ok());
        let p: PassAtK = serde_json::from_value(json!({"pass@1": 0.5, "pass^2": 0.1})).unwrap();
        assert_eq!(p, PassAtK(vec![(1, 0.5)]));
    }

    #[test]
    fn checkpoint_round_trips() {
        let text = r#"{"name":"step-000002","step":2,"data_cursor":6,"state_path":"checkpoints/step-000002","sampler_path":null,"time":"2025-01-01T00:00:00Z","kind":"final"}"#;
        let rec: CheckpointRecord = serde_json::from_str(text).unwrap();
        assert_eq!(rec.state_path.as_deref(), Some("checkpoints/step-000002"));
        assert_eq!(serde_json::to_string(&rec).unwrap(), text);
    }
}
