//! A Sandbox Fusion `/run_code` client (the Docker setup of the origin documents).
//!
//! Grading sends our harness (`harness.py fusion`) rather than the LiveCodeBench `testing_util`,
//! so verdicts follow the same semantics as the local sandbox and come back per test; the files
//! are `harness.py`, `job.json` (tests without expected outputs) and `expected.json` (expected
//! outputs plus a per-request nonce that the verdict line must carry). Isolation is the server's
//! (Sandbox Fusion's default is none).
//!
//! Transport: one pooled hyper client (HTTP/1.1 keep-alive, plain HTTP: Sandbox Fusion is
//! reached on localhost or a private network, and leaving TLS out avoids building a TLS stack),
//! a semaphore capping requests in flight (Sandbox Fusion has no cap of its own, §1.4), a
//! per-request timeout above the run timeout, and retries ([`crate::retry`]'s policy) on transport
//! errors, timeouts, HTTP 5xx and `SandboxError`. Whatever still fails is an infrastructure
//! error, never a failed test. hyper is used directly (not reqwest) because the server side
//! already needs it, and reqwest would add a second HTTP stack to build.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::Uri;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::retry;

use super::harness;
use super::local::parse_tests;
use super::compare::check_output;
use super::lang::Compiled;
use super::error::Error;
use super::limits::GradeOptions;
use super::verdict::{Grader, TestResult, TestStatus, Verdict, clip_start};
use crate::data::{IoCase, Problem, Tests};
use crate::spec::types::Language;

/// Client configuration.
#[derive(Debug, Clone)]
pub struct FusionConfig {
    /// `http://host:port` or the full `/run_code` URL.
    pub url: String,
    /// Requests in flight (tinker's `SANDBOX_MAX_CONCURRENCY` default is 4).
    pub concurrency: usize,
    /// Retries after the first attempt for retryable failures.
    pub retries: u32,
    /// First backoff; doubles per retry.
    pub backoff: Duration,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Sent as `X-API-Key` when set (a keyed `rlx sandbox serve`).
    pub api_key: Option<String>,
}

impl FusionConfig {
    /// Defaults for `url`: 4 in flight, 3 retries from 200 ms, 5 s to connect, the key in
    /// `RLX_SANDBOX_API_KEY` (the variable `rlx sandbox serve --api-key` reads too) when set.
    pub fn new(url: &str) -> Self {
        FusionConfig {
            url: url.to_owned(),
            concurrency: 4,
            retries: 3,
            backoff: Duration::from_millis(200),
            connect_timeout: Duration::from_secs(5),
            api_key: crate::switches::SANDBOX_API_KEY.var().filter(|k| !k.trim().is_empty()),
        }
    }
}

/// The Sandbox Fusion client and grader.
#[derive(Clone)]
pub struct FusionClient {
    uri: Uri,
    client: Client<HttpConnector, Full<Bytes>>,
    permits: Arc<Semaphore>,
    config: FusionConfig,
}

/// The longest wait between two requests (the first is the configured backoff, doubling).
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Why one attempt failed, and whether another may help.
struct Attempt {
    reason: String,
    retryable: bool,
}

impl FusionClient {
    /// Build the client (no connection is made yet).
    ///
    /// # Errors
    /// [`Error::Url`] for a URL that is not `http://`.
    pub fn new(config: FusionConfig) -> Result<FusionClient, Error> {
        let bad = |reason: String| Error::Url { url: config.url.clone(), reason };
        let mut url = config.url.trim_end_matches('/').to_owned();
        if !url.ends_with("/run_code") {
            url.push_str("/run_code");
        }
        let uri: Uri = url.parse().map_err(|e| bad(format!("{e}")))?;
        if uri.scheme_str() != Some("http") {
            return Err(bad("it must be `http://` (rlx's client speaks plain HTTP)".into()));
        }
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(config.connect_timeout));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(30)).build(connector);
        Ok(FusionClient { uri, client, permits: Arc::new(Semaphore::new(config.concurrency.max(1))), config })
    }

    /// The server's address without `/run_code`.
    pub fn base_url(&self) -> String {
        self.uri.to_string().trim_end_matches("/run_code").to_owned()
    }

    /// `GET /v1/ping`, once, within the connect timeout plus five seconds: `Err` with the reason
    /// when no Sandbox Fusion answers `"pong"`.
    pub(crate) async fn ping(&self) -> Result<(), String> {
        let uri: Uri = format!("{}/v1/ping", self.base_url()).parse().map_err(|e| format!("{e}"))?;
        let req = Request::get(uri).body(Full::new(Bytes::new())).expect("static request parts are valid");
        let exchange = async {
            let resp = self.client.request(req).await.map_err(|e| error_chain(&e))?;
            let status = resp.status();
            let body = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
            match serde_json::from_slice::<Value>(&body) {
                Ok(v) if status.is_success() && v == "pong" => Ok(()),
                _ => Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&body[..body.len().min(200)]))),
            }
        };
        tokio::time::timeout(self.config.connect_timeout + Duration::from_secs(5), exchange).await.map_err(|_| "no reply".to_owned())?
    }

    /// POST a `/run_code` request and return the decoded response, retrying infrastructure
    /// failures. A response with `status: SandboxError` counts as a failure.
    ///
    /// # Errors
    /// [`Error::Remote`] with the attempt count once retries are exhausted or the failure is
    /// not retryable (HTTP 4xx, undecodable reply).
    pub async fn run_code(&self, body: &Value, timeout: Duration) -> Result<Value, Error> {
        let _permit = self.permits.acquire().await.expect("semaphore never closed");
        let bytes = Bytes::from(serde_json::to_vec(body).expect("JSON values serialize"));
        let policy = retry::Policy::counted(self.config.retries, self.config.backoff, MAX_BACKOFF);
        let label = self.uri.to_string();
        retry::run(&policy, &label, |_| {
            let bytes = bytes.clone();
            async move {
                match self.attempt(bytes, timeout).await {
                    Ok(v) => retry::Attempt::Done(v),
                    Err(f) if f.retryable => retry::Attempt::Retry(f.reason, None),
                    Err(f) => retry::Attempt::Fail(f.reason),
                }
            }
        })
        .await
        .map_err(|g| Error::Remote { attempts: g.attempts, reason: g.last })
    }

    async fn attempt(&self, body: Bytes, timeout: Duration) -> Result<Value, Attempt> {
        let mut req = Request::post(self.uri.clone()).header("content-type", "application/json");
        if let Some(key) = &self.config.api_key {
            req = req.header("x-api-key", key.as_str());
        }
        let req = req
            .body(Full::new(body))
            .expect("static request parts are valid");
        let exchange = async {
            let resp = self.client.request(req).await.map_err(|e| Attempt {
                // Connection refused/reset and other transport errors: the server may come back.
                reason: format!("transport error: {}", error_chain(&e)),
                retryable: true,
            })?;
            let status = resp.status();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| Attempt { reason: format!("reading the reply: {e}"), retryable: true })?
                .to_bytes();
            if status.is_server_error() {
                return Err(Attempt { reason: format!("HTTP {status}"), retryable: true });
            }
            if !status.is_success() {
                let text = String::from_utf8_lossy(&bytes[..bytes.len().min(500)]).into_owned();
                return Err(Attempt { reason: format!("HTTP {status}: {text}"), retryable: false });
            }
            let v: Value = serde_json::from_slice(&bytes)
                .map_err(|e| Attempt { reason: format!("undecodable reply: {e}"), retryable: false })?;
            if v["status"] == "SandboxError" {
                return Err(Attempt { reason: format!("SandboxError: {}", v["message"]), retryable: true });
            }
            Ok(v)
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(r) => r,
            Err(_) => Err(Attempt { reason: format!("no reply within {timeout:?}"), retryable: true }),
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

/// 128 bits that the program cannot guess (std's per-process random hash keys, plus time and
/// a counter), to tag the verdict line.
pub(crate) fn new_nonce() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let c = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mut parts = [0u64; 2];
    for (i, p) in parts.iter_mut().enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(c);
        h.write_u64(t);
        h.write_usize(i);
        *p = h.finish();
    }
    format!("{:016x}{:016x}", parts[0], parts[1])
}

/// The `/run_code` body that grades `code` on `problem` with our harness, and its nonce.
pub fn grade_request(problem: &Problem, code: &str, opts: &GradeOptions) -> (Value, String) {
    let (job, expected) = harness::grade_job(problem, code, opts);
    let nonce = new_nonce();
    let expected = json!({"nonce": nonce, "expected": expected.map(|e| e["expected"].clone())});
    let run_timeout = job["deadline_s"].as_f64().unwrap_or(60.0) + 5.0;
    // The harness process gets the program's memory limit: a server applies its own default
    // (1024 MiB on `rlx sandbox serve`) as a hard limit otherwise, and the harness could not
    // give the program more (every test of `memory_mb: 2048` was a runtime error).
    let body = json!({
        "code": "import harness\nharness.fusion_main()\n",
        "language": "python",
        "run_timeout": run_timeout,
        "memory_limit_MB": opts.limits.memory_mb,
        "files": {
            "harness.py": B64.encode(harness::SOURCE),
            "job.json": B64.encode(job.to_string()),
            "expected.json": B64.encode(expected.to_string()),
        },
    });
    (body, nonce)
}

/// Find the verdict line carrying `nonce` in the driver's stdout.
pub fn parse_verdict_line(stdout: &str, nonce: &str) -> Option<Value> {
    let prefix = format!("RLX-VERDICT {nonce} ");
    stdout.lines().rev().find_map(|l| l.strip_prefix(&prefix)).and_then(|j| serde_json::from_str(j).ok())
}

impl Grader for FusionClient {
    async fn grade(&self, problem: &Problem, code: &str, opts: &GradeOptions) -> Verdict {
        let opts = &opts.for_problem(problem);
        let language = problem.language();
        if problem.checker_program().is_some() {
            let reason = "problems with a checker program are graded by the embedded sandbox only (`sandbox.kind: local`)".to_owned();
            return Verdict::infra_error(&problem.id, problem.tests.len(), &Error::Remote { attempts: 0, reason }).in_language(language);
        }
        if language != Language::Python {
            return self.grade_native(problem, code, opts, language).await.in_language(language);
        }
        let total = problem.tests.len();
        let (body, nonce) = grade_request(problem, code, opts);
        let timeout = Duration::from_secs_f64(body["run_timeout"].as_f64().unwrap_or(60.0) + 30.0);
        let resp = match self.run_code(&body, timeout).await {
            Ok(r) => r,
            Err(e) => return Verdict::infra_error(&problem.id, total, &e),
        };
        let stdout = resp["run_result"]["stdout"].as_str().unwrap_or_default();
        match parse_verdict_line(stdout, &nonce).map(|v| parse_tests(&v)) {
            Some(Ok(tests)) => Verdict::from_tests(&problem.id, total, tests),
            Some(Err(e)) => Verdict::infra_error(&problem.id, total, &Error::Remote { attempts: 1, reason: e }),
            None => {
                let rr = &resp["run_result"];
                let reason = format!(
                    "the harness reported no verdict (run status {}, return code {}, stderr: {})",
                    rr["status"],
                    rr["return_code"],
                    rr["stderr"].as_str().unwrap_or_default().chars().rev().take(400).collect::<String>().chars().rev().collect::<String>()
                );
                Verdict::infra_error(&problem.id, total, &Error::Remote { attempts: 1, reason })
            }
        }
    }
}

/// One test of a program in one of Sandbox Fusion's own languages: the `/run_code` body.
fn native_request(language: &str, code: &str, case: &IoCase, problem: &Problem, opts: &GradeOptions) -> Value {
    let compile_timeout = problem.compile_timeout_s().unwrap_or(opts.limits.compile_timeout.as_secs_f64());
    json!({
        "code": code,
        "language": language,
        "stdin": case.input,
        "compile_timeout": compile_timeout,
        "run_timeout": opts.limits.timeout.as_secs_f64(),
        "memory_limit_MB": opts.limits.memory_mb,
    })
}

/// The compile step of a `/run_code` reply, when it failed: the program's fault.
fn failed_compile(resp: &Value) -> Option<Compiled> {
    let c = resp.get("compile_result").filter(|c| !c.is_null())?;
    let timed_out = c["status"] == "TimeLimitExceeded";
    let exit = c["return_code"].as_i64();
    if !timed_out && exit == Some(0) {
        return None;
    }
    let output = format!("{}{}", c["stderr"].as_str().unwrap_or_default(), c["stdout"].as_str().unwrap_or_default());
    let time_ms = (c["execution_time"].as_f64().unwrap_or(0.0) * 1000.0) as u64;
    Some(Compiled { status: if timed_out { "timeout" } else { "error" }.into(), time_ms, exit, output: output.trim().to_owned(), cached: false })
}

/// One test's verdict from its `/run_code` reply (after a successful compile).
fn native_test(resp: &Value, expected: &str, problem: &Problem) -> TestResult {
    let r = &resp["run_result"];
    let time_ms = (r["execution_time"].as_f64().unwrap_or(0.0) * 1000.0) as u64;
    let stdout = r["stdout"].as_str().unwrap_or_default();
    let stderr = r["stderr"].as_str().unwrap_or_default().trim();
    let error = (!stderr.is_empty()).then(|| stderr.chars().rev().take(600).collect::<Vec<_>>().into_iter().rev().collect::<String>());
    let status = if r["status"] == "TimeLimitExceeded" {
        TestStatus::Timeout
    } else if r["return_code"].as_i64() != Some(0) {
        if stderr.contains("std::bad_alloc") || stderr.contains("Cannot allocate memory") { TestStatus::MemoryLimit } else { TestStatus::RuntimeError }
    } else if check_output(problem.checker(), stdout, expected) {
        TestStatus::Passed
    } else {
        TestStatus::WrongAnswer
    };
    let got = (status == TestStatus::WrongAnswer).then(|| clip_start(stdout, 600));
    TestResult { status, time_ms, got, error: if status == TestStatus::Passed { None } else { error } }
}

impl FusionClient {
    /// Grades a program in one of Sandbox Fusion's own languages (`cpp`): one `/run_code` per
    /// test with `language` set, as verl sends them, compared here by the problem's checker
    /// (our harness is Python and does not run there).
    async fn grade_native(&self, problem: &Problem, code: &str, opts: &GradeOptions, language: Language) -> Verdict {
        let total = problem.tests.len();
        let Some(name) = language.fusion_name() else {
            let reason = format!("Sandbox Fusion has no language for {}; use `sandbox.kind: local`", language.display_name());
            return Verdict::infra_error(&problem.id, total, &Error::Remote { attempts: 0, reason });
        };
        let Tests::Stdin { cases } = &problem.tests else {
            let reason = format!("only stdin/stdout problems can be graded in {}", language.display_name());
            return Verdict::infra_error(&problem.id, total, &Error::Rejected(reason));
        };
        let timeout = opts.limits.timeout + opts.limits.compile_timeout + Duration::from_secs(30);
        let replies = futures_util::future::join_all(cases.iter().map(|c| {
            let body = native_request(name, code, c, problem, opts);
            async move { self.run_code(&body, timeout).await }
        }))
        .await;
        let mut tests = Vec::with_capacity(total);
        for (resp, case) in replies.iter().zip(cases) {
            let resp = match resp {
                Ok(r) => r,
                Err(e) => return Verdict::infra_error(&problem.id, total, e),
            };
            if let Some(c) = failed_compile(resp) {
                return Verdict::compile_error(&problem.id, total, c, opts.fail_fast);
            }
            tests.push(native_test(resp, &case.output, problem));
            if opts.fail_fast && tests.last().is_some_and(|t| t.status != TestStatus::Passed) {
                break;
            }
        }
        Verdict::from_tests(&problem.id, total, tests)
    }
}
