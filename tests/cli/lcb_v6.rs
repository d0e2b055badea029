//! The LiveCodeBench v6 preset of `experiments/qwen3-4b.yaml` and `experiments/qwen3.5-4b.yaml`
//! (the benchmark the tinker-cookbook code-RL recipe reports: `test6.jsonl` of
//! `livecodebench/code_generation_lite`, contest dates 2025-02-01 to 2025-05-31), offline: the test
//! writes a Hugging Face cache holding a few rows in LiveCodeBench's own schema (hidden tests
//! pickled, compressed and base64-encoded by CPython, as LCB ships them), some inside the window
//! and some outside, and reads it through the shipped specs' own eval source.

#![allow(clippy::print_stderr)] // skip notices are meant to be seen in test output

use std::path::{Path, PathBuf};

use rlx::data::Tests;
use rlx::data::source;
use rlx::spec::types::Source;
use serde_json::{Value, json};

use crate::common::{Run, TestContext, jsonl, only_run, repo};
use crate::sources::{HubCache, offline, python_private_field};

const REPO: &str = "livecodebench/code_generation_lite";
const PRESET: &str = "hf://livecodebench/code_generation_lite:test6";
const IN_WINDOW: [&str; 3] = ["abc392_b", "3485", "2077_c"];

/// One row of `test6.jsonl` as LiveCodeBench writes it: tests as JSON strings, the hidden ones
/// `base64(zlib(pickle(json)))`; `None` when python3 is missing.
fn lcb_row(id: &str, platform: &str, date: &str, statement: &str, public: Value, private: Value, func: Option<&str>) -> Option<Value> {
    let starter = func.map_or(String::new(), |f| format!("class Solution:\n    def {f}(self, nums: List[int]) -> int:\n        "));
    let metadata = func.map_or(json!({}), |f| json!({"func_name": f}));
    Some(json!({
        "question_title": format!("{id} title"), "question_content": statement, "platform": platform,
        "question_id": id, "contest_id": id.split('_').next().unwrap_or(id), "contest_date": date,
        "starter_code": starter, "difficulty": "easy", "public_test_cases": public.to_string(),
        "private_test_cases": python_private_field(&private, 4)?, "metadata": metadata.to_string(),
    }))
}

fn stdin(cases: &[(&str, &str)]) -> Value {
    cases.iter().map(|(i, o)| json!({"input": i, "output": o, "testtype": "stdin"})).collect()
}

/// The cache, and the path of its `test6.jsonl`; `None` (after saying SKIPPED) without python3.
fn lcb_cache() -> Option<(HubCache, PathBuf)> {
    let sum = "Read N and then N integers; print their sum.";
    let functional = |cases: &[(&str, &str)]| -> Value { cases.iter().map(|(i, o)| json!({"input": i, "output": o, "testtype": "functional"})).collect() };
    let rows = [
        // The day before the window and the day after it: dropped.
        lcb_row("abc390_a", "atcoder", "2025-01-31T23:59:59", sum, stdin(&[("1\n4\n", "4\n")]), stdin(&[("1\n7\n", "7\n")]), None),
        lcb_row("abc392_b", "atcoder", "2025-02-01T00:00:00", sum, stdin(&[("3\n1 2 3\n", "6\n")]), stdin(&[("1\n5\n", "5\n"), ("2\n10 20\n", "30\n")]), None),
        lcb_row("3485", "leetcode", "2025-03-15T14:30:00", "Return the largest element of nums.", functional(&[("[1, 5, 3]", "5")]), functional(&[("[-2, -7]", "-2")]), Some("maxSum")),
        lcb_row("2077_c", "codeforces", "2025-05-31T23:35:00", "Print the input line reversed.", stdin(&[("abc\n", "cba\n")]), stdin(&[("xyz\n", "zyx\n")]), None),
        lcb_row("abc406_a", "atcoder", "2025-06-01T00:00:00", sum, stdin(&[("1\n2\n", "2\n")]), stdin(&[("1\n3\n", "3\n")]), None),
    ];
    let Some(rows) = rows.into_iter().collect::<Option<Vec<Value>>>() else {
        eprintln!("SKIPPED: python3 is needed to pickle LiveCodeBench's hidden tests");
        return None;
    };
    let cache = HubCache::new();
    let test6 = cache.add(REPO, "test6.jsonl", &crate::sources::jsonl(&rows));
    // An older release file in the same repo: `:test6` must not read it.
    let old = lcb_row("abc300_a", "atcoder", "2025-03-01T00:00:00", sum, stdin(&[("1\n1\n", "1\n")]), stdin(&[]), None)?;
    cache.add(REPO, "test5.jsonl", &crate::sources::jsonl(&[old]));
    cache.add(REPO, "code_generation_lite.py", b"# the dataset's loading script; rlx does not run it\n");
    Some((cache, test6))
}

fn spec_eval_source(spec: &str) -> Source {
    let plan = rlx::plan::plan(&repo().join("experiments").join(spec), &[]).unwrap();
    assert_eq!(plan.data.eval.len(), 1, "{spec}: one eval source, the preset");
    plan.data.eval[0].clone()
}

fn ids(ps: &[rlx::data::Problem]) -> Vec<&str> {
    ps.iter().map(|p| p.id.as_str()).collect()
}

#[test]
fn the_shipped_preset_keeps_the_window_with_the_hidden_tests() {
    let Some((cache, _)) = lcb_cache() else { return };
    let preset = spec_eval_source("qwen3.5-4b.yaml");
    assert_eq!(preset, spec_eval_source("qwen3-4b.yaml"), "both specs evaluate on the same preset");
    assert_eq!((preset.path.as_str(), preset.label()), (PRESET, "lcb_v6".to_owned()));
    assert_eq!((preset.date_from.as_deref(), preset.date_to.as_deref()), (Some("2025-02-01"), Some("2025-05-31")));

    let loaded = source::load_source(&preset, &offline(cache.root())).unwrap();
    assert_eq!(ids(&loaded.problems), IN_WINDOW, "both bounds are inclusive; test5.jsonl is not read");
    let files: Vec<String> = loaded.origin.files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(files, ["test6.jsonl"]);
    let Tests::Stdin { cases } = &loaded.problems[0].tests else { panic!("abc392_b is stdin/stdout") };
    let inputs: Vec<&str> = cases.iter().map(|c| c.input.as_str()).collect();
    assert_eq!(inputs, ["3\n1 2 3\n", "1\n5\n", "2\n10 20\n"], "the public test, then the two hidden ones");
    let Tests::Functional { fn_name, cases } = &loaded.problems[1].tests else { panic!("3485 is functional") };
    assert_eq!((fn_name.as_str(), cases.len()), ("maxSum", 2));
    assert_eq!(loaded.problems[2].metadata["contest_date"], "2025-05-31T23:35:00");

    // The stdin/stdout problems of the window (LeetCode's are functional).
    let stdin_only = Source { platform: vec!["atcoder".into(), "codeforces".into()], ..preset.clone() };
    assert_eq!(ids(&source::load_source(&stdin_only, &offline(cache.root())).unwrap().problems), ["abc392_b", "2077_c"]);
    // A window holding nothing is a spec mistake, said as such.
    let later = Source { date_from: Some("2026-01-01".into()), date_to: None, ..preset };
    let err = source::load_source(&later, &offline(cache.root())).unwrap_err();
    let err = std::iter::successors(Some(&err as &dyn std::error::Error), |e| e.source()).map(ToString::to_string).collect::<Vec<_>>().join(": ");
    assert!(err.contains("none of the 5 problems") && err.contains("dates kept 0"), "{err}");
}

#[test]
fn bad_dates_in_the_preset_are_refused_at_validate() {
    let cx = TestContext::new();
    let spec = repo().join("experiments/qwen3.5-4b.yaml").display().to_string();
    for (date, message) in [
        ("data.eval.0.date_to=2025-02-30", "`date_to` must be a date `YYYY-MM-DD`, found `2025-02-30`"),
        ("data.eval.0.date_to=2025-5-31", "`date_to` must be a date `YYYY-MM-DD`, found `2025-5-31`"),
        ("data.eval.0.date_from=2025-06-01", "`date_to` (2025-05-31) is before `date_from` (2025-06-01)"),
    ] {
        let r = cx.run(&["validate", &spec, date]);
        assert_eq!(r.code, 2, "{date}: {}", r.stderr);
        assert!(r.stderr.contains(message), "{date}: expected `{message}` in\n{}", r.stderr);
        assert!(r.stderr.contains("qwen3.5-4b.yaml:") || r.stderr.contains("command line"), "located: {}", r.stderr);
    }
    let r = cx.run(&["validate", &spec, "data.eval.0.platfrom=[atcoder]"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("did you mean `platform`?"), "{}", r.stderr);
}

#[test]
fn answers_are_graded_on_the_hidden_tests_after_the_reasoning() {
    let Some((_cache, test6)) = lcb_cache() else { return };
    let cx = TestContext::new();
    let rows = [
        // A thinking model's completion: a wrong draft in the reasoning, the answer after it.
        json!({"problem_id": "abc392_b", "completion": "Maybe\n```python\nprint(6)\n```\n</think>\n\n```python\ninput()\nprint(sum(map(int, input().split())))\n```"}),
        // Right on the public example only.
        json!({"problem_id": "abc392_b", "completion": "```python\nprint(6)\n```"}),
        json!({"problem_id": "3485", "completion": "```python\nclass Solution:\n    def maxSum(self, nums):\n        return max(nums)\n```"}),
        // The right program, but only inside the reasoning: nothing was submitted.
        json!({"problem_id": "2077_c", "completion": "```python\nprint(input()[::-1])\n```\n</think>\n\nDone."}),
    ];
    let completions = cx.write("c.jsonl", &rows.iter().map(|r| format!("{r}\n")).collect::<String>());
    let out = cx.path().join("out.jsonl");
    let r = cx.run(&["grade", "--no-progress", "--format", "lcb", "--problems", test6.to_str().unwrap(), "--completions", completions.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = jsonl(&out);
    let got: Vec<(&str, u64, u64)> = v.iter().map(|g| (g["status"].as_str().unwrap(), g["tests_passed"].as_u64().unwrap(), g["tests_total"].as_u64().unwrap())).collect();
    assert_eq!(got, [("passed", 3, 3), ("failed", 1, 3), ("passed", 2, 2), ("format_error", 0, 2)], "{v:?}");
}

/// The shipped Qwen3.5 spec with the tiny model of `engine.rs` on the embedded backend and
/// sandbox in place of Tinker and Sandbox Fusion; its eval section, prompt, chat template and data
/// preset stay as shipped.
fn tiny_overrides() -> Vec<&'static str> {
    vec![
        "model.base=./tiny",
        "model.finetune=full",
        "backend={kind: local, threads: 1}",
        "sandbox={kind: local, strict: false}",
        "data.train=[{path: \"hf://livecodebench/code_generation_lite:test6\", format: lcb}]",
        "grpo.prompts_per_step=2",
        "sampling.max_tokens=8",
    ]
}

fn offline_rlx(cx: &TestContext, cache: &Path, args: &[&str]) -> Run {
    Run::from(cx.rlx().env("HF_HUB_CACHE", cache).env("HF_HUB_OFFLINE", "1").args(args).output().unwrap())
}

#[test]
fn rlx_eval_of_the_tiny_model_through_the_preset() {
    let Some((cache, _)) = lcb_cache() else { return };
    let cx = TestContext::new();
    crate::engine::tiny_model(&cx.path().join("tiny"));
    let spec = repo().join("experiments/qwen3.5-4b.yaml").display().to_string();
    let with = |cmd: &[&str]| -> Vec<String> { cmd.iter().copied().chain([spec.as_str()]).chain(tiny_overrides()).map(str::to_owned).collect() };

    // The first eval prompt: LCB's stdin wording, Qwen3.5's thinking generation prompt.
    let args = [with(&["render"]), vec!["--eval".into(), "--n".into(), "1".into()]].concat();
    let r = offline_rlx(&cx, cache.root(), &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("Read N and then N integers") && r.stdout.contains("Read the input from standard input"), "{}", r.stdout);
    assert!(r.stdout.contains("<|im_start|>assistant\n<think>\n"), "{}", r.stdout);

    let args = with(&["eval"]);
    let r = offline_rlx(&cx, cache.root(), &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("pass@8") || r.stderr.contains("pass@8"), "{}\n{}", r.stdout, r.stderr);
    let dir = only_run(&cx);
    let results: Vec<Value> = jsonl(&dir.join("eval_results.jsonl")).into_iter().filter(|e| e.get("protocol").is_none()).collect();
    let mut seen: Vec<&str> = results.iter().map(|e| e["problem_id"].as_str().unwrap()).collect();
    seen.sort_unstable();
    let mut want = IN_WINDOW.to_vec();
    want.sort_unstable();
    assert_eq!(seen, want, "the window's problems, each once: {results:?}");
    assert!(results.iter().all(|e| e["n"] == 8), "8 samples each: {results:?}");
    let metrics = jsonl(&dir.join("metrics.jsonl"));
    assert_eq!(metrics.len(), 1, "{metrics:?}");
    for k in ["eval/pass@1", "eval/pass@8"] {
        assert!(metrics[0][k].is_number(), "{k}: {}", metrics[0]);
    }
    // Every sample was graded (a random model writes no code block); none is an infrastructure error.
    let samples = jsonl(&dir.join("eval_rollouts.jsonl"));
    assert!(samples.len() >= 24, "{}", samples.len());
    assert!(samples.iter().all(|s| ["passed", "failed", "format_error"].contains(&s["status"].as_str().unwrap_or("?"))), "{samples:?}");
    // The prompt opened a <think> block none of them closed: no answer was submitted.
    assert!(samples.iter().all(|s| s["status"] == "format_error" && s["code"].is_null()), "{samples:?}");
    // Graded against the public and the hidden tests.
    for (id, total) in [("abc392_b", 3), ("3485", 2), ("2077_c", 2)] {
        assert!(samples.iter().filter(|s| s["problem_id"] == id).all(|s| s["tests_total"] == total), "{id}: {samples:?}");
    }
}
