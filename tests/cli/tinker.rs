//! rlx's Tinker backend against a real server of Tinker's protocol: `rlx serve` over the embedded
//! trainer, on 127.0.0.1 (the real service cannot be reached from CI). The backend contract
//! suite through the protocol; full `rlx run`s with faults injected (429s, 5xx before and after
//! the work, dropped connections, `try_again` storms), checked against the server's request
//! record: every training request ran exactly once, in `seq_id` order, with no gap; a run killed
//! mid-way resumes from its `tinker://` checkpoint.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rlx::backend::contract::{Fixture, check_sampler, check_trainer};
use rlx::backend::{Policy, tinker};
use rlx::seam::{Finetune, LoraConfig};
use serde_json::Value;

use crate::common::{Run, TestContext, jsonl, only_run};
use crate::tinker_sdk::Server;

/// `rlx serve` in `cx` with `--fault` values.
fn serve(cx: &TestContext, model: &Path, faults: &[&str]) -> Server {
    let args: Vec<&str> = faults.iter().flat_map(|f| ["--fault", f]).chain(["--long-poll-s", "2"]).collect();
    Server::start(cx, model, &args)
}

/// Whether the server did the work of a recorded request: it was not turned away by a fault
/// before handling, and it was not a resubmission answered with the original future.
fn did_work(r: &Value) -> bool {
    let fault = r["fault"].as_str().unwrap_or("");
    let handled = fault.is_empty() || fault.ends_with("after handling");
    handled && r["duplicate"] != Value::Bool(true) && r["status"] != 400 && r["status"] != 404
}

/// The training requests that did work, per model: `(path, seq_id)` in arrival order.
fn training_work(records: &[Value]) -> std::collections::BTreeMap<String, Vec<(String, i64)>> {
    let mut per_model: std::collections::BTreeMap<String, Vec<(String, i64)>> = Default::default();
    for r in records {
        let path = r["path"].as_str().unwrap_or("");
        // `/forward` and a `load_weights` into an existing model take a `seq_id` on the older
        // JSON wire; a `load_weights` that creates a model has none.
        let training = ["/api/v1/forward_backward", "/api/v1/forward", "/api/v1/optim_step", "/api/v1/save_weights", "/api/v1/save_weights_for_sampler", "/api/v1/load_weights"].contains(&path);
        let seq = r["seq_id"].as_i64().filter(|_| path != "/api/v1/load_weights" || r["body"]["model_id"].is_string());
        if let (true, true, Some(seq)) = (training, did_work(r), seq) {
            let model = r["model_id"].as_str().unwrap_or_default().to_string();
            per_model.entry(model).or_default().push((path.to_string(), seq));
        }
    }
    per_model
}

/// Every model's training requests ran once each, with `seq_id`s 1, 2, 3, … and no gap.
fn assert_each_training_request_ran_once(records: &[Value]) -> std::collections::BTreeMap<String, Vec<(String, i64)>> {
    let work = training_work(records);
    for (model, reqs) in &work {
        let mut seqs: Vec<i64> = reqs.iter().map(|r| r.1).collect();
        seqs.sort_unstable();
        let want: Vec<i64> = (1..=seqs.len() as i64).collect();
        assert_eq!(seqs, want, "model {model}: each seq_id ran once, none missing: {reqs:?}");
    }
    work
}

fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    std::iter::successors(Some(e), |e| e.source()).map(|e| e.to_string()).collect::<Vec<_>>().join(": ")
}

fn tiny(dir: &Path) -> PathBuf {
    let model = dir.join("tiny");
    crate::engine::tiny_model(&model);
    model
}

/// Options for a Tinker policy on `rlx serve` at `url`, serving `model` under its path.
pub(crate) fn options(url: &str, model: &Path) -> tinker::Options {
    tinker::Options {
        base_url: url.to_string(),
        api_key: "tml-test".into(),
        base_model: model.display().to_string(),
        finetune: Finetune::Lora(LoraConfig::all_linear(4)),
        seed: 3,
        max_in_flight: 8,
        tokenizer: None,
        user_metadata: Default::default(),
        retry: tinker::RetryPolicy::default(),
        server: None,
    }
}

/// Top-k prompt scores (`topk_prompt_logprobs`, what top-K distillation trains against) through
/// the client and the protobuf reply: with k the whole vocabulary each row is the next-token
/// distribution, most likely first, holding the prompt token's own score (`prompt_logprobs`);
/// a smaller k is the head of each row.
async fn check_topk_prompt_scores(sampler: &dyn rlx::backend::Sampler, vocab: usize) {
    let prompt = vec![5u32, 6, 7, 8, 9];
    let own = sampler.prompt_logprobs(prompt.clone()).await.expect("prompt_logprobs");
    let whole = sampler.prompt_topk_logprobs(prompt.clone(), vocab).await.expect("topk_prompt_logprobs");
    let head = sampler.prompt_topk_logprobs(prompt.clone(), 2).await.expect("topk_prompt_logprobs");
    assert_eq!((whole.len(), whole[0].len(), head[0].len()), (prompt.len(), 0, 0), "one row per position, the first unscored");
    for i in 1..prompt.len() {
        let row = &whole[i];
        assert_eq!(row.len(), vocab, "row {i}");
        assert!(row.windows(2).all(|w| w[0].1 >= w[1].1), "row {i} is most likely first: {row:?}");
        let mass: f64 = row.iter().map(|t| f64::from(t.1).exp()).sum();
        assert!((mass - 1.0).abs() < 1e-3, "row {i} holds {mass}");
        let mine = row.iter().find(|t| t.0 == prompt[i]).expect("every token is in a whole row").1;
        assert!((mine - own[i]).abs() < 1e-4, "row {i}: {mine} in the top-k, {} alone", own[i]);
        assert_eq!(head[i], row[..2], "row {i}: k = 2 is the head");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tinker_backend_meets_the_contract_through_rlx_serve() {
    let cx = TestContext::new();
    let model = tiny(cx.path());
    let served = serve(&cx, &model, &[]);
    let policy = tinker::open(options(&served.url, &model)).await.expect("a Tinker session on rlx serve");
    let Policy::Trainable(trainer) = policy else { panic!("Tinker policies train") };
    // The tiny model's character vocabulary (98 entries); token 1 is `<|im_end|>`.
    let fixture = Fixture { prompts: vec![vec![5, 6, 7], vec![8, 9, 10, 11, 12, 13]], vocab_size: 98, stop_token: 1, max_tokens: 6 };
    let sampler = trainer.sampler().await.unwrap();
    check_sampler(&*sampler, &fixture).await.unwrap_or_else(|e| panic!("sampler: {e}: {:?}", std::error::Error::source(&e)));
    check_trainer(&*trainer, &fixture).await.unwrap_or_else(|e| panic!("trainer: {e}: {:?}", std::error::Error::source(&e)));
    check_topk_prompt_scores(&*sampler, 98).await;
    drop((sampler, trainer));
    // States are tinker:// paths; each request of each model ran once, in order.
    let records = served.record();
    let saves: Vec<&Value> = records.iter().filter(|r| r["path"] == "/api/v1/save_weights" && did_work(r)).collect();
    assert!(!saves.is_empty());
    assert_each_training_request_ran_once(&records);
    // The SDK's headers: a key, an idempotency key on every submission.
    // (Lifecycle calls are not submissions: the session's `finish`, sent when the last handle
    // drops, races the record being read.)
    let lifecycle = |p: &str| p == "/api/v1/retrieve_future" || p.ends_with("/finish") || p.ends_with("session_heartbeat") || p.ends_with("telemetry");
    let keyless: Vec<&Value> = records.iter().filter(|r| r["method"] == "POST" && !lifecycle(r["path"].as_str().unwrap_or("")) && !r["idempotency_key"].is_string()).collect();
    assert!(keyless.is_empty(), "submissions without an idempotency key: {keyless:#?}");
}

/// The older wire of SkyRL, verl_tinker and TuFT (`backend.server: verl_tinker`): JSON
/// `forward_backward` and `/forward` bodies, JSON results, states loaded into the existing model.
/// `rlx serve` still reads that wire, so the same client path meets the same contract here, on
/// every `cargo test`, as it does against SkyRL in `skyrl::`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_older_json_wire_meets_the_contract_through_rlx_serve() {
    let cx = TestContext::new();
    let model = tiny(cx.path());
    let served = serve(&cx, &model, &[]);
    let o = tinker::Options { server: Some(tinker::Server::VerlTinker), ..options(&served.url, &model) };
    let Policy::Trainable(trainer) = tinker::open(o).await.expect("a session on rlx serve") else { panic!("Tinker policies train") };
    let fixture = Fixture { prompts: vec![vec![5, 6, 7], vec![8, 9, 10, 11, 12, 13]], vocab_size: 98, stop_token: 1, max_tokens: 6 };
    let sampler = trainer.sampler().await.unwrap();
    check_sampler(&*sampler, &fixture).await.unwrap_or_else(|e| panic!("sampler: {e}: {:?}", std::error::Error::source(&e)));
    check_trainer(&*trainer, &fixture).await.unwrap_or_else(|e| panic!("trainer: {e}: {:?}", std::error::Error::source(&e)));
    // A loss the declared server lacks is refused before anything is sent, naming both.
    let d = rlx::seam::Datum { model_input: vec![5, 6], loss_fn_inputs: rlx::seam::LossFnInputs { target_tokens: vec![6, 7], weights: None, logprobs: Some(vec![-1.0; 2]), advantages: Some(vec![1.0; 2]) } };
    // Forward-only passes go to `/forward` on this wire.
    let out = trainer.forward(vec![d.clone()], rlx::seam::LossFn::CrossEntropy).await.expect("a JSON forward");
    assert!(out.outputs[0].logprobs.len() == 2 && out.outputs[0].logprobs.iter().all(|l| *l < 0.0), "{out:?}");
    let err = trainer.forward_backward(vec![d], rlx::seam::LossFn::CISPO).await.unwrap_err();
    let msg = chain(&err);
    assert!(msg.contains("`verl_tinker` Tinker server cannot run `grpo.loss: {kind: cispo}`") && err.is_user_error(), "{msg}");
    drop((sampler, trainer));
    let records = served.record();
    let bodies = |p: &str| records.iter().filter(|r| r["path"] == p && did_work(r)).count();
    assert!(bodies("/api/v1/forward") > 0 && bodies("/api/v1/forward_backward") > 0, "JSON forward and forward_backward were sent");
    assert!(records.iter().filter(|r| r["path"] == "/api/v1/forward_backward").all(|r| r["body"]["forward_backward_input"].is_object()), "every forward_backward body was JSON");
    let loads: Vec<&Value> = records.iter().filter(|r| r["path"] == "/api/v1/load_weights" && did_work(r)).collect();
    assert!(!loads.is_empty() && loads.iter().all(|r| r["body"]["model_id"].is_string()), "states load into the existing model: {loads:#?}");
    assert_each_training_request_ran_once(&records);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_model_and_a_missing_key_are_clear_errors() {
    let cx = TestContext::new();
    let model = tiny(cx.path());
    let served = serve(&cx, &model, &[]);
    let mut o = options(&served.url, &model);
    o.base_model = "Qwen/Qwen3-4B-Instruct-2507".into();
    let err = match tinker::open(o).await {
        Err(e) => e,
        Ok(_) => panic!("an unknown base model must be refused"),
    };
    let msg = chain(&err);
    assert!(msg.contains("Qwen/Qwen3-4B-Instruct-2507"), "{msg}");
    assert!(err.is_user_error(), "{msg}");
    // No key: nothing is sent.
    let e = tinker::Options::credentials(None, "RLX_TEST_TINKER_KEY_THAT_IS_NOT_SET").unwrap_err();
    assert!(e.to_string().contains("set `RLX_TEST_TINKER_KEY_THAT_IS_NOT_SET`"), "{e}");
    // A server that is not there at the first request: a setting to fix, said at once (the
    // retry budget, long here, is not waited out), with the cause named.
    let mut o = options("http://127.0.0.1:9", &model);
    o.retry = tinker::RetryPolicy { budget: Duration::from_secs(600), ..Default::default() };
    let err = match tinker::open(o).await {
        Err(e) => e,
        Ok(_) => panic!("nothing listens on port 9"),
    };
    let msg = chain(&err);
    assert!(msg.contains("nothing answers at the Tinker URL `http://127.0.0.1:9`") && msg.to_lowercase().contains("connect"), "{msg}");
    assert!(err.is_user_error(), "{msg}");
}

/// A spec training the tiny model through `url`, which serves it under its path.
pub(crate) fn spec(url: &str, max_steps: u32, save_every: u32) -> String {
    spec_with(url, max_steps, save_every, "")
}

fn spec_with(url: &str, max_steps: u32, save_every: u32, backend_extra: &str) -> String {
    // The engine test's spec, trained with LoRA through Tinker instead of locally.
    let mut spec = crate::engine::spec_with(max_steps, save_every, "");
    for (from, to) in [
        ("name: tiny\n", "name: tiny-tinker\n".to_string()),
        ("model: {base: ./tiny, finetune: full}", "model: {base: ./tiny, finetune: lora, lora: {rank: 4, alpha: 8}}".to_string()),
        ("backend: {kind: local, threads: 1}", format!("backend: {{kind: tinker, base_url: '{url}', max_in_flight: 4{backend_extra}}}")),
        ("skip_degenerate: false}", "skip_degenerate: false, loss: {kind: importance_sampling}}".to_string()),
    ] {
        assert!(spec.contains(from), "the engine test's spec changed: no `{from}`");
        spec = spec.replacen(from, &to, 1);
    }
    spec
}

#[test]
fn a_run_on_tinker_with_faults_trains_every_step_once() {
    let cx = TestContext::new();
    let model = tiny(cx.path());
    let faults = ["seed=5", "429=0.08", "5xx=0.08", "drop=0.05", "try-again=0.3"];
    let served = serve(&cx, &model, &faults);
    cx.write("spec.yaml", &spec(&served.url, 4, 2));
    let r = Run::from(cx.rlx().args(["run", "spec.yaml"]).env("TINKER_API_KEY", "tml-test").output().unwrap());
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let dir = only_run(&cx);
    let steps: Vec<i64> = jsonl(&dir.join("metrics.jsonl")).iter().map(|m| m["step"].as_i64().unwrap()).collect();
    assert_eq!(steps, vec![-1, 0, 1, 2, 3], "baseline eval, then each step once");
    let metrics = jsonl(&dir.join("metrics.jsonl"));
    for m in &metrics[1..] {
        assert_eq!(m["train/datums"], 6.0, "2 problems × 3 completions: {m}");
        assert!(m["train/loss"].is_number(), "{m}");
    }
    let cks = jsonl(&dir.join("checkpoints.jsonl"));
    assert!(!cks.is_empty() && cks.iter().all(|c| c["state_path"].as_str().unwrap().starts_with("tinker://")), "{cks:?}");

    let records = served.record();
    let faulted = records.iter().filter(|r| r["fault"].is_string()).count();
    assert!(faulted >= 5, "the faults were exercised ({faulted} faulted requests of {})", records.len());
    let work = assert_each_training_request_ran_once(&records);
    assert_eq!(work.len(), 1, "one training model: {:?}", work.keys());
    let reqs = work.values().next().unwrap();
    let count = |p: &str| reqs.iter().filter(|r| r.0 == p).count();
    assert_eq!(count("/api/v1/forward_backward"), 4, "one forward_backward per step");
    assert_eq!(count("/api/v1/optim_step"), 4, "one optim_step per step");
    assert_eq!(count("/api/v1/save_weights"), cks.len(), "one saved state per checkpoint line");
    // Within a model the server ran requests in seq_id order.
    let seqs: Vec<i64> = reqs.iter().map(|r| r.1).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "arrival order is seq_id order: {seqs:?}");
    // No sample was lost: every step and eval has its completions in the run directory.
    assert_eq!(jsonl(&dir.join("rollouts.jsonl")).len(), 4 * 6);
}

#[test]
fn a_killed_tinker_run_resumes_from_its_tinker_checkpoint() {
    killed_run_resumes("");
}

/// Two steps in flight (groups of the next two steps streaming while one trains) when the run
/// is killed: the resumed run still records each step once and runs each `seq_id` once.
#[test]
fn a_killed_tinker_run_two_steps_deep_resumes_with_each_step_once() {
    killed_run_resumes(", max_steps_off_policy: 2");
}

fn killed_run_resumes(grpo_extra: &str) {
    let cx = TestContext::new();
    let model = tiny(cx.path());
    let served = serve(&cx, &model, &["latency=30ms"]);
    let text = spec(&served.url, 4, 1).replacen("skip_degenerate: false,", &format!("skip_degenerate: false{grpo_extra},"), 1);
    assert!(grpo_extra.is_empty() || text.contains(grpo_extra));
    cx.write("spec.yaml", &text);
    let mut child = cx.rlx().args(["run", "spec.yaml"]).env("TINKER_API_KEY", "tml-test").stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    // Kill it once step 1's checkpoint is recorded.
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    loop {
        let cks = std::fs::read_dir(cx.path().join("runs")).ok().and_then(|mut d| d.next()).and_then(|e| e.ok()).map(|e| jsonl(&e.path().join("checkpoints.jsonl"))).unwrap_or_default();
        if cks.len() >= 2 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no checkpoint within 5 minutes");
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the run ended before it could be killed: {status}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let r = Run::from(cx.rlx().args(["run", "spec.yaml"]).env("TINKER_API_KEY", "tml-test").output().unwrap());
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let dir = only_run(&cx);
    let steps: Vec<i64> = jsonl(&dir.join("metrics.jsonl")).iter().filter(|m| m["step"].as_i64() >= Some(0)).map(|m| m["step"].as_i64().unwrap()).collect();
    assert_eq!(steps, vec![0, 1, 2, 3], "each step once across the kill");
    if !grpo_extra.is_empty() {
        let metrics = jsonl(&dir.join("metrics.jsonl"));
        assert!(metrics.iter().filter(|m| m["step"].as_i64() >= Some(0)).all(|m| m["train/staleness_max"].as_f64().is_some_and(|x| x <= 2.0)), "{metrics:?}");
    }
    // The resumed run created its model from the saved state, with the optimizer.
    let loads: Vec<Value> = served.record().into_iter().filter(|r| r["path"] == "/api/v1/load_weights" && did_work(r)).collect();
    assert_eq!(loads.len(), 1, "one restore");
    assert_eq!(loads[0]["body"]["optimizer"], true);
    assert!(loads[0]["body"]["path"].as_str().unwrap().starts_with("tinker://"));
    assert_each_training_request_ran_once(&served.record());
}

#[test]
fn an_evaluation_only_tinker_run_needs_no_training_model() {
    let cx = TestContext::new();
    let model = tiny(cx.path());
    let served = serve(&cx, &model, &[]);
    cx.write("spec.yaml", &spec(&served.url, 0, 1));
    let r = Run::from(cx.rlx().args(["run", "spec.yaml"]).env("TINKER_API_KEY", "tml-test").output().unwrap());
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let metrics = jsonl(&only_run(&cx).join("metrics.jsonl"));
    assert_eq!(metrics.len(), 1, "{metrics:?}");
    assert!(metrics[0]["eval/pass@1"].is_number(), "{metrics:?}");
    let paths: Vec<String> = served.record().iter().map(|r| r["path"].as_str().unwrap().to_string()).collect();
    assert!(paths.iter().any(|p| p == "/api/v1/create_sampling_session"), "{paths:?}");
    assert!(!paths.iter().any(|p| p == "/api/v1/create_model"), "no training model for an evaluation: {paths:?}");
    // Saved sampler weights must be named by a tinker:// path, and only evaluate.
    cx.write("bad.yaml", &spec_with(&served.url, 2, 1, ", model_path: 'runs/x'"));
    let r = cx.run(&["validate", "bad.yaml"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("must be a `tinker://` path"), "{}", r.stderr);
    cx.write("bad2.yaml", &spec_with(&served.url, 2, 1, ", model_path: 'tinker://m/sampler_weights/s'"));
    let r = cx.run(&["validate", "bad2.yaml"]);
    assert!(r.stderr.contains("`schedule.max_steps` is 2") && r.stderr.contains("max_steps: 0"), "{}", r.stderr);
}

/// `./.env` supplies the Tinker key when the environment has none; it never overrides the real
/// environment (an empty `TINKER_API_KEY` set by the user stays empty); names rlx does not use
/// are left alone; an unreadable line is a warning naming `.env:LINE`; the key is written nowhere.
#[test]
fn a_dotenv_file_supplies_the_key_without_overriding_the_environment() {
    let cx = TestContext::new();
    let model = tiny(cx.path());
    let served = serve(&cx, &model, &[]);
    cx.write("spec.yaml", &spec(&served.url, 1, 1));
    cx.write(".env", "# keys\nexport TINKER_API_KEY=\"tml-dotenv-secret\"\nnot a line\nUNRELATED_SETTING=1\n");
    let r = Run::from(cx.rlx().args(["run", "spec.yaml"]).env_remove("TINKER_API_KEY").output().unwrap());
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains(".env:3: expected `NAME=value`; line skipped"), "{}", r.stderr);
    assert!(!format!("{}{}", r.stdout, r.stderr).contains("tml-dotenv-secret"), "the key was printed");
    let dir = only_run(&cx);
    for e in walk(&dir) {
        let bytes = std::fs::read(&e).unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains("tml-dotenv-secret"), "the key is in {}", e.display());
    }
    // The real environment wins, even when empty.
    let r = Run::from(cx.rlx().args(["run", "spec.yaml", "seed=1"]).env("TINKER_API_KEY", "").output().unwrap());
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("no Tinker API key"), "{}", r.stderr);
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() { out.extend(walk(&p)) } else { out.push(p) }
    }
    out
}

/// `TINKER_BASE_URL` at a port where nothing listens (a typo) fails at the first request, naming
/// the URL and where it came from, as the user's error; it used to be retried for minutes.
#[test]
fn a_closed_base_url_fails_at_once_naming_it() {
    let cx = TestContext::new();
    let model = tiny(cx.path());
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let spec = spec("http://unused", 1, 1).replace("base_url: 'http://unused', ", "");
    assert!(!spec.contains("http://unused"), "the test's spec must take the URL from the environment:\n{spec}");
    cx.write("spec.yaml", &spec);
    let _ = model;
    let r = Run::from(cx.rlx().args(["run", "spec.yaml"]).env("TINKER_API_KEY", "tml-test").env("TINKER_BASE_URL", &url).output().unwrap());
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains(&format!("nothing answers at the Tinker URL `{url}`")), "{}", r.stderr);
    assert!(r.stderr.contains("TINKER_BASE_URL"), "{}", r.stderr);
}

/// Runs the compatibility suite (scripts/tinker_compat.py) on `record` against `url`: its exit
/// status and the table it printed.
pub(crate) fn compat_table(record: &Path, url: &str, base_model: &str, name: &str, json_wire: bool) -> (i32, String) {
    let mut c = std::process::Command::new("python3");
    c.arg(crate::common::repo().join("scripts/tinker_compat.py")).arg("--record").arg(record).args(["--url", url, "--base-model", base_model, "--name", name]);
    if json_wire {
        c.arg("--json-wire");
    }
    let out = c.env("NO_PROXY", "127.0.0.1,localhost").env_remove("HTTP_PROXY").env_remove("http_proxy").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(stdout.starts_with("| endpoint"), "the suite printed no table:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), stdout)
}

/// The calls of a recorded `rlx run` (2 steps, a checkpoint each) replayed against a second
/// `rlx serve`: everything matches on the JSON wire; protobuf bodies are said to be skipped
/// without it.
#[test]
fn the_compatibility_suite_replays_a_recorded_run_against_rlx_serve() {
    let cx = TestContext::new();
    let model = tiny(cx.path());
    let recorded = serve(&cx, &model, &[]);
    cx.write("spec.yaml", &spec(&recorded.url, 2, 1));
    let r = Run::from(cx.rlx().args(["run", "spec.yaml"]).env("TINKER_API_KEY", "tml-test").output().unwrap());
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let cx2 = TestContext::new();
    let replayed = serve(&cx2, &model, &[]);
    let base = model.display().to_string();
    let (code, table) = compat_table(&recorded.record, &replayed.url, &base, "rlx serve", true);
    #[allow(clippy::print_stderr)] // the table is the test's output, shown with --nocapture
    {
        eprintln!("{table}");
    }
    assert_eq!(code, 0, "every replayed call matches on rlx serve:\n{table}");
    for endpoint in ["/api/v1/create_session", "/api/v1/create_model", "/api/v1/forward_backward", "/api/v1/optim_step", "/api/v1/save_weights", "/api/v1/save_weights_for_sampler", "/api/v1/asample"] {
        assert!(table.contains(&format!("| `{endpoint}` |")), "no row for {endpoint}:\n{table}");
    }
    let (code, table) = compat_table(&recorded.record, &replayed.url, &base, "rlx serve", false);
    assert_eq!(code, 1, "{table}");
    assert!(table.contains("forward_backward (protobuf)") && table.contains("skipped"), "{table}");
}
