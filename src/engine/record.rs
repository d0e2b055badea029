//! The run log's records of what the engine saw: completions (training rollouts and eval
//! samples), verdicts, prompts and stop reasons, converted from the engine's types into the run
//! log's own (so a rename in the sandbox or the seam cannot change the file format).

use crate::runlog::{self, Attempt, EvalSampleRecord, RolloutRecord, TestOutcome, TestRecord};
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

/// The rollout record of trajectory `k` of group `gi`.
pub(crate) fn rollout(step: u32, g: &Group, gi: usize, k: usize, t: &Trajectory, (reward, advantage, skipped): (f64, f64, bool)) -> RolloutRecord {
    let last = t.last();
    // Earlier attempts and the feedback each got.
    let turns = if t.turns.len() > 1 {
        t.turns
            .iter()
            .map(|x| Attempt {
                prompt_last_message: x.prompt.messages.last().map(|m| m.content.clone()),
                text: x.text.clone(),
                status: status(x.graded.verdict.status),
                tests_passed: x.graded.verdict.tests_passed,
            })
            .collect()
    } else {
        vec![]
    };
    RolloutRecord {
        step,
        problem_id: g.problem.id.clone(),
        group: gi,
        sample: k,
        text: last.text.clone(),
        code: last.graded.code.clone(),
        language: last.graded.verdict.language.map(|l| l.name().to_owned()),
        status: status(last.graded.verdict.status),
        tests_passed: last.graded.verdict.tests_passed,
        tests_total: last.graded.verdict.tests_total,
        tests: last.graded.verdict.tests.iter().map(test_record).collect(),
        error: last.graded.verdict.error.clone(),
        // Once per group: its completions share the prompt.
        prompt: match k {
            0 => prompt(&t.turns[0].prompt),
            _ => vec![],
        },
        reward,
        advantage,
        skipped,
        stop_reason: stop(last.seq.stop_reason),
        tokens: last.seq.tokens.len(),
        attempts: t.turns.len(),
        policy_version: None,
        turns,
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

/// The eval_rollouts.jsonl record of sample `k` (its prompt on the first sample only).
pub(crate) fn eval_sample(step: i64, source: &Option<String>, k: usize, t: &Turn) -> EvalSampleRecord {
    let v = &t.graded.verdict;
    EvalSampleRecord {
        step,
        protocol: None,
        problem_id: v.problem_id.clone(),
        source: source.clone(),
        sample: k,
        text: t.text.clone(),
        code: t.graded.code.clone(),
        language: v.language.map(|l| l.name().to_owned()),
        status: status(v.status),
        tests_passed: v.tests_passed,
        tests_total: v.tests_total,
        tests: v.tests.iter().map(test_record).collect(),
        error: v.error.clone(),
        prompt: if k == 0 { prompt(&t.prompt) } else { vec![] },
        stop_reason: stop(t.seq.stop_reason),
        tokens: t.seq.tokens.len(),
    }
}
