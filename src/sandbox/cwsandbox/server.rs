//! `rlx sandbox serve --protocol cwsandbox`: the CoreWeave Sandbox gRPC service
//! (`coreweave.sandbox.v1.SandboxService`) over plaintext HTTP/2, backed by the embedded sandbox.
//!
//! What a sandbox is here: a record (id, spec, tags, state) and a filesystem held by the server.
//! Nothing runs between calls: each `Exec`/`StreamExec` is one isolated run of the embedded
//! sandbox (its namespaces, read-only root, limits) that gets the sandbox's files, runs the
//! command, and returns the files as the command left them. An image is not pulled: every image
//! runs on the server's Python interpreter and host toolchain (`python`/`python3` are that
//! interpreter); absolute paths live under the run's working directory, and arguments that
//! name them are rewritten (`launcher.py`). `CreateSandbox` answers `RUNNING` at once, unless
//! [`ServeOptions::pending`] (the test-only `RLX_CWSANDBOX_PENDING_S`) holds new sandboxes in
//! `PENDING` a while.
//! Calls the protocol has and rlx does not serve (templates, snapshots, logs, the direct data
//! plane's `ConnectSandbox`) answer `UNIMPLEMENTED`, which the official client takes as "use the
//! gateway". No authentication: the server binds loopback by default.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Limited};
use hyper::body::{Frame, Incoming};
use hyper::{HeaderMap, Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::grpc::{self, Deframer};
use super::wire::{self, State};
use crate::sandbox::local::LocalSandbox;
use crate::sandbox::exec::{ExecRequest, ExecStatus, Sandbox as _};
use crate::sandbox::limits::Limits;

/// The program each exec runs inside the embedded sandbox.
const LAUNCHER: &str = include_str!("launcher.py");

/// The deadline of an exec whose call carries none (the official client's default request
/// timeout).
const DEFAULT_EXEC_TIMEOUT: Duration = Duration::from_secs(300);

/// Deleted sandboxes remembered for `GetSandbox`.
const ENDED_KEPT: usize = 4096;

/// Largest request accepted (files travel inside `WriteFile`).
const MAX_REQUEST: usize = 100 << 20;

/// A gRPC status to answer with.
#[derive(Debug)]
pub(crate) struct Status {
    code: u32,
    message: String,
}

impl Status {
    fn new(code: u32, message: impl Into<String>) -> Status {
        Status { code, message: message.into() }
    }
}

/// One sandbox: its record and its files (absolute path → bytes).
struct Held {
    proto: wire::Sandbox,
    files: BTreeMap<String, Vec<u8>>,
    memory_mb: u64,
    expires: Option<Instant>,
    /// When a `PENDING` sandbox becomes `RUNNING` (`None`: never, or already running).
    ready_at: Option<Instant>,
}

impl Held {
    /// `PENDING` turns `RUNNING` once its time has come.
    fn promote(&mut self) {
        if let Some(status) = self.proto.status.as_mut()
            && status.state == State::Pending as i32
            && self.ready_at.is_some_and(|t| t <= Instant::now())
        {
            status.state = State::Running as i32;
            status.start_time = Some(wire::Timestamp::now());
        }
    }

    fn running(&self) -> bool {
        self.proto.status.as_ref().is_some_and(|s| s.state == State::Running as i32)
    }
}

/// How the server behaves beyond the protocol.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServeOptions {
    /// Test-only: a new sandbox stays `PENDING` this long before it is `RUNNING` (`Duration::MAX`:
    /// never), as a hosted service's cold start would, so that clients' readiness timeouts can
    /// be tested. `None`: `RUNNING` at once.
    pub pending: Option<Duration>,
}

/// The service's state.
pub(crate) struct Service {
    sandbox: LocalSandbox,
    held: std::sync::Mutex<HashMap<String, Held>>,
    counter: AtomicU64,
    /// Deleted sandboxes, most recent last, kept for `GetSandbox` (the official client polls for
    /// the terminal state after a stop) but not listed.
    ended: std::sync::Mutex<std::collections::VecDeque<wire::Sandbox>>,
    /// Part of every id, so ids of a restarted server do not repeat.
    epoch: u32,
    options: ServeOptions,
    /// Most sandboxes held at once.
    peak: std::sync::atomic::AtomicUsize,
}

/// The response body: frames pushed by a task (streaming) or queued at once (unary).
pub(crate) struct ChannelBody(mpsc::Receiver<Frame<Bytes>>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|f| f.map(Ok))
    }
}

fn trailers(status: &Status) -> Frame<Bytes> {
    let mut h = HeaderMap::new();
    h.insert("grpc-status", status.code.to_string().parse().expect("digits are a valid header value"));
    if !status.message.is_empty()
        && let Ok(v) = grpc::encode_message(&status.message).parse()
    {
        h.insert("grpc-message", v);
    }
    Frame::trailers(h)
}

fn response(frames: Vec<Frame<Bytes>>) -> Response<ChannelBody> {
    let (tx, rx) = mpsc::channel(frames.len().max(1));
    for f in frames {
        let _ = tx.try_send(f);
    }
    streaming(rx)
}

fn streaming(rx: mpsc::Receiver<Frame<Bytes>>) -> Response<ChannelBody> {
    Response::builder().header("content-type", "application/grpc").body(ChannelBody(rx)).expect("static response parts are valid")
}

fn reply<M: Message>(result: Result<M, Status>) -> Response<ChannelBody> {
    match result {
        Ok(m) => response(vec![Frame::data(grpc::frame(&m)), trailers(&Status::new(grpc::OK, ""))]),
        Err(s) => response(vec![trailers(&s)]),
    }
}

/// What a server did, reported when it stops: sandboxes created, and alive at the end (leaked,
/// if the clients should have stopped them all).
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    /// Sandboxes created.
    pub created: u64,
    /// Sandboxes not deleted when the server stopped.
    pub alive: usize,
    /// Most sandboxes alive at once.
    pub peak: usize,
}

/// Serves until `shutdown` resolves; connections still open then are closed after the execs in
/// flight on them end (at most ten seconds).
///
/// # Errors
/// A failing `accept` that is not transient.
pub async fn serve(listener: TcpListener, sandbox: LocalSandbox, options: ServeOptions, shutdown: impl Future<Output = ()>) -> std::io::Result<Stats> {
    let svc = Arc::new(Service {
        sandbox,
        held: std::sync::Mutex::new(HashMap::new()),
        counter: AtomicU64::new(0),
        ended: std::sync::Mutex::default(),
        epoch: wire::Timestamp::now().nanos as u32 ^ std::process::id(),
        options,
        peak: std::sync::atomic::AtomicUsize::new(0),
    });
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        while connections.try_join_next().is_some() {}
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::Interrupted) => continue,
                Err(e) => return Err(e),
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let svc = svc.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let svc = svc.clone();
                async move { Ok::<_, Infallible>(svc.route(req).await) }
            });
            let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(stream), service).await;
        });
    }
    if tokio::time::timeout(Duration::from_secs(10), async { while connections.join_next().await.is_some() {} }).await.is_err() {
        connections.shutdown().await;
    }
    Ok(Stats { created: svc.counter.load(Ordering::Relaxed), alive: svc.lock().len(), peak: svc.peak.load(Ordering::Relaxed) })
}

async fn unary<Req: Message + Default>(req: Request<Incoming>) -> Result<Req, Status> {
    let body = Limited::new(req.into_body(), MAX_REQUEST).collect().await.map_err(|e| Status::new(grpc::INVALID_ARGUMENT, format!("cannot read the request: {e}")))?.to_bytes();
    let mut d = Deframer::default();
    d.push(&body);
    let msg = d.next().map_err(|e| Status::new(grpc::INVALID_ARGUMENT, e))?.ok_or_else(|| Status::new(grpc::INVALID_ARGUMENT, "no request message"))?;
    Req::decode(msg).map_err(|e| Status::new(grpc::INVALID_ARGUMENT, format!("undecodable request: {e}")))
}

fn deadline(req: &Request<Incoming>) -> Duration {
    req.headers().get("grpc-timeout").and_then(|v| v.to_str().ok()).and_then(grpc::parse_timeout).unwrap_or(DEFAULT_EXEC_TIMEOUT)
}

impl Service {
    async fn route(self: Arc<Self>, req: Request<Incoming>) -> Response<ChannelBody> {
        let method = req.uri().path().strip_prefix(wire::SERVICE).unwrap_or("").to_owned();
        self.reap_expired();
        match method.as_str() {
            "CreateSandbox" => reply(async { self.create(unary(req).await?) }.await),
            "GetSandbox" => reply(async { self.get(&unary::<wire::GetSandboxRequest>(req).await?.sandbox_id) }.await),
            "ListSandboxes" => reply(async { Ok(self.list(&unary(req).await?)) }.await),
            "DeleteSandbox" => reply(async { self.delete(&unary(req).await?) }.await),
            "WriteFile" => reply(async { self.write_file(unary(req).await?) }.await),
            "ReadFile" => reply(async { self.read_file(&unary(req).await?) }.await),
            "Exec" => {
                let timeout = deadline(&req);
                reply(async { self.exec(unary(req).await?, timeout).await }.await)
            }
            "StreamExec" => self.stream_exec(req),
            _ => reply::<wire::WriteFileResponse>(Err(Status::new(grpc::UNIMPLEMENTED, format!("`{}` is not served by rlx sandbox serve", req.uri().path())))),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sandboxes past their `max_lifetime_seconds` end as the real service ends them.
    fn reap_expired(&self) {
        let now = Instant::now();
        self.lock().retain(|_, h| h.expires.is_none_or(|e| e > now));
    }

    fn create(&self, req: wire::CreateSandboxRequest) -> Result<wire::Sandbox, Status> {
        let mut proto = req.sandbox.unwrap_or_default();
        let spec = proto.spec.get_or_insert_with(Default::default);
        let memory_mb = spec.containers.first().and_then(container_memory_mb).unwrap_or(Limits::default().memory_mb);
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let id = format!("rlx-{:08x}-{n:06}", self.epoch);
        let lifetime = spec.max_lifetime_seconds;
        proto.sandbox_id.clone_from(&id);
        let now = wire::Timestamp::now();
        let pending = self.options.pending.filter(|d| !d.is_zero());
        proto.status = Some(wire::SandboxStatus {
            state: if pending.is_some() { State::Pending } else { State::Running } as i32,
            create_time: Some(now.clone()),
            start_time: pending.is_none().then_some(now),
            effective_max_lifetime_seconds: lifetime,
            ..Default::default()
        });
        let expires = (lifetime > 0).then(|| Instant::now() + Duration::from_secs(lifetime as u64));
        let ready_at = pending.and_then(|d| Instant::now().checked_add(d));
        tracing::debug!(sandbox = %id, tags = ?spec.tags, "sandbox created");
        let mut held = self.lock();
        held.insert(id, Held { proto: proto.clone(), files: BTreeMap::new(), memory_mb, expires, ready_at });
        self.peak.fetch_max(held.len(), Ordering::Relaxed);
        Ok(proto)
    }

    fn get(&self, id: &str) -> Result<wire::Sandbox, Status> {
        if let Some(h) = self.lock().get_mut(id) {
            h.promote();
            return Ok(h.proto.clone());
        }
        let ended = self.ended.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        ended.iter().rev().find(|s| s.sandbox_id == id).cloned().ok_or_else(|| not_found(id))
    }

    fn list(&self, req: &wire::ListSandboxesRequest) -> wire::ListSandboxesResponse {
        let mut held = self.lock();
        held.values_mut().for_each(Held::promote);
        let mut sandboxes: Vec<wire::Sandbox> = held
            .values()
            .filter(|h| {
                let tags = h.proto.spec.as_ref().map(|s| s.tags.as_slice()).unwrap_or_default();
                req.tags.iter().all(|t| tags.contains(t))
            })
            .map(|h| h.proto.clone())
            .collect();
        sandboxes.sort_by(|a, b| a.sandbox_id.cmp(&b.sandbox_id));
        wire::ListSandboxesResponse { sandboxes, next_page_token: String::new() }
    }

    fn delete(&self, req: &wire::DeleteSandboxRequest) -> Result<wire::DeleteSandboxResponse, Status> {
        match self.lock().remove(&req.sandbox_id) {
            Some(mut h) => {
                let status = h.proto.status.get_or_insert_with(Default::default);
                status.state = State::Terminated as i32;
                status.end_time = Some(wire::Timestamp::now());
                tracing::debug!(sandbox = %req.sandbox_id, "sandbox deleted");
                let mut ended = self.ended.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if ended.len() >= ENDED_KEPT {
                    ended.pop_front();
                }
                ended.push_back(h.proto.clone());
                Ok(wire::DeleteSandboxResponse { sandbox: Some(h.proto) })
            }
            None if req.allow_missing => Ok(wire::DeleteSandboxResponse { sandbox: None }),
            None => Err(not_found(&req.sandbox_id)),
        }
    }

    fn write_file(&self, req: wire::WriteFileRequest) -> Result<wire::WriteFileResponse, Status> {
        let path = normalize(&req.path)?;
        let mut held = self.lock();
        let h = held.get_mut(&req.sandbox_id).ok_or_else(|| not_found(&req.sandbox_id))?;
        h.files.insert(path, req.content);
        Ok(wire::WriteFileResponse {})
    }

    fn read_file(&self, req: &wire::ReadFileRequest) -> Result<wire::ReadFileResponse, Status> {
        let path = normalize(&req.path)?;
        let held = self.lock();
        let h = held.get(&req.sandbox_id).ok_or_else(|| not_found(&req.sandbox_id))?;
        let content = h.files.get(&path).cloned().ok_or_else(|| Status::new(grpc::NOT_FOUND, format!("no file `{}` in sandbox `{}`", req.path, req.sandbox_id)))?;
        Ok(wire::ReadFileResponse { content })
    }

    async fn exec(&self, req: wire::ExecRequest, timeout: Duration) -> Result<wire::ExecResponse, Status> {
        let out = self.run_command(&req.sandbox_id, req.command, req.env, None, timeout).await?;
        let cap = if req.max_output_bytes > 0 { req.max_output_bytes as usize } else { usize::MAX };
        let (stdout_truncated, stderr_truncated) = (out.stdout.len() > cap || out.stdout_truncated, out.stderr.len() > cap);
        let clip = |mut v: Vec<u8>| {
            v.truncate(cap);
            v
        };
        Ok(wire::ExecResponse { stdout: clip(out.stdout), stderr: clip(out.stderr), exit_code: out.exit_code, stdout_truncated, stderr_truncated })
    }

    /// `StreamExec`: `ready` at once, stdin gathered until the client closes it, then the run,
    /// its output and its exit.
    fn stream_exec(self: Arc<Self>, req: Request<Incoming>) -> Response<ChannelBody> {
        let timeout = deadline(&req);
        let (tx, rx) = mpsc::channel(8);
        tokio::spawn(async move {
            let data = |m: wire::StreamResponse| Frame::data(grpc::frame(&wire::ExecStreamResponse { message: Some(m) }));
            let status = match read_stream_request(req.into_body(), &tx, data(wire::StreamResponse::Ready(wire::ExecStreamReady { ready_time: Some(wire::Timestamp::now()) }))).await {
                Err(s) => s,
                Ok((init, stdin)) => match self.run_command(&init.sandbox_id, init.command, init.env, Some(stdin), timeout).await {
                    Err(s) => s,
                    Ok(out) => {
                        for (stream, bytes) in [(1, out.stdout), (2, out.stderr)] {
                            for chunk in bytes.chunks(64 << 10) {
                                let _ = tx.send(data(wire::StreamResponse::Output(wire::ExecStreamOutput { stream, data: chunk.to_vec() }))).await;
                            }
                        }
                        let exit = wire::ExecStreamExit { exit_code: out.exit_code, completed_time: Some(wire::Timestamp::now()) };
                        let _ = tx.send(data(wire::StreamResponse::Exit(exit))).await;
                        Status::new(grpc::OK, "")
                    }
                },
            };
            let _ = tx.send(trailers(&status)).await;
        });
        streaming(rx)
    }

    /// One command in the embedded sandbox with the sandbox's files; the files it leaves replace
    /// them.
    async fn run_command(&self, id: &str, argv: Vec<String>, env: BTreeMap<String, String>, stdin: Option<Vec<u8>>, timeout: Duration) -> Result<Output, Status> {
        if argv.is_empty() {
            return Err(Status::new(grpc::INVALID_ARGUMENT, "the command is empty"));
        }
        let (files, memory_mb) = {
            let mut held = self.lock();
            let h = held.get_mut(id).ok_or_else(|| not_found(id))?;
            h.promote();
            if !h.running() {
                return Err(Status::new(grpc::FAILED_PRECONDITION, format!("sandbox `{id}` is not running yet")));
            }
            (h.files.clone(), h.memory_mb)
        };
        let files: BTreeMap<String, String> = files.into_iter().map(|(p, b)| (p, B64.encode(b))).collect();
        let job = serde_json::json!({"argv": argv, "env": env, "files": files}).to_string().into_bytes();
        let req = ExecRequest {
            code: LAUNCHER.into(),
            stdin: stdin.map(|s| String::from_utf8_lossy(&s).into_owned()),
            files: BTreeMap::from([("rlx-exec.json".to_owned(), job)]),
            fetch_files: vec!["rlx-fs.json".into()],
            limits: Limits { timeout, memory_mb, ..Limits::default() },
            ..ExecRequest::default()
        };
        let out = self.sandbox.run(req).await.map_err(|e| Status::new(grpc::UNAVAILABLE, format!("the sandbox failed: {e}")))?;
        if let Some(snapshot) = out.files.get("rlx-fs.json").and_then(|b| serde_json::from_slice::<BTreeMap<String, String>>(b).ok()) {
            let files = snapshot.into_iter().filter_map(|(p, b)| Some((p, B64.decode(b).ok()?))).collect();
            if let Some(h) = self.lock().get_mut(id) {
                h.files = files;
            }
        }
        let exit_code = match out.status {
            ExecStatus::TimedOut => return Err(Status::new(grpc::DEADLINE_EXCEEDED, format!("the command ran past its deadline of {:.1}s", timeout.as_secs_f64()))),
            ExecStatus::Exited(c) => c,
            ExecStatus::Signaled(s) => 128 + s,
            ExecStatus::OutputLimit => 137,
        };
        Ok(Output { stdout: out.stdout, stderr: out.stderr, exit_code, stdout_truncated: out.status == ExecStatus::OutputLimit })
    }
}

/// What a command left.
struct Output {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    exit_code: i32,
    stdout_truncated: bool,
}

/// Reads a `StreamExec` request stream: the `init`, then stdin until `close` or the end of the
/// stream. `ready` is sent once `init` has arrived (the official client waits for it before
/// sending stdin).
async fn read_stream_request(mut body: Incoming, tx: &mpsc::Sender<Frame<Bytes>>, ready: Frame<Bytes>) -> Result<(wire::ExecStreamInit, Vec<u8>), Status> {
    let mut d = Deframer::default();
    let mut init = None;
    let mut ready = Some(ready);
    let mut stdin = Vec::new();
    loop {
        while let Some(msg) = d.next().map_err(|e| Status::new(grpc::INVALID_ARGUMENT, e))? {
            let m = wire::ExecStreamRequest::decode(msg).map_err(|e| Status::new(grpc::INVALID_ARGUMENT, format!("undecodable request: {e}")))?;
            match (m.message, init.is_some()) {
                (Some(wire::StreamRequest::Init(i)), false) => {
                    init = Some(i);
                    if let Some(r) = ready.take() {
                        let _ = tx.send(r).await;
                    }
                }
                (Some(wire::StreamRequest::Stdin(b)), true) => stdin.extend_from_slice(&b),
                (Some(wire::StreamRequest::Close(_)), true) => return Ok((init.expect("checked"), stdin)),
                (_, false) => return Err(Status::new(grpc::INVALID_ARGUMENT, "the first StreamExec message must be `init`")),
                (_, true) => {}
            }
        }
        match body.frame().await {
            Some(Ok(f)) => {
                if let Some(b) = f.data_ref() {
                    d.push(b);
                }
            }
            Some(Err(e)) => return Err(Status::new(grpc::CANCELLED, format!("the request stream failed: {e}"))),
            None => break,
        }
    }
    init.map(|i| (i, stdin)).ok_or_else(|| Status::new(grpc::INVALID_ARGUMENT, "no `init` message"))
}

fn not_found(id: &str) -> Status {
    Status::new(grpc::NOT_FOUND, format!("sandbox `{id}` not found"))
}

/// A sandbox path as the server keys it: absolute, `.` and empty parts dropped; `..` refused.
fn normalize(path: &str) -> Result<String, Status> {
    let mut parts = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => return Err(Status::new(grpc::INVALID_ARGUMENT, format!("path `{path}` leaves the sandbox's filesystem (`..`)"))),
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return Err(Status::new(grpc::INVALID_ARGUMENT, format!("path `{path}` names no file")));
    }
    Ok(format!("/{}", parts.join("/")))
}

/// The memory limit a container asks for, in MiB (`limits` first, then `requests`, then the
/// older `resources`).
fn container_memory_mb(c: &wire::Container) -> Option<u64> {
    let rr = c.resource_requirements.as_ref();
    [rr.and_then(|r| r.limits.as_ref()), rr.and_then(|r| r.requests.as_ref()), c.resources.as_ref()]
        .into_iter()
        .flatten()
        .find_map(|r| parse_quantity_mib(&r.memory))
}

/// A Kubernetes memory quantity (`512Mi`, `1Gi`, `1G`, bytes) in MiB.
pub(crate) fn parse_quantity_mib(q: &str) -> Option<u64> {
    let q = q.trim();
    let split = q.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(q.len());
    let (n, unit) = q.split_at(split);
    let n: f64 = n.parse().ok()?;
    let bytes = n * match unit {
        "" => 1.0,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "K" | "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        _ => return None,
    };
    Some((bytes / (1024.0 * 1024.0)).ceil() as u64).filter(|&m| m > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_quantities() {
        assert_eq!(normalize("/tmp//a/./b.py").unwrap(), "/tmp/a/b.py");
        assert_eq!(normalize("b.py").unwrap(), "/b.py");
        assert!(normalize("/tmp/../etc/passwd").is_err());
        assert!(normalize("/").is_err());
        assert_eq!(parse_quantity_mib("1Gi"), Some(1024));
        assert_eq!(parse_quantity_mib("512Mi"), Some(512));
        assert_eq!(parse_quantity_mib("1G"), Some(954));
        assert_eq!(parse_quantity_mib("lots"), None);
    }
}
