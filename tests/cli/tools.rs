//! Tool turns (`rollout.tools`, issue 52) through the engine: a scripted model (the one
//! [`Scripted`] sampler, deciding each turn from the conversation so far) drives trajectories to
//! every stop reason, with `check_solution` and `python` run in the real local sandbox; malformed
//! calls under each parse-error policy; a hanging tool; a slow tool call that holds back no
//! other trajectory's next turn; and the datums the trainer receives
//! against an independent count of the sampled tokens. Also `rlx validate`, `rlx show` and a dry
//! run of the shipped two-turn recipe's setup on the tiny model.

use std::sync::{Arc, Mutex};

use rlx::backend::Policy;
use rlx::engine::{self, PolicySource};
use rlx::seam::StopReason;
use serde_json::{Value, json};

use crate::common::{TestContext, jsonl, repo};
use crate::fakes::{Call, Problems, Recorder, Scripted};

/// A tool call in the Hermes format.
fn call(name: &str, code: &str) -> String {
    format!("<tool_call>\n{}\n</tool_call>", json!({"name": name, "arguments": {"code": code}}))
}

/// Which path a trajectory follows: the sample index on its first turn, then the `PATH=` marker
/// its first turn wrote (later prompts hold the earlier turns).
pub(crate) fn path(c: &Call) -> (usize, usize) {
    let turn = c.prompt.matches("<|im_start|>assistant").count();
    let path = match c.prompt.find("PATH=") {
        Some(i) => c.prompt[i + 5..i + 6].parse().unwrap(),
        None => c.sample,
    };
    (path, turn)
}

/// One trajectory per stop reason but `timeout`, by sample index (group of 6).
fn every_stop(p: &Problems, c: &Call) -> (String, StopReason) {
    let sol = &p.rows[c.problem].solution;
    let (path, turn) = path(c);
    let text = match (path, turn) {
        // completed: check, then answer.
        (0, 1) => format!("PATH=0\n{}", call("check_solution", sol)),
        (0, _) => format!("PATH=0 checked\n```python\n{sol}\n```"),
        // max_turns: always a tool call.
        (1, _) => format!("PATH=1\n{}", call("python", "print(6 * 7)")),
        // max_tokens: cut off.
        (2, _) => return ("PATH=2\n```python\ndef".into(), StopReason::Length),
        // max_tool_calls: three calls, two allowed.
        (3, _) => format!("PATH=3\n{}{}{}", call("python", "print(1)"), call("python", "print(2)"), call("python", "print(3)")),
        // context_overflow: two long outputs.
        (4, _) => format!("PATH=4\n{}{}", call("python", "print('y' * 590)"), call("python", "print('z' * 590)")),
        // parse_error: malformed twice in a row.
        _ => "PATH=5\n<tool_call>{not json}</tool_call>".into(),
    };
    (text, StopReason::Stop)
}

/// The spec: one problem × `group` samples, one step, the tools and `limits` given.
pub(crate) fn spec(cx: &TestContext, group: u32, limits: &str) -> std::path::PathBuf {
    if !cx.path().join("tiny").exists() {
        crate::engine::tiny_model(&cx.path().join("tiny"));
    }
    let text = format!(
        "name: tools
seed: 5
model: {{base: ./tiny}}
backend: {{kind: local}}
data:
  train: [{{path: {train}, format: mbpp, limit: 4}}]
prompt: {{user: {user}}}
sampling: {{max_tokens: 64}}
grpo: {{prompts_per_step: 1, group_size: {group}}}
reward: {{test_timeout_s: 2}}
sandbox: {{kind: local, strict: false}}
log: {{root: {root}, rollouts: all}}
schedule: {{max_steps: 1, eval_every: 0, save_every: 0, eval_at_start: false}}
rollout:
  tools: [check_solution, python]
  limits: {limits}
",
        train = repo().join("experiments/data/easy_python_train.jsonl").display(),
        user = repo().join("prompts/mbpp_user.j2").display(),
        root = cx.path().join("runs").display(),
    );
    cx.write("spec.yaml", &text)
}

/// The longest first prompt of the spec's problems, in tokens (`rlx render`'s statistics).
fn first_prompt_tokens(cx: &TestContext) -> usize {
    let r = cx.run(&["render", "spec.yaml", "--n", "1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("<tool_call>"), "the tools are declared to a template without `tools`: {}", r.stdout);
    let line = r.stdout.lines().find(|l| l.starts_with("prompt tokens")).unwrap();
    line.split_whitespace().skip_while(|w| *w != "max").nth(1).unwrap().parse().unwrap()
}

/// Runs the plan of `spec.yaml` (with `overrides`) on `script`; the run directory and what the
/// trainer received.
async fn run(cx: &TestContext, overrides: &[String], script: impl Fn(&Problems, &Call) -> (String, StopReason) + Send + Sync + 'static) -> (std::path::PathBuf, Arc<Recorder>) {
    let overrides: Vec<_> = overrides.iter().map(|o| rlx::spec::overrides::parse(o).unwrap()).collect();
    let plan = rlx::plan::plan(&cx.path().join("spec.yaml"), &overrides).unwrap();
    let trainer = Arc::new(Recorder::new(Arc::new(Scripted::new(cx, false, script))));
    let outcome = engine::run(&plan, PolicySource::Given(Policy::Trainable(trainer.clone())), &engine::StopSignal::default(), &|_| {}).await;
    assert_eq!(outcome.unwrap(), engine::RunOutcome::Finished { steps: 1 });
    (plan.log.root.join(&plan.run_id), trainer)
}

/// Sampled tokens of a record's turns that train: the turns not masked.
fn trained_tokens(r: &Value) -> u64 {
    r["turns"].as_array().unwrap().iter().filter(|t| t["masked"] != true).map(|t| t["tokens"].as_u64().unwrap()).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_model_ends_trajectories_with_every_stop_reason() {
    let cx = TestContext::new();
    spec(&cx, 6, "{max_turns: 3, max_tool_calls: 2, parse_error: {penalty: 0.1, mask_turn: true, max_consecutive: 2}}");
    // Room for the first prompt and short tool results, not for 1,200 characters of output.
    let limit = first_prompt_tokens(&cx) + 500;
    let (dir, trainer) = run(&cx, &[format!("rollout.limits.max_trajectory_tokens={limit}")], every_stop).await;
    let rollouts = jsonl(&dir.join("rollouts.jsonl"));
    assert_eq!(rollouts.len(), 6);
    let by_path = |k: usize| rollouts.iter().find(|r| r["turns"][0]["text"].as_str().unwrap().starts_with(&format!("PATH={k}"))).unwrap();
    let stops: Vec<&str> = (0..6).map(|k| by_path(k)["stop"].as_str().unwrap()).collect();
    assert_eq!(stops, ["completed", "max_turns", "max_tokens", "max_tool_calls", "context_overflow", "parse_error"]);

    // completed: the public test ran in the sandbox; the answer was graded on all tests.
    let done = by_path(0);
    let check = &done["turns"][0]["calls"][0];
    assert_eq!(check["name"], "check_solution");
    assert_eq!(check["output"], "passed: 1/1 public tests", "{done}");
    assert_eq!((done["status"].as_str(), done["tests_passed"].as_u64(), done["tests_total"].as_u64()), (Some("passed"), Some(3), Some(3)));
    assert!(done["turns"][0]["appended"][0]["content"].as_str().unwrap().starts_with("<tool_response>\npassed"), "{done}");
    assert!(done["reward"].as_f64().unwrap() > 0.0);
    // max_turns: two python runs answered, the third turn's call not run.
    let turns = by_path(1)["turns"].as_array().unwrap().clone();
    assert_eq!(turns.len(), 3);
    assert!(turns[0]["calls"][0]["output"].as_str().unwrap().contains("stdout:\n42"), "{}", turns[0]);
    assert!(turns[2]["calls"][0].get("output").is_none(), "{}", turns[2]);
    // max_tool_calls: none of the three calls ran.
    assert!(by_path(3)["turns"][0]["calls"].as_array().unwrap().iter().all(|c| c.get("output").is_none()));
    // parse_error: both malformed turns say why and are masked.
    let bad = by_path(5);
    assert!(bad["turns"][0]["parse_error"].as_str().unwrap().contains("not JSON"), "{bad}");
    assert!(bad["turns"].as_array().unwrap().iter().all(|t| t["masked"] == true));
    // Rewards: a limit scores zero (`on_limit: zero`), less 0.1 per malformed turn.
    for k in 1..5 {
        assert_eq!(by_path(k)["reward"], 0.0, "{}", by_path(k));
    }
    assert!((bad["reward"].as_f64().unwrap() + 0.2).abs() < 1e-9, "{bad}");

    // Metrics: the histogram and the tool counts, against the records.
    let m = &jsonl(&dir.join("metrics.jsonl"))[0];
    for (reason, share) in [("completed", 1.0), ("max_turns", 1.0), ("max_tokens", 1.0), ("max_tool_calls", 1.0), ("context_overflow", 1.0), ("parse_error", 1.0), ("timeout", 0.0)] {
        assert!((m[format!("train/stop_{reason}")].as_f64().unwrap() - share / 6.0).abs() < 1e-9, "{reason}: {m}");
    }
    let calls: usize = rollouts.iter().flat_map(|r| r["turns"].as_array().unwrap()).map(|t| t["calls"].as_array().map_or(0, Vec::len)).sum();
    assert_eq!(calls, 1 + 3 + 3 + 2);
    assert!((m["train/tool_calls_mean"].as_f64().unwrap() - calls as f64 / 6.0).abs() < 1e-9, "{m}");
    assert!((m["train/turns_mean"].as_f64().unwrap() - 10.0 / 6.0).abs() < 1e-9, "{m}");
    assert!((m["train/parse_error_rate"].as_f64().unwrap() - 0.2).abs() < 1e-9, "{m}");
    assert!((m["train/limit_stop_rate"].as_f64().unwrap() - 5.0 / 6.0).abs() < 1e-9, "{m}");
    assert_eq!(m["train/tool_error_rate"], 0.0);

    // Training on what was sampled: one datum per trajectory with a trained turn (each prompt
    // extends the last token for token), the trajectory's advantage on exactly its sampled,
    // unmasked tokens.
    let inputs = trainer.inputs.lock().unwrap().clone();
    assert_eq!(inputs.len(), 1, "one step");
    assert_eq!(inputs[0].len(), 5, "the all-masked trajectory trains nothing");
    let mut got: Vec<(u64, f32)> = inputs[0].iter().map(|(_, adv)| {
        let nonzero: Vec<f32> = adv.iter().copied().filter(|a| *a != 0.0).collect();
        assert!(nonzero.windows(2).all(|w| w[0] == w[1]), "one advantage per trajectory");
        (nonzero.len() as u64, nonzero[0])
    }).collect();
    let mut want: Vec<(u64, f32)> = rollouts.iter().filter(|r| trained_tokens(r) > 0).map(|r| (trained_tokens(r), r["advantage"].as_f64().unwrap() as f32)).collect();
    got.sort_by(|a, b| a.partial_cmp(b).unwrap());
    want.sort_by(|a, b| a.partial_cmp(b).unwrap());
    assert_eq!(got, want);

    // `rlx show` renders each trajectory as a conversation.
    let r = cx.run(&["show", dir.to_str().unwrap(), "--limit", "0"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("conversation (3 turns, stop: max_turns)"), "{}", r.stdout);
    assert!(r.stdout.contains("[tool check_solution]") && r.stdout.contains("passed: 1/1 public tests"), "{}", r.stdout);
    assert!(r.stdout.contains("[tool python (not run: a limit)]"), "{}", r.stdout);
    assert!(r.stdout.contains("malformed tool call:") && r.stdout.contains("masked in training"), "{}", r.stdout);
}

/// Sample 0 runs a snippet that never ends; sample 1 writes a malformed call.
fn hang_or_malformed(_: &Problems, c: &Call) -> (String, StopReason) {
    let text = if c.sample == 0 { call("python", "import time\ntime.sleep(60)") } else { "<tool_call>{\"name\": \"python\"}</tool_call>".into() };
    (text, StopReason::Stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_tool_is_a_tool_error_and_the_rollout_times_out_and_a_malformed_call_ends_it_unmasked() {
    let cx = TestContext::new();
    // The default parse-error policy (one malformed turn ends the trajectory, its tokens
    // trained) with a penalty; a tool timeout longer than the rollout's.
    spec(&cx, 2, "{max_turns: 4, timeout_s: 0.5, tool_timeout_s: 1, parse_error: {penalty: 0.5}}");
    let (dir, trainer) = run(&cx, &[], hang_or_malformed).await;
    let rollouts = jsonl(&dir.join("rollouts.jsonl"));
    let hung = rollouts.iter().find(|r| r["sample"] == 0).unwrap();
    let bad = rollouts.iter().find(|r| r["sample"] == 1).unwrap();
    assert_eq!(hung["stop"], "timeout", "{hung}");
    let c = &hung["turns"][0]["calls"][0];
    assert_eq!(c["error"], true, "{c}");
    assert!(c["output"].as_str().unwrap().starts_with("status: timed out"), "the model sees the tool error: {c}");
    assert_eq!(bad["stop"], "parse_error", "{bad}");
    assert_eq!(bad["turns"].as_array().unwrap().len(), 1);
    assert!(bad["turns"][0]["parse_error"].as_str().unwrap().contains("no `arguments`"), "{bad}");
    assert!(bad["turns"][0].get("masked").is_none());
    assert_eq!((hung["reward"].as_f64(), bad["reward"].as_f64()), (Some(0.0), Some(-0.5)));
    let m = &jsonl(&dir.join("metrics.jsonl"))[0];
    assert_eq!((m["train/tool_error_rate"].as_f64(), m["train/stop_timeout"].as_f64(), m["train/stop_parse_error"].as_f64()), (Some(1.0), Some(0.5), Some(0.5)));
    // Both trained in full: the malformed turn is not masked under this policy.
    let inputs = trainer.inputs.lock().unwrap().clone();
    let trained: u64 = inputs[0].iter().map(|(_, adv)| adv.iter().filter(|a| **a != 0.0).count() as u64).sum();
    assert_eq!(trained, rollouts.iter().map(trained_tokens).sum::<u64>());
}

#[test]
fn tool_specs_are_validated_with_located_errors() {
    let cx = TestContext::new();
    spec(&cx, 2, "{max_tokens_per_turn: 100, tool_timeout_s: 0}");
    let text = std::fs::read_to_string(cx.path().join("spec.yaml")).unwrap().replace("tools: [check_solution, python]", "tools: [check_solution, check_solution]\n  max_attempts: 2");
    cx.write("spec.yaml", &text);
    let r = cx.run(&["validate", "spec.yaml"]);
    assert_eq!(r.code, 2, "{}\n{}", r.stdout, r.stderr);
    for says in [
        "`rollout.max_attempts` is 2 but `rollout.tools` is set",
        "tool `check_solution` is listed twice",
        "`rollout.limits.max_tokens_per_turn` must be between 1 and `sampling.max_tokens` (64), found 100",
        "`rollout.limits.tool_timeout_s` must be a positive number of seconds, found 0",
    ] {
        assert!(r.stderr.contains(says), "{says}: {}", r.stderr);
    }
    assert!(r.stderr.contains("spec.yaml:"), "located: {}", r.stderr);
    // An unknown tool is refused by the schema.
    cx.write("spec.yaml", &text.replace("tools: [check_solution, check_solution]", "tools: [shell]"));
    let r = cx.run(&["validate", "spec.yaml"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("shell"), "{}", r.stderr);
}

/// The shipped Qwen3.5 recipe's setup (two turns, `check_solution`, Qwen3.5's thinking
/// template) on the tiny model, the embedded sandbox and the local easy problems.
fn recipe_overrides(cx: &TestContext) -> Vec<String> {
    if !cx.path().join("tiny").exists() {
        crate::engine::tiny_model(&cx.path().join("tiny"));
    }
    let train = repo().join("experiments/data/easy_python_train.jsonl");
    [
        format!("model.base={}", cx.path().join("tiny").display()),
        "model.finetune=full".into(),
        "backend={kind: local, threads: 1}".into(),
        "sandbox={kind: local, strict: false}".into(),
        format!("data={{train: [{{path: {}, format: mbpp, limit: 4}}]}}", train.display()),
        "grpo.prompts_per_step=1".into(),
        "grpo.group_size=2".into(),
        "sampling.max_tokens=16".into(),
        "schedule={max_steps: 1, eval_every: 0, save_every: 0, eval_at_start: false}".into(),
        format!("log={{root: {}, rollouts: all}}", cx.path().join("runs").display()),
    ]
    .into()
}

/// Thinks, checks its answer, then answers: the recipe's two turns. Sample 1 checks and
/// answers a wrong program (its first turn says so, and the second reads it back).
fn check_then_answer(p: &Problems, c: &Call) -> (String, StopReason) {
    // (The template drops the reasoning of earlier turns, so the marker is the checked code.)
    let wrong = c.prompt.contains("def nothing") || (c.sample == 1 && !c.prompt.contains("<tool_response>"));
    let code = if wrong { "def nothing():\n    return None".to_owned() } else { p.rows[c.problem].solution.clone() };
    let text = if c.prompt.contains("<tool_response>") {
        format!("Done.\n</think>\n\n```python\n{code}\n```")
    } else {
        format!("Let me check{}.\n</think>\n\n{}", if wrong { " mine" } else { "" }, call("check_solution", &code))
    };
    (text, StopReason::Stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_two_turn_recipe_validates_and_runs_on_the_tiny_model_with_one_datum_per_turn() {
    let cx = TestContext::new();
    let spec = repo().join("experiments/qwen3.5-4b.yaml").display().to_string();
    let overrides = recipe_overrides(&cx);
    let args: Vec<&str> = ["validate", spec.as_str()].into_iter().chain(overrides.iter().map(String::as_str)).collect();
    let r = cx.run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);

    // A dry run through the binary: the tiny random model samples, the environment steps.
    let args: Vec<&str> = ["run", spec.as_str(), "--dry-run"].into_iter().chain(overrides.iter().map(String::as_str)).collect();
    let r = cx.run(&args);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let dir = crate::common::only_run(&cx);
    let rollouts = jsonl(&dir.join("rollouts.jsonl"));
    assert_eq!(rollouts.len(), 2);
    assert!(rollouts.iter().all(|r| r["stop"].is_string() && r["turns"].is_array()), "{rollouts:?}");
    let m = &jsonl(&dir.join("metrics.jsonl"))[0];
    let shares: f64 = ["completed", "max_turns", "max_tokens", "max_tool_calls", "context_overflow", "parse_error", "timeout"].iter().map(|r| m[format!("train/stop_{r}")].as_f64().unwrap()).sum();
    assert!((shares - 1.0).abs() < 1e-9, "one stop reason per trajectory: {m}");
    std::fs::remove_dir_all(cx.path().join("runs")).unwrap();

    // The two turns scripted: check, then answer. Qwen3.5's template drops the first turn's
    // reasoning once a later message follows, so the second prompt does not extend the first
    // turn: each turn is its own datum, trained in the context it was sampled in.
    let path = cx.write("recipe.yaml", &std::fs::read_to_string(&spec).unwrap().replace("../prompts/", &format!("{}/prompts/", repo().display())));
    let parsed: Vec<_> = overrides.iter().map(|o| rlx::spec::overrides::parse(o).unwrap()).collect();
    let plan = rlx::plan::plan(&path, &parsed).unwrap();
    let trainer = Arc::new(Recorder::new(Arc::new(Scripted::new(&cx, false, check_then_answer))));
    let outcome = engine::run(&plan, PolicySource::Given(Policy::Trainable(trainer.clone())), &engine::StopSignal::default(), &|_| {}).await;
    assert_eq!(outcome.unwrap(), engine::RunOutcome::Finished { steps: 1 });
    let dir = plan.log.root.join(&plan.run_id);
    let rollouts = jsonl(&dir.join("rollouts.jsonl"));
    assert_eq!(rollouts.len(), 2);
    for r in &rollouts {
        let passed = r["sample"] == 0;
        assert_eq!((r["stop"].as_str(), r["status"].as_str()), (Some("completed"), Some(if passed { "passed" } else { "failed" })), "{r}");
        let said = r["turns"][0]["calls"][0]["output"].as_str().unwrap();
        assert!(said.starts_with(if passed { "passed: 1/1 public tests" } else { "failed: 0/1 public tests passed" }), "{r}");
        assert!(r["turns"][1]["prompt_last_message"].as_str().unwrap().starts_with("<tool_response>"), "Qwen3.5's builtin template has no tool role: {r}");
    }
    // Independently: one datum per turn, each with its turn's sampled tokens at its
    // trajectory's advantage.
    let inputs = trainer.inputs.lock().unwrap().clone();
    let mut got: Vec<(u64, f32)> = inputs[0].iter().map(|(_, adv)| {
        let nonzero: Vec<f32> = adv.iter().copied().filter(|a| *a != 0.0).collect();
        (nonzero.len() as u64, nonzero[0])
    }).collect();
    let mut want: Vec<(u64, f32)> = rollouts.iter().flat_map(|r| r["turns"].as_array().unwrap().iter().map(|t| (t["tokens"].as_u64().unwrap(), r["advantage"].as_f64().unwrap() as f32))).collect();
    got.sort_by(|a, b| a.partial_cmp(b).unwrap());
    want.sort_by(|a, b| a.partial_cmp(b).unwrap());
    assert_eq!(got, want);
    assert_eq!(got.len(), 4, "two trajectories of two turns, split");
}

/// Problem 0's trajectories run a snippet the fault-injecting proxy answers with HTTP 503; the
/// others check a right answer.
fn infra_on_problem_0(p: &Problems, c: &Call) -> (String, StopReason) {
    let text = if c.problem == 0 { call("python", "# INFRA-FAIL\nprint(1)") } else { call("check_solution", &p.rows[c.problem].solution) };
    (text, StopReason::Stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_failing_under_a_tool_call_drops_the_group_and_never_scores_it() {
    use std::io::BufRead as _;
    let cx = TestContext::new();
    let (mut server, upstream) = crate::common::sandbox_server();
    let mut proxy = std::process::Command::new("python3").args(["-c", crate::health::FLAKY_PROXY, &upstream]).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let mut port = String::new();
    std::io::BufReader::new(proxy.stdout.take().unwrap()).read_line(&mut port).unwrap();
    spec(&cx, 2, "{max_turns: 2}");
    // (memory_mb 1024: through `rlx sandbox serve`, programs under the default 2048 MB limit end
    // as runtime errors on this machine, tools or not; a bug of its own.)
    let overrides = [format!("sandbox={{kind: fusion, url: http://127.0.0.1:{}, memory_mb: 1024}}", port.trim()), "rollout.infra_retries=1".into(), "grpo.prompts_per_step=4".into()];
    let (dir, _) = run(&cx, &overrides, infra_on_problem_0).await;
    let _ = (proxy.kill(), proxy.wait(), server.kill(), server.wait());
    let m = &jsonl(&dir.join("metrics.jsonl"))[0];
    assert_eq!((m["train/groups"].as_f64(), m["train/groups_infra_dropped"].as_f64()), (Some(4.0), Some(1.0)), "{m}");
    let rollouts = jsonl(&dir.join("rollouts.jsonl"));
    assert_eq!(rollouts.len(), 6, "the dropped group is not scored or recorded");
    let outputs: Vec<&Value> = rollouts.iter().map(|r| &r["turns"][0]["calls"][0]["output"]).collect();
    // The other groups' checks ran through the same sandbox.
    assert!(outputs.iter().all(|o| o.as_str().is_some_and(|o| o.starts_with("passed: 1/1"))), "{outputs:?}");
}

/// Sample 0 runs a snippet that sleeps 3 s and prints when it woke; the others' snippets print
/// at once. Each second turn records when it was sampled (`sampled`), then answers.
fn slow_and_fast(sampled: Arc<Mutex<Vec<(usize, f64)>>>) -> impl Fn(&Problems, &Call) -> (String, StopReason) + Send + Sync + 'static {
    move |p, c| {
        let (path, turn) = path(c);
        if turn > 1 {
            sampled.lock().unwrap().push((path, std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()));
            return (format!("PATH={path} done\n```python\n{}\n```", p.rows[c.problem].solution), StopReason::Stop);
        }
        let code = if c.sample == 0 { "import time\ntime.sleep(3)\nprint('woke', repr(time.time()))" } else { "print('fast')" };
        (format!("PATH={}\n{}", c.sample, call("python", code)), StopReason::Stop)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_tool_call_holds_back_no_other_trajectory() {
    let cx = TestContext::new();
    spec(&cx, 3, "{max_turns: 2, tool_timeout_s: 30}");
    let sampled = Arc::new(Mutex::new(vec![]));
    let (dir, _) = run(&cx, &[], slow_and_fast(sampled.clone())).await;
    let rollouts = jsonl(&dir.join("rollouts.jsonl"));
    assert_eq!(rollouts.len(), 3);
    assert!(rollouts.iter().all(|r| r["stop"] == "completed" && r["status"] == "passed"), "{rollouts:?}");
    let slow = rollouts.iter().find(|r| r["turns"][0]["text"].as_str().unwrap().starts_with("PATH=0")).unwrap();
    let output = slow["turns"][0]["calls"][0]["output"].as_str().unwrap();
    let woke: f64 = output.split("woke ").nth(1).and_then(|w| w.split_whitespace().next()).and_then(|w| w.parse().ok()).unwrap_or_else(|| panic!("{output}"));
    // The fast trajectories took their second turn while the slow call still slept (the clock
    // is the machine's, in this process and in the sandbox alike); the slow one after it woke.
    let sampled = sampled.lock().unwrap().clone();
    let at = |k: usize| sampled.iter().find(|(p, _)| *p == k).unwrap_or_else(|| panic!("{k}: {sampled:?}")).1;
    for k in [1, 2] {
        assert!(at(k) < woke, "trajectory {k}'s second turn waited for another's tool call (sampled at {}, the call ended at {woke})", at(k));
    }
    assert!(at(0) > woke);
    // The sampler sat idle while the slow call ran: the metric says so.
    let m = &jsonl(&dir.join("metrics.jsonl"))[0];
    assert!(m["time/tool_wait_s"].as_f64().unwrap() > 0.0, "{m}");
}

/// The OpenAI-compatible chat path with tools: a scripted server on 127.0.0.1 answers a first
/// turn with `tool_calls` (`check_solution`) and a turn after a tool result with the answer.
/// The run reads the call as if the model had written it, runs it in the sandbox, and sends the
/// next turn with the schemas, the call as `tool_calls` and the result as a `tool` message.
#[test]
fn a_dry_run_on_an_openai_chat_server_sends_tools_and_reads_tool_calls() {
    use crate::openai::{Reply, models, serve};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(serve(Arc::new(|path: &str, body: &Value| {
        if path == "/v1/models" {
            return models("vllm");
        }
        let message = if body["messages"].as_array().unwrap().last().unwrap()["role"] == "tool" {
            json!({"role": "assistant", "content": "```python\nprint(2)\n```"})
        } else {
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "srv_1", "type": "function", "function": {"name": "check_solution", "arguments": "{\"code\": \"print(1)\"}"}}]})
        };
        Reply::Json(200, json!({"choices": [{"index": 0, "message": message, "finish_reason": if message["content"].is_null() { "tool_calls" } else { "stop" }}]}))
    })));
    let cx = TestContext::new();
    let spec = std::fs::read_to_string(spec(&cx, 2, "{max_turns: 2}")).unwrap();
    let eval = repo().join("experiments/data/easy_python_eval.jsonl");
    let spec = spec
        .replace("backend: {kind: local}", &format!("backend: {{kind: openai, base_url: \"{}\", served_model: m, api: chat}}", server.url()))
        .replace("limit: 4}]", &format!("limit: 4}}]\n  eval: [{{path: {}, format: mbpp, limit: 2}}]", eval.display()));
    cx.write("spec.yaml", &spec);
    let runs = || std::fs::read_dir(cx.path().join("runs")).map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>()).unwrap_or_default();

    // Evaluation runs the same environment: every turn recorded, and pass@k says what it grades.
    let r = cx.run(&["eval", "spec.yaml", "--n", "1", "--temperature", "1.0"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("pass@k grades the final answer after tool use"), "{}", r.stdout);
    let eval_dir = runs().pop().unwrap();
    let samples = jsonl(&eval_dir.join("eval_rollouts.jsonl"));
    assert_eq!(samples.len(), 4, "two problems, a sampled and a greedy trajectory each");
    for s in &samples {
        let turns = s["turns"].as_array().unwrap();
        assert_eq!((turns.len(), s["stop"].as_str()), (2, Some("completed")), "{s}");
        assert_eq!(turns[0]["calls"][0]["name"], "check_solution", "{s}");
        assert_eq!(s["text"], "```python\nprint(2)\n```", "the record's completion is the final answer: {s}");
    }
    let eval_bodies = server.bodies.lock().unwrap().iter().filter(|b| b["_path"] == "/v1/chat/completions").count();
    assert_eq!(eval_bodies, 8);
    std::fs::remove_dir_all(cx.path().join("runs")).unwrap();
    server.bodies.lock().unwrap().clear();

    let r = cx.run(&["run", "spec.yaml", "--dry-run", "schedule.eval_at_start=false"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let dir = runs().pop().unwrap();
    let rollouts = jsonl(&dir.join("rollouts.jsonl"));
    assert_eq!(rollouts.len(), 2);
    for r in &rollouts {
        let turns = r["turns"].as_array().unwrap();
        assert_eq!((turns.len(), r["stop"].as_str()), (2, Some("completed")), "{r}");
        assert_eq!((turns[0]["calls"][0]["name"].as_str(), turns[0]["calls"][0]["arguments"]["code"].as_str()), (Some("check_solution"), Some("print(1)")), "{r}");
        assert!(turns[0]["calls"][0]["output"].as_str().unwrap().contains("public test"), "the call ran in the sandbox: {r}");
    }
    let bodies: Vec<Value> = server.bodies.lock().unwrap().iter().filter(|b| b["_path"] == "/v1/chat/completions").cloned().collect();
    assert_eq!(bodies.len(), 8, "two training trajectories and the final evaluation's four, of two turns each");
    assert!(bodies.iter().all(|b| b["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect::<Vec<_>>() == ["check_solution", "python"]), "{bodies:?}");
    let second: Vec<&Value> = bodies.iter().filter(|b| b["messages"].as_array().unwrap().len() > 2).collect();
    assert_eq!(second.len(), 4);
    for b in second {
        let m = b["messages"].as_array().unwrap();
        let (call, result) = (&m[m.len() - 2], &m[m.len() - 1]);
        assert_eq!(call["role"], "assistant");
        let tc = &call["tool_calls"][0];
        assert_eq!((tc["type"].as_str(), tc["function"]["name"].as_str()), (Some("function"), Some("check_solution")), "{b}");
        let args: Value = serde_json::from_str(tc["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args, json!({"code": "print(1)"}), "arguments as a JSON string");
        assert_eq!((result["role"].as_str(), &result["tool_call_id"]), (Some("tool"), &tc["id"]), "{b}");
        assert!(result["content"].as_str().unwrap().contains("public test") && !result["content"].as_str().unwrap().contains("<tool_response>"), "{b}");
    }
}

/// The environment variable that makes [`kill_9_child`] run, naming its test directory.
const KILL_DIR: &str = "RLX_TOOLS_KILL_DIR";

/// One python call per trajectory, then the right answer. Once `armed` exists, the first call
/// sampled sleeps 10 s in the sandbox, and the sampler writes `in_tool` as it hands it over: the
/// parent kills the process inside that call. (The sampler, not the tool, writes the marker:
/// the sandbox may not let a snippet write outside its own directory.)
fn sleepy(dir: std::path::PathBuf) -> impl Fn(&Problems, &Call) -> (String, StopReason) + Send + Sync + 'static {
    move |p, c| {
        if c.prompt.contains("<tool_response>") {
            return (format!("```python\n{}\n```", p.rows[c.problem].solution), StopReason::Stop);
        }
        let (armed, marker) = (dir.join("armed"), dir.join("in_tool"));
        let code = if armed.exists() && !marker.exists() {
            std::fs::write(&marker, "").unwrap();
            "import time\ntime.sleep(10)\nprint('slept')"
        } else {
            "print(1)"
        };
        (call("python", code), StopReason::Stop)
    }
}

/// The run that [`kill_9_inside_a_tool_call_then_rerun_runs_each_step_once`] starts (twice) as
/// a process of its own: the scripted model with a trainer whose states outlive the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of kill_9_inside_a_tool_call_then_rerun_runs_each_step_once"]
async fn kill_9_child() {
    let Some(dir) = std::env::var_os(KILL_DIR).map(std::path::PathBuf::from) else { return };
    let plan = rlx::plan::plan(&dir.join("spec.yaml"), &[]).unwrap();
    let trainer = Arc::new(Recorder::new(Arc::new(Scripted::new_in(&dir, false, sleepy(dir.clone())))).persisting(dir.join("states.json")));
    let outcome = engine::run(&plan, PolicySource::Given(Policy::Trainable(trainer)), &engine::StopSignal::default(), &|_| {}).await;
    assert!(matches!(outcome.unwrap(), engine::RunOutcome::Finished { .. }));
}

#[test]
fn kill_9_inside_a_tool_call_then_rerun_runs_each_step_once() {
    use std::time::{Duration, Instant};
    let cx = TestContext::new();
    let text = std::fs::read_to_string(spec(&cx, 2, "{max_turns: 2, tool_timeout_s: 30}")).unwrap();
    cx.write("spec.yaml", &text.replace("max_steps: 1, eval_every: 0, save_every: 0", "max_steps: 3, eval_every: 0, save_every: 1"));
    let child = || {
        let mut c = std::process::Command::new(std::env::current_exe().unwrap());
        c.args(["--exact", "tools::kill_9_child", "--ignored", "--test-threads", "1"]).env(KILL_DIR, cx.path()).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
        c
    };
    let run_dir = || std::fs::read_dir(cx.path().join("runs")).ok().and_then(|mut d| d.next()).and_then(|e| e.ok()).map(|e| e.path());
    let metrics = || run_dir().map(|d| jsonl(&d.join("metrics.jsonl")).len()).unwrap_or(0);
    let mut first = child().spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    // After the first step, the next python call sleeps; the kill lands inside it.
    while metrics() < 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    cx.write("armed", "");
    while !cx.path().join("in_tool").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    // The call has 10 s to run; the sandbox starts it well within a second.
    std::thread::sleep(Duration::from_secs(1));
    first.kill().unwrap();
    first.wait().unwrap();
    let dir = run_dir().unwrap();
    let before = jsonl(&dir.join("rollouts.jsonl"));
    assert!(before.len() < 6, "killed before the last step's rollouts were written");
    let status: Value = serde_json::from_slice(&std::fs::read(dir.join("status.json")).unwrap()).unwrap();
    assert_eq!(status["state"], "running", "SIGKILL leaves no chance to say otherwise");

    assert!(child().status().unwrap().success(), "the rerun resumes and finishes");
    let steps: Vec<i64> = jsonl(&dir.join("metrics.jsonl")).iter().map(|m| m["step"].as_i64().unwrap()).collect();
    assert_eq!(steps, [0, 1, 2], "every step exactly once");
    let rollouts = jsonl(&dir.join("rollouts.jsonl"));
    let mut per_step = std::collections::BTreeMap::<i64, usize>::new();
    for r in &rollouts {
        *per_step.entry(r["step"].as_i64().unwrap()).or_default() += 1;
        assert_eq!(r["stop"], "completed", "{r}");
        assert!(!r["turns"][0]["calls"][0]["output"].as_str().unwrap().contains("slept"), "the killed call's trajectory was sampled again: {r}");
    }
    assert_eq!(per_step.into_iter().collect::<Vec<_>>(), [(0, 2), (1, 2), (2, 2)]);
    assert!(jsonl(&dir.join("events.jsonl")).iter().any(|e| e["event"] == "resume"));
    let status: Value = serde_json::from_slice(&std::fs::read(dir.join("status.json")).unwrap()).unwrap();
    assert_eq!((status["state"].as_str(), status["steps_done"].as_i64()), (Some("finished"), Some(3)));
}
