//! What the feedback template of a multi-attempt rollout sees about a failed attempt: the first
//! failing test's input, expected and actual output, and the error text.

use serde_json::{Value, json};

use crate::data::{Problem, Tests};
use crate::sandbox::{TestStatus, Verdict, VerdictStatus};

/// The `feedback` variable of the feedback template for a failed verdict.
///
/// `status` is the failing test's status (`wrong_answer`, `runtime_error`, `timeout`, ...) or
/// `format_error` when the answer had no code block; `input` and `expected` come from the
/// problem's tests (`input` is the assert statement for MBPP-style tests); `got` and `error` from
/// the sandbox (clipped). Absent values are null.
pub(crate) fn describe(problem: &Problem, verdict: &Verdict) -> Value {
    if verdict.status == VerdictStatus::FormatError {
        return json!({
            "status": "format_error", "input": null, "expected": null, "got": null,
            "error": format!("no ```{} code block was found in the answer", problem.language().fences()[0]),
        });
    }
    let Some((i, t)) = verdict.tests.iter().enumerate().find(|(_, t)| t.status != TestStatus::Passed) else {
        // Failed without a failing test (e.g. no tests ran): say only the status.
        return json!({"status": verdict.status, "input": null, "expected": null, "got": null, "error": verdict.error});
    };
    let (input, expected) = match &problem.tests {
        Tests::Stdin { cases } | Tests::Functional { cases, .. } => match cases.get(i) {
            Some(c) => (Some(c.input.clone()), Some(c.output.clone())),
            None => (None, None),
        },
        Tests::Asserts { asserts, .. } => (asserts.get(i).cloned(), None),
        Tests::Check { .. } => (None, None),
    };
    json!({"status": t.status, "input": input, "expected": expected, "got": t.got, "error": t.error})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::IoCase;
    use crate::sandbox::TestResult;

    fn problem(tests: Tests) -> Problem {
        Problem { id: "p".into(), statement: "s".into(), starter_code: None, tests, metadata: Default::default() }
    }

    fn result(status: TestStatus, got: Option<&str>, error: Option<&str>) -> TestResult {
        TestResult { status, time_ms: 1, got: got.map(str::to_string), error: error.map(str::to_string) }
    }

    #[test]
    fn first_failing_stdin_case() {
        let p = problem(Tests::Stdin { cases: vec![IoCase { input: "1".into(), output: "2".into() }, IoCase { input: "5".into(), output: "10".into() }] });
        let v = Verdict::from_tests("p", 2, vec![result(TestStatus::Passed, None, None), result(TestStatus::WrongAnswer, Some("11\n"), None)]);
        let f = describe(&p, &v);
        assert_eq!(f["status"], "wrong_answer");
        assert_eq!(f["input"], "5");
        assert_eq!(f["expected"], "10");
        assert_eq!(f["got"], "11\n");
        assert!(f["error"].is_null());
    }

    #[test]
    fn assert_tests_show_the_statement_and_the_traceback() {
        let p = problem(Tests::Asserts { setup: String::new(), asserts: vec!["assert f(1) == 2".into()] });
        let v = Verdict::from_tests("p", 1, vec![result(TestStatus::RuntimeError, None, Some("NameError: name 'g' is not defined"))]);
        let f = describe(&p, &v);
        assert_eq!(f["status"], "runtime_error");
        assert_eq!(f["input"], "assert f(1) == 2");
        assert!(f["expected"].is_null());
        assert_eq!(f["error"], "NameError: name 'g' is not defined");
    }

    #[test]
    fn missing_code_block() {
        let p = problem(Tests::Asserts { setup: String::new(), asserts: vec!["assert f(1) == 2".into()] });
        let f = describe(&p, &Verdict::format_error("p", 1));
        assert_eq!(f["status"], "format_error");
        assert!(f["error"].as_str().unwrap().contains("code block"));
    }
}
