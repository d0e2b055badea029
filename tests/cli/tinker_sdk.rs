//! `rlx serve` driven by the official Tinker Python SDK (`tinker==0.38.0`, installed by the test
//! into a cached virtualenv) over real HTTP on 127.0.0.1, on a tiny random model the test builds:
//! every call of the issue, with shapes and values checked by the script
//! (tests/fixtures/tinker_sdk/drive.py) and again here; then the same with faults injected, where
//! the SDK's retries must still complete the script and the server's request record must show
//! no work done twice.
//!
//! [`sdk_python`] and [`Server`] are shared with other Tinker tests (the client backend's).

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::common::{TestContext, python_env, repo};

/// The pinned SDK set (one cached virtualenv for every Tinker test).
pub(crate) const SDK_REQUIREMENTS: &[&str] = &["tinker==0.38.0", "transformers==5.23.0", "tokenizers==0.23.3", "numpy==2.4.6"];

/// Python with the Tinker SDK, or `None` (after a SKIPPED line) without a package registry.
#[track_caller]
pub(crate) fn sdk_python() -> Option<PathBuf> {
    python_env("tinker", SDK_REQUIREMENTS)
}

/// A running `rlx serve`; killed on drop.
pub(crate) struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The `--record` file.
    pub record: PathBuf,
}

impl Server {
    /// Starts `rlx serve` in `cx` on a free port over the model at `model` (served as
    /// `tiny-model` too), with `extra` arguments; waits until it listens.
    pub(crate) fn start(cx: &TestContext, model: &Path, extra: &[&str]) -> Server {
        Self::start_at(cx, model, "127.0.0.1:0", extra)
    }

    /// [`Server::start`] listening on `bind` (a server restarted at the URL a run names).
    pub(crate) fn start_at(cx: &TestContext, model: &Path, bind: &str, extra: &[&str]) -> Server {
        let record = cx.path().join("record.jsonl");
        let mut child = cx
            .rlx()
            .args(["serve", "--bind", bind, "--name", "tiny-model", "--threads", "1", "--state-dir", "state", "--record"])
            .arg(&record)
            .arg("--model")
            .arg(model)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rlx serve starts");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let url = loop {
            let Some(Ok(line)) = lines.next() else {
                let _ = child.kill();
                panic!("rlx serve exited before listening");
            };
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest.split_whitespace().next().unwrap().to_string();
            }
        };
        // Keep draining stderr so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Server { child, url, record }
    }

    /// The request record's lines so far.
    pub(crate) fn record(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.record).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    /// A command running `script` with the SDK pointed at this server only: no telemetry, no
    /// proxy, no Hub.
    pub(crate) fn python(&self, python: &Path, script: &Path) -> Command {
        let mut c = Command::new(python);
        c.arg(script)
            .env("TINKER_BASE_URL", &self.url)
            .env("TINKER_API_KEY", "tml-rlx-test")
            .env("TINKER_TELEMETRY", "0")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("HF_HUB_OFFLINE", "1")
            .env("TRANSFORMERS_OFFLINE", "1")
            .env("HF_HOME", std::env::temp_dir().join("rlx-test-hf-home"))
            .env_remove("TINKER_CREDENTIAL_CMD")
            .env_remove("HTTP_PROXY")
            .env_remove("HTTPS_PROXY")
            .env_remove("http_proxy")
            .env_remove("https_proxy");
        c
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn drive(cx: &TestContext, server: &Server, python: &Path, args: &[&str]) -> Value {
    let script = repo().join("tests/fixtures/tinker_sdk/drive.py");
    let out = server.python(python, &script).args(args).current_dir(cx.path()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the SDK script failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    let summary = serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_else(|e| panic!("no summary line ({e}):\n{stdout}\n{stderr}"));
    #[allow(clippy::print_stderr)] // shown with --nocapture, for diagnosis
    {
        eprintln!("SDK summary: {summary}");
    }
    summary
}

fn tiny(cx: &TestContext) -> PathBuf {
    let dir = cx.path().join("tiny");
    crate::engine::tiny_model(&dir);
    dir
}

/// Training and sampling submissions: the record key that identifies their work.
fn work_key(line: &Value) -> Option<(String, String, u64)> {
    let path = line["path"].as_str()?;
    let seq = line["seq_id"].as_u64()?;
    match path {
        "/api/v1/forward_backward" | "/api/v1/optim_step" | "/api/v1/save_weights" | "/api/v1/save_weights_for_sampler" => {
            Some(("train".into(), line["model_id"].as_str()?.to_string(), seq))
        }
        "/api/v1/asample" => Some(("sample".into(), line["sampling_session_id"].as_str()?.to_string(), seq)),
        _ => None,
    }
}

#[test]
fn the_official_sdk_drives_rlx_serve() {
    let Some(python) = sdk_python() else { return };
    let cx = TestContext::new();
    let model = tiny(&cx);
    let server = Server::start(&cx, &model, &[]);
    let s = drive(&cx, &server, &python, &["tiny-model"]);

    let losses: Vec<f64> = s["ce_losses"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(losses.len(), 4);
    assert!(losses.windows(2).all(|w| w[1] < w[0]), "cross_entropy must fall step after step: {losses:?}");
    assert!(s["sample_logprob_max_diff"].as_f64().unwrap() < 2e-3, "{s}");
    assert!(s["prompt_logprob_max_diff"].as_f64().unwrap() < 2e-3, "{s}");
    assert_eq!(s["topk_vocab"].as_u64(), Some(crate::engine::char_tokenizer().1 as u64), "k past the vocabulary is every token: {s}");
    // `loss_fn_config.temperature` scores a tempered sampler's tokens on-policy; without it, not.
    assert!(s["tempered_logprob_max_diff"].as_f64().unwrap() < 2e-3, "{s}");
    assert!(s["untempered_logprob_max_diff"].as_f64().unwrap() > 1e-2, "{s}");
    assert!((s["is_loss"].as_f64().unwrap() + 0.5 * s["tokens"].as_f64().unwrap()).abs() < 1e-2, "{s}");
    assert!(s["too_long_error"].as_str().unwrap().contains("exceed the model's context"), "{s}");
    assert!(s["state_path"].as_str().unwrap().starts_with("tinker://"), "{s}");
    // `user_metadata` of create_model comes back from GET /training_runs/{id}, for the model and
    // for the one created from its checkpoint.
    for key in ["user_metadata", "resumed_user_metadata"] {
        assert_eq!(s[key]["renderer_name"], "qwen3", "{key}: {s}");
        assert_eq!(s[key]["recipe"], "rlx-test", "{key}: {s}");
    }
    let refusal = s["stable_reinforce_error"].as_str().unwrap();
    assert!(refusal.contains("400") || refusal.contains("BadRequest"), "refused at submission, not in the future: {refusal}");
    assert!(refusal.contains("stable_reinforce") && refusal.contains("ppo") && refusal.contains("importance_sampling"), "{refusal}");

    let record = server.record();
    let paths: Vec<&str> = record.iter().filter_map(|l| l["path"].as_str()).collect();
    for p in [
        "/api/v1/client/config",
        "/api/v1/create_session",
        "/api/v1/create_model",
        "/api/v1/get_info",
        "/api/v1/forward_backward",
        "/api/v1/optim_step",
        "/api/v1/save_weights_for_sampler",
        "/api/v1/asample",
        "/api/v1/create_sampling_session",
        "/api/v1/save_weights",
        "/api/v1/load_weights",
        "/api/v1/retrieve_future",
    ] {
        assert!(paths.contains(&p), "the SDK never called {p}: {paths:?}");
    }
    assert!(!paths.contains(&"/api/v1/telemetry"), "telemetry was off");
    // The protobuf bodies are in the record, decoded.
    let fb = record.iter().find(|l| l["path"] == "/api/v1/forward_backward").unwrap();
    assert_eq!(fb["body"]["loss_fn"], "cross_entropy");
    assert_eq!(fb["body"]["data"][0]["loss_fn_inputs"]["target_tokens"]["dtype"], "int64");
    assert_eq!(fb["seq_id"], 1);
    // Each model's training requests carry seq_ids 1, 2, 3, ... without gaps.
    let mut seqs: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for l in &record {
        if let Some((kind, id, seq)) = work_key(l)
            && kind == "train"
        {
            seqs.entry(id).or_default().push(seq);
        }
    }
    assert_eq!(seqs.len(), 2, "the first model and the one created from its state: {seqs:?}");
    for (id, v) in &seqs {
        assert_eq!(*v, (1..=v.len() as u64).collect::<Vec<_>>(), "seq_ids of {id}");
    }
    // The record's failures are the two bad requests' futures, answered 200 with an error, and
    // the stable_reinforce submission, refused with 400.
    let refused: Vec<&Value> = record.iter().filter(|l| l["status"] != 200 && l["path"] != "/api/v1/retrieve_future").collect();
    assert_eq!(refused.len(), 1, "unexpected HTTP errors: {refused:?}");
    assert_eq!((refused[0]["path"].as_str(), refused[0]["status"].as_u64()), (Some("/api/v1/forward_backward"), Some(400)));
}

#[test]
fn the_sdk_completes_through_injected_faults_without_duplicated_work() {
    let Some(python) = sdk_python() else { return };
    let cx = TestContext::new();
    let model = tiny(&cx);
    let faults = ["--fault", "seed=11", "--fault", "5xx=0.15", "--fault", "drop=0.1", "--fault", "429=0.05", "--fault", "try-again=0.3", "--fault", "latency=2ms"];
    let server = Server::start(&cx, &model, &faults);
    let s = drive(&cx, &server, &python, &["tiny-model", "--quick"]);
    let losses: Vec<f64> = s["ce_losses"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert!(losses[1] < losses[0], "{losses:?}");

    let record = server.record();
    let faulted = record.iter().filter(|l| l.get("fault").is_some()).count();
    let duplicates = record.iter().filter(|l| l["duplicate"] == true).count();
    #[allow(clippy::print_stderr)]
    {
        eprintln!("{} requests, {faulted} faulted, {duplicates} answered as duplicates", record.len());
    }
    assert!(faulted > 0, "no fault was injected");
    assert!(duplicates > 0, "no resubmission reached the server (seed 11 gives some)");
    // No work twice: each training (model_id, seq_id) and each sample (session, seq_id) started
    // once; every other submission of it was answered as a duplicate.
    let mut started: BTreeMap<(String, String, u64), usize> = BTreeMap::new();
    for l in &record {
        if let Some(k) = work_key(l)
            && l["duplicate"] == false
        {
            *started.entry(k).or_default() += 1;
        }
    }
    assert!(!started.is_empty());
    for (k, n) in &started {
        assert_eq!(*n, 1, "{k:?} started {n} times");
    }
    // A submission that was handled but whose answer was lost (5xx or drop after handling)
    // was resubmitted by the SDK and answered as a duplicate.
    for l in record.iter().filter(|l| l["fault"].as_str().is_some_and(|f| f.ends_with("after handling"))) {
        if let Some(k) = work_key(l)
            && l["duplicate"] == false
        {
            assert!(record.iter().any(|m| work_key(m).as_ref() == Some(&k) && m["duplicate"] == true), "{k:?} was lost and never resubmitted");
        }
    }
}

/// One raw HTTP request; the status and the body as JSON.
fn http(url: &str, path: &str, content_type: &str, body: Vec<u8>) -> (u16, Value) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let r = reqwest::Client::new().post(format!("{url}{path}")).header("content-type", content_type).body(body).send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json::<Value>().await.unwrap_or(Value::Null))
    })
}

#[test]
fn bad_input_gets_an_error_that_says_what_and_the_server_keeps_serving() {
    let cx = TestContext::new();
    let model = tiny(&cx);
    let server = Server::start(&cx, &model, &[]);
    let json = |path: &str, body: &str| http(&server.url, path, "application/json", body.as_bytes().to_vec());
    let detail = |v: &Value| v["detail"].as_str().unwrap_or_default().to_string();

    let (st, v) = json("/api/v1/create_session", "{not json");
    assert_eq!(st, 400);
    assert!(detail(&v).contains("invalid `create_session` body"), "{v}");
    let (st, v) = json("/api/v1/create_session", r#"{"tags": [], "user_metadata": {}, "sdk_version": "0.38.0", "type": "create_session"}"#);
    assert_eq!(st, 200, "{v}");
    let session = v["session_id"].as_str().unwrap().to_string();

    let (st, v) = json("/api/v1/create_model", &format!(r#"{{"session_id": "{session}", "model_seq_id": 0, "base_model": "Qwen/Qwen3-8B", "lora_config": {{"rank": 4}}}}"#));
    assert_eq!(st, 400);
    assert!(detail(&v).contains("`Qwen/Qwen3-8B` is not served here") && detail(&v).contains("`tiny-model`"), "{v}");
    let (st, v) = json("/api/v1/create_model", r#"{"session_id": "nope", "model_seq_id": 0, "base_model": "tiny-model"}"#);
    assert_eq!(st, 404);
    assert!(detail(&v).contains("unknown session `nope`"), "{v}");
    let (st, v) = json("/api/v1/get_info", r#"{"model_id": "nope:train:0", "type": "get_info"}"#);
    assert_eq!(st, 404);
    assert!(detail(&v).contains("unknown model `nope:train:0`"), "{v}");
    let (st, v) = json("/api/v1/retrieve_future", r#"{"request_id": "r-404"}"#);
    assert_eq!(st, 404);
    assert!(detail(&v).contains("unknown request id `r-404`"), "{v}");
    let (st, v) = http(&server.url, "/api/v1/forward_backward", "application/x-protobuf", vec![0xff, 0xff, 0xff]);
    assert_eq!(st, 400);
    assert!(detail(&v).contains("invalid protobuf `ForwardBackwardRequest`"), "{v}");
    let (st, v) = json("/api/v1/no_such_thing", "{}");
    assert_eq!(st, 404);
    assert!(detail(&v).contains("is not an endpoint of rlx serve"), "{v}");

    // Still serving: a model is created and its future resolves.
    let (st, v) = json("/api/v1/create_model", &format!(r#"{{"session_id": "{session}", "model_seq_id": 0, "base_model": "tiny-model", "lora_config": {{"rank": 2}}}}"#));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["model_id"], format!("{session}:train:0"));
    let (st, r) = json("/api/v1/retrieve_future", &format!(r#"{{"request_id": "{}"}}"#, v["request_id"].as_str().unwrap()));
    assert_eq!((st, r["model_id"].as_str()), (200, Some(format!("{session}:train:0").as_str())), "{r}");
    // Every request is in the record, with its status.
    let statuses: Vec<u64> = server.record().iter().map(|l| l["status"].as_u64().unwrap()).collect();
    assert_eq!(statuses, vec![400, 200, 400, 404, 404, 404, 400, 404, 200, 200]);
}

#[test]
fn a_public_bind_needs_an_api_key_which_is_then_checked() {
    let cx = TestContext::new();
    let r = cx.run(&["serve", "--bind", "0.0.0.0:0", "--model", "missing"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("without authentication") && r.stderr.contains("--api-key"), "{}", r.stderr);

    let model = tiny(&cx);
    let server = Server::start(&cx, &model, &["--api-key", "tml-secret"]);
    let body = br#"{"sdk_version": "0.38.0"}"#.to_vec();
    let (st, v) = http(&server.url, "/api/v1/client/config", "application/json", body.clone());
    assert_eq!(st, 401, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("X-API-Key"), "{v}");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let st = rt.block_on(async {
        let r = reqwest::Client::new().post(format!("{}/api/v1/client/config", server.url)).header("x-api-key", "tml-secret").body(body).send().await.unwrap();
        r.status().as_u16()
    });
    assert_eq!(st, 200);
}

/// An empty key is no key (issue 51): `--api-key ""` used to pass the public-bind rule, and an
/// empty `X-API-Key:` then got 200. The key is checked before the body is read: a request
/// without it that promises 200 MiB and sends nothing is answered 401 at once (it used to be
/// read first, up to 256 MiB a request), and one with the key that promises more than the cap
/// is refused from its `Content-Length` (413). A sample request past the server's caps on
/// samples or tokens is 422, before its session is looked up.
#[test]
fn an_empty_key_is_no_key_and_the_key_comes_before_the_body() {
    let cx = TestContext::new();
    let r = cx.run(&["serve", "--bind", "0.0.0.0:0", "--api-key", "", "--model", "missing"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("empty"), "{}", r.stderr);
    let model = tiny(&cx);
    let server = Server::start(&cx, &model, &["--api-key", "tml-secret"]);
    let addr = server.url.trim_start_matches("http://").to_owned();
    let ask = |head: &str| -> String {
        use std::io::{Read as _, Write as _};
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        // A hang guard, not a timing check: the old server waited for the promised body.
        s.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
        s.write_all(format!("{head}\r\nHost: {addr}\r\n\r\n").as_bytes()).unwrap();
        let mut out = vec![0u8; 4096];
        let n = s.read(&mut out).expect("answered without the body");
        String::from_utf8_lossy(&out[..n]).into_owned()
    };
    let out = ask("POST /api/v1/client/config HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 209715200");
    assert!(out.starts_with("HTTP/1.1 401"), "{out}");
    let out = ask("POST /api/v1/client/config HTTP/1.1\r\nX-API-Key:\r\nContent-Length: 0");
    assert!(out.starts_with("HTTP/1.1 401"), "an empty header is no key: {out}");
    let out = ask("POST /api/v1/client/config HTTP/1.1\r\nX-API-Key: tml-secret\r\nContent-Length: 1073741824");
    assert!(out.starts_with("HTTP/1.1 413"), "{out}");
    // What one request may ask for: past a cap, 422 (which the SDK does not retry), before the
    // request is queued or its session looked up.
    let sample_k = |num_samples: u64, max_tokens: u64, topk: u64| -> String {
        use std::io::{Read as _, Write as _};
        let body = format!(
            r#"{{"num_samples":{num_samples},"prompt":{{"chunks":[{{"tokens":[1,2,3],"type":"encoded_text"}}]}},"sampling_params":{{"max_tokens":{max_tokens},"temperature":1.0}},"sampling_session_id":"none:sample:0","type":"sample","topk_prompt_logprobs":{topk}}}"#
        );
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
        let head = format!("POST /api/v1/asample HTTP/1.1\r\nHost: {addr}\r\nX-API-Key: tml-secret\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
        s.write_all(format!("{head}{body}").as_bytes()).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    };
    let sample = |num_samples: u64, max_tokens: u64| sample_k(num_samples, max_tokens, 0);
    let out = sample(1_000_000_000_000, 16);
    assert!(out.starts_with("HTTP/1.1 422") && out.contains("num_samples"), "{out}");
    let out = sample(2, 1_000_000_000);
    assert!(out.starts_with("HTTP/1.1 422") && out.contains("max_tokens"), "{out}");
    let out = sample_k(2, 16, 1_000_000);
    assert!(out.starts_with("HTTP/1.1 422") && out.contains("topk_prompt_logprobs"), "{out}");
    let out = sample_k(2, 16, 1024);
    assert!(out.starts_with("HTTP/1.1 404"), "within the caps, the unknown session is what is wrong: {out}");
}
