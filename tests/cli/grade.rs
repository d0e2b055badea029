//! `rlx grade` and `rlx sandbox serve` through the real binary: output lines in input order with
//! the exact fields of issue 3, format errors, a scrubbed environment (a secret in rlx's
//! environment is unreachable), bad input, and grading through `--sandbox fusion` against a
//! spawned `rlx sandbox serve`. Only the MBPP test needs ../shared/data (skipped without it);
//! the others grade the repository's own `tests/fixtures/data/lcb_rllm.json`.

#![allow(clippy::print_stderr)] // skip notices are meant to be seen in test output

use std::process::Command;

use serde_json::{Value, json};

use crate::common::{fixture_problems, python_available, shared_data};

fn rlx() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rlx"));
    c.env("NO_COLOR", "1");
    c
}

fn write_jsonl(path: &std::path::Path, rows: &[Value]) {
    std::fs::write(path, rows.iter().map(|r| r.to_string() + "\n").collect::<String>()).unwrap();
}

fn lines(out: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(out).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn grade_mbpp_completions_in_input_order() {
    if !python_available() {
        return;
    }
    let Some(mbpp) = shared_data("mbpp/mbpp.jsonl") else { return };
    let dir = tempfile::tempdir().unwrap();
    let completions = dir.path().join("c.jsonl");
    write_jsonl(
        &completions,
        &[
            json!({"problem_id": "2", "completion": "Here:\n```python\ndef similar_elements(a, b):\n    return tuple(set(a) & set(b))\n```\nDone."}),
            json!({"problem_id": 3, "code": "def is_not_prime(n):\n    return any(n % i == 0 for i in range(2, n))\n"}),
            json!({"problem_id": "2", "completion": "I cannot write code today."}),
            json!({"problem_id": "2", "code": "def similar_elements(a, b):\n    return ()\n"}),
        ],
    );
    let out = dir.path().join("out.jsonl");
    let status = rlx()
        .args(["grade", "--no-progress", "--concurrency", "2"])
        .arg("--problems")
        .arg(&mbpp)
        .arg("--completions")
        .arg(&completions)
        .arg("--out")
        .arg(&out)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let v = lines(&std::fs::read(&out).unwrap());
    assert_eq!(v.len(), 4);
    let keys: Vec<&str> = v[0].as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["problem_id", "status", "passed", "tests_passed", "tests_total", "tests"]);
    assert_eq!(v[0]["status"], "passed");
    assert_eq!(v[0]["tests"].as_array().unwrap().len(), 3);
    assert!(v[0]["tests"][0]["time_ms"].is_u64());
    assert_eq!((v[1]["problem_id"].as_str(), v[1]["status"].as_str()), (Some("3"), Some("passed")));
    assert_eq!(v[2]["status"], "format_error");
    assert_eq!((v[2]["passed"].as_bool(), v[2]["tests_total"].as_u64()), (Some(false), Some(3)));
    assert_eq!(v[3]["status"], "failed");
    assert_eq!(v[3]["tests"][0]["status"], "wrong_answer");
}

#[test]
fn secrets_in_rlx_environment_are_unreachable() {
    if !python_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let problems = dir.path().join("p.json");
    std::fs::write(&problems, json!([{"problem": "env", "tests": [{"input": "", "output": "None None", "testtype": "stdin"}]}]).to_string()).unwrap();
    let completions = dir.path().join("c.jsonl");
    write_jsonl(
        &completions,
        &[json!({"problem_id": "p/0", "code": "import os\nprint(os.environ.get('RLX_TEST_SECRET'), os.environ.get('OPENAI_API_KEY'))"})],
    );
    let out = rlx()
        .args(["grade", "--no-progress"])
        .arg("--problems")
        .arg(&problems)
        .arg("--completions")
        .arg(&completions)
        .env("RLX_TEST_SECRET", "hunter2")
        .env("OPENAI_API_KEY", "sk-test")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = lines(&out.stdout);
    assert_eq!(v[0]["status"], "passed", "{v:?}");
}

#[test]
fn bad_inputs_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let completions = dir.path().join("c.jsonl");
    write_jsonl(&completions, &[json!({"problem_id": "nope", "code": "print(1)"})]);
    let out = rlx()
        .args(["grade", "--no-progress", "--problems"])
        .arg(fixture_problems())
        .arg("--completions")
        .arg(&completions)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "an unknown problem id is a usage error");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`nope`") && err.contains("line 1"), "{err}");

    std::fs::write(&completions, "{\"problem_id\": \"lcb_rllm/0\"}\n").unwrap();
    let out = rlx().arg("grade").arg("--problems").arg(fixture_problems()).arg("--completions").arg(&completions).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 1") && err.contains("`completion` or `code`"), "{err}");

    let out = rlx().args(["grade", "--problems", "missing.json", "--completions", "missing.jsonl"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.json"));
}

#[test]
fn grade_through_a_spawned_sandbox_server() {
    if !python_available() {
        return;
    }
    let (mut server, addr) = crate::common::sandbox_server();
    let dir = tempfile::tempdir().unwrap();
    let completions = dir.path().join("c.jsonl");
    write_jsonl(
        &completions,
        &[
            json!({"problem_id": "lcb_rllm/0", "code": "a, b = map(int, input().split())\nprint(-(-a // b))"}),
            json!({"problem_id": "lcb_rllm/0", "code": "print(4)"}),
        ],
    );
    let out = rlx()
        .args(["grade", "--no-progress", "--sandbox", "fusion", "--problems"])
        .arg(fixture_problems())
        .arg("--fusion-url")
        .arg(&addr)
        .arg("--completions")
        .arg(&completions)
        .output()
        .unwrap();
    // SIGINT: the server's Ctrl-C path, which stops its workers and removes its files.
    // SAFETY: kill(2) on the child we spawned.
    unsafe {
        libc::kill(server.id() as i32, libc::SIGINT);
    }
    let _ = server.wait();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = lines(&out.stdout);
    assert_eq!((v[0]["status"].as_str(), v[0]["tests_passed"].as_u64()), (Some("passed"), Some(3)));
    assert_eq!((v[1]["status"].as_str(), v[1]["tests_passed"].as_u64()), (Some("failed"), Some(1)));
}

/// Without namespaces and without `--strict`, `rlx grade` grades and says, once, what isolation
/// is missing and how to refuse instead.
#[test]
fn reduced_isolation_is_a_warning() {
    if !python_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let problems = dir.path().join("p.json");
    std::fs::write(&problems, json!([{"problem": "one", "tests": [{"input": "", "output": "1", "testtype": "stdin"}]}]).to_string()).unwrap();
    let completions = dir.path().join("c.jsonl");
    write_jsonl(&completions, &[json!({"problem_id": "p/0", "code": "print(1)"})]);
    let out = rlx()
        .args(["grade", "--no-progress", "--concurrency", "1"])
        .arg("--problems")
        .arg(&problems)
        .arg("--completions")
        .arg(&completions)
        .env("RLX_SANDBOX_NAMESPACES", "0")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(lines(&out.stdout)[0]["status"], "passed");
    assert_eq!(err.matches("warning: the sandbox runs model code with reduced isolation").count(), 1, "{err}");
    assert!(err.contains("namespaces disabled") && err.contains("help: pass `--strict` to refuse to run instead"), "{err}");
}

#[test]
fn grade_cpp_completions_and_a_missing_compiler() {
    if !crate::sandbox_cpp::toolchain(rlx::spec::types::Language::Cpp) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let problems = dir.path().join("p.jsonl");
    write_jsonl(&problems, &[json!({"id": "ab", "problem": "a+b", "tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "2 2\n", "output": "4\n"}]})]);
    let completions = dir.path().join("c.jsonl");
    let good = format!("Here it is:\n```cpp\n{}```\nand in Python:\n```python\nprint(sum(map(int, input().split())))\n```", crate::sandbox_cpp::APLUSB);
    write_jsonl(
        &completions,
        &[
            json!({"problem_id": "ab", "completion": good}),
            json!({"problem_id": "ab", "completion": "```c++\nint main(){ return nope; }\n```"}),
            json!({"problem_id": "ab", "completion": "```python\nprint(3)\n```"}),
        ],
    );
    let out = rlx()
        .args(["grade", "--no-progress", "--language", "cpp", "--compile-timeout", "60"])
        .arg("--problems")
        .arg(&problems)
        .arg("--completions")
        .arg(&completions)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let l = lines(&out.stdout);
    assert_eq!((l[0]["status"].as_str(), l[0]["language"].as_str(), l[0]["compile"]["status"].as_str()), (Some("passed"), Some("cpp"), Some("ok")), "{}", l[0]);
    assert_eq!(l[1]["status"], "failed");
    assert_eq!(l[1]["tests"][0]["status"], "compile_error");
    assert!(l[1]["tests"][0]["error"].as_str().is_some_and(|e| e.contains("nope")), "{}", l[1]);
    assert_eq!(l[2]["status"], "format_error", "a ```python block is not C++: {}", l[2]);

    // No compiler: exit 2 naming it, before anything is graded.
    let out = rlx()
        .env("RLX_TOOLCHAIN_PATH", dir.path().join("no-such-dir"))
        .args(["grade", "--no-progress", "--language", "cpp"])
        .arg("--problems")
        .arg(&problems)
        .arg("--completions")
        .arg(&completions)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("C++ needs the compiler `g++`, which is not installed"), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing graded");
    let out = rlx().args(["grade", "--language", "cplusplus", "--problems", "p", "--completions", "c"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown language `cplusplus`"), "{}", String::from_utf8_lossy(&out.stderr));
}
