//! Staged runs (`stages:`) end to end on the tiny random model: supervised fine-tuning on
//! reference solutions lowers the negative log-likelihood, then GRPO continues the same step
//! counter from the supervised stage's checkpoint; a run killed inside either stage resumes with
//! every step once and the stage boundary crossed once; bad stages are located errors at
//! validate.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{TestContext, jsonl, only_run, repo};
use crate::engine::{spec_with, tiny_model};

/// The first `n` rows of a file of the repository's experiments data, written to the test's
/// directory as `name`.
fn rows(cx: &TestContext, from: &str, n: usize, name: &str) {
    let text = std::fs::read_to_string(repo().join("experiments/data").join(from)).unwrap();
    let lines: Vec<&str> = text.lines().take(n).collect();
    cx.write(name, &(lines.join("\n") + "\n"));
}

/// The tiny test spec with an SFT stage of `sft_steps` steps (batch 2 of 8 rows: 4 a epoch) and
/// a GRPO stage of `grpo_steps`.
fn staged(cx: &TestContext, sft_steps: u32, grpo_steps: u32, save_every: u32) -> String {
    rows(cx, "easy_python_train.jsonl", 8, "sft_train.jsonl");
    rows(cx, "easy_python_eval.jsonl", 4, "sft_eval.jsonl");
    let stages = format!(
        "stages:
  - {{kind: sft, name: warmup, train: sft_train.jsonl, eval: sft_eval.jsonl, epochs: 10, batch_size: 2, max_steps: {sft_steps}, learning_rate: 3e-3, warmup_steps: 1, lr_decay: constant, eval_every: 4}}
  - {{kind: grpo}}
"
    );
    spec_with(grpo_steps, save_every, &stages)
}

fn steps_of(dir: &std::path::Path) -> Vec<i64> {
    jsonl(&dir.join("metrics.jsonl")).iter().map(|m| m["step"].as_i64().unwrap()).collect()
}

#[test]
fn sft_then_grpo_share_one_counter_and_sft_lowers_the_nll() {
    let cx = TestContext::new();
    tiny_model(&cx.path().join("tiny"));
    cx.write("spec.yaml", &staged(&cx, 8, 2, 100));
    let r = cx.run(&["run", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("step 0  sft  nll"), "{}", r.stderr);
    let dir = only_run(&cx);
    assert_eq!(steps_of(&dir), (-1..10).collect::<Vec<_>>(), "baseline, 8 supervised steps, 2 GRPO steps, each once");
    let m = jsonl(&dir.join("metrics.jsonl"));
    let nll = |s: usize| m[s + 1]["train/nll"].as_f64().unwrap();
    for s in 0..8 {
        assert_eq!(m[s + 1]["stage"], 0.0, "step {s}");
        assert_eq!(m[s + 1]["train/datums"], 2.0);
        assert!(m[s + 1].get("train/reward_mean").is_none());
    }
    assert_eq!(m[1]["optim/lr"], 3e-3, "one warmup step reaches the peak at once");
    // Epoch 1 (steps 0–3) against epoch 2 (steps 4–7): the same rows, in another order.
    let first: f64 = (0..4).map(nll).sum::<f64>() / 4.0;
    let second: f64 = (4..8).map(nll).sum::<f64>() / 4.0;
    assert!(second < first * 0.9, "train nll {first:.3} → {second:.3}");
    // Held-out rows scored at the stage's evaluations (every 4 steps, and its end).
    let held = |s: usize| m[s + 1]["eval/nll"].as_f64().unwrap();
    assert!(held(7) < held(3), "eval nll {} → {}", held(3), held(7));
    let before = m[0]["eval/nll"].as_f64().expect("the baseline scores the held-out rows");
    assert!(held(3) < before, "eval nll {before} before the stage → {} after step 3", held(3));
    assert!(m[3].get("eval/nll").is_none());
    assert!(m[4]["eval/pass@1"].is_number(), "pass@k on the spec's eval problems between stages too");
    for s in 8..10 {
        assert!(m[s + 1]["train/reward_mean"].is_number(), "GRPO step {s}: {}", m[s + 1]);
        assert!(m[s + 1].get("train/nll").is_none());
    }
    let rollout_steps: Vec<i64> = jsonl(&dir.join("rollouts.jsonl")).iter().map(|r| r["step"].as_i64().unwrap()).collect();
    assert!(rollout_steps.iter().all(|&s| s == 8 || s == 9) && rollout_steps.len() == 12, "{rollout_steps:?}");
    let cks: Vec<(i64, String)> = jsonl(&dir.join("checkpoints.jsonl")).iter().map(|c| (c["step"].as_i64().unwrap(), c["kind"].as_str().unwrap().to_owned())).collect();
    assert_eq!(cks, vec![(7, "stage".into()), (9, "final".into())]);
    let status: Value = serde_json::from_slice(&std::fs::read(dir.join("status.json")).unwrap()).unwrap();
    assert_eq!((status["state"].as_str(), status["steps_done"].as_u64()), (Some("finished"), Some(10)));
    // The stage's rows are fingerprinted beside `data:`'s, under their stage.
    let prov: Value = serde_json::from_slice(&std::fs::read(dir.join("provenance.json")).unwrap()).unwrap();
    let staged: Vec<&Value> = prov["datasets"].as_array().unwrap().iter().filter(|d| d["stage"] == 0).collect();
    assert_eq!(staged.iter().map(|d| (d["split"].as_str().unwrap(), d["key"].as_str().unwrap())).collect::<Vec<_>>(), [("train", "stages.0.train"), ("eval", "stages.0.eval")], "{prov}");
    assert!(staged.iter().all(|d| d["sha256"].as_str().is_some_and(|h| h.len() == 64)), "{prov}");
    assert!(prov["datasets"].as_array().unwrap().iter().any(|d| d.get("stage").is_none()), "data: keeps its own entries");
    // The readers of run directories read a staged one: the doctor's smoke test reads the GRPO
    // stage (its two steps, counted from 0), `compare` the supervised metrics (lower is better).
    let d = dir.display().to_string();
    let doctor = cx.run(&["doctor", &d]);
    assert_eq!(doctor.code, 0, "{}", doctor.stderr);
    assert!(doctor.stdout.contains("scaled to 2 steps"), "{}", doctor.stdout);
    assert!(doctor.stdout.contains("finished, 10 of 10 steps, the last 2 in the GRPO stage"), "{}", doctor.stdout);
    assert!(doctor.stdout.contains("1 step(s) with train/reward_mean"), "the GRPO stage's first step is its step 0: {}", doctor.stdout);
    let compare = cx.run(&["compare", &d, "--metric", "train/nll", "--at", "7"]);
    assert_eq!(compare.code, 0, "{}", compare.stderr);
    assert!(compare.stdout.contains("train/nll (lower is better) at step 7"), "{}", compare.stdout);
    assert!(compare.stdout.contains("stages.0.kind") && compare.stdout.contains("sft"), "{}", compare.stdout);
}

#[test]
fn kill_9_inside_the_sft_stage_then_rerun_runs_each_step_once() {
    // The kill lands after the fourth supervised line: inside the stage (16 steps).
    kill_9_then_rerun(16, 2, 5, |s| s < 16);
}

#[test]
fn kill_9_inside_the_grpo_stage_then_rerun_runs_each_step_once() {
    // After the first GRPO line: the supervised stage is done and checkpointed.
    kill_9_then_rerun(4, 4, 6, |s| s >= 4);
}

fn kill_9_then_rerun(sft_steps: u32, grpo_steps: u32, kill_after_lines: usize, resumes_inside: fn(u32) -> bool) {
    let cx = TestContext::new();
    tiny_model(&cx.path().join("tiny"));
    cx.write("spec.yaml", &staged(&cx, sft_steps, grpo_steps, 2));
    let mut child = cx.rlx().args(["run", "spec.yaml"]).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    let lines = || std::fs::read_dir(cx.path().join("runs")).ok().and_then(|mut d| d.next()).and_then(|e| e.ok()).map(|e| jsonl(&e.path().join("metrics.jsonl")).len()).unwrap_or(0);
    while lines() < kill_after_lines && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let dir = only_run(&cx);
    // Resumed from the run directory alone (its recorded spec, relative stage paths and all),
    // the way `rlx sweep` and a user without the spec resume.
    let r = cx.run(&["run", "--resume", &dir.display().to_string()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let at: u32 = r.stderr.split("resuming at step ").nth(1).and_then(|s| s.split_whitespace().next()).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no resume in {}", r.stderr));
    assert!(resumes_inside(at), "resumed at step {at}");
    let total = i64::from(sft_steps + grpo_steps);
    assert_eq!(steps_of(&dir), (-1..total).collect::<Vec<_>>());
    let mut per_step: BTreeMap<i64, usize> = BTreeMap::new();
    for r in jsonl(&dir.join("rollouts.jsonl")) {
        *per_step.entry(r["step"].as_i64().unwrap()).or_default() += 1;
    }
    assert_eq!(per_step.keys().copied().collect::<Vec<_>>(), (i64::from(sft_steps)..total).collect::<Vec<_>>(), "rollouts for GRPO steps only");
    assert!(per_step.values().all(|&n| n == 6), "{per_step:?}");
    let boundary = jsonl(&dir.join("checkpoints.jsonl")).iter().filter(|c| c["kind"] == "stage").count();
    assert_eq!(boundary, 1, "the stage boundary is crossed (and checkpointed) once");
    let status: Value = serde_json::from_slice(&std::fs::read(dir.join("status.json")).unwrap()).unwrap();
    assert_eq!(status["steps_done"].as_i64(), Some(total));
}

#[test]
fn sft_trains_through_the_tinker_protocol_on_rlx_serve() {
    // The same stage through the Tinker backend (LoRA) against `rlx serve`: `cross_entropy`
    // with per-token weights on the wire, `forward` for the held-out rows.
    let cx = TestContext::new();
    tiny_model(&cx.path().join("tiny"));
    let served = crate::tinker_sdk::Server::start(&cx, &cx.path().join("tiny"), &["--long-poll-s", "2"]);
    rows(&cx, "easy_python_train.jsonl", 8, "sft_train.jsonl");
    rows(&cx, "easy_python_eval.jsonl", 4, "sft_eval.jsonl");
    let stages = "stages:\n  - {kind: sft, train: sft_train.jsonl, eval: sft_eval.jsonl, epochs: 2, batch_size: 2, learning_rate: 1e-2, lr_decay: constant}\n  - {kind: grpo}\n";
    cx.write("spec.yaml", &(crate::tinker::spec(&served.url, 1, 100) + stages));
    let r = crate::common::Run::from(cx.rlx().args(["run", "spec.yaml"]).env("TINKER_API_KEY", "tml-test").output().unwrap());
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let dir = only_run(&cx);
    assert_eq!(steps_of(&dir), (-1..9).collect::<Vec<_>>());
    let m = jsonl(&dir.join("metrics.jsonl"));
    let nll = |s: usize| m[s + 1]["train/nll"].as_f64().unwrap();
    let (first, second) = ((0..4).map(nll).sum::<f64>() / 4.0, (4..8).map(nll).sum::<f64>() / 4.0);
    assert!(second < first, "train nll {first:.3} → {second:.3}");
    assert!(m[8]["eval/nll"].is_number() && m[9]["train/reward_mean"].is_number());
    let cks = jsonl(&dir.join("checkpoints.jsonl"));
    assert!(cks.iter().any(|c| c["kind"] == "stage" && c["state_path"].as_str().unwrap().starts_with("tinker://")), "{cks:?}");
    let fb = served.record().iter().filter(|r| r["path"] == "/api/v1/forward_backward").count();
    assert!(fb >= 9, "8 supervised steps and 1 GRPO step: {fb} forward_backward requests");
}

/// `rlx validate` on the spec with `stages` replaced by `stages_yaml`.
fn validate(stages_yaml: &str) -> crate::common::Run {
    let cx = TestContext::new();
    std::fs::create_dir_all(cx.path().join("tiny")).unwrap();
    rows(&cx, "easy_python_train.jsonl", 2, "sft_train.jsonl");
    cx.write("empty.jsonl", "");
    cx.write("no_code.jsonl", "{\"task_id\": 1, \"text\": \"x\", \"test_list\": [\"assert True\"]}\n");
    cx.write("spec.yaml", &spec_with(2, 100, stages_yaml));
    let r = cx.run(&["validate", "spec.yaml"]);
    // The context's directory goes with it; the output is what the test reads.
    drop(cx);
    r
}

#[test]
fn bad_stages_are_located_errors_naming_the_stage() {
    let cases: &[(&str, &str, &str)] = &[
        ("stages:\n  - {kind: grpo}\n  - {kind: sft, train: sft_train.jsonl}\n", "stage `grpo`: a `grpo` stage must be the last stage", "spec.yaml:"),
        ("stages:\n  - {kind: sft, train: no_code.jsonl}\n", "stage `sft`: `", "no reference completion"),
        ("stages:\n  - {kind: sft, train: sft_train.jsonl}\n  - {kind: sft, train: sft_train.jsonl}\n", "stage 1 is named `sft` like an earlier stage", "give each stage a `name`"),
        ("stages:\n  - {kind: sfft, train: sft_train.jsonl}\n", "sfft", "did you mean `sft`?"),
        ("stages:\n  - {kind: sft, train: sft_train.jsonl, eval: empty.jsonl}\n", "stage `sft`: `", "empty.jsonl` has no rows"),
        ("stages:\n  - {kind: sft, train: sft_train.jsonl, train_on: every_turn}\n", "every_turn", "last_assistant"),
    ];
    for (yaml, message, also) in cases {
        let r = validate(yaml);
        assert_eq!(r.code, 2, "{yaml}\n{}", r.stderr);
        assert!(r.stderr.contains(message) && r.stderr.contains(also), "{yaml}: expected `{message}` and `{also}` in\n{}", r.stderr);
        assert!(r.stderr.lines().any(|l| l.trim_start().starts_with("-->") && l.contains("spec.yaml:")), "{yaml}: no location in\n{}", r.stderr);
    }
}

#[test]
fn a_train_on_the_chat_template_cannot_express_is_refused_at_validate() {
    // A template that shows earlier assistant turns differently once later turns follow (as
    // Qwen3 drops `<think>` blocks): every turn's context cannot be built, the last one's can.
    let cx = TestContext::new();
    tiny_model(&cx.path().join("tiny"));
    let chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' and not loop.last %}(earlier){% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    cx.write("rewrite.jinja", chatml);
    let turn = |r: &str, c: &str| serde_json::json!({"role": r, "content": c});
    let row = serde_json::json!({"messages": [turn("system", "Be brief."), turn("user", "add"), turn("assistant", "a + b"), turn("user", "sub"), turn("assistant", "a - b")]});
    cx.write("chat.jsonl", &format!("{row}\n"));
    for (train_on, code) in [("all_assistant", 2), ("last_assistant", 0)] {
        let stages = format!("stages:\n  - {{kind: sft, train: chat.jsonl, train_on: {train_on}}}\n");
        cx.write("spec.yaml", &spec_with(2, 100, &stages).replace("finetune: full}", "finetune: full, chat_template: rewrite.jinja}"));
        let r = cx.run(&["validate", "spec.yaml"]);
        assert_eq!(r.code, code, "{train_on}: {}", r.stderr);
        if code == 2 {
            assert!(r.stderr.contains("stage `sft`: `train_on: all_assistant` on row 0") && r.stderr.contains("rewrites history"), "{}", r.stderr);
            assert!(r.stderr.lines().any(|l| l.trim_start().starts_with("-->") && l.contains("spec.yaml:")), "{}", r.stderr);
        }
    }
}

#[test]
fn a_spec_without_stages_plans_as_before() {
    let cx = TestContext::new();
    let quickstart = repo().join("experiments/quickstart.yaml");
    let text = std::fs::read_to_string(&quickstart).unwrap();
    let plain = rlx::plan::plan_text(&quickstart, text.clone(), &[]).unwrap();
    assert!(plain.stages.is_empty());
    // `stages: []` is the same experiment: the field is not serialized when empty, so the run
    // id (a hash of the serialized spec) is the one rlx gave this spec before stages existed.
    let empty = rlx::plan::plan_text(&quickstart, format!("{text}\nstages: []\n"), &[]).unwrap();
    assert_eq!(plain.run_id, empty.run_id);
    // With a stage, the total spans both and the GRPO stage keeps `schedule.max_steps`.
    rows(&cx, "easy_python_train.jsonl", 5, "sft.jsonl");
    let staged = format!("{text}\nstages:\n  - {{kind: sft, train: {}, batch_size: 2, epochs: 2}}\n  - {{kind: grpo}}\n", cx.path().join("sft.jsonl").display());
    let p = rlx::plan::plan_text(&quickstart, staged, &[]).unwrap();
    assert_ne!(p.run_id, plain.run_id);
    let layout: Vec<(String, u32, u32)> = p.stages.iter().map(|s| (s.name.clone(), s.first_step, s.steps)).collect();
    assert_eq!(layout, vec![("sft".into(), 0, 6), ("grpo".into(), 6, plain.schedule.max_steps)], "⌈5/2⌉ × 2 supervised steps");
    assert_eq!(p.schedule.max_steps, 6 + plain.schedule.max_steps);
}
