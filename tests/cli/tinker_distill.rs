//! On-policy distillation on the Tinker backend, against `rlx serve` (the real local server of
//! Tinker's protocol, over the tiny model): a teacher saved on the server scores a datum's
//! targets as the embedded trainer scores the same weights; a student distilled from it moves
//! toward it (`train/teacher_kl` falls); a teacher on a second server (`teacher.base_url`) is
//! scored there, and one on another base model is refused naming both; validation refuses, at
//! the key, each teacher the backend cannot score.

use std::path::{Path, PathBuf};

use rlx::backend::local::{LocalTrainer, TrainerOptions, load};
use rlx::backend::tinker::{Teacher, TeacherModel};
use rlx::backend::{Policy, Trainer, tinker};
use rlx::seam::{AdamParams, Datum, LossFn, LossFnInputs};
use serde_json::Value;

use crate::common::{Run, TestContext, jsonl, only_run};
use crate::engine::{tiny_model, tiny_model_seeded};
use crate::tinker_sdk::Server;

/// A supervised datum over `tokens` (every target weighted).
fn sft(tokens: &[u32]) -> Datum {
    let n = tokens.len() - 1;
    Datum { model_input: tokens[..n].to_vec(), loss_fn_inputs: LossFnInputs { target_tokens: tokens[1..].to_vec(), weights: Some(vec![1.0; n]), ..Default::default() } }
}

/// Trains a LoRA adapter on the server toward a few fixed sequences (a teacher that differs
/// from the base model) and saves it; its `tinker://` path.
async fn saved_teacher(trainer: &dyn Trainer) -> String {
    let data: Vec<Datum> = [&[5u32, 6, 7, 8, 9, 10, 11][..], &[12, 13, 14, 15, 16, 17], &[20, 21, 22, 23, 24, 25, 26, 27]].iter().map(|t| sft(t)).collect();
    for _ in 0..6 {
        trainer.forward_backward(data.clone(), LossFn::CrossEntropy).await.expect("forward_backward");
        trainer.optim_step(AdamParams { learning_rate: 5e-2, ..Default::default() }).await.expect("optim_step");
    }
    let state = trainer.save_state("teacher").await.expect("save_state");
    assert!(state.0.starts_with("tinker://"), "{state:?}");
    state.0
}

/// Where `rlx serve --state-dir state` in `cx` keeps `tinker://RUN/weights/NAME`: a trainer
/// state directory the embedded trainer loads.
fn on_disk(cx: &TestContext, path: &str) -> PathBuf {
    let p = path.strip_prefix("tinker://").unwrap();
    let (run, rest) = p.split_once('/').unwrap();
    cx.path().join("state/models").join(run).join(rest)
}

/// Datums of several shapes: prompts and completions of various lengths.
fn datums() -> Vec<Datum> {
    let rows: [(&[u32], usize); 3] = [(&[4, 5, 6, 7, 8, 9, 30, 31], 4), (&[12, 13, 40, 41, 42], 2), (&[20, 21, 22, 23, 24, 25, 26, 27, 28, 29], 7)];
    rows.iter().map(|(t, ob)| rlx::seam::make_datum(t, &vec![-1.0; t.len() - ob], *ob, 1.0)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::print_stderr)] // reports the largest difference
async fn a_tinker_teacher_scores_targets_as_the_embedded_trainer_scores_the_same_weights() {
    let cx = TestContext::new();
    let model = cx.path().join("tiny");
    tiny_model(&model);
    let served = Server::start(&cx, &model, &["--long-poll-s", "2"]);
    let Policy::Trainable(trainer) = tinker::open(crate::tinker::options(&served.url, &model)).await.unwrap() else { panic!("Tinker policies train") };
    let path = saved_teacher(&*trainer).await;
    let data = datums();
    let teacher = Teacher { model: TeacherModel::Path(path.clone()), base_url: None };
    let remote = trainer.tinker_teacher_logprobs(teacher.clone(), data.clone()).await.expect("the teacher scores through Tinker");
    let mut local = LocalTrainer::new(load(&model).unwrap(), TrainerOptions::default()).unwrap();
    let here = local.teacher_logprobs(&on_disk(&cx, &path), &data).expect("the embedded trainer scores the same state");
    let base = trainer.reference_logprobs(data.clone()).await.unwrap();
    let mut moved = 0;
    let mut largest = 0f32;
    for (i, d) in data.iter().enumerate() {
        assert_eq!(remote[i].len(), d.loss_fn_inputs.target_tokens.len(), "datum {i}: one score per target");
        for t in 0..remote[i].len() {
            assert!((remote[i][t] - here[i][t]).abs() < 1e-4, "datum {i} target {t}: Tinker {} against the embedded trainer {}", remote[i][t], here[i][t]);
            moved += usize::from((remote[i][t] - base[i][t]).abs() > 1e-2);
            largest = largest.max((remote[i][t] - here[i][t]).abs());
        }
    }
    eprintln!("teacher log-probs, Tinker against the embedded trainer: largest difference {largest:e}; {moved} targets moved from the base model by > 0.01");
    assert!(moved > 0, "the teacher is the trained adapter, not the base model");
    // Opened once: a second call reuses the sampling session.
    trainer.tinker_teacher_logprobs(teacher, data).await.unwrap();
    drop(trainer);
    let opened = served.record().iter().filter(|r| r["path"] == "/api/v1/create_sampling_session" && r["body"]["model_path"] == Value::String(path.clone())).count();
    assert_eq!(opened, 1, "one sampling session for the teacher");
}

/// The Tinker test spec for `url`, distilling from `teacher` (`extra` added to it) alone, at
/// learning rate `lr`.
fn distill_spec(url: &str, steps: u32, teacher: &str, extra: &str, lr: &str) -> String {
    let spec = crate::tinker::spec(url, steps, 100);
    let from = "loss: {kind: importance_sampling}}";
    assert!(spec.contains(from), "the Tinker test spec changed: no `{from}`");
    spec.replace(from, &format!("loss: {{kind: importance_sampling}}, distill: {{teacher: {{base: '{teacher}'{extra}}}, task_reward: false}}}}"))
        .replace("learning_rate: 1e-3", &format!("learning_rate: {lr}"))
}

fn teacher_kl(dir: &Path) -> Vec<f64> {
    jsonl(&dir.join("metrics.jsonl")).iter().filter(|m| m["step"].as_i64().unwrap() >= 0).map(|m| m["train/teacher_kl"].as_f64().expect("every step reports train/teacher_kl")).collect()
}

fn run(cx: &TestContext, args: &[&str]) -> Run {
    Run::from(cx.rlx().args(args).env("TINKER_API_KEY", "tml-test").output().unwrap())
}

/// A teacher trained and saved on `served` (serving `model`), through the Rust client.
fn teacher_on(served: &Server, model: &Path) -> String {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let Policy::Trainable(trainer) = tinker::open(crate::tinker::options(&served.url, model)).await.unwrap() else { panic!("Tinker policies train") };
        saved_teacher(&*trainer).await
    })
}

#[test]
#[allow(clippy::print_stderr)] // reports the measured teacher_kl
fn a_student_distilled_on_tinker_moves_toward_its_teacher() {
    let cx = TestContext::new();
    let model = cx.path().join("tiny");
    tiny_model(&model);
    let served = Server::start(&cx, &model, &["--long-poll-s", "2"]);
    let path = teacher_on(&served, &model);
    cx.write("spec.yaml", &distill_spec(&served.url, 10, &path, "", "2e-2"));
    let r = run(&cx, &["run", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let dir = only_run(&cx);
    let kl = teacher_kl(&dir);
    assert_eq!(kl.len(), 10, "{kl:?}");
    eprintln!("train/teacher_kl on Tinker: {kl:.4?}");
    let (first, last) = (kl[..3].iter().sum::<f64>() / 3.0, kl[7..].iter().sum::<f64>() / 3.0);
    assert!(first > 0.05, "the student starts at the base model, away from its teacher: {kl:?}");
    assert!(last < first * 0.7, "teacher_kl {first:.3} → {last:.3}: {kl:?}");
    // The teacher's scores came from its sampling session on the server.
    let scored = served.record().iter().filter(|r| r["path"] == "/api/v1/asample" && r["body"]["prompt_logprobs"] == Value::Bool(true)).count();
    assert!(scored >= 10 * 6, "every datum of every step scored by the teacher ({scored} scoring requests)");
}

#[test]
fn a_teacher_on_a_second_server_is_scored_there_and_one_on_another_base_model_is_refused() {
    let cx = TestContext::new();
    let model = cx.path().join("tiny");
    tiny_model(&model);
    let served = Server::start(&cx, &model, &["--long-poll-s", "2"]);
    // A second server of the same base model: the teacher is the student's base model there.
    let cx2 = TestContext::new();
    let second = Server::start(&cx2, &model, &["--long-poll-s", "2"]);
    cx.write("spec.yaml", &distill_spec(&served.url, 1, "./tiny", &format!(", base_url: '{}'", second.url), "1e-3"));
    let r = run(&cx, &["run", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let kl = teacher_kl(&only_run(&cx));
    assert!(kl[0].abs() < 1e-3, "the teacher is the student's own base model: {kl:?}");
    let scoring = |s: &Server| s.record().iter().filter(|r| r["path"] == "/api/v1/asample" && r["body"]["prompt_logprobs"] == Value::Bool(true)).count();
    assert!(scoring(&second) >= 6, "the second server scored every datum");
    assert_eq!(scoring(&served), 0, "the student's server scored nothing");
    // A teacher saved on a server of another base model: refused when it is opened, naming both.
    let cx3 = TestContext::new();
    let other = cx3.path().join("other");
    tiny_model_seeded(&other, 11);
    let third = Server::start(&cx3, &other, &["--long-poll-s", "2"]);
    let path = teacher_on(&third, &other);
    cx.write("spec.yaml", &distill_spec(&served.url, 1, &path, &format!(", base_url: '{}'", third.url), "1e-3"));
    let r = run(&cx, &["run", "spec.yaml"]);
    assert_eq!(r.code, 2, "a setting to fix:\n{}", r.stderr);
    let (theirs, ours) = (other.display().to_string(), model.display().to_string());
    assert!(r.stderr.contains("is served from base model") && r.stderr.contains(&theirs) && r.stderr.contains(&ours), "{}", r.stderr);
}

/// A fake run directory `runs/NAME` (the status file of `like`) whose one checkpoint, at step 0,
/// is on a Tinker service.
fn remote_run(cx: &TestContext, like: &Path, name: &str) {
    let dir = cx.path().join("runs").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(like.join("status.json"), dir.join("status.json")).unwrap();
    let line = serde_json::json!({"name": "step-000000", "step": 0, "data_cursor": 2, "state_path": "tinker://remote-run/weights/step-000000", "sampler_path": "tinker://remote-run/sampler_weights/step-000000", "time": "2026-01-01T00:00:00Z", "kind": "periodic"});
    std::fs::write(dir.join("checkpoints.jsonl"), format!("{line}\n")).unwrap();
}

/// Validates `spec` in `cx`: its exit code and standard error.
fn validate(cx: &TestContext, spec: &str) -> (i32, String) {
    cx.write("spec.yaml", spec);
    let r = run(cx, &["validate", "spec.yaml"]);
    (r.code, r.stderr)
}

#[test]
fn teachers_a_backend_cannot_score_are_located_errors_at_validate() {
    let cx = TestContext::new();
    tiny_model(&cx.path().join("tiny"));
    tiny_model_seeded(&cx.path().join("other"), 11);
    // A run whose checkpoints are on this machine, and one whose are on a Tinker service.
    cx.write("local.yaml", &crate::engine::spec_with(1, 1, "").replace("name: tiny", "name: local"));
    let r = cx.run(&["run", "local.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let local_run = only_run(&cx);
    let local_ref = format!("runs/{}@0", local_run.file_name().unwrap().to_string_lossy());
    remote_run(&cx, &local_run, "remote");
    let url = "http://127.0.0.1:9";
    let at = |stderr: &str, key: &str| stderr.contains(key) && stderr.lines().any(|l| l.trim_start().starts_with("-->") && l.contains("spec.yaml:"));
    let cannot = "the Tinker service cannot load";
    for (teacher, extra, want, key) in [
        ("./other", "", "which the Tinker service cannot load", "grpo.distill.teacher.base"),
        ("pypi:rlx-tiny-model", "", "which the Tinker service cannot load", "grpo.distill.teacher.base"),
        (local_ref.as_str(), "", "is on this machine, and the Tinker service cannot load it", "grpo.distill.teacher.base"),
        ("tinker://not-a-path", "", "tinker://not-a-path", "grpo.distill.teacher.base"),
        ("tinker://abc/weights/step-1", ", base_url: 'ftp://elsewhere'", "must be an `http://` or `https://` URL", "grpo.distill.teacher.base_url"),
    ] {
        let (code, stderr) = validate(&cx, &distill_spec(url, 2, teacher, extra, "1e-3"));
        assert_eq!(code, 2, "{teacher}: {stderr}");
        assert!(stderr.contains(want), "{teacher}: want {want:?} in\n{stderr}");
        assert!(at(&stderr, key), "{teacher}: not located at `{key}`:\n{stderr}");
        assert!(key.ends_with("base_url") || stderr.contains(cannot) || teacher.starts_with("tinker://"), "{teacher}: no hint:\n{stderr}");
    }
    // What the service can score validates: a `tinker://` path (on another server too), a run
    // whose checkpoints are on the service, the student's base model.
    for (teacher, extra) in [("tinker://abc/weights/step-1", ", base_url: 'http://127.0.0.1:10'"), ("runs/remote@0", ""), ("./tiny", "")] {
        let (code, stderr) = validate(&cx, &distill_spec(url, 2, teacher, extra, "1e-3"));
        assert_eq!(code, 0, "{teacher}: {stderr}");
    }
    // A `distill` stage's teacher is checked the same way, named by its stage.
    let stage = |teacher: &str| crate::tinker::spec(url, 2, 100) + &format!("stages:\n  - {{kind: distill, teacher: {{base: '{teacher}'}}, max_steps: 1}}\n  - {{kind: grpo}}\n");
    let (code, stderr) = validate(&cx, &stage("./other"));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("stage `distill`") && stderr.contains("which the Tinker service cannot load") && at(&stderr, "stages.0.teacher.base"), "{stderr}");
    let (code, stderr) = validate(&cx, &stage("tinker://abc/weights/step-1"));
    assert_eq!(code, 0, "{stderr}");
    // The service scores a teacher at temperature 1 only: a student sampled at another would
    // converge to a flatter copy of its teacher.
    let hot = stage("tinker://abc/weights/step-1").replacen("temperature: 1.0}", "temperature: 0.7}", 1);
    assert!(hot.contains("temperature: 0.7}"), "the engine test's spec changed: {hot}");
    let (code, stderr) = validate(&cx, &hot);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("scores teacher `tinker://abc/weights/step-1` at temperature 1, and this run samples the student at 0.7") && stderr.contains("sampling.temperature: 1") && at(&stderr, "stages.0.teacher.base"), "{stderr}");
    // The embedded trainer: no `base_url`, no checkpoint on a service.
    let local = |teacher: &str, extra: &str| crate::engine::spec_with(2, 100, "").replace("skip_degenerate: false}", &format!("skip_degenerate: false, distill: {{teacher: {{base: '{teacher}'{extra}}}}}}}"));
    for (teacher, extra, want, key) in [
        ("./other", ", base_url: 'http://127.0.0.1:10'", "`base_url` names a teacher on a Tinker-API server", "grpo.distill.teacher.base_url"),
        ("runs/remote@0", "", "is on a remote service", "grpo.distill.teacher.base"),
    ] {
        let (code, stderr) = validate(&cx, &local(teacher, extra));
        assert_eq!(code, 2, "{teacher}: {stderr}");
        assert!(stderr.contains(want), "{teacher}: want {want:?} in\n{stderr}");
        assert!(at(&stderr, key), "{teacher}: not located at `{key}`:\n{stderr}");
    }
}

#[test]
fn a_teacher_server_killed_mid_run_fails_the_step_as_an_infrastructure_error_and_the_run_resumes() {
    let cx = TestContext::new();
    let model = cx.path().join("tiny");
    tiny_model(&model);
    let served = Server::start(&cx, &model, &["--long-poll-s", "2", "--fault", "latency=30ms"]);
    let cx2 = TestContext::new();
    let teacher = Server::start(&cx2, &model, &["--long-poll-s", "2"]);
    let bind = teacher.url.trim_start_matches("http://").to_string();
    let spec = distill_spec(&served.url, 8, "./tiny", &format!(", base_url: '{}'", teacher.url), "1e-3");
    cx.write("spec.yaml", &spec.replace("save_every: 100", "save_every: 1"));
    // A teacher that stays unreachable is given up on after a second of retries, not five
    // minutes.
    let rlx = |cx: &TestContext| {
        let mut c = cx.rlx();
        c.args(["run", "spec.yaml"]).env("TINKER_API_KEY", "tml-test").env("RLX_TINKER_RETRY_S", "1");
        c
    };
    let mut child = rlx(&cx).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    // The teacher's server stops once step 1's checkpoint is recorded.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    let checkpoints = || std::fs::read_dir(cx.path().join("runs")).ok().and_then(|mut d| d.next()).and_then(|e| e.ok()).map(|e| jsonl(&e.path().join("checkpoints.jsonl"))).unwrap_or_default();
    while checkpoints().len() < 2 {
        assert!(std::time::Instant::now() < deadline, "no checkpoint within 5 minutes");
        assert!(child.try_wait().unwrap().is_none(), "the run ended before its teacher's server stopped");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    drop(teacher);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "an infrastructure error, not the user's:\n{stderr}");
    assert!(stderr.contains("/api/v1/asample"), "the failed request is named:\n{stderr}");
    let dir = only_run(&cx);
    let done = teacher_kl(&dir);
    assert!(done.len() >= 2 && done.len() < 8, "stopped mid-run: {done:?}");
    assert!(done.iter().all(|k| k.is_finite() && k.abs() < 1e-2), "no step trained on a missing teacher's zero: {done:?}");
    // Its server back at the same URL, the run resumes and finishes every step once.
    let _teacher = Server::start_at(&cx2, &model, &bind, &["--long-poll-s", "2"]);
    let r = Run::from(rlx(&cx).output().unwrap());
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let steps: Vec<i64> = jsonl(&dir.join("metrics.jsonl")).iter().filter(|m| m["step"].as_i64() >= Some(0)).map(|m| m["step"].as_i64().unwrap()).collect();
    assert_eq!(steps, (0..8).collect::<Vec<i64>>(), "each step once across the failure");
}
