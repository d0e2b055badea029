//! C++ end to end: runs whose data is to be solved in C++ (`data.*.language: cpp`), graded by
//! the embedded sandbox with the real g++. A dry run against an OpenAI-compatible server written
//! here answers with a right, a wrong and a non-compiling C++ program, so compile errors, wrong
//! answers and passes are recorded per test, the compile error is fed back in a second attempt,
//! `rlx show` prints the C++ code and the compiler's output, and `rlx eval` grades the eval set.
//! A few steps of the tiny model on the embedded backend train on the shipped C++ data. A
//! missing compiler stops `rlx run` with exit code 2 naming it. SKIPPED without g++.

use std::sync::Arc;

use serde_json::Value;

use crate::common::{TestContext, jsonl, only_run, repo};
use crate::openai::{Server, completion, models, serve, tokenizer};
use rlx::spec::types::Language;

/// Problems: `sum` is answered right, `prod` wrong, `broken` with C++ that does not compile
/// (and, after the compiler's output is fed back, right), `prose` without a code block.
const TRAIN: &str = r#"{"id": "sum", "problem": "Print a+b.", "tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10\n"}]}
{"id": "prod", "problem": "Print a*b.", "tests": [{"input": "2 3\n", "output": "6\n"}, {"input": "2 2\n", "output": "4\n"}]}
{"id": "broken", "problem": "Print a-b.", "tests": [{"input": "5 3\n", "output": "2\n"}]}
{"id": "prose", "problem": "Print nothing useful.", "tests": [{"input": "", "output": "1\n"}]}
"#;

const SUM: &str = "#include <cstdio>\nint main(){ long long a, b; scanf(\"%lld %lld\", &a, &b); printf(\"%lld\\n\", a + b); }\n";

async fn cpp_server() -> Server {
    let tok = tokenizer();
    serve(Arc::new(move |path: &str, body: &Value| {
        if path == "/v1/models" {
            return models("llamacpp");
        }
        let ids: Vec<u32> = body["prompt"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let prompt = tok.decode(&ids, false).unwrap();
        let text = if prompt.contains("did not compile") {
            "Fixed:\n```cpp\n#include <cstdio>\nint main(){ int a, b; scanf(\"%d %d\", &a, &b); printf(\"%d\\n\", a - b); }\n```".to_owned()
        } else if prompt.contains("Print a+b.") {
            format!("```cpp\n{SUM}```")
        } else if prompt.contains("Print a*b.") {
            // a+b: wrong on 2 3, right (by accident) on 2 2.
            "```c++\n#include <cstdio>\nint main(){ int a, b; scanf(\"%d %d\", &a, &b); printf(\"%d\\n\", a + b); }\n```".to_owned()
        } else if prompt.contains("Print a-b.") {
            "```cpp\nint main(){ return undeclared_name; }\n```".to_owned()
        } else {
            "I would rather not.".to_owned()
        };
        completion(&tok, &text, ids.len(), "stop")
    }))
    .await
}

fn write_spec(cx: &TestContext, url: &str) {
    crate::engine::tiny_model(&cx.path().join("tiny"));
    cx.write("problems.jsonl", TRAIN);
    let prompts = repo().join("prompts");
    cx.write(
        "cpp.yaml",
        &format!(
            "name: cpp
model: {{base: ./tiny, finetune: full}}
backend: {{kind: openai, base_url: \"{url}\", served_model: m, max_retries: 1}}
data:
  train: [{{path: problems.jsonl, format: codeforces, language: cpp, compile_timeout_s: 60}}]
  eval: [{{path: problems.jsonl, format: codeforces, language: cpp, compile_timeout_s: 60}}]
prompt: {{user: {user}, feedback: {feedback}}}
sampling: {{max_tokens: 400, temperature: 1.0}}
grpo: {{prompts_per_step: 4, group_size: 2}}
rollout: {{max_attempts: 2}}
sandbox: {{kind: local, strict: false}}
schedule: {{max_steps: 1, eval_every: 1}}
eval: {{k: [1], samples: 1, temperature: 1.0}}
",
            user = prompts.join("code_user.j2").display(),
            feedback = prompts.join("code_feedback.j2").display(),
        ),
    );
}

#[test]
fn a_cpp_dry_run_records_compile_errors_wrong_answers_and_passes() {
    if !crate::sandbox_cpp::toolchain(Language::Cpp) {
        return;
    }
    let cx = TestContext::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(cpp_server());
    write_spec(&cx, &server.url());
    let r = cx.run(&["run", "cpp.yaml", "--dry-run"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let dir = only_run(&cx);
    let rollouts = jsonl(&dir.join("rollouts.jsonl"));
    let by = |id: &str| rollouts.iter().find(|r| r["problem_id"] == id).unwrap_or_else(|| panic!("{id} in {rollouts:?}\n{}", r.stderr));
    let sum = by("sum");
    assert_eq!((sum["status"].as_str(), sum["language"].as_str()), (Some("passed"), Some("cpp")), "{sum}");
    assert!(sum["code"].as_str().unwrap().contains("#include <cstdio>"), "the C++ block is the code: {sum}");
    let prod = by("prod");
    assert_eq!((prod["status"].as_str(), prod["attempts"].as_u64()), (Some("failed"), Some(2)), "{prod}");
    let statuses: Vec<&str> = prod["tests"].as_array().unwrap().iter().filter_map(|t| t["status"].as_str()).collect();
    assert_eq!(statuses, ["wrong_answer", "passed"], "{prod}");
    let broken = by("broken");
    let first = &broken["turns"][0];
    assert_eq!(first["status"], "failed", "{broken}");
    let feedback = broken["turns"][1]["prompt_last_message"].as_str().unwrap();
    assert!(feedback.contains("did not compile") && feedback.contains("undeclared_name") && feedback.contains("```cpp"), "the compiler's output is fed back: {feedback}");
    assert_eq!(broken["status"], "passed", "the second attempt compiles: {broken}");
    assert_eq!(by("prose")["status"], "format_error");

    // The compile-error rate of the step: every `broken` rollout's first attempt did not
    // compile, every other attempt with code did; `prose` never had code.
    let attempts: u64 = rollouts.iter().filter(|r| r["problem_id"] != "prose").map(|r| r["attempts"].as_u64().unwrap()).sum();
    let broken_n = rollouts.iter().filter(|r| r["problem_id"] == "broken").count() as f64;
    let metrics = jsonl(&dir.join("metrics.jsonl"));
    let train = metrics.iter().find(|m| m.get("train/compile_error_rate").is_some()).unwrap_or_else(|| panic!("a step line with the rate: {metrics:?}"));
    let rate = train["train/compile_error_rate"].as_f64().unwrap();
    assert!(broken_n > 0.0 && (rate - broken_n / attempts as f64).abs() < 1e-9, "{rate} vs {broken_n}/{attempts}");
    // The eval: one sample each of sum, prod, broken (which does not compile) and prose.
    let eval = metrics.iter().find(|m| m.get("eval/compile_error_rate").is_some()).unwrap_or_else(|| panic!("an eval line with the rate: {metrics:?}"));
    assert!((eval["eval/compile_error_rate"].as_f64().unwrap() - 1.0 / 3.0).abs() < 1e-9, "{eval}");

    // The first attempt's per-test record of a compile error, through `rlx show`.
    let run = dir.strip_prefix(cx.path()).unwrap().display().to_string();
    let r = cx.run(&["show", &run, "--problem", "sum", "--limit", "1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("code (cpp)") && r.stdout.contains("#include <cstdio>"), "{}", r.stdout);
    let evals = jsonl(&dir.join("eval_rollouts.jsonl"));
    let compile_error = evals.iter().find(|e| e["problem_id"] == "broken").expect("the eval sample of `broken`");
    assert_eq!(compile_error["tests"][0]["status"], "compile_error", "{compile_error}");
    assert_eq!(compile_error["language"], "cpp");
    let r = cx.run(&["show", &run, "--eval", "--problem", "broken"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("compile_error") && r.stdout.contains("undeclared_name"), "the compiler's output: {}", r.stdout);
    let wrong = evals.iter().find(|e| e["problem_id"] == "prod").unwrap();
    let statuses: Vec<&str> = wrong["tests"].as_array().unwrap().iter().filter_map(|t| t["status"].as_str()).collect();
    assert_eq!(statuses, ["wrong_answer", "passed"], "{wrong}");

    // `rlx eval` on the same spec grades the eval set in C++.
    let r = cx.run(&["eval", "cpp.yaml"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("pass@1") || r.stderr.contains("pass@1"), "{}\n{}", r.stdout, r.stderr);

    // Without g++: exit 2 naming it, before any sample.
    let r = cx.rlx().env("RLX_TOOLCHAIN_PATH", cx.path().join("none")).args(["run", "cpp.yaml", "--dry-run", "name=cpp-nocc"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("needs the compiler `g++`"), "{stderr}");
}

/// A few steps of the tiny model on the embedded backend, on the shipped C++ data.
#[test]
fn a_cpp_run_of_the_tiny_model() {
    if !crate::sandbox_cpp::toolchain(Language::Cpp) {
        return;
    }
    let cx = TestContext::new();
    crate::engine::tiny_model(&cx.path().join("tiny"));
    let data = repo().join("experiments/data");
    let text = crate::engine::spec_with(2, 2, "")
        .replace(&format!("{}, format: mbpp, limit: 6", data.join("easy_python_train.jsonl").display()), &format!("{}, format: codeforces, language: cpp, limit: 6", data.join("easy_stdin_train.jsonl").display()))
        .replace(&format!("{}, format: mbpp, limit: 2", data.join("easy_python_eval.jsonl").display()), &format!("{}, format: codeforces, language: cpp, limit: 2", data.join("easy_stdin_eval.jsonl").display()))
        .replace(&repo().join("prompts/mbpp_user.j2").display().to_string(), &repo().join("prompts/code_user.j2").display().to_string());
    assert!(text.contains("language: cpp") && text.contains("code_user.j2"), "{text}");
    cx.write("spec.yaml", &text);
    let r = cx.run(&["run", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let dir = only_run(&cx);
    let rollouts = jsonl(&dir.join("rollouts.jsonl"));
    assert_eq!(rollouts.len(), 12, "2 steps of 2 groups of 3");
    // A random model writes no C++: format errors, recorded as graded in C++.
    assert!(rollouts.iter().all(|r| r["language"] == "cpp" && r["status"] != "infra_error"), "{rollouts:?}");
    let prompt = rollouts[0]["prompt"][0]["content"].as_str().unwrap();
    assert!(prompt.contains("complete C++ program") && prompt.contains("```cpp"), "{prompt}");
    let metrics = jsonl(&dir.join("metrics.jsonl"));
    assert!(metrics.iter().any(|m| m["step"] == 1), "{metrics:?}");
}

/// Every reference solution of the shipped C++ data passes its own tests in the sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_cpp_data_is_solvable() {
    if !crate::sandbox_cpp::toolchain(Language::Cpp) {
        return;
    }
    use rlx::sandbox::Grader;
    let sb = rlx::sandbox::local::LocalSandbox::start(rlx::sandbox::local::LocalConfig { workers: 2, ..Default::default() }).await.unwrap();
    let o = rlx::sandbox::GradeOptions { limits: rlx::sandbox::Limits { compile_timeout: std::time::Duration::from_secs(60), ..Default::default() }, fail_fast: false };
    for file in ["easy_stdin_train.jsonl", "easy_stdin_eval.jsonl"] {
        let path = repo().join("experiments/data").join(file);
        let rows: Vec<Value> = std::fs::read_to_string(&path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let problems = rlx::data::load_file(&path, None).unwrap();
        assert_eq!(rows.len(), 20, "{file}");
        for (row, p) in rows.iter().zip(problems) {
            let p = p.in_language(Language::Cpp);
            let v = sb.grade(&p, row["solution"].as_str().unwrap(), &o).await;
            assert!(v.passed, "{}: {v:?}", p.id);
        }
    }
}
