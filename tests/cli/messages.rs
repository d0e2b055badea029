//! What rlx tells the user when something is wrong, through the real binary: one shape for
//! errors (`error:`, `  Caused by:` lines, `help:` lines), exit code 2 for what the user can fix
//! (a missing model, a malformed dataset line, a truncated GGUF file, a strict sandbox on a
//! machine without namespaces) and 3 for the rest, no backtraces, the sandbox warning of
//! `rlx run` with `sandbox.strict: false`, and a closed stdout counting as success.

#![allow(clippy::print_stderr)] // skip notices are meant to be seen in test output

use std::io::{BufRead as _, Read as _};
use std::process::Stdio;

use crate::common::{Run, TestContext, python_available, repo};

/// Every line of a message is a label line, a cause, or a continuation; none is a backtrace
/// frame (`   3: candle_core::...`, `stack backtrace:`, `at src/...`).
fn assert_no_backtrace(stderr: &str) {
    for line in stderr.lines() {
        let t = line.trim_start();
        let frame = t.split_once(':').is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        assert!(!frame && !t.starts_with("at ") && !t.contains("backtrace"), "a backtrace line reached the user: {line:?}\n{stderr}");
    }
}

#[test]
fn schema_into_a_closed_pipe_exits_0() {
    let cx = TestContext::new();
    // The read end closed before rlx writes: every write fails with EPIPE.
    let mut child = cx.rlx().arg("schema").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    drop(child.stdout.take());
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked") && stderr.is_empty(), "{stderr}");

    // `rlx schema | head -1`: one line read, then the pipe closed.
    let mut child = cx.rlx().arg("schema").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert_eq!(first.trim(), "{");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
}

#[test]
fn a_malformed_dataset_line_exits_2_with_its_causes() {
    let cx = TestContext::new();
    let good = r#"{"task_id": 1, "text": "Return 1.", "code": "def f():\n    return 1", "test_list": ["assert f() == 1"]}"#;
    cx.write("problems.jsonl", &format!("{good}\n{{\"task_id\": 2, \"text\": \n"));
    cx.write("c.jsonl", "{\"problem_id\": \"1\", \"code\": \"def f():\\n    return 1\"}\n");
    let r = cx.run(&["grade", "--no-progress", "--problems", "problems.jsonl", "--completions", "c.jsonl"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(lines[0], "error: cannot load problems from `problems.jsonl`", "{}", r.stderr);
    assert_eq!(lines[1], "  Caused by: `problems.jsonl` line 2: invalid JSON", "{}", r.stderr);
    assert!(lines[2].starts_with("  Caused by: EOF while parsing"), "{}", r.stderr);

    // A malformed completions line is the user's too.
    cx.write("problems.jsonl", &format!("{good}\n"));
    cx.write("c.jsonl", "{\"problem_id\": \"1\", \"code\": \"x\"}\nnot json\n");
    let r = cx.run(&["grade", "--no-progress", "--problems", "problems.jsonl", "--completions", "c.jsonl"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.starts_with("error: `c.jsonl` line 2: invalid JSON\n  Caused by: expected ident"), "{}", r.stderr);

    // A missing problem file: exit 2, the path and the OS's reason.
    let r = cx.run(&["grade", "--problems", "absent.jsonl", "--completions", "c.jsonl"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("error: cannot load problems from `absent.jsonl`\n  Caused by: cannot read `absent.jsonl`\n  Caused by: No such file"), "{}", r.stderr);
}

/// A GGUF file cut inside its vocabulary array: 3 of the 1,000 tokens it announces.
fn truncated_gguf() -> Vec<u8> {
    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes()); // version
    b.extend(0u64.to_le_bytes()); // tensors
    b.extend(2u64.to_le_bytes()); // metadata entries
    string(&mut b, "general.architecture");
    b.extend(8u32.to_le_bytes()); // string
    string(&mut b, "llama");
    string(&mut b, "tokenizer.ggml.tokens");
    b.extend(9u32.to_le_bytes()); // array
    b.extend(8u32.to_le_bytes()); // of strings
    b.extend(1000u64.to_le_bytes());
    for t in ["a", "b", "c"] {
        string(&mut b, t);
    }
    b
}

#[test]
fn a_truncated_gguf_is_one_line_without_backtrace_and_exits_2() {
    let cx = TestContext::new();
    std::fs::write(cx.path().join("trunc.gguf"), truncated_gguf()).unwrap();
    // RUST_BACKTRACE makes candle attach a backtrace to its errors; the user must not see it.
    let r = Run::from(cx.rlx().args(["render", "spec.yaml", "model.base=./trunc.gguf"]).env("RUST_BACKTRACE", "1").output().unwrap());
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.starts_with("error: "), "{}", r.stderr);
    assert!(r.stderr.contains("trunc.gguf`: not a readable GGUF file: gguf: array of 1000 elements needs at least"), "{}", r.stderr);
    assert_no_backtrace(&r.stderr);
    assert!(r.stderr.lines().count() <= 3, "error, then one line per cause:\n{}", r.stderr);
}

#[test]
fn a_missing_model_exits_2() {
    let cx = TestContext::new();
    // A path: the spec check finds it before anything runs.
    let r = cx.run(&["run", "spec.yaml", "model.base=./absent.gguf"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("error: model `./absent.gguf` does not exist"), "{}", r.stderr);
    // A Hub repo id that is not in the (empty) cache, offline: found missing when the model is
    // located, with the chain of causes.
    let r = Run::from(
        cx.rlx().args(["render", "spec.yaml"]).env("HF_HUB_CACHE", cx.path().join("empty-hf")).env("HF_HUB_OFFLINE", "1").output().unwrap(),
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.starts_with("error: cannot load the model's tokenizer and chat template\n  Caused by: model `org/model`: not found in the Hugging Face cache"), "{}", r.stderr);
}

/// `rlx run` reports a missing model as the user's error, with its causes, on the console.
#[test]
fn run_with_a_missing_model_exits_2_with_its_causes() {
    let cx = TestContext::new();
    let r = Run::from(
        cx.rlx().args(["run", "spec.yaml"]).env("HF_HUB_CACHE", cx.path().join("empty-hf")).env("HF_HUB_OFFLINE", "1").output().unwrap(),
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("error: "), "{}", r.stderr);
    assert!(r.stderr.contains("  Caused by: model `org/model`: not found in the Hugging Face cache"), "{}", r.stderr);
}

#[test]
fn a_strict_sandbox_without_namespaces_exits_2() {
    if !python_available() {
        return;
    }
    let cx = TestContext::new();
    cx.write("p.json", r#"[{"problem": "one", "tests": [{"input": "", "output": "1", "testtype": "stdin"}]}]"#);
    cx.write("c.jsonl", "{\"problem_id\": \"p/0\", \"code\": \"print(1)\"}\n");
    let r = Run::from(
        cx.rlx()
            .args(["grade", "--no-progress", "--strict", "--concurrency", "1", "--problems", "p.json", "--completions", "c.jsonl"])
            .env("RLX_SANDBOX_NAMESPACES", "0")
            .output()
            .unwrap(),
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.starts_with("error: cannot start the sandbox\n  Caused by: sandbox isolation incomplete: namespaces disabled"), "{}", r.stderr);
    assert!(r.stderr.contains("help: to run with the isolation this machine has"), "{}", r.stderr);
}

/// `rlx run` with `sandbox.strict: false` on a machine without namespaces says so (the spec
/// reference promises a warning) and records the protection actually in force.
#[test]
fn run_warns_when_the_sandbox_lacks_isolation() {
    if !python_available() {
        return;
    }
    let cx = TestContext::new();
    crate::engine::tiny_model(&cx.path().join("tiny"));
    let data = repo().join("experiments/data/easy_python_train.jsonl");
    let user = repo().join("prompts/mbpp_user.j2");
    cx.write(
        "spec.yaml",
        &format!(
            "name: degraded
model: {{base: ./tiny, finetune: full}}
backend: {{kind: local, threads: 1}}
data:
  train: [{{path: {}, format: mbpp, limit: 2}}]
prompt: {{user: {}}}
sampling: {{max_tokens: 8}}
grpo: {{prompts_per_step: 1, group_size: 2, skip_degenerate: false}}
sandbox: {{kind: local, strict: false, concurrency: 1}}
schedule: {{max_steps: 1, eval_at_start: false}}
",
            data.display(),
            user.display()
        ),
    );
    let r = Run::from(cx.rlx().args(["run", "spec.yaml"]).env("RLX_SANDBOX_NAMESPACES", "0").output().unwrap());
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("warning: the sandbox runs model code with reduced isolation on this machine: namespaces disabled"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("sandbox.strict: true"), "the warning says how to refuse instead:\n{}", r.stderr);
    let runs: Vec<_> = std::fs::read_dir(cx.path().join("runs")).unwrap().flatten().collect();
    let prov: serde_json::Value = serde_json::from_slice(&std::fs::read(runs[0].path().join("provenance.json")).unwrap()).unwrap();
    assert_eq!(prov["sandbox"]["network_namespace"], false, "{prov}");
}

/// A malformed `tokenizer.json` is the user's error on every backend: exit 2, naming the file.
/// (Before the one prompt-file loader the same file exited 3 through `tinker` and `local`.)
/// The remote backends point at a closed port: the tokenizer is read before any connection
/// (stop strings need it), so nothing is contacted.
#[test]
fn a_malformed_tokenizer_exits_2_with_its_path_on_every_backend() {
    let cx = TestContext::new();
    crate::engine::tiny_model(&cx.path().join("tiny"));
    let tokenizer = cx.path().join("tiny/tokenizer.json");
    std::fs::write(&tokenizer, "{\"version\": \"1.0\", \"model\": [").unwrap();
    let base = crate::engine::spec_with(1, 1, "");
    let sampling = "sampling: {max_tokens: 12, temperature: 1.0, stop: [\"```\"]}";
    for (backend, steps) in [
        ("backend: {kind: local, threads: 1}", 1),
        ("backend: {kind: openai, base_url: \"http://127.0.0.1:9/v1\"}", 0),
        ("backend: {kind: tinker, base_url: \"http://127.0.0.1:9\"}", 1),
    ] {
        let spec = base
            .replace("backend: {kind: local, threads: 1}", backend)
            .replace("sampling: {max_tokens: 12, temperature: 1.0}", sampling)
            .replace("schedule: {max_steps: 1,", &format!("schedule: {{max_steps: {steps},"));
        // Tinker trains LoRA adapters only.
        let spec = if backend.contains("tinker") { spec.replace("finetune: full", "finetune: lora") } else { spec };
        cx.write("spec.yaml", &spec);
        let r = Run::from(cx.rlx().args(["run", "spec.yaml"]).env("TINKER_API_KEY", "tml-test").output().unwrap());
        assert_eq!(r.code, 2, "{backend}: {}", r.stderr);
        assert!(r.stderr.contains(&tokenizer.display().to_string()), "{backend}: the message names the file:\n{}", r.stderr);
        assert_no_backtrace(&r.stderr);
    }
}
