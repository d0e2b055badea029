//! `rlx run` end to end on a tiny random model the test builds (an HF directory with a
//! character-level tokenizer and a ChatML template), the real local sandbox and real problems:
//! the run directory is complete and well formed; a run killed with SIGKILL mid-step resumes and
//! finishes with every step exactly once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use candle_core::DType;
use rlx::backend::local::model::{Arch, random_weights};
use rlx::backend::local::{LocalTrainer, TrainerOptions, Tuning};
use serde_json::{Value, json};

use crate::common::{TestContext, jsonl, only_run, repo};

const SPECIALS: [&str; 3] = ["<|im_start|>", "<|im_end|>", "<unk>"];

/// A character-level BPE tokenizer (no merges) over printable ASCII and newline.
pub(crate) fn char_tokenizer() -> (Value, usize) {
    let mut vocab = serde_json::Map::new();
    let mut added = vec![];
    for (i, s) in SPECIALS.iter().enumerate() {
        vocab.insert(s.to_string(), json!(i));
        added.push(json!({"id": i, "content": s, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}));
    }
    let chars: Vec<char> = std::iter::once('\n').chain((32u8..=126).map(char::from)).collect();
    for c in &chars {
        let id = vocab.len();
        vocab.insert(c.to_string(), json!(id));
    }
    let n = vocab.len();
    let tok = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": {"type": "Fuse"},
        "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab, "merges": []}
    });
    (tok, n)
}

/// Writes a tiny random Qwen3 model as an HF directory.
pub(crate) fn tiny_model(dir: &Path) {
    tiny_model_seeded(dir, 7);
}

/// [`tiny_model`] with weights drawn from `seed` (another model, the same tokenizer).
pub(crate) fn tiny_model_seeded(dir: &Path, seed: u64) {
    let (tok_json, vocab) = char_tokenizer();
    let mut cfg = crate::trainer::tiny_config(Arch::Qwen3);
    cfg.vocab_size = vocab;
    cfg.max_position_embeddings = 2048;
    cfg.eos_token_ids = vec![1];
    let tokenizer = tokenizers::Tokenizer::from_bytes(tok_json.to_string().as_bytes()).unwrap();
    let w = random_weights(&cfg, 0.2, seed, DType::F32).unwrap();
    let opts = TrainerOptions { tuning: Tuning::Full, seed, max_tokens_per_microbatch: 4096, ..Default::default() };
    let tr = LocalTrainer::from_weights(cfg, w, Some(tokenizer), opts, PathBuf::from("random")).unwrap();
    tr.export_merged(dir).unwrap();
    let chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    std::fs::write(dir.join("tokenizer_config.json"), json!({"chat_template": chatml, "eos_token": "<|im_end|>"}).to_string()).unwrap();
}

fn spec(max_steps: u32, save_every: u32) -> String {
    spec_with(max_steps, save_every, "")
}

/// The test spec with `extra` YAML lines appended (top-level sections the base spec lacks).
pub(crate) fn spec_with(max_steps: u32, save_every: u32, extra: &str) -> String {
    let data = repo().join("experiments/data");
    let prompts = repo().join("prompts");
    format!(
        "name: tiny
seed: 3
model: {{base: ./tiny, finetune: full}}
backend: {{kind: local, threads: 1}}
data:
  train: [{{path: {train}, format: mbpp, limit: 6}}]
  eval: [{{path: {eval}, format: mbpp, limit: 2}}]
prompt: {{user: {user}}}
sampling: {{max_tokens: 12, temperature: 1.0}}
grpo: {{prompts_per_step: 2, group_size: 3, skip_degenerate: false}}
reward: {{test_timeout_s: 2}}
sandbox: {{kind: local, strict: false}}
optimizer: {{learning_rate: 1e-3}}
schedule: {{max_steps: {max_steps}, eval_every: 2, save_every: {save_every}}}
eval: {{k: [1], temperature: 0, max_tokens: 8}}
{extra}",
        train = data.join("easy_python_train.jsonl").display(),
        eval = data.join("easy_python_eval.jsonl").display(),
        user = prompts.join("mbpp_user.j2").display(),
    )
}

#[test]
fn a_short_run_writes_a_complete_run_directory() {
    let cx = TestContext::new();
    tiny_model(&cx.path().join("tiny"));
    cx.write("spec.yaml", &spec(3, 1));
    let r = cx.run(&["run", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("step 2  reward"), "{}", r.stderr);
    let dir = only_run(&cx);
    for f in ["spec.yaml", "resolved.json", "provenance.json", "status.json", "metrics.jsonl", "rollouts.jsonl", "checkpoints.jsonl", "events.jsonl", "eval_results.jsonl", "logs.log"] {
        assert!(dir.join(f).exists(), "missing {f}");
    }
    let status: Value = serde_json::from_slice(&std::fs::read(dir.join("status.json")).unwrap()).unwrap();
    assert_eq!(status["state"], "finished");
    assert_eq!(status["steps_done"], 3);
    let metrics = jsonl(&dir.join("metrics.jsonl"));
    let steps: Vec<i64> = metrics.iter().map(|m| m["step"].as_i64().unwrap()).collect();
    assert_eq!(steps, vec![-1, 0, 1, 2], "baseline then each step once");
    assert!(metrics[0]["eval/pass@1"].is_number());
    for m in &metrics[1..] {
        for k in ["train/reward_mean", "train/correct_mean", "train/format_rate", "train/groups_skipped", "train/datums", "train/loss", "time/sample_s", "time/grade_s", "time/train_s", "sandbox/p95_ms"] {
            assert!(m[k].is_number(), "step {} lacks {k}: {m}", m["step"]);
        }
        assert_eq!(m["train/datums"], 6.0, "2 problems × 3 completions");
        // Random weights: no code block, the format penalty of the default reward.
        assert!((m["train/reward_mean"].as_f64().unwrap() - -0.1).abs() < 1e-9 || m["train/format_rate"].as_f64().unwrap() > 0.0);
    }
    // Eval after step 1 (every 2) and at the end.
    assert!(metrics[2]["eval/pass@1"].is_number() && metrics[3]["eval/pass@1"].is_number());
    assert!(metrics[1].get("eval/pass@1").is_none());
    assert_eq!(jsonl(&dir.join("rollouts.jsonl")).len(), 18);
    assert_eq!(jsonl(&dir.join("eval_results.jsonl")).len(), 6, "2 problems × 3 evals");
    let cks = jsonl(&dir.join("checkpoints.jsonl"));
    assert_eq!(cks.len(), 3);
    assert_eq!(cks[2]["kind"], "final");
    assert_eq!(cks[2]["data_cursor"], 6);
    assert!(dir.join(cks[2]["state_path"].as_str().unwrap()).exists(), "state paths are relative to the run directory");
    let prov: Value = serde_json::from_slice(&std::fs::read(dir.join("provenance.json")).unwrap()).unwrap();
    assert!(prov["sandbox"].is_object(), "effective sandbox protection recorded: {prov}");
    assert_eq!(prov["data"]["train"]["problems"], 6);
    assert_eq!(prov["data"]["train"]["fingerprint"].as_str().unwrap().len(), 64);
    assert!(prov["prompt_tokens"]["max"].as_u64().unwrap() >= prov["prompt_tokens"]["min"].as_u64().unwrap());
    // Running the finished experiment again is a no-op.
    let again = cx.run(&["run", "spec.yaml"]);
    assert_eq!(again.code, 0);
    assert_eq!(jsonl(&dir.join("metrics.jsonl")).len(), 4);
}

#[test]
fn kill_9_mid_step_then_rerun_finishes_each_step_once() {
    kill_9_then_rerun(&spec(6, 2));
}

#[test]
fn kill_9_mid_step_then_rerun_finishes_each_step_once_pipelined() {
    // The samples in flight for the next step die with the process; the checkpoint's cursor
    // counts trained steps, so the re-run samples them again and no step is skipped.
    kill_9_then_rerun(&spec(6, 2).replace("skip_degenerate: false}", "skip_degenerate: false, max_steps_off_policy: 1}"));
}

pub(crate) fn kill_9_then_rerun(spec_text: &str) {
    let cx = TestContext::new();
    tiny_model(&cx.path().join("tiny"));
    cx.write("spec.yaml", spec_text);
    let mut child = cx.rlx().args(["run", "spec.yaml"]).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    // Wait until step 2 is written (a checkpoint exists after step 1), then kill hard.
    let deadline = Instant::now() + Duration::from_secs(300);
    let metrics = || {
        std::fs::read_dir(cx.path().join("runs")).ok().and_then(|mut d| d.next()).and_then(|e| e.ok()).map(|e| jsonl(&e.path().join("metrics.jsonl")).len()).unwrap_or(0)
    };
    while metrics() < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let dir = only_run(&cx);
    let before: Value = serde_json::from_slice(&std::fs::read(dir.join("status.json")).unwrap()).unwrap();
    assert_eq!(before["state"], "running", "SIGKILL leaves no chance to say otherwise");

    let r = cx.run(&["run", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("resuming at step"), "{}", r.stderr);
    let steps: Vec<i64> = jsonl(&dir.join("metrics.jsonl")).iter().map(|m| m["step"].as_i64().unwrap()).collect();
    assert_eq!(steps, vec![-1, 0, 1, 2, 3, 4, 5]);
    let mut per_step: BTreeMap<i64, usize> = BTreeMap::new();
    for r in jsonl(&dir.join("rollouts.jsonl")) {
        *per_step.entry(r["step"].as_i64().unwrap()).or_default() += 1;
    }
    assert!(per_step.values().all(|&n| n == 6), "{per_step:?}");
    assert_eq!(per_step.len(), 6);
    let events = jsonl(&dir.join("events.jsonl"));
    assert!(events.iter().any(|e| e["event"] == "resume"), "{events:?}");
    let status: Value = serde_json::from_slice(&std::fs::read(dir.join("status.json")).unwrap()).unwrap();
    assert_eq!(status["state"], "finished");
    assert_eq!(status["steps_done"], 6);
}

#[test]
fn sigint_stops_gracefully_and_resume_continues() {
    let cx = TestContext::new();
    tiny_model(&cx.path().join("tiny"));
    cx.write("spec.yaml", &spec(6, 100));
    let child = cx.rlx().args(["run", "spec.yaml"]).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    let metrics = || std::fs::read_dir(cx.path().join("runs")).ok().and_then(|mut d| d.next()).and_then(|e| e.ok()).map(|e| jsonl(&e.path().join("metrics.jsonl")).len()).unwrap_or(0);
    while metrics() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    let dir = only_run(&cx);
    let status: Value = serde_json::from_slice(&std::fs::read(dir.join("status.json")).unwrap()).unwrap();
    assert_eq!(status["state"], "interrupted");
    let done = status["steps_done"].as_u64().unwrap();
    assert!((1..6).contains(&done));
    let cks = jsonl(&dir.join("checkpoints.jsonl"));
    assert_eq!(cks.last().unwrap()["kind"], "interrupt");
    assert_eq!(cks.last().unwrap()["step"].as_u64().unwrap(), done - 1);
    let r = cx.run(&["run", "--resume", dir.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let steps: Vec<i64> = jsonl(&dir.join("metrics.jsonl")).iter().map(|m| m["step"].as_i64().unwrap()).collect();
    assert_eq!(steps, vec![-1, 0, 1, 2, 3, 4, 5]);
}

#[test]
fn pipelined_run_trains_each_step_on_samples_one_step_old() {
    let cx = TestContext::new();
    tiny_model(&cx.path().join("tiny"));
    let text = spec(4, 2).replace("skip_degenerate: false}", "skip_degenerate: false, max_steps_off_policy: 1}");
    assert!(text.contains("max_steps_off_policy: 1"));
    cx.write("spec.yaml", &text);
    let r = cx.run(&["run", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let dir = only_run(&cx);
    let metrics = jsonl(&dir.join("metrics.jsonl"));
    let steps: Vec<i64> = metrics.iter().map(|m| m["step"].as_i64().unwrap()).collect();
    assert_eq!(steps, vec![-1, 0, 1, 2, 3]);
    // Step 0 samples on the initial weights; every later step's groups were sampled while the
    // previous step trained.
    let lag: Vec<f64> = metrics[1..].iter().map(|m| m["train/off_policy_steps"].as_f64().unwrap()).collect();
    assert_eq!(lag, vec![0.0, 1.0, 1.0, 1.0]);
    for m in &metrics[1..] {
        assert_eq!(m["train/datums"], 6.0);
        assert!(m["time/step_s"].as_f64().unwrap() > 0.0);
    }
    let mut per_step: BTreeMap<i64, usize> = BTreeMap::new();
    for r in jsonl(&dir.join("rollouts.jsonl")) {
        *per_step.entry(r["step"].as_i64().unwrap()).or_default() += 1;
    }
    assert_eq!(per_step.into_iter().collect::<Vec<_>>(), vec![(0, 6), (1, 6), (2, 6), (3, 6)]);
    let cks = jsonl(&dir.join("checkpoints.jsonl"));
    assert_eq!(cks.iter().map(|c| c["data_cursor"].as_u64().unwrap()).collect::<Vec<_>>(), vec![4, 8], "the cursor counts trained steps only");
}

#[test]
fn failed_attempts_get_feedback_and_every_turn_is_trained() {
    let cx = TestContext::new();
    tiny_model(&cx.path().join("tiny"));
    let feedback = repo().join("prompts/feedback.j2");
    let text = spec_with(2, 100, "rollout: {max_attempts: 2}\n")
        .replace("prompt: {user: ", &format!("prompt: {{feedback: {}, user: ", feedback.display()))
        .replace("temperature: 1.0}", "temperature: 0.9}");
    cx.write("spec.yaml", &text);
    let r = cx.run(&["run", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    // Tempered samples with the unclipped loss: the run says what that does to the ratios.
    assert!(r.stderr.contains("importance ratios will be far from 1"), "{}", r.stderr);
    let dir = only_run(&cx);
    let metrics = jsonl(&dir.join("metrics.jsonl"));
    let rollouts = jsonl(&dir.join("rollouts.jsonl"));
    assert_eq!(rollouts.len(), 12);
    for (m, step) in metrics[1..].iter().zip(0..) {
        let here: Vec<&Value> = rollouts.iter().filter(|r| r["step"] == step).collect();
        // Exactly the answers that failed got a second try.
        for r in &here {
            match r["attempts"].as_u64().unwrap() {
                1 => assert_eq!(r["status"], "passed", "{r}"),
                2 => assert_ne!(r["turns"][0]["status"], "passed", "{r}"),
                n => panic!("{n} attempts with max_attempts 2"),
            }
        }
        let retried = here.iter().filter(|r| r["attempts"] == 2).count();
        assert!((m["train/attempts_mean"].as_f64().unwrap() - (6 + retried) as f64 / 6.0).abs() < 1e-9, "{m}");
        assert!(m["train/correct_first_attempt"].is_number());
        // One datum per trajectory when the second attempt extends the first (prompt, answer,
        // feedback, answer: one sequence); two when it cannot (a random model sometimes samples a
        // special token mid-answer, which the rendered history leaves out).
        let datums = m["train/datums"].as_f64().unwrap();
        assert!((6.0..12.0).contains(&datums), "{m}");
        assert_eq!(m["train/action_tokens"], m["train/completion_tokens"], "every sampled token of every attempt is trained: {m}");
    }
    let two = rollouts.iter().find(|r| r["attempts"] == 2).expect("a failed first attempt");
    let turns = two["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2);
    let fb = turns[1]["prompt_last_message"].as_str().unwrap();
    assert!(fb.contains("did not pass the tests") && fb.contains("attempt 2 of 2"), "{fb}");
    assert_eq!(two["text"], turns[1]["text"], "the final attempt is the one scored");
}

/// Writes the tiny model of these tests to `$RLX_TINY_OUT`: how `tests/fixtures/run-v1` was made
/// (see `compat.rs`). `cargo test --test cli engine::write_tiny_model -- --ignored`.
#[test]
#[ignore = "a tool for regenerating fixtures, not a test"]
fn write_tiny_model() {
    let out = std::env::var_os("RLX_TINY_OUT").expect("RLX_TINY_OUT names the directory to write");
    tiny_model(Path::new(&out));
}
