//! The grading seam: [`Grader`] checks code against a problem's tests and answers a
//! [`Verdict`] of per-test [`TestResult`]s; what is graded ([`Submission`]) and who hears of each
//! grade ([`Progress`]).

use std::future::Future;

use serde::{Deserialize, Serialize};

use super::lang::Compiled;
use super::limits::GradeOptions;
use crate::data::Problem;
use crate::spec::types::Language;

/// Overall verdict status of one completion.
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

/// Result of one test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestStatus {
    /// Output matched.
    Passed,
    /// Ran to completion with the wrong output (or a failed assert).
    WrongAnswer,
    /// Raised, exited non-zero, or was killed by a signal.
    RuntimeError,
    /// Passed the wall-clock or CPU limit.
    Timeout,
    /// Ran out of memory (MemoryError under the address-space limit).
    MemoryLimit,
    /// Wrote more than the output limit.
    OutputLimit,
    /// The program did not compile (every test of a compiled language's submission; the first
    /// carries the compiler's output as `error`).
    CompileError,
}

/// One test's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestResult {
    /// Outcome.
    pub status: TestStatus,
    /// Wall time of the test in milliseconds.
    pub time_ms: u64,
    /// For a wrong answer: what the program printed (stdin tests) or returned (functional
    /// tests), clipped to 600 characters. The error feedback of multi-attempt rollouts shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub got: Option<String>,
    /// For a failed test: the end of what the program wrote to stderr (the traceback), clipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The grade of one completion: the `rlx grade` output line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The problem graded against.
    pub problem_id: String,
    /// Overall status.
    pub status: VerdictStatus,
    /// All tests passed (LiveCodeBench's all-pass verdict).
    pub passed: bool,
    /// Tests that passed.
    pub tests_passed: usize,
    /// Tests the problem has.
    pub tests_total: usize,
    /// Per-test results, in test order (shorter than `tests_total` only with fail-fast).
    pub tests: Vec<TestResult>,
    /// For `infra_error`: what failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The language graded, when it is not Python.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<Language>,
    /// The compile step of a compiled language.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile: Option<Compiled>,
    /// For `infra_error`: the problem is at fault, not the sandbox (its checker program did not
    /// build, ran past its time limit or failed). Grading again gives the same answer, so the
    /// grading loop does not retry it; the code was still not judged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub problem_fault: bool,
}

impl Verdict {
    /// A verdict from per-test results.
    pub fn from_tests(problem_id: &str, tests_total: usize, tests: Vec<TestResult>) -> Verdict {
        let tests_passed = tests.iter().filter(|t| t.status == TestStatus::Passed).count();
        let passed = tests_total > 0 && tests_passed == tests_total;
        Verdict {
            problem_id: problem_id.to_owned(),
            status: if passed { VerdictStatus::Passed } else { VerdictStatus::Failed },
            passed,
            tests_passed,
            tests_total,
            tests,
            error: None,
            language: None,
            compile: None,
            problem_fault: false,
        }
    }

    /// A submission that did not compile: every test a compile error (only the first with
    /// fail-fast), the first carrying the compiler's output.
    pub fn compile_error(problem_id: &str, tests_total: usize, compiled: Compiled, fail_fast: bool) -> Verdict {
        let n = if fail_fast { tests_total.min(1) } else { tests_total };
        let what = if compiled.status == "timeout" { "the compiler ran past its time limit".to_owned() } else { compiled.output.clone() };
        let tests = (0..n)
            .map(|i| TestResult { status: TestStatus::CompileError, time_ms: 0, got: None, error: (i == 0).then(|| clip_start(&what, 2000)) })
            .collect();
        Verdict { compile: Some(compiled), ..Verdict::from_tests(problem_id, tests_total, tests) }
    }

    /// For a judged submission in a compiled language, whether it failed to compile (a compile
    /// timeout included); `None` for Python, a missing code block or an infrastructure failure.
    /// The compile-error rate of a step or an eval is the share of `Some(true)`.
    pub fn compile_failed(&self) -> Option<bool> {
        let compiled = self.language.is_some_and(|l| l.toolchain().is_some());
        let judged = matches!(self.status, VerdictStatus::Passed | VerdictStatus::Failed);
        (compiled && judged).then(|| self.compile.as_ref().is_some_and(|c| !c.ok()))
    }

    /// The same verdict, saying which language was graded (when not Python).
    pub fn in_language(mut self, language: Language) -> Verdict {
        self.language = (language != Language::Python).then_some(language);
        self
    }

    /// No code block to run.
    pub fn format_error(problem_id: &str, tests_total: usize) -> Verdict {
        Verdict {
            problem_id: problem_id.to_owned(),
            status: VerdictStatus::FormatError,
            passed: false,
            tests_passed: 0,
            tests_total,
            tests: vec![],
            error: None,
            language: None,
            compile: None,
            problem_fault: false,
        }
    }

    /// The sandbox failed.
    pub fn infra_error(problem_id: &str, tests_total: usize, err: &dyn std::error::Error) -> Verdict {
        let mut msg = err.to_string();
        let mut src = err.source();
        while let Some(s) = src {
            msg.push_str(": ");
            msg.push_str(&s.to_string());
            src = s.source();
        }
        Verdict {
            problem_id: problem_id.to_owned(),
            status: VerdictStatus::InfraError,
            passed: false,
            tests_passed: 0,
            tests_total,
            tests: vec![],
            error: Some(msg),
            language: None,
            compile: None,
            problem_fault: false,
        }
    }

    /// The problem failed to be graded through its own fault (see the `problem_fault` field).
    pub fn problem_at_fault(problem_id: &str, tests_total: usize, err: &dyn std::error::Error) -> Verdict {
        Verdict { problem_fault: true, ..Verdict::infra_error(problem_id, tests_total, err) }
    }
}

/// The start of `s`, at most `chars` characters, marked when cut (a compiler's first error is
/// the one that counts).
pub(crate) fn clip_start(s: &str, chars: usize) -> String {
    match s.char_indices().nth(chars) {
        Some((i, _)) => format!("{}\n... (cut)", &s[..i]),
        None => s.to_owned(),
    }
}


/// Checks code against a problem's tests.
pub trait Grader: Send + Sync {
    /// Grade already-extracted `code`. Never fails: infrastructure failures come back as
    /// [`VerdictStatus::InfraError`] verdicts.
    fn grade(&self, problem: &Problem, code: &str, opts: &GradeOptions) -> impl Future<Output = Verdict> + Send;
}


/// What to grade: a completion (model text, code extracted here) or code as is.
#[derive(Debug, Clone)]
pub enum Submission {
    /// Model output; the last fenced code block is graded, none is a format error.
    Completion(String),
    /// Code to grade directly.
    Code(String),
}

/// Progress of [`grade_all`](super::grade_all), one call per finished completion (in completion order, not input
/// order). Implemented by the CLI's progress bar.
pub trait Progress: Send + Sync {
    /// One more completion graded.
    fn graded(&self, verdict: &Verdict);
}

impl Progress for () {
    fn graded(&self, _: &Verdict) {}
}
