//! `rlx sandbox serve`: a Sandbox-Fusion-compatible HTTP server backed by [`LocalSandbox`].
//!
//! Endpoints (those of Sandbox Fusion (https://github.com/bytedance/SandboxFusion)): `GET /v1/ping` answers `"pong"`; `POST /run_code`
//! takes the same request JSON (unknown fields ignored) and answers HTTP 200 with the same
//! response JSON and status rules: `Success` iff the run finished with return code 0, `Failed`
//! for a non-zero code, a signal or a timeout (`TimeLimitExceeded`, `return_code: null`), and
//! `SandboxError` when the sandbox itself failed. A body that fails validation gets HTTP 422 with
//! a pydantic-style `detail` list. `python` and `cpp` run (`cpp`: a compile step first, with its
//! own `compile_timeout`; a failed compile is `Failed` with `compile_result` set and no
//! `run_result`, as in Sandbox Fusion). The other languages of Sandbox Fusion's schema are
//! accepted but not run here: they get `SandboxError`.
//!
//! Differences: concurrency is bounded by the worker pool (requests queue; Sandbox Fusion runs
//! everything at once); stdout/stderr are read while the program runs and capped instead of being
//! silently cut at ~200 KB or deadlocking; non-UTF-8 output is decoded lossily (U+FFFD) instead
//! of being replaced by a `[DecodeError]` message; files must stay inside the working directory.
//!
//! Limits ([`ServerConfig`]): a request asking for more memory, time or files than the server's
//! caps gets HTTP 422 naming the field and the cap (Sandbox Fusion takes any value; a memory
//! limit of 9.3e15 MiB used to overflow into a `SandboxError`, which clients retry). The API key,
//! when the server has one, is checked before the body is read, and the body's size before it is
//! buffered (HTTP 413).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use super::local::LocalSandbox;
use super::lang::Compiled;
use super::exec::{ExecRequest, ExecStatus, Sandbox};
use super::limits::Limits;
use crate::http_server::{self, ApiKey, BodyError};
use crate::spec::types::Language;

/// Languages in Sandbox Fusion's `RunCodeRequest.language` Literal.
const FUSION_LANGUAGES: &[&str] = &[
    "python", "cpp", "nodejs", "go", "go_test", "java", "php", "csharp", "bash", "typescript", "sql", "rust", "cuda",
    "lua", "R", "perl", "D_ut", "ruby", "scala", "julia", "pytest", "junit", "kotlin_script", "jest", "verilog",
    "python_gpu", "lean", "swift", "racket",
];

/// Who may use the server and what a request may ask for. The defaults are safe for a server
/// shared by several trainers: every cap is above what rlx's own clients send for the problems
/// they grade (a row's memory limit, LiveCodeBench's 6 s per test times its tests).
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The key clients must send (`X-API-Key` or `Authorization: Bearer`); `None`: none (a
    /// loopback server). An empty key is refused by [`serve_with`].
    pub api_key: Option<String>,
    /// Largest `memory_limit_MB` a request may ask for; a request without one gets
    /// [`Limits::default`]'s.
    pub max_memory_mb: u64,
    /// Longest `run_timeout` a request may ask for.
    pub max_run_timeout: Duration,
    /// Longest `compile_timeout` a request may ask for.
    pub max_compile_timeout: Duration,
    /// Most entries in `files`, and in `fetch_files`.
    pub max_files: usize,
    /// Largest request body (files travel base64-encoded inside it), bytes.
    pub max_body: usize,
    /// Connections open at once.
    pub max_connections: usize,
}

impl Default for ServerConfig {
    /// No key; 4 GiB; 15 minutes to run and 10 to compile; 1000 files; 64 MiB of body; 256
    /// connections.
    fn default() -> Self {
        ServerConfig {
            api_key: None,
            max_memory_mb: 4096,
            max_run_timeout: Duration::from_secs(900),
            max_compile_timeout: Duration::from_secs(600),
            max_files: 1000,
            max_body: 64 << 20,
            max_connections: http_server::DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// How long shutdown waits for runs in flight before cutting them (a run asking for its whole
/// cap is cut; waiting 25 minutes for Ctrl-C to finish would be worse).
const DRAIN: Duration = Duration::from_secs(120);

/// [`serve_with`] with [`ServerConfig::default`].
///
/// # Errors
/// Only a failing `accept` that is not transient.
pub async fn serve(listener: TcpListener, sandbox: LocalSandbox, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
    serve_with(listener, sandbox, ServerConfig::default(), shutdown).await
}

/// Serve until `shutdown` resolves, then let the runs being answered finish (up to two
/// minutes). In-flight runs are bounded by the sandbox's worker pool.
///
/// # Errors
/// An empty `api_key` (`InvalidInput`: an empty key would be no key), or a failing `accept` that
/// is not transient.
pub async fn serve_with(listener: TcpListener, sandbox: LocalSandbox, config: ServerConfig, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
    let key = config.api_key.clone().map(ApiKey::new).transpose().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let options = http_server::ServeOptions {
        max_connections: config.max_connections,
        ..http_server::ServeOptions::new(DRAIN)
    };
    let shared = std::sync::Arc::new((sandbox, config, key));
    let handler = move |req| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(route(req, &shared.0, &shared.1, shared.2.as_ref()).await) }
    };
    http_server::serve_with(listener, handler, shutdown, options).await
}

fn json_response(status: StatusCode, v: &Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(v.to_string())))
        .expect("static response parts are valid")
}

async fn route(req: Request<Incoming>, sandbox: &LocalSandbox, config: &ServerConfig, key: Option<&ApiKey>) -> Response<Full<Bytes>> {
    // The key first, before anything else is read or answered.
    if !http_server::authorized(key, req.headers()) {
        return json_response(StatusCode::UNAUTHORIZED, &json!({"detail": "missing or wrong API key (`X-API-Key` or `Authorization: Bearer`)"}));
    }
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/v1/ping") => json_response(StatusCode::OK, &json!("pong")),
        (&Method::POST, "/run_code") => {
            let (parts, body) = req.into_parts();
            let body = match http_server::read_body(body, &parts.headers, config.max_body).await {
                Ok(b) => b,
                Err(e @ BodyError::TooLarge { .. }) => return json_response(StatusCode::PAYLOAD_TOO_LARGE, &json!({"detail": e.to_string()})),
                Err(e) => return unprocessable(vec![detail(&["body"], &e.to_string(), "value_error")]),
            };
            match parse_request(&body).and_then(|r| within_caps(r, config)) {
                Ok(r) => json_response(StatusCode::OK, &run_code(r, sandbox).await),
                Err(details) => unprocessable(details),
            }
        }
        (_, "/run_code" | "/v1/ping") => json_response(StatusCode::METHOD_NOT_ALLOWED, &json!({"detail": "Method Not Allowed"})),
        _ => json_response(StatusCode::NOT_FOUND, &json!({"detail": "Not Found"})),
    }
}

fn detail(loc: &[&str], msg: &str, kind: &str) -> Value {
    json!({"loc": loc, "msg": msg, "type": kind})
}

fn unprocessable(details: Vec<Value>) -> Response<Full<Bytes>> {
    json_response(StatusCode::UNPROCESSABLE_ENTITY, &json!({"detail": details}))
}

/// A validated `/run_code` request.
#[derive(Debug)]
pub struct RunCodeRequest {
    /// Source code.
    pub code: String,
    /// Language (one of Sandbox Fusion's).
    pub language: String,
    /// Wall-clock limit of the compile step (compiled languages), seconds.
    pub compile_timeout: f64,
    /// Wall-clock limit of the run, seconds.
    pub run_timeout: f64,
    /// Address-space limit, MiB (≤ 0: the default limit).
    pub memory_limit_mb: i64,
    /// Stdin.
    pub stdin: Option<String>,
    /// Files (relative path → bytes).
    pub files: BTreeMap<String, Vec<u8>>,
    /// Files to return.
    pub fetch_files: Vec<String>,
}

/// Validate a request body the way Sandbox Fusion's pydantic model does: required `code` and
/// `language`, typed optional fields, unknown fields ignored.
///
/// # Errors
/// The pydantic-style `detail` entries, one per problem.
pub fn parse_request(body: &[u8]) -> Result<RunCodeRequest, Vec<Value>> {
    let v: Value = serde_json::from_slice(body).map_err(|e| vec![detail(&["body"], &format!("invalid JSON: {e}"), "json_invalid")])?;
    let Value::Object(m) = v else {
        return Err(vec![detail(&["body"], "Input should be a valid dictionary", "dict_type")]);
    };
    let mut errs = Vec::new();
    let code = match m.get("code") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => { errs.push(detail(&["body", "code"], "Input should be a valid string", "string_type")); String::new() }
        None => { errs.push(detail(&["body", "code"], "Field required", "missing")); String::new() }
    };
    let language = match m.get("language") {
        Some(Value::String(s)) if FUSION_LANGUAGES.contains(&s.as_str()) => s.clone(),
        Some(_) => {
            errs.push(detail(&["body", "language"], &format!("Input should be one of {}", FUSION_LANGUAGES.join(", ")), "literal_error"));
            String::new()
        }
        None => { errs.push(detail(&["body", "language"], "Field required", "missing")); String::new() }
    };
    let mut number = |key: &str, default: f64| match m.get(key) {
        None | Some(Value::Null) => default,
        Some(Value::Number(n)) => n.as_f64().unwrap_or(default),
        Some(_) => { errs.push(detail(&["body", key], "Input should be a valid number", "float_type")); default }
    };
    let run_timeout = number("run_timeout", 10.0);
    let compile_timeout = number("compile_timeout", 10.0);
    let memory_limit_mb = number("memory_limit_MB", -1.0) as i64;
    let stdin = match m.get("stdin") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => { errs.push(detail(&["body", "stdin"], "Input should be a valid string", "string_type")); None }
    };
    let mut files = BTreeMap::new();
    match m.get("files") {
        None | Some(Value::Null) => {}
        Some(Value::Object(f)) => {
            for (path, content) in f {
                match content {
                    Value::Null => {}
                    Value::String(b) => match B64.decode(b) {
                        Ok(bytes) => { files.insert(path.clone(), bytes); }
                        Err(_) => errs.push(detail(&["body", "files", path], "Input should be base64", "value_error")),
                    },
                    _ => errs.push(detail(&["body", "files", path], "Input should be a valid string", "string_type")),
                }
            }
        }
        Some(_) => errs.push(detail(&["body", "files"], "Input should be a valid dictionary", "dict_type")),
    }
    let fetch_files = match m.get("fetch_files") {
        None | Some(Value::Null) => vec![],
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => a.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect(),
        Some(_) => { errs.push(detail(&["body", "fetch_files"], "Input should be a valid list of strings", "list_type")); vec![] }
    };
    if !(run_timeout > 0.0 && run_timeout.is_finite()) {
        errs.push(detail(&["body", "run_timeout"], "Input should be greater than 0", "greater_than"));
    }
    if !(compile_timeout > 0.0 && compile_timeout.is_finite()) {
        errs.push(detail(&["body", "compile_timeout"], "Input should be greater than 0", "greater_than"));
    }
    if !errs.is_empty() {
        return Err(errs);
    }
    Ok(RunCodeRequest { code, language, compile_timeout, run_timeout, memory_limit_mb, stdin, files, fetch_files })
}

/// The request when it asks for no more than `config` allows; otherwise one `detail` per field
/// past its cap (HTTP 422: the client's request is at fault, so it must not be retried as a
/// `SandboxError` would be).
///
/// # Errors
/// The pydantic-style `detail` entries.
pub fn within_caps(r: RunCodeRequest, config: &ServerConfig) -> Result<RunCodeRequest, Vec<Value>> {
    let mut errs = Vec::new();
    let mut over = |field: &str, cap: String, kind: &str| errs.push(detail(&["body", field], &format!("Input should be less than or equal to {cap} (this server's cap)"), kind));
    // ≤ 0 asks for the default; anything above the cap (9.3e15 included) is refused, so the
    // MiB → bytes conversion downstream can no longer overflow.
    if r.memory_limit_mb > 0 && (r.memory_limit_mb as u64) > config.max_memory_mb {
        over("memory_limit_MB", config.max_memory_mb.to_string(), "less_than_equal");
    }
    if r.run_timeout > config.max_run_timeout.as_secs_f64() {
        over("run_timeout", config.max_run_timeout.as_secs_f64().to_string(), "less_than_equal");
    }
    if r.compile_timeout > config.max_compile_timeout.as_secs_f64() {
        over("compile_timeout", config.max_compile_timeout.as_secs_f64().to_string(), "less_than_equal");
    }
    if r.files.len() > config.max_files {
        over("files", format!("{} entries", config.max_files), "too_long");
    }
    if r.fetch_files.len() > config.max_files {
        over("fetch_files", format!("{} entries", config.max_files), "too_long");
    }
    if errs.is_empty() { Ok(r) } else { Err(errs) }
}

/// The Sandbox Fusion languages this server runs.
fn served_languages() -> Vec<&'static str> {
    Language::ALL.into_iter().filter_map(Language::fusion_name).collect()
}

/// Sandbox Fusion's `compile_result`: `Finished` with the compiler's return code, or
/// `TimeLimitExceeded` with none. The compiler's output is in `stderr` (stderr, then stdout).
fn compile_result(c: &Compiled) -> Value {
    let timed_out = c.status == "timeout";
    json!({
        "status": if timed_out { "TimeLimitExceeded" } else { "Finished" },
        "execution_time": c.time_ms as f64 / 1000.0,
        "return_code": if timed_out { Value::Null } else { json!(c.exit.unwrap_or(i64::from(!c.ok()))) },
        "stdout": "",
        "stderr": c.output,
    })
}

fn sandbox_error(message: &str) -> Value {
    json!({"status": "SandboxError", "message": message, "compile_result": null, "run_result": null,
           "executor_pod_name": null, "files": {}})
}

/// Run a validated request and build the Sandbox Fusion response.
pub async fn run_code<S: Sandbox>(r: RunCodeRequest, sandbox: &S) -> Value {
    let Some(language) = Language::ALL.into_iter().find(|l| l.fusion_name() == Some(r.language.as_str())) else {
        return sandbox_error(&format!("language `{}` is not supported by rlx sandbox serve ({})", r.language, served_languages().join(", ")));
    };
    // Absolute or escaping paths land anywhere on the host in Sandbox Fusion; here they are refused.
    if let Some(bad) = r.files.keys().find(|p| p.starts_with('/') || p.split('/').any(|c| c == "..")) {
        return sandbox_error(&format!("file path `{bad}` must be relative to the working directory"));
    }
    let mut limits = Limits { timeout: Duration::from_secs_f64(r.run_timeout.min(86_400.0)), output_bytes: 16 << 20, stderr_bytes: 1 << 20, ..Limits::default() };
    if r.memory_limit_mb > 0 {
        limits.memory_mb = r.memory_limit_mb as u64;
    }
    limits.compile_timeout = Duration::from_secs_f64(r.compile_timeout.min(600.0));
    let req = ExecRequest { code: r.code, stdin: r.stdin, files: r.files, fetch_files: r.fetch_files, limits, language };
    let out = match sandbox.run(req).await {
        Ok(o) => o,
        Err(e) => return sandbox_error(&e.to_string()),
    };
    let compile_result = out.compile.as_ref().map(compile_result);
    if out.compile.as_ref().is_some_and(|c| !c.ok()) {
        // Sandbox Fusion: a failed compile (non-zero code or its time limit) runs nothing.
        return json!({"status": "Failed", "message": "", "compile_result": compile_result, "run_result": null,
                      "executor_pod_name": null, "files": {}});
    }
    let (run_status, return_code) = match out.status {
        ExecStatus::Exited(c) => ("Finished", json!(c)),
        ExecStatus::Signaled(s) => ("Finished", json!(-s)),
        ExecStatus::TimedOut => ("TimeLimitExceeded", Value::Null),
        ExecStatus::OutputLimit => ("Finished", json!(-(libc::SIGKILL))),
    };
    let status = if run_status == "Finished" && return_code == json!(0) { "Success" } else { "Failed" };
    let files: serde_json::Map<String, Value> = out.files.iter().map(|(k, v)| (k.clone(), Value::String(B64.encode(v)))).collect();
    json!({
        "status": status,
        "message": "",
        "compile_result": compile_result,
        "run_result": {
            "status": run_status,
            "execution_time": out.time.as_secs_f64(),
            "return_code": return_code,
            "stdout": String::from_utf8_lossy(&out.stdout),
            "stderr": String::from_utf8_lossy(&out.stderr),
        },
        "executor_pod_name": null,
        "files": files,
    })
}
