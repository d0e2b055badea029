//! The run log's records of what the engine saw: completions (training rollouts and eval
//! samples), verdicts, prompts and stop reasons, converted from the engine's types into the run
//! log's own (so a rename in the sandbox or the seam cannot change the file format).

use crate::runlog::{self, Attempt, Completion, EvalSampleRecord, RolloutRecord, TestOutcome, TestRecord, ToolCallRecord};
use crate::seam;

use super::prompting;
use super::rollout::{Group, Trajectory, Turn};

/// A verdict status as the run log records it (the log's own enum, so a rename in the sandbox
/// cannot change the file format).
pub(crate) fn status(s: crate::sandbox::VerdictStatus) -> runlog::VerdictStatus {
    use crate::sandbox::VerdictStatus as V;
    match s {
        V::Passed => runlog::VerdictStatus::Passed,
        V::Failed => runlog::VerdictStatus::Failed,
        V::FormatError => runlog::VerdictStatus::FormatError,
        V::InfraError => runlog::VerdictStatus::InfraError,
    }
}

/// A prompt's messages as the run log records them (once per group or eval problem).
pub(crate) fn prompt(prompt: &prompting::Rendered) -> Vec<runlog::PromptMessage> {
    prompt.messages.iter().map(|m| runlog::PromptMessage { role: m.role.clone(), content: m.content.clone() }).collect()
}

/// A stop reason as the run log records it.
pub(crate) fn stop(s: seam::StopReason) -> runlog::StopReason {
    match s {
        seam::StopReason::Stop => runlog::StopReason::Stop,
        seam::StopReason::Length => runlog::StopReason::Length,
    }
}

/// A turn as the run log records it; with `tools`, with its tool calls and what followed it.
fn attempt(x: &Turn, tools: bool) -> Attempt {
    let calls = x.tools.calls.iter().map(|c| ToolCallRecord { name: c.call.tool.name().to_owned(), arguments: c.call.arguments.clone(), output: c.output.clone(), error: c.error }).collect();
    Attempt {
        prompt_last_message: x.prompt.messages.last().map(|m| m.content.clone()),
        text: x.text.clone(),
        status: status(x.graded.verdict.status),
        tests_passed: x.graded.verdict.tests_passed,
        tokens: tools.then_some(x.seq.tokens.len()),
        calls,
        parse_error: x.tools.parse_error.clone(),
        masked: x.tools.masked,
        appended: if tools { x.append.iter().map(|m| runlog::PromptMessage { role: m.role.clone(), content: m.content.clone() }).collect() } else { vec![] },
    }
}

/// The rollout record of trajectory `k` of group `gi`; `tools` when the run has tool turns (every
/// turn and the stop reason recorded).
pub(crate) fn rollout(step: u32, g: &Group, gi: usize, k: usize, t: &Trajectory, (reward, advantage, skipped): (f64, f64, bool), tools: bool) -> RolloutRecord {
    let last = t.last();
    RolloutRecord {
        step,
        group: gi,
        // Once per group: its completions share the prompt.
        completion: completion(&g.problem.id, k, last, k == 0),
        reward,
        advantage,
        skipped,
        attempts: t.turns.len(),
        policy_version: None,
        turns: turns(t, tools),
        stop: stop_reason(t, tools),
    }
}

/// Earlier attempts and the feedback each got; with tools, every turn.
fn turns(t: &Trajectory, tools: bool) -> Vec<Attempt> {
    if t.turns.len() > 1 || tools { t.turns.iter().map(|x| attempt(x, tools)).collect() } else { vec![] }
}

/// With tools, why the trajectory ended.
fn stop_reason(t: &Trajectory, tools: bool) -> Option<String> {
    t.ending.filter(|_| tools).map(|e| e.name().to_owned())
}

/// Sample `k` of a problem as graded, with its prompt when `with_prompt`.
fn completion(problem_id: &str, k: usize, t: &Turn, with_prompt: bool) -> Completion {
    let v = &t.graded.verdict;
    Completion {
        problem_id: problem_id.to_owned(),
        sample: k,
        text: t.text.clone(),
        code: t.graded.code.clone(),
        language: v.language.map(|l| l.name().to_owned()),
        status: status(v.status),
        tests_passed: v.tests_passed,
        tests_total: v.tests_total,
        tests: v.tests.iter().map(test_record).collect(),
        error: v.error.clone(),
        prompt: if with_prompt { prompt(&t.prompt) } else { vec![] },
        stop_reason: stop(t.seq.stop_reason),
        tokens: t.seq.tokens.len(),
    }
}

/// A test's result as the run log records it (the log's own enum, as for verdicts).
pub(crate) fn test_record(t: &crate::sandbox::TestResult) -> TestRecord {
    use crate::sandbox::TestStatus as T;
    let status = match t.status {
        T::Passed => TestOutcome::Passed,
        T::WrongAnswer => TestOutcome::WrongAnswer,
        T::RuntimeError => TestOutcome::RuntimeError,
        T::Timeout => TestOutcome::Timeout,
        T::MemoryLimit => TestOutcome::MemoryLimit,
        T::OutputLimit => TestOutcome::OutputLimit,
        T::CompileError => TestOutcome::CompileError,
    };
    TestRecord { status, time_ms: t.time_ms, got: t.got.clone(), error: t.error.clone() }
}

/// The eval_rollouts.jsonl record of sample `k` (its prompt on the first sample only); `tools`
/// as for [`rollout`]: every turn and the stop reason kept.
pub(crate) fn eval_sample(step: i64, source: &Option<String>, k: usize, t: &Trajectory, tools: bool) -> EvalSampleRecord {
    let last = t.last();
    EvalSampleRecord { step, protocol: None, source: source.clone(), completion: completion(&last.graded.verdict.problem_id, k, last, k == 0), turns: turns(t, tools), stop: stop_reason(t, tools) }
}
