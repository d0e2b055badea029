//! The OpenAI-compatible sampler against HTTP servers written here on 127.0.0.1 (raw sockets, so
//! a reply can be garbage, cut off mid-body or never come): request bodies, token accounting,
//! retries with back-off, and every failure mode (down, slow, garbage, truncated, disagreeing
//! with our tokenizer, a 4xx) as a clear error of the right class; then, through the `rlx`
//! binary, an evaluation and a dry run whose server fails for one problem: the problem is
//! dropped and counted, never scored. Also the dry run on the local backend. The real server
//! (llama.cpp) is `llama_cpp.rs`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rlx::backend::openai::{self, Config, Error};
use rlx::backend::Sampler;
use rlx::seam::{SampleRequest, SamplingParams, Stop};
use rlx::prompt::Tokenizer;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::common::{TestContext, jsonl, only_run, repo};

/// What the test server does with one request.
pub(crate) enum Reply {
    /// A status and a JSON body.
    Json(u16, Value),
    /// These bytes, then the connection closes.
    Raw(Vec<u8>),
    /// Never answer.
    Hang,
}

pub(crate) type Handler = dyn Fn(&str, &Value) -> Reply + Send + Sync;

/// A server on 127.0.0.1: every request goes to `handler` (path, JSON body); bodies are kept.
pub(crate) struct Server {
    addr: SocketAddr,
    pub(crate) bodies: Arc<Mutex<Vec<Value>>>,
}

impl Server {
    pub(crate) fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
    fn hits(&self, path_part: &str) -> usize {
        self.bodies.lock().unwrap().iter().filter(|b| b["_path"].as_str().unwrap_or("").contains(path_part)).count()
    }
}

pub(crate) async fn serve(handler: Arc<Handler>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let bodies = Arc::new(Mutex::new(vec![]));
    let log = bodies.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else { return };
            let (handler, log) = (handler.clone(), log.clone());
            tokio::spawn(async move {
                let mut buf = vec![];
                let mut chunk = [0u8; 4096];
                let head_end = loop {
                    let n = sock.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
                    .unwrap_or(0);
                while buf.len() < head_end + len {
                    let n = sock.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                let mut body: Value = serde_json::from_slice(&buf[head_end..]).unwrap_or(json!({}));
                let reply = handler(&path, &body);
                body["_path"] = json!(path);
                log.lock().unwrap().push(body);
                let bytes = match reply {
                    Reply::Json(status, v) => {
                        let text = v.to_string();
                        format!("HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}", text.len()).into_bytes()
                    }
                    Reply::Raw(b) => b,
                    Reply::Hang => {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        return;
                    }
                };
                let _ = sock.write_all(&bytes).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    Server { addr, bodies }
}

pub(crate) fn tokenizer() -> Arc<Tokenizer> {
    let (json, _) = crate::engine::char_tokenizer();
    Arc::new(Tokenizer::from_bytes(json.to_string().as_bytes()).unwrap())
}

pub(crate) fn models(owner: &str) -> Reply {
    Reply::Json(200, json!({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": owner}]}))
}

/// A llama-server-style completion of `text` (ids from our tokenizer), for a prompt of
/// `prompt_tokens` tokens.
pub(crate) fn completion(tok: &Tokenizer, text: &str, prompt_tokens: usize, finish: &str) -> Reply {
    let ids = tok.encode(text).unwrap();
    let content: Vec<Value> = ids.iter().map(|&id| json!({"id": id, "token": tok.decode(&[id], false).unwrap(), "logprob": -0.25})).collect();
    Reply::Json(200, json!({
        "choices": [{"text": text, "index": 0, "finish_reason": finish, "logprobs": {"content": content}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": ids.len()}
    }))
}

fn config(url: String) -> Config {
    Config { backoff: Duration::from_millis(5), max_retries: 2, timeout: Duration::from_secs(10), ..Config::new(url, "m") }
}

fn params() -> SamplingParams {
    SamplingParams { max_tokens: 16, temperature: 1.0, stop: vec![Stop::Token(1)], ..SamplingParams::default() }
}

fn req(prompt: &[u32], n: usize, seed: u64) -> SampleRequest {
    SampleRequest { prompt: prompt.to_vec(), num_samples: n, seed: Some(seed), greedy: false }
}

fn prompt_len(body: &Value) -> usize {
    body["prompt"].as_array().map_or(0, Vec::len)
}

#[tokio::test]
async fn a_healthy_server_samples_with_seeds_switches_and_token_accounting() {
    let tok = tokenizer();
    let t = tok.clone();
    let server = serve(Arc::new(move |path: &str, body: &Value| match path {
        "/v1/models" => models("llamacpp"),
        _ => completion(&t, "ab c", prompt_len(body), "stop"),
    }))
    .await;
    let sampler = openai::open(config(server.url()), tok.clone()).await.unwrap();
    let prompt = tok.encode("hello").unwrap();
    let out = sampler.sample(vec![req(&prompt, 2, 7), req(&prompt[..3], 1, 8)], &params()).await.unwrap();
    assert_eq!(out.iter().map(Vec::len).collect::<Vec<_>>(), [2, 1]);
    let seq = &out[0][0];
    assert_eq!(tok.decode(&seq.tokens, false).unwrap(), "ab c");
    assert_eq!(seq.logprobs, vec![-0.25; 4]);
    assert_eq!(seq.stop_reason, rlx::seam::StopReason::Stop);
    let usage = sampler.usage();
    assert_eq!((usage.requests, usage.prompt_tokens, usage.completion_tokens, usage.retries), (3, 5 + 5 + 3, 12, 0));
    // One request per completion, each with its own seed; llama.cpp's sampling switches off.
    let bodies: Vec<Value> = server.bodies.lock().unwrap().iter().filter(|b| b["_path"] == "/v1/completions").cloned().collect();
    assert_eq!(bodies.len(), 3);
    let seeds: std::collections::BTreeSet<u64> = bodies.iter().map(|b| b["seed"].as_u64().unwrap()).collect();
    assert_eq!(seeds.len(), 3, "{bodies:?}");
    let b = &bodies[0];
    assert_eq!((b["top_k"].clone(), b["min_p"].clone(), b["repeat_penalty"].clone(), b["n"].clone()), (json!(0), json!(0.0), json!(1.0), json!(1)));
    assert!(b["prompt"].is_array() && b["logprobs"] == 1 && b["model"] == "m", "{b}");
    // The same seed again gives the same request seeds (what makes a server's samples repeatable).
    let again = sampler.sample(vec![req(&prompt, 2, 7)], &params()).await.unwrap();
    assert_eq!(again[0].len(), 2);
    let later: Vec<u64> = server.bodies.lock().unwrap().iter().rev().take(2).map(|b| b["seed"].as_u64().unwrap()).collect();
    assert!(later.iter().all(|s| seeds.contains(s)));
    // A greedy request beside a sampled one (an eval's two protocols in one call) goes out at
    // temperature 0; the sampled one keeps the call's.
    let greedy = SampleRequest { greedy: true, ..req(&prompt, 1, 9) };
    sampler.sample(vec![req(&prompt, 1, 9), greedy], &params()).await.unwrap();
    let mut temps: Vec<f64> = server.bodies.lock().unwrap().iter().rev().take(2).map(|b| b["temperature"].as_f64().unwrap()).collect();
    temps.sort_by(f64::total_cmp);
    assert_eq!(temps, [0.0, 1.0]);
}

#[tokio::test]
async fn server_errors_and_rate_limits_are_retried_with_back_off() {
    let tok = tokenizer();
    let t = tok.clone();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let server = serve(Arc::new(move |path: &str, body: &Value| match path {
        "/v1/models" => models("llamacpp"),
        _ => match c.fetch_add(1, Ordering::SeqCst) {
            0 => Reply::Json(503, json!({"error": "loading"})),
            1 => Reply::Json(429, json!({"error": "slow down"})),
            _ => completion(&t, "x", prompt_len(body), "length"),
        },
    }))
    .await;
    let sampler = openai::open(config(server.url()), tok.clone()).await.unwrap();
    let out = sampler.sample(vec![req(&tok.encode("hi").unwrap(), 1, 1)], &params()).await.unwrap();
    assert_eq!(out[0][0].stop_reason, rlx::seam::StopReason::Length);
    assert_eq!(sampler.usage().retries, 2);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn the_chat_api_sends_the_conversation_and_encodes_the_reply() {
    let tok = tokenizer();
    let server = serve(Arc::new(|path: &str, _: &Value| match path {
        "/v1/models" => models("vllm"),
        _ => Reply::Json(200, json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "ab c"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 11, "completion_tokens": 3}})),
    }))
    .await;
    let sampler = openai::open(Config { api: rlx::backend::openai::Api::Chat, ..config(server.url()) }, tok.clone()).await.unwrap();
    // Tokens alone cannot be sent to a chat endpoint.
    let err = sampler.sample(vec![req(&tok.encode("hi").unwrap(), 1, 1)], &params()).await.unwrap_err();
    assert!(err.to_string().contains("samples conversations") && err.is_user_error(), "{err}");
    let chat = rlx::backend::ChatRequest { request: req(&tok.encode("hi").unwrap(), 2, 1), messages: vec![rlx::prompt::Message::new("user", "hi")], tools: vec![] };
    let out = sampler.sample_chat(vec![chat], &params()).await.unwrap();
    let seq = &out[0][1];
    assert_eq!(seq.tokens, tok.encode("ab c").unwrap(), "our encoding of the reply's text");
    assert!(seq.logprobs.len() == 4 && seq.logprobs.iter().all(|l| l.is_nan()), "a chat reply has no log-probabilities");
    let body = server.bodies.lock().unwrap().last().cloned().unwrap();
    assert_eq!(body["_path"], "/v1/chat/completions");
    assert_eq!(body["messages"], json!([{"role": "user", "content": "hi"}]));
    assert!(body.get("prompt").is_none() && body.get("logprobs").is_none(), "{body}");
    assert_eq!((body["top_k"].clone(), body["max_tokens"].clone()), (json!(-1), json!(16)), "vLLM's way to switch top-k off");
}

/// The error a one-completion request ends with, with `reply` answering every completion.
async fn failure(owner: &'static str, cfg: impl Fn(String) -> Config, reply: impl Fn(&Tokenizer, &Value) -> Reply + Send + Sync + 'static) -> (Error, Server) {
    let tok = tokenizer();
    let t = tok.clone();
    let server = serve(Arc::new(move |path: &str, body: &Value| if path == "/v1/models" { models(owner) } else { reply(&t, body) })).await;
    let sampler = openai::open(cfg(server.url()), tok.clone()).await.unwrap();
    let err = sampler.sample(vec![req(&tok.encode("hi").unwrap(), 1, 1)], &params()).await.unwrap_err();
    let rlx::backend::Error::Openai(e) = err else { panic!("not an OpenAI error: {err:?}") };
    (e, server)
}

fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[tokio::test]
async fn a_server_that_is_down_is_an_infrastructure_error_after_the_retries() {
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let err = openai::open(config(format!("http://127.0.0.1:{port}/v1")), tokenizer()).await.unwrap_err();
    assert!(matches!(err, Error::Unreachable { attempts: 3, .. }), "{err:?}");
    assert!(err.is_infrastructure() && !err.is_user_error());
    assert!(chain(&err).contains(&format!("no answer from `http://127.0.0.1:{port}/v1/models` after 3 attempt(s)")), "{}", chain(&err));
}

#[tokio::test]
async fn a_slow_server_times_out_and_is_retried() {
    let slow = |url| Config { timeout: Duration::from_millis(300), max_retries: 1, ..config(url) };
    let (e, server) = failure("llamacpp", slow, |_, _| Reply::Hang).await;
    assert!(matches!(e, Error::Unreachable { attempts: 2, .. }), "{e:?}");
    assert!(e.is_infrastructure());
    assert!(chain(&e).to_lowercase().contains("timed out") || chain(&e).contains("operation"), "{}", chain(&e));
    assert_eq!(server.hits("completions"), 2);
}

#[tokio::test]
async fn garbage_and_truncated_replies_are_malformed_after_the_retries() {
    let (e, server) = failure("llamacpp", config, |_, _| Reply::Json(200, json!("<html>bad gateway</html>"))).await;
    assert!(matches!(e, Error::Malformed { attempts: 3, .. }) && e.is_infrastructure(), "{e:?}");
    assert!(e.to_string().contains("no `choices[0]`"), "{e}");
    assert_eq!(server.hits("completions"), 3);

    let (e, _) = failure("llamacpp", config, |_, _| Reply::Raw(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n{\"choices".to_vec())).await;
    assert!(matches!(e, Error::Malformed { .. }) && e.to_string().contains("not JSON"), "{e:?}");

    // The body is cut off before its announced length: the connection closes mid-reply.
    let (e, _) = failure("llamacpp", config, |_, _| Reply::Raw(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"choices\": [".to_vec())).await;
    assert!(e.is_infrastructure(), "{e:?}");

    // A reply with fewer log-probabilities than tokens.
    let (e, _) = failure("me", config, |_, _| {
        Reply::Json(200, json!({"choices": [{"text": "ab", "finish_reason": "stop", "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-0.1]}}]}))
    })
    .await;
    assert!(matches!(e, Error::Malformed { .. }) && e.to_string().contains("2 tokens but 1 log-probabilities"), "{e}");
}

#[tokio::test]
async fn tokens_that_disagree_with_our_tokenizer_are_refused() {
    // Ids that decode to other text than the server's.
    let (e, _) = failure("llamacpp", config, |tok, body| {
        let Reply::Json(_, mut v) = completion(tok, "abc", prompt_len(body), "stop") else { unreachable!() };
        v["choices"][0]["text"] = json!("xyz");
        Reply::Json(200, v)
    })
    .await;
    assert!(matches!(e, Error::TokenMismatch { .. }) && e.is_infrastructure(), "{e:?}");
    assert!(e.to_string().contains("\"xyz\"") && e.to_string().contains("\"abc\""), "{e}");
    // Token strings our vocabulary does not have (the char tokenizer has no `ab`).
    let (e, _) = failure("me", config, |_, _| {
        Reply::Json(200, json!({"choices": [{"text": "abc", "finish_reason": "stop", "logprobs": {"tokens": ["ab", "c"], "token_logprobs": [-0.1, -0.2]}}]}))
    })
    .await;
    assert!(matches!(e, Error::TokenMismatch { .. }), "{e:?}");
    assert!(e.to_string().contains("token 0 is \"ab\" on the server but \"a\" with our tokenizer"), "{e}");
    // A prompt the server counts differently: another model's tokenizer.
    let (e, _) = failure("llamacpp", config, |tok, _| completion(tok, "a", 99, "stop")).await;
    assert!(e.to_string().contains("counted 99 prompt tokens, our tokenizer 2"), "{e}");
    // Token strings that do match are mapped to our ids, with their log-probabilities.
    let tok = tokenizer();
    let t = tok.clone();
    let server = serve(Arc::new(move |path: &str, _: &Value| match path {
        "/v1/models" => models("me"),
        _ => Reply::Json(200, json!({"choices": [{"text": "ab", "finish_reason": "stop", "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-0.1, -0.2]}}], "usage": {"prompt_tokens": 2}})),
    }))
    .await;
    let sampler = openai::open(Config { prompt: rlx::backend::openai::PromptEncoding::Text, ..config(server.url()) }, tok.clone()).await.unwrap();
    let out = sampler.sample(vec![req(&t.encode("hi").unwrap(), 1, 1)], &params()).await.unwrap();
    assert_eq!(out[0][0].tokens, t.encode("ab").unwrap());
    assert_eq!(out[0][0].logprobs, vec![-0.1, -0.2]);
    assert_eq!(server.bodies.lock().unwrap().last().unwrap()["prompt"], "hi", "text prompts are our rendering, decoded");
}

#[tokio::test]
async fn client_errors_are_not_retried_and_unknown_models_are_named() {
    let (e, server) = failure("llamacpp", config, |_, _| Reply::Json(400, json!({"error": "prompt must be a string"}))).await;
    assert!(matches!(e, Error::Status { status: 400, attempts: 1, .. }) && e.is_user_error() && !e.is_infrastructure(), "{e:?}");
    assert!(e.to_string().contains("prompt must be a string"), "{e}");
    assert_eq!(server.hits("completions"), 1);

    let server = serve(Arc::new(|_: &str, _: &Value| Reply::Json(200, json!({"data": [{"id": "other", "owned_by": "vllm"}]})))).await;
    let err = openai::open(config(server.url()), tokenizer()).await.unwrap_err();
    assert!(err.is_user_error());
    assert_eq!(err.to_string(), format!("`{}` does not serve `m`; it serves `other`", server.url()));
}

/// Problems the test server can answer: `f` returns 1 (answered correctly), `g` returns 2 (the
/// server fails on it).
const PROBLEMS: &str = r#"{"task_id": 1, "text": "Write f. Return 1.", "code": "", "test_list": ["assert f() == 1"]}
{"task_id": 2, "text": "Write g. Return 2.", "code": "", "test_list": ["assert g() == 2"]}
"#;

/// A server that answers `f` correctly and fails with 500 on anything about `g`.
async fn half_broken_server() -> Server {
    let tok = tokenizer();
    serve(Arc::new(move |path: &str, body: &Value| {
        if path == "/v1/models" {
            return models("llamacpp");
        }
        let ids: Vec<u32> = body["prompt"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let prompt = tok.decode(&ids, false).unwrap();
        if prompt.contains("Write g.") {
            Reply::Json(500, json!({"error": "CUDA error: out of memory"}))
        } else {
            completion(&tok, "```python\ndef f():\n    return 1\n```", ids.len(), "stop")
        }
    }))
    .await
}

fn tiny(cx: &TestContext) {
    crate::engine::tiny_model(&cx.path().join("tiny"));
    cx.write("problems.jsonl", PROBLEMS);
}

#[test]
fn rlx_eval_drops_and_counts_a_problem_the_server_fails_on() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(half_broken_server());
    let cx = TestContext::new();
    tiny(&cx);
    let url = server.url();
    let r = cx.run(&["eval", "--model", "./tiny", "--data", "problems.jsonl", "--format", "mbpp", "--base-url", &url, "--served-model", "m", "--max-tokens", "64"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("pass@1   100.00%  95% CI [100.00%, 100.00%]  over 1 problems"), "{}", r.stdout);
    assert!(r.stderr.contains("1 problem(s) dropped after sampler infrastructure errors"), "{}", r.stderr);
    let dir = only_run(&cx);
    let results = jsonl(&dir.join("eval_results.jsonl"));
    assert_eq!(results.len(), 1, "the failed problem has no record: it was not scored");
    assert_eq!((results[0]["problem_id"].as_str(), results[0]["correct"].as_u64()), (Some("1"), Some(1)));
    let metrics = jsonl(&dir.join("metrics.jsonl"));
    assert_eq!(metrics[0]["eval/problems_dropped"], 1.0);
    assert_eq!(metrics[0]["eval/problems"], 1.0);
    // The failing problem was retried (3 retries by default... 4) before it was dropped.
    assert_eq!(server.bodies.lock().unwrap().iter().filter(|b| b["_path"] == "/v1/completions").count(), 1 + 5);
}

fn dry_spec(backend: &str, extra: &str) -> String {
    format!(
        "name: dry
model: {{base: ./tiny, finetune: full}}
backend: {backend}
data:
  train: [{{path: problems.jsonl, format: mbpp}}]
prompt: {{user: {user}, feedback: {feedback}}}
sampling: {{max_tokens: 48, temperature: 1.0}}
grpo: {{prompts_per_step: 2, group_size: 2}}
sandbox: {{kind: local, strict: false}}
schedule: {{max_steps: 2, eval_at_start: false}}
{extra}",
        user = repo().join("prompts/mbpp_user.j2").display(),
        feedback = repo().join("prompts/feedback.j2").display(),
    )
}

#[test]
fn a_dry_run_on_a_server_drops_failed_groups_and_trains_nothing() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(half_broken_server());
    let cx = TestContext::new();
    tiny(&cx);
    cx.write("spec.yaml", &dry_spec(&format!("{{kind: openai, base_url: \"{}\", served_model: m, max_retries: 1}}", server.url()), ""));
    // Training on a sampling-only backend is refused, with the dry run as the way out.
    let r = cx.run(&["run", "spec.yaml"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("can only sample") && r.stderr.contains("--dry-run"), "{}", r.stderr);
    let r = cx.run(&["run", "spec.yaml", "--dry-run"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("dry run: nothing trained"), "{}", r.stderr);
    let dir = only_run(&cx);
    let prov: Value = serde_json::from_slice(&std::fs::read(dir.join("provenance.json")).unwrap()).unwrap();
    assert_eq!(prov["dry_run"], true);
    assert!(prov["overrides"].as_array().unwrap().contains(&json!("schedule.dry_run=true")));
    let metrics = jsonl(&dir.join("metrics.jsonl"));
    assert_eq!(metrics.len(), 2);
    for m in &metrics {
        assert_eq!(m["train/groups_sampler_dropped"], 1.0, "{m}");
        assert_eq!(m["train/groups"], 1.0);
        assert_eq!(m["train/correct_mean"], 1.0, "only the answered problem is scored: {m}");
        assert!(m.get("train/loss").is_none(), "nothing trained: {m}");
        assert_eq!(m["train/datums"], 0.0, "a group of two correct answers is degenerate");
    }
    let rollouts = jsonl(&dir.join("rollouts.jsonl"));
    assert!(rollouts.iter().all(|r| r["problem_id"] == "1" && r["reward"].as_f64().unwrap() > 0.0));
    assert!(jsonl(&dir.join("checkpoints.jsonl")).is_empty() && !dir.join("checkpoints").join("step-000001").exists());
}

#[test]
fn a_dry_run_on_the_local_backend_scores_multi_attempt_rollouts_without_training() {
    let cx = TestContext::new();
    tiny(&cx);
    cx.write("spec.yaml", &dry_spec("{kind: local, threads: 1}", "rollout: {max_attempts: 2}\ngrpo: {prompts_per_step: 2, group_size: 2, skip_degenerate: false}\n").replace("grpo: {prompts_per_step: 2, group_size: 2}\n", ""));
    let r = cx.run(&["run", "spec.yaml", "--dry-run"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let dir = only_run(&cx);
    let metrics = jsonl(&dir.join("metrics.jsonl"));
    assert_eq!(metrics.iter().map(|m| m["step"].as_i64().unwrap()).collect::<Vec<_>>(), [0, 1]);
    for m in &metrics {
        // Random weights write no code: every answer is wrong, so each gets its second attempt.
        assert_eq!(m["train/attempts_mean"], 2.0, "{m}");
        assert!(m["train/datums"].as_f64().unwrap() >= 4.0, "datums are built and counted: {m}");
        assert!(m.get("train/loss").is_none() && m.get("optim/grad_norm").is_none(), "{m}");
    }
    assert_eq!(jsonl(&dir.join("rollouts.jsonl")).len(), 8);
    assert!(jsonl(&dir.join("checkpoints.jsonl")).is_empty());
    let prov: Value = serde_json::from_slice(&std::fs::read(dir.join("provenance.json")).unwrap()).unwrap();
    assert_eq!(prov["dry_run"], true);
    // The same spec without --dry-run is another run (its own id and directory).
    let resolved: Value = serde_json::from_slice(&std::fs::read(dir.join("resolved.json")).unwrap()).unwrap();
    assert_eq!(resolved["schedule"]["dry_run"], true);
}

#[test]
fn the_mbpp_multistep_specs_validate_for_a_server_tinker_and_offline() {
    let cx = TestContext::new();
    let spec = repo().join("experiments/mbpp-multistep.yaml").display().to_string();
    let offline = repo().join("experiments/mbpp-multistep-offline.yaml").display().to_string();
    for args in [vec!["validate", spec.as_str()], vec!["validate", spec.as_str(), "backend={kind: tinker}", "schedule.dry_run=false"], vec!["validate", offline.as_str()]] {
        let r = cx.run(&args);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    }
    // The server variant without its dry run would train on a backend that cannot.
    let r = cx.run(&["validate", &spec, "schedule.dry_run=false"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("can only sample"), "{}", r.stderr);
}

#[test]
fn rlx_eval_of_a_spec_is_its_own_evaluation_only_run() {
    let cx = TestContext::new();
    tiny(&cx);
    cx.write("spec.yaml", &format!("{}data:\n  train: [{{path: problems.jsonl, format: mbpp}}]\n  eval: [{{path: problems.jsonl, format: mbpp}}]\n", dry_spec("{kind: local, threads: 1}", "").replace("data:\n  train: [{path: problems.jsonl, format: mbpp}]\n", "")));
    let r = cx.run(&["eval", "spec.yaml", "--k", "1,2", "--n", "3", "--temperature", "1.0", "--max-tokens", "8"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    // Random weights write no code: 0% with a zero-width interval, over both problems.
    assert!(r.stdout.contains("pass@1     0.00%  95% CI [0.00%, 0.00%]  over 2 problems"), "{}", r.stdout);
    assert!(r.stdout.contains("pass@2 "), "{}", r.stdout);
    let dir = only_run(&cx);
    let prov: Value = serde_json::from_slice(&std::fs::read(dir.join("provenance.json")).unwrap()).unwrap();
    let ovs = prov["overrides"].as_array().unwrap();
    for o in ["schedule.max_steps=0", "eval.k=[1,2]", "eval.samples=3", "eval.temperature=1", "eval.max_tokens=8"] {
        assert!(ovs.iter().any(|v| v.as_str().unwrap().starts_with(o)), "{o} not in {ovs:?}");
    }
    // Sampled at temperature 1, so greedy pass@1 too (`eval.greedy` on by default): one more
    // record per problem, tagged, one sample each.
    assert!(r.stdout.contains("greedy     0.00%  95% CI [0.00%, 0.00%]  over 2 problems (pass@1, 1 sample at temperature 0)"), "{}", r.stdout);
    let results = jsonl(&dir.join("eval_results.jsonl"));
    assert_eq!(results.len(), 4);
    let (greedy, main): (Vec<&Value>, Vec<&Value>) = results.iter().partition(|r| r.get("protocol").is_some());
    assert!(main.len() == 2 && main.iter().all(|r| r["n"] == 3 && r["statuses"].as_array().unwrap().len() == 3), "{main:?}");
    assert!(greedy.len() == 2 && greedy.iter().all(|r| r["protocol"] == "greedy" && r["n"] == 1 && r["metrics"].get("pass@1").is_some()), "{greedy:?}");
    let m = &jsonl(&dir.join("metrics.jsonl"))[0];
    assert!(m["eval/greedy/pass@1"] == 0.0 && m["eval/greedy/problems"] == 2.0 && m["eval/greedy/format_rate"].is_number(), "{m}");
    let rollouts = jsonl(&dir.join("eval_rollouts.jsonl"));
    assert_eq!(rollouts.iter().filter(|r| r["protocol"] == "greedy").count(), 2, "{rollouts:?}");
    assert!(jsonl(&dir.join("checkpoints.jsonl")).is_empty(), "an evaluation saves nothing");

    // A spec whose eval samples 3 at temperature 1: `eval.temperature=0` alone is the greedy
    // protocol (one sample, pass@1), not a refusal.
    let spec = std::fs::read_to_string(cx.path().join("spec.yaml")).unwrap();
    cx.write("sampled.yaml", &format!("{}eval: {{k: [1, 2], samples: 3, temperature: 1.0, max_tokens: 8}}\n", spec.replace("name: dry", "name: sampled")));
    let r = cx.run(&["eval", "sampled.yaml", "eval.temperature=0"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("pass@1     0.00%") && !r.stdout.contains("pass@2") && !r.stdout.contains("greedy "), "{}", r.stdout);
    let run = std::fs::read_dir(cx.path().join("runs")).unwrap().flatten().map(|e| e.path()).find(|p| p.file_name().unwrap().to_string_lossy().starts_with("sampled-")).unwrap();
    let results = jsonl(&run.join("eval_results.jsonl"));
    assert!(results.len() == 2 && results.iter().all(|r| r["n"] == 1 && r.get("protocol").is_none()), "{results:?}");
    assert_eq!(jsonl(&run.join("metrics.jsonl"))[0]["eval/greedy/pass@1"], 0.0, "the main eval is the greedy protocol, named as such");
    // Asking for more samples at temperature 0 is still refused, saying what to set.
    let r = cx.run(&["eval", "sampled.yaml", "eval.temperature=0", "eval.samples=3"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("set `eval.samples: 1`"), "{}", r.stderr);
}
