//! Running a tool call in the sandbox. Model-written arguments are untrusted: they only ever
//! run there, as code under the sandbox's limits (the tool timeout per run).
//!
//! A tool that hangs or crashes is the model's business: it sees a clipped message saying so. A
//! sandbox that is down is not: its `infra_error` grade comes back as [`Ran::Infra`] and the
//! group is dropped like any group whose grading failed (after the grading loop's retries).

use crate::data::{IoCase, Problem, Tests};
use crate::sandbox::grade_loop::grade_one;
use crate::sandbox::{AnyGrader, GradeOptions, Submission, TestStatus, VerdictStatus};
use crate::spec::types::Tool;

use super::calls::{Call, clip};
use crate::engine::grading::Graded;

/// The most characters of a tool result the model is shown.
pub(crate) const OUTPUT_CHARS: usize = 2000;

/// What running a call gave.
#[derive(Debug)]
pub(crate) enum Ran {
    /// The result the model sees (clipped), and whether the tool failed.
    Output { text: String, error: bool },
    /// The sandbox failed past its retries.
    Infra(Graded),
}

/// The sandbox and the options tool calls run under.
pub(crate) struct Runner<'a> {
    pub grader: &'a AnyGrader,
    /// Grading options with the tool timeout.
    pub opts: &'a GradeOptions,
    pub retries: u32,
    /// Tests `check_solution` runs: the first this many.
    pub public_tests: usize,
}

impl Runner<'_> {
    /// Runs `call` for `problem`.
    pub(crate) async fn run(&self, call: &Call, problem: &Problem) -> Ran {
        match call.tool {
            Tool::CheckSolution => self.check_solution(call.code(), problem).await,
            Tool::Python => self.python(call.code(), problem).await,
            // A shell needs the trajectory's own sandbox: the tool environment runs it
            // (`super::shell`), never a stateless grading call.
            Tool::Bash => Ran::Output { text: "error: `bash` runs in the trajectory's sandbox".into(), error: true },
        }
    }

    async fn check_solution(&self, code: &str, problem: &Problem) -> Ran {
        let public = public(problem, self.public_tests);
        let graded = grade_one(self.grader, &public, Submission::Code(code.to_owned()), self.opts, self.retries).await;
        let v = &graded.verdict;
        if v.status == VerdictStatus::InfraError {
            return Ran::Infra(graded);
        }
        if v.passed {
            return Ran::Output { text: format!("passed: {}/{} public tests", v.tests_passed, v.tests_total), error: false };
        }
        let f = crate::engine::feedback::describe(&public, v);
        let mut text = format!("failed: {}/{} public tests passed", v.tests_passed, v.tests_total);
        for key in ["status", "input", "expected", "got", "error"] {
            if let Some(s) = f[key].as_str() {
                text.push_str(&format!("\n{key}: {s}"));
            }
        }
        Ran::Output { text: clip(&text, OUTPUT_CHARS), error: false }
    }

    async fn python(&self, code: &str, problem: &Problem) -> Ran {
        // One stdin test whose expected output nothing prints: the program's stdout comes back
        // as `got` (a wrong answer), its stderr as `error`.
        let snippet = Problem {
            id: format!("{}#python", problem.id),
            statement: String::new(),
            starter_code: None,
            tests: Tests::Stdin { cases: vec![IoCase { input: String::new(), output: "\u{1}rlx: no output matches this\u{1}".into() }] },
            metadata: Default::default(),
        };
        let graded = grade_one(self.grader, &snippet, Submission::Code(code.to_owned()), self.opts, self.retries).await;
        if graded.verdict.status == VerdictStatus::InfraError {
            return Ran::Infra(graded);
        }
        let Some(t) = graded.verdict.tests.first() else {
            let error = graded.verdict.error.clone().unwrap_or_else(|| "the snippet did not run".into());
            return Ran::Output { text: clip(&format!("error: {error}"), OUTPUT_CHARS), error: true };
        };
        let (stdout, stderr) = (t.got.clone().unwrap_or_default(), t.error.clone().unwrap_or_default());
        let (status, error) = match t.status {
            TestStatus::WrongAnswer | TestStatus::Passed => ("ok", false),
            TestStatus::Timeout => ("timed out", true),
            TestStatus::MemoryLimit => ("out of memory", true),
            TestStatus::OutputLimit => ("too much output", true),
            TestStatus::RuntimeError | TestStatus::CompileError => ("error", true),
        };
        let text = format!("status: {status}\nstdout:\n{stdout}\nstderr:\n{stderr}");
        Ran::Output { text: clip(&text, OUTPUT_CHARS), error }
    }
}

/// `problem` with only its first `n` tests (all of a HumanEval `check`, which is one test).
pub(crate) fn public(problem: &Problem, n: usize) -> Problem {
    let mut p = problem.clone();
    match &mut p.tests {
        Tests::Stdin { cases } | Tests::Functional { cases, .. } => cases.truncate(n),
        Tests::Asserts { asserts, .. } => asserts.truncate(n),
        Tests::Check { .. } => {}
    }
    p
}
