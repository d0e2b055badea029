//! The grading harness: our Python source (`harness.py`, embedded here) and the jobs it runs.
//!
//! `harness.py` is both the warm worker of [`super::local`] and the driver that
//! [`super::fusion`] sends to a Sandbox Fusion server. This module turns a [`Problem`] into the
//! harness's job (tests without their expected outputs) and the separate expected-output message,
//! so that the process running submitted code never receives the expected outputs.

use serde_json::{Value, json};

use super::limits::{GradeOptions, Limits};
use crate::data::{Problem, Tests};
use crate::spec::types::Checker;

/// The Python source of the harness.
pub const SOURCE: &str = include_str!("harness.py");

/// Limits as the harness reads them.
pub fn limits_json(l: &Limits) -> Value {
    json!({
        "memory_mb": l.memory_mb,
        "output_bytes": l.output_bytes,
        "stderr_bytes": l.stderr_bytes,
        "nproc": l.nproc,
        "fsize_mb": l.fsize_mb,
        "nofile": l.nofile,
    })
}

/// Whole-submission deadline: Sandbox Fusion's `run_timeout = (t+1)·n+5` seconds.
pub fn deadline_s(timeout_s: f64, n: usize) -> f64 {
    (timeout_s + 1.0) * n as f64 + 5.0
}

/// The grading job for `code` against `problem` and, separately, the expected outputs (`None`
/// for assert-based formats, whose expectations live in the test code).
pub fn grade_job(problem: &Problem, code: &str, opts: &GradeOptions) -> (Value, Option<Value>) {
    let t = opts.limits.timeout.as_secs_f64();
    let mut job = json!({
        "kind": "grade",
        "code": code,
        "timeout_s": t,
        "deadline_s": deadline_s(t, problem.tests.len()),
        "limits": limits_json(&opts.limits),
        "fail_fast": opts.fail_fast,
    });
    let checker = problem.checker();
    if checker != Checker::Lcb {
        job["checker"] = checker.name().into();
    }
    let expected = match &problem.tests {
        Tests::Stdin { cases } => {
            job["mode"] = "stdin".into();
            job["tests"] = cases.iter().map(|c| json!({"stdin": c.input})).collect();
            Some(json!({"expected": cases.iter().map(|c| c.output.clone()).collect::<Vec<_>>()}))
        }
        Tests::Functional { fn_name, cases } => {
            job["mode"] = "functional".into();
            job["fn_name"] = fn_name.clone().into();
            job["tests"] = cases.iter().map(|c| json!({"input": c.input})).collect();
            Some(json!({"expected": cases.iter().map(|c| c.output.clone()).collect::<Vec<_>>()}))
        }
        Tests::Asserts { setup, asserts } => {
            job["mode"] = "assert".into();
            job["setup"] = setup.clone().into();
            job["tests"] = asserts.iter().map(|a| json!({"code": a})).collect();
            None
        }
        Tests::Check { test, entry_point, prompt } => {
            job["mode"] = "assert".into();
            // Completions usually restate the whole function; a bare body needs the prompt.
            if !code.contains(&format!("def {entry_point}")) {
                job["code"] = format!("{prompt}{code}").into();
            }
            job["tests"] = json!([{"code": format!("{test}\ncheck({entry_point})\n")}]);
            None
        }
    };
    (job, expected)
}

/// A plain run (`/run_code`): one "test" in script mode. The bytes of `file_names` follow the
/// job frame raw, in that order.
pub fn run_job(code: &str, stdin: Option<&str>, file_names: &[String], fetch_files: &[String], limits: &Limits) -> Value {
    let t = limits.timeout.as_secs_f64();
    json!({
        "kind": "run",
        "mode": "script",
        "code": code,
        "tests": [{"stdin": stdin.unwrap_or("")}],
        "file_names": file_names,
        "fetch_files": fetch_files,
        "timeout_s": t,
        "deadline_s": t + 5.0,
        "limits": limits_json(limits),
    })
}
