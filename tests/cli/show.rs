//! `rlx show` on real run directories: a dry run whose completions come from an
//! OpenAI-compatible server written here (right, wrong and raising answers, so every verdict and
//! test outcome occurs, with two named eval sources), and a run of the tiny model on the embedded
//! backend. Each filter, the baseline evaluation, plain output when piped, colour on a terminal,
//! and bad steps and problems.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::common::{TestContext, only_run, repo};
use crate::openai::{Server, completion, models, serve, tokenizer};

/// Training problems: `f` is answered right, `g` wrong (a failed assert), `h` with code that
/// raises, `k` without a code block.
const TRAIN: &str = r#"{"task_id": 1, "text": "Write f. Return 1.", "code": "", "test_list": ["assert f() == 1", "assert f() + 1 == 2"]}
{"task_id": 2, "text": "Write g. Return 2.", "code": "", "test_list": ["assert g() == 2"]}
{"task_id": 3, "text": "Write h. Return 3.", "code": "", "test_list": ["assert h() == 3"]}
{"task_id": 4, "text": "Write k. Return 4.", "code": "", "test_list": ["assert k() == 4"]}
"#;
/// Two eval sources: `easy` (f, g: pass@1 50%) and `hard` (h: 0%).
const EASY: &str = r#"{"task_id": 1, "text": "Write f. Return 1.", "code": "", "test_list": ["assert f() == 1"]}
{"task_id": 2, "text": "Write g. Return 2.", "code": "", "test_list": ["assert g() == 2"]}
"#;
const HARD: &str = r#"{"task_id": 3, "text": "Write h. Return 3.", "code": "", "test_list": ["assert h() == 3"]}
"#;

/// A server that answers each problem the same way every time (see [`TRAIN`]), except that
/// below temperature 1 it gets `f` wrong too (so a run evaluated colder regresses on it).
pub(crate) async fn scripted_server() -> Server {
    let tok = tokenizer();
    serve(Arc::new(move |path: &str, body: &Value| {
        if path == "/v1/models" {
            return models("llamacpp");
        }
        let ids: Vec<u32> = body["prompt"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let prompt = tok.decode(&ids, false).unwrap();
        let cold = body["temperature"].as_f64().is_some_and(|t| t < 1.0);
        let text = if prompt.contains("Write f.") && cold {
            "```python\ndef f():\n    return 0\n```"
        } else if prompt.contains("Write f.") {
            "```python\ndef f():\n    return 1\n```"
        } else if prompt.contains("Write g.") {
            "```python\ndef g():\n    return 3\n```"
        } else if prompt.contains("Write h.") {
            "```python\ndef h():\n    raise ValueError('boom')\n```"
        } else {
            "I would rather not."
        };
        completion(&tok, text, ids.len(), "stop")
    }))
    .await
}

/// Writes the problems, the prompt template and (unless `model` names one elsewhere) the tiny
/// model's tokenizer into `cx`, and a dry-run spec `served.yaml` against `url`: 2 steps of 4
/// groups of 2, evaluated at the start and the end (2 samples per problem on two named
/// sources), with a diagnostic that fires at once (every group degenerate). Every file is the
/// same in every `cx`, as in two clones of one repository.
pub(crate) fn served_spec(cx: &TestContext, url: &str, model: Option<&Path>) {
    let tiny = match model {
        Some(m) => m.to_path_buf(),
        None => {
            crate::engine::tiny_model(&cx.path().join("tiny"));
            cx.path().join("tiny")
        }
    };
    cx.write("prompts/user.j2", &std::fs::read_to_string(repo().join("prompts/mbpp_user.j2")).unwrap());
    cx.write("problems.jsonl", TRAIN);
    cx.write("data/easy.jsonl", EASY);
    cx.write("data/hard.jsonl", HARD);
    cx.write(
        "served.yaml",
        &format!(
            "name: served
model: {{base: {tiny}, finetune: full}}
backend: {{kind: openai, base_url: \"{url}\", served_model: m, max_retries: 1}}
data:
  train: [{{path: problems.jsonl, format: mbpp}}]
  eval: [{{path: data/easy.jsonl, format: mbpp, name: easy}}, {{path: data/hard.jsonl, format: mbpp, name: hard}}]
prompt: {{user: prompts/user.j2}}
sampling: {{max_tokens: 64, temperature: 1.0}}
grpo: {{prompts_per_step: 4, group_size: 2}}
sandbox: {{kind: local, strict: false}}
schedule: {{max_steps: 2, eval_every: 2}}
eval: {{k: [1, 2], samples: 2, temperature: 1.0}}
diagnostics: {{groups_degenerate: {{steps: 1}}}}
",
            tiny = tiny.display(),
        ),
    );
}

/// A dry run against [`scripted_server`] with `overrides`; its run directory.
pub(crate) fn served_run(cx: &TestContext, server: &Server, overrides: &[&str]) -> PathBuf {
    if !cx.path().join("served.yaml").exists() {
        served_spec(cx, &server.url(), None);
    }
    let list = || -> std::collections::BTreeSet<PathBuf> { std::fs::read_dir(cx.path().join("runs")).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default() };
    let before = list();
    let mut args = vec!["run", "served.yaml", "--dry-run"];
    args.extend(overrides);
    let r = cx.run(&args);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let new: Vec<PathBuf> = list().difference(&before).cloned().collect();
    assert_eq!(new.len(), 1, "one new run directory: {new:?}");
    new[0].clone()
}

/// The headers (`── step …`) of an output.
fn headers(out: &str) -> Vec<&str> {
    out.lines().filter(|l| l.starts_with("── ")).collect()
}

#[test]
#[allow(clippy::print_stderr)]
fn every_filter_on_a_served_dry_run() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(scripted_server());
    let cx = TestContext::new();
    let dir = served_run(&cx, &server, &[]);
    let run = dir.strip_prefix(cx.path()).unwrap().display().to_string();

    // No flags: the last step (1), all 8 completions, each with its prompt, text, code and tests.
    let r = cx.run(&["show", &run]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    eprintln!("{}", r.stdout);
    let h = headers(&r.stdout);
    assert_eq!(h.len(), 8, "{}", r.stdout);
    assert!(h.iter().all(|l| l.starts_with("── step 1 · problem `")), "{h:?}");
    // Every completion shows the prompt, the second sample of a group too (it is looked up from
    // the first, which is the only one that carries it on disk).
    let on_disk = crate::common::jsonl(&dir.join("rollouts.jsonl"));
    assert!(on_disk.iter().all(|l| l.get("prompt").is_some() == (l["sample"] == 0)), "only a group's first completion carries the prompt");
    assert_eq!(r.stdout.matches("  │ [user]").count(), 8, "{}", r.stdout);
    let ones = h.iter().filter(|l| l.contains("problem `1`")).count();
    assert_eq!(r.stdout.matches("Write f. Return 1.").count(), ones, "{}", r.stdout);
    let f = block(&r.stdout, "problem `1` · group");
    assert!(f.contains("verdict  passed, 2/2 tests passed") && f.contains("  │ def f():") && f.contains("  │ [user]"), "{f}");
    assert!(f.contains("reward   ") && f.contains("(advantage 0.000; group skipped: every reward equal)"), "{f}");
    let tests: Vec<&str> = f.lines().skip_while(|l| *l != "tests").skip(1).filter(|l| !l.is_empty()).collect();
    assert_eq!(tests.len(), 2, "{f}");
    assert!(tests.iter().all(|l| l.split_whitespace().nth(1) == Some("passed")), "{f}");
    let g = block(&r.stdout, "problem `2` · group");
    assert!(g.contains("verdict  failed, 0/1 tests passed") && g.contains("wrong_answer"), "{g}");
    let h3 = block(&r.stdout, "problem `3` · group");
    assert!(h3.contains("runtime_error") && h3.contains("ValueError: boom"), "the traceback's last lines: {h3}");
    let k = block(&r.stdout, "problem `4` · group");
    assert!(k.contains("verdict  format error (no code block)\n") && k.contains("(no code block found)") && k.contains("I would rather not."), "{k}");
    assert!(!r.stdout.contains('\x1b'), "piped output is plain");

    // --passed / --failed, --step, --problem, --limit.
    let r = cx.run(&["show", &run, "--passed"]);
    assert_eq!(headers(&r.stdout).len(), 2, "{}", r.stdout);
    assert!(headers(&r.stdout).iter().all(|l| l.contains("problem `1`")));
    let r = cx.run(&["show", &run, "--failed", "--step", "0"]);
    let h = headers(&r.stdout);
    assert_eq!(h.len(), 6, "{}", r.stdout);
    assert!(h.iter().all(|l| l.starts_with("── step 0 ") && !l.contains("problem `1`")), "{h:?}");
    let r = cx.run(&["show", &run, "--problem", "3"]);
    let h = headers(&r.stdout);
    assert_eq!(h.len(), 4, "both steps, two samples each: {h:?}");
    assert!(h[0].starts_with("── step 0 ") && h[3].starts_with("── step 1 "), "{h:?}");
    let r = cx.run(&["show", &run, "--limit", "3"]);
    assert_eq!(headers(&r.stdout).len(), 3);
    assert!(r.stderr.contains("showed 3 of 8 completions at step 1 in rollouts.jsonl; `--limit 0` shows all"), "{}", r.stderr);
    let r = cx.run(&["show", &run, "--problem", "3", "--passed"]);
    assert_eq!((r.code, r.stdout.as_str()), (0, ""));
    assert!(r.stderr.contains("no passed completions among the 4 at 2 steps in rollouts.jsonl"), "{}", r.stderr);

    // Evaluations: the baseline by `base` or `-1`, the source named in the header.
    let r = cx.run(&["show", &run, "--eval", "--step", "base"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let h = headers(&r.stdout);
    assert_eq!(h.len(), 9, "3 problems × 2 samples (`log.rollouts: all`), and 3 greedy (`eval.greedy`, on at T 1): {}", r.stdout);
    assert_eq!(h.iter().filter(|l| l.ends_with("· greedy sample 0")).count(), 3, "{h:?}");
    assert!(h.iter().all(|l| l.starts_with("── step -1 (baseline) · problem `")), "{h:?}");
    assert!(h.iter().any(|l| l.contains("problem `3` (hard)")) && h.iter().any(|l| l.contains("problem `1` (easy)")), "{h:?}");
    let r2 = cx.run(&["show", &run, "--eval", "--step=-1"]);
    assert_eq!(r.stdout, r2.stdout);
    let r = cx.run(&["show", &run, "--eval", "--problem", "2"]);
    let h = headers(&r.stdout);
    assert!(h.len() >= 2 && h[0].starts_with("── step -1 (baseline)") && h.last().unwrap().starts_with("── step 1 "), "{h:?}");
}

/// The block of `out` whose header contains `needle`, up to the next header.
fn block<'a>(out: &'a str, needle: &str) -> &'a str {
    let start = out.lines().position(|l| l.starts_with("── ") && l.contains(needle)).unwrap_or_else(|| panic!("no `{needle}` in\n{out}"));
    let lines: Vec<&str> = out.lines().collect();
    let end = lines[start + 1..].iter().position(|l| l.starts_with("── ")).map_or(lines.len(), |e| start + 1 + e);
    let (a, b) = (byte_of(out, start), byte_of(out, end));
    &out[a..b]
}

fn byte_of(out: &str, line: usize) -> usize {
    out.split_inclusive('\n').take(line).map(str::len).sum()
}

#[test]
fn bad_steps_problems_and_paths_exit_2_naming_what_there_is() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(scripted_server());
    let cx = TestContext::new();
    let dir = served_run(&cx, &server, &[]);
    let run = dir.strip_prefix(cx.path()).unwrap().display().to_string();
    let r = cx.run(&["show", &run, "--step", "7"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("error: no completions at step 7 in rollouts.jsonl (steps with completions: 0, 1)"), "{}", r.stderr);
    let r = cx.run(&["show", &run, "--step", "base"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("help: step −1 is the baseline evaluation: add `--eval`"), "{}", r.stderr);
    let r = cx.run(&["show", &run, "--problem", "33"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("error: no completions of problem `33` at any step in rollouts.jsonl (4 problem(s) there: `1`, `2`, `3`, `4`)"), "{}", r.stderr);
    assert!(r.stderr.contains("help: did you mean `3`?"), "{}", r.stderr);
    let r = cx.run(&["show", &run, "--eval", "--step", "0"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("no completions at step 0 in eval_rollouts.jsonl (steps with completions: -1, 1)"), "{}", r.stderr);
    let r = cx.run(&["show", &run, "--step", "first"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("`first` is not a step"), "{}", r.stderr);
    let r = cx.run(&["show", "nowhere"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("`nowhere` is not a run directory (no status.json)"), "{}", r.stderr);
    let r = cx.run(&["show", &run, "--passed", "--failed"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
}

/// Piped without `NO_COLOR`: still plain. On a terminal (`script` gives the command one):
/// coloured, unless `NO_COLOR` is set.
#[test]
#[allow(clippy::print_stderr)]
fn colour_on_a_terminal_only() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(scripted_server());
    let cx = TestContext::new();
    let dir = served_run(&cx, &server, &[]);
    let run = dir.strip_prefix(cx.path()).unwrap().display().to_string();
    let out = cx.rlx().env_remove("NO_COLOR").args(["show", &run, "--limit", "2"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("── step 1") && !stdout.contains('\x1b'), "{stdout}");
    if std::process::Command::new("script").arg("--version").output().is_err() {
        eprintln!("SKIPPED the terminal half of colour_on_a_terminal_only: no `script` (util-linux) to give rlx a terminal");
        return;
    }
    let bin = env!("CARGO_BIN_EXE_rlx");
    let on_tty = |no_color: bool| {
        let mut c = std::process::Command::new("script");
        c.current_dir(cx.path()).env_remove("NO_COLOR").args(["-qec", &format!("{bin} show {run} --passed --limit 1"), "/dev/null"]);
        if no_color {
            c.env("NO_COLOR", "1");
        }
        String::from_utf8_lossy(&c.output().unwrap().stdout).into_owned()
    };
    let coloured = on_tty(false);
    assert!(coloured.contains("\x1b[1;32mpassed\x1b[0m"), "a passing verdict in green on a terminal: {coloured:?}");
    let plain = on_tty(true);
    assert!(plain.contains("verdict") && !plain.contains("\x1b["), "NO_COLOR: {plain:?}");
}

/// The tiny random model on the embedded backend: it writes no code, so every completion is a
/// format error; what the run recorded is shown anyway.
#[test]
fn a_run_of_the_tiny_model() {
    let cx = TestContext::new();
    crate::engine::tiny_model(&cx.path().join("tiny"));
    cx.write("spec.yaml", &crate::engine::spec_with(2, 2, ""));
    let r = cx.run(&["run", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let run = only_run(&cx).strip_prefix(cx.path()).unwrap().display().to_string();
    let r = cx.run(&["show", &run]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let h = headers(&r.stdout);
    assert_eq!(h.len(), 6, "2 groups of 3 at the last step: {}", r.stdout);
    assert!(h.iter().all(|l| l.starts_with("── step 1 · problem `")), "{h:?}");
    assert!(r.stdout.contains("[user]") && r.stdout.contains("completion\n  │ "), "{}", r.stdout);
    let r = cx.run(&["show", &run, "--passed"]);
    assert_eq!((r.code, r.stdout.as_str()), (0, ""));
    assert!(r.stderr.contains("no passed completions among the 6 at step 1 in rollouts.jsonl"), "{}", r.stderr);
    let r = cx.run(&["show", &run, "--failed", "--step", "0", "--limit", "0"]);
    assert_eq!(headers(&r.stdout).len(), 6, "{}", r.stdout);
    let r = cx.run(&["show", &run, "--eval", "--step", "last"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(headers(&r.stdout).len(), 2, "2 eval problems, the first sample of each: {}", r.stdout);
}

/// A run directory written before prompts, per-test verdicts and eval completions were recorded
/// (`tests/fixtures/run-v1`, read in place): what it has is shown, what it lacks is said.
#[test]
fn an_old_run_shows_what_it_recorded() {
    let cx = TestContext::new();
    let run = repo().join("tests/fixtures/run-v1/run").display().to_string();
    let r = cx.run(&["show", &run, "--limit", "1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.starts_with("── step ") && r.stdout.contains("verdict  format error (no code block)"), "{}", r.stdout);
    assert!(r.stdout.contains("prompt\n  (not recorded"), "{}", r.stdout);
    assert!(r.stdout.contains("tokens   12, cut off at max_tokens"), "{}", r.stdout);
    let r = cx.run(&["show", &run, "--eval"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("holds no completions in eval_rollouts.jsonl: no evaluation has finished yet, or the run predates eval_rollouts.jsonl"), "{}", r.stderr);
}
