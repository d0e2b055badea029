//! `rlx sandbox serve --protocol cwsandbox`: the CoreWeave Sandbox gRPC service
//! (`coreweave.sandbox.v1.SandboxService`) over plaintext HTTP/2, backed by the embedded sandbox.
//!
//! What a sandbox is here: a record (id, spec, tags, state, owner) and a directory on disk, its
//! persistent root ([`super::rootfs`]). Each `Exec`/`StreamExec` is one isolated run of the
//! embedded sandbox (its namespaces, limits) chrooted into that root, where the host's system
//! directories and Python are bound read-only and everything else is the sandbox's own, writable
//! and kept for its lifetime: a file written at `/tmp/data.txt` by `WriteFile`, a program or a
//! shell is there, at that path, for every later command and for `ReadFile`, as in a container.
//! Commands of one sandbox run one at a time; processes a command leaves in the background end
//! with it. An image is not pulled: every sandbox runs on the server's Python (`python`,
//! `python3` and shells find that interpreter first), and an image that is not that Python is
//! refused at creation ([`super::access::check_image`]). `CreateSandbox` answers `RUNNING` at
//! once, unless [`ServeOptions::pending`] (the test-only `RLX_CWSANDBOX_PENDING_S`) holds new
//! sandboxes in `PENDING` a while.
//!
//! Clients are kept apart: a sandbox belongs to the credential that created it, and any other
//! gets `NOT_FOUND` for it on every call (list included); ids are random. With
//! [`ServeOptions::api_key`], a request without that key gets `UNAUTHENTICATED` before its body
//! is read. [`ServerLimits`] caps live sandboxes (per credential and in all), their lifetime,
//! memory, files and streamed stdin.
//! Calls the protocol has and rlx does not serve (templates, snapshots, logs, the direct data
//! plane's `ConnectSandbox`) answer `UNIMPLEMENTED`, which the official client takes as "use the
//! gateway".

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::future::Future;
use std::path::PathBuf;
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
use prost::Message;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::access::{self, ApiKey};
use super::grpc::{self, Deframer, Status};
use super::rootfs::{FsError, RootFs};
use super::wire::{self, State};
use crate::sandbox::local::LocalSandbox;
use crate::sandbox::exec::{ExecRequest, ExecStatus};
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

/// One sandbox: its record, its owner and its files.
struct Held {
    proto: wire::Sandbox,
    /// The principal that created it ([`access::principal`]).
    owner: Vec<u8>,
    fs: Arc<RootFs>,
    memory_mb: u64,
    /// The image's environment (`environment_variables`), under each call's own.
    env: BTreeMap<String, String>,
    /// Where commands start (the container's `working_dir`, else `/`).
    cwd: String,
    expires: Instant,
    /// When a `PENDING` sandbox becomes `RUNNING` (`None`: never, or already running).
    ready_at: Option<Instant>,
    /// Held by the command running: one at a time, so that nothing of the sandbox's changes its
    /// root while the next command's view of it is set up (`enter_root` in harness.py).
    turn: Arc<tokio::sync::Mutex<()>>,
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

    fn owned_by(&self, who: &[u8]) -> bool {
        crate::http_server::same_secret(&self.owner, who)
    }
}

/// What a client may ask of the server: past these, a call fails (`RESOURCE_EXHAUSTED` for what
/// is full, `INVALID_ARGUMENT` for what may never be asked).
#[derive(Debug, Clone, Copy)]
pub struct ServerLimits {
    /// Live sandboxes per credential.
    pub per_key: usize,
    /// Live sandboxes in all.
    pub total: usize,
    /// The lifetime of a sandbox created without one.
    pub default_lifetime: Duration,
    /// The longest lifetime granted (a longer one is cut to this, as `effective_max_lifetime_seconds`
    /// reports).
    pub max_lifetime: Duration,
    /// The most memory a sandbox may ask for, in MiB.
    pub max_memory_mb: u64,
    /// Bytes of files per sandbox.
    pub disk_bytes: u64,
    /// Files, folders and links per sandbox.
    pub files: u64,
    /// Bytes of stdin one `StreamExec` may send.
    pub stdin_bytes: usize,
}

impl Default for ServerLimits {
    /// 64 sandboxes per credential (twice a grader's default `max_alive`), 256 in all; an hour
    /// by default, a day at most; 8 GiB of memory; 1 GiB in 10 000 files each; 16 MiB of stdin.
    fn default() -> Self {
        ServerLimits {
            per_key: 64,
            total: 256,
            default_lifetime: Duration::from_secs(3600),
            max_lifetime: Duration::from_secs(24 * 3600),
            max_memory_mb: 8192,
            disk_bytes: 1 << 30,
            files: 10_000,
            stdin_bytes: 16 << 20,
        }
    }
}

impl ServerLimits {
    /// The lifetime granted for `max_lifetime_seconds`: the default for none (0 or less), at
    /// most the maximum.
    fn lifetime(&self, asked_s: i32) -> Duration {
        match u64::try_from(asked_s) {
            Ok(s) if s > 0 => Duration::from_secs(s).min(self.max_lifetime),
            _ => self.default_lifetime,
        }
    }
}

/// How the server behaves beyond the protocol.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// Test-only: a new sandbox stays `PENDING` this long before it is `RUNNING` (`Duration::MAX`:
    /// never), as a hosted service's cold start would, so that clients' readiness timeouts can
    /// be tested. `None`: `RUNNING` at once.
    pub pending: Option<Duration>,
    /// The key every request must carry (`authorization: Bearer KEY`); `None`: any credential,
    /// each its own principal (for a loopback bind).
    pub api_key: Option<ApiKey>,
    /// Caps on what clients may ask.
    pub limits: ServerLimits,
}

/// The service's state.
pub(crate) struct Service {
    sandbox: LocalSandbox,
    held: std::sync::Mutex<HashMap<String, Held>>,
    counter: AtomicU64,
    /// Ended sandboxes with their owners, most recent last, kept for `GetSandbox` (the official
    /// client polls for the terminal state after a stop) but not listed.
    ended: std::sync::Mutex<std::collections::VecDeque<(Vec<u8>, wire::Sandbox)>>,
    options: ServeOptions,
    /// Most sandboxes held at once.
    peak: std::sync::atomic::AtomicUsize,
    /// Where the sandboxes' roots live ([`LocalSandbox::roots_dir`]).
    roots: PathBuf,
    /// The server's Python (`3.11.7`), the one image it provides.
    python_version: String,
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
/// flight on them end (at most ten seconds). Every sandbox's files are removed by then.
///
/// # Errors
/// A sandbox without persistent roots (started without [`crate::sandbox::local::LocalConfig::persistent_roots`],
/// or without the mount namespace that shows them); a Python whose version cannot be read; a
/// failing `accept` that is not transient.
pub async fn serve(listener: TcpListener, sandbox: LocalSandbox, options: ServeOptions, shutdown: impl Future<Output = ()>) -> std::io::Result<Stats> {
    let roots = sandbox.roots_dir().map(std::path::Path::to_path_buf).ok_or_else(|| {
        std::io::Error::other("the CoreWeave protocol needs a sandbox with persistent roots, which need the mount namespace (see `rlx sandbox check`)")
    })?;
    let version = tokio::process::Command::new(sandbox.python()).args(["-I", "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"]).output().await?;
    let python_version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    if python_version.is_empty() {
        return Err(std::io::Error::other(format!("cannot read the version of {}", sandbox.python().display())));
    }
    let svc = Arc::new(Service {
        sandbox,
        held: std::sync::Mutex::new(HashMap::new()),
        counter: AtomicU64::new(0),
        ended: std::sync::Mutex::default(),
        options,
        peak: std::sync::atomic::AtomicUsize::new(0),
        roots,
        python_version,
    });
    // The shared accept loop (connection limit, owned connection tasks, drain on shutdown) over
    // HTTP/2: a gRPC client multiplexes its calls on one connection, so the limit counts clients.
    let handle = {
        let svc = svc.clone();
        move |req| {
            let svc = svc.clone();
            async move { Ok::<_, Infallible>(svc.route(req).await) }
        }
    };
    let options = crate::http_server::ServeOptions { drain: Duration::from_secs(10), max_connections: crate::http_server::DEFAULT_MAX_CONNECTIONS, http: crate::http_server::Http::Two };
    crate::http_server::serve_with(listener, handle, shutdown, options).await?;
    let alive = std::mem::take(&mut *svc.lock());
    Ok(Stats { created: svc.counter.load(Ordering::Relaxed), alive: alive.len(), peak: svc.peak.load(Ordering::Relaxed) })
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

/// A random sandbox id: `rlx-` and 64 bits from the OS, so no client can guess another's.
fn random_id() -> Result<String, Status> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).map_err(|e| Status::new(grpc::INTERNAL, format!("no randomness for an id: {e}")))?;
    Ok(format!("rlx-{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>()))
}

impl Service {
    async fn route(self: Arc<Self>, req: Request<Incoming>) -> Response<ChannelBody> {
        let method = req.uri().path().strip_prefix(wire::SERVICE).unwrap_or("").to_owned();
        // The key before the body: an unauthenticated client costs no buffering.
        let who = match access::principal(req.headers(), self.options.api_key.as_ref()) {
            Ok(w) => w,
            Err(s) => return reply::<wire::WriteFileResponse>(Err(s)),
        };
        self.reap_expired();
        match method.as_str() {
            "CreateSandbox" => reply(async { self.create(who, unary(req).await?) }.await),
            "GetSandbox" => reply(async { self.get(&who, &unary::<wire::GetSandboxRequest>(req).await?.sandbox_id) }.await),
            "ListSandboxes" => reply(async { Ok(self.list(&who, &unary(req).await?)) }.await),
            "DeleteSandbox" => reply(async { self.delete(&who, &unary(req).await?) }.await),
            "WriteFile" => reply(async { self.write_file(&who, unary(req).await?).await }.await),
            "ReadFile" => reply(async { self.read_file(&who, &unary(req).await?).await }.await),
            "Exec" => {
                let timeout = deadline(&req);
                reply(async { self.exec(&who, unary(req).await?, timeout).await }.await)
            }
            "StreamExec" => self.stream_exec(who, req),
            _ => reply::<wire::WriteFileResponse>(Err(Status::new(grpc::UNIMPLEMENTED, format!("`{}` is not served by rlx sandbox serve", req.uri().path())))),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Ends sandboxes past their lifetime, as the real service ends them (their files go).
    fn reap_expired(&self) {
        let now = Instant::now();
        let expired: Vec<String> = self.lock().iter().filter(|(_, h)| h.expires <= now).map(|(id, _)| id.clone()).collect();
        for id in expired {
            self.end(&id, "its max lifetime passed");
        }
    }

    /// Removes sandbox `id` (its files with it) and remembers it as ended.
    fn end(&self, id: &str, reason: &str) -> Option<wire::Sandbox> {
        let mut h = self.lock().remove(id)?;
        let status = h.proto.status.get_or_insert_with(Default::default);
        status.state = State::Terminated as i32;
        status.end_time = Some(wire::Timestamp::now());
        reason.clone_into(&mut status.state_reason);
        tracing::debug!(sandbox = %id, reason, "sandbox ended");
        let mut ended = self.ended.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if ended.len() >= ENDED_KEPT {
            ended.pop_front();
        }
        ended.push_back((h.owner.clone(), h.proto.clone()));
        Some(h.proto)
    }

    /// Runs `f` on sandbox `id` if `who` owns it; `NOT_FOUND` otherwise, whether it exists or not.
    fn with_held<T>(&self, who: &[u8], id: &str, f: impl FnOnce(&mut Held) -> T) -> Result<T, Status> {
        let mut held = self.lock();
        let h = held.get_mut(id).filter(|h| h.owned_by(who)).ok_or_else(|| not_found(id))?;
        Ok(f(h))
    }

    fn create(&self, who: Vec<u8>, req: wire::CreateSandboxRequest) -> Result<wire::Sandbox, Status> {
        let limits = self.options.limits;
        let mut proto = req.sandbox.unwrap_or_default();
        let spec = proto.spec.get_or_insert_with(Default::default);
        let container = spec.containers.first().cloned().unwrap_or_default();
        access::check_image(&container.image, &self.python_version)?;
        let memory_mb = container_memory_mb(&container).unwrap_or(Limits::default().memory_mb);
        if memory_mb > limits.max_memory_mb {
            return Err(Status::new(grpc::INVALID_ARGUMENT, format!("{memory_mb} MiB of memory asked; this server grants at most {} MiB", limits.max_memory_mb)));
        }
        let cwd = if container.working_dir.trim_matches('/').is_empty() { "/".to_owned() } else { normalize(&container.working_dir)? };
        let lifetime = limits.lifetime(spec.max_lifetime_seconds);
        let id = random_id()?;
        proto.sandbox_id.clone_from(&id);
        let now = wire::Timestamp::now();
        let pending = self.options.pending.filter(|d| !d.is_zero());
        proto.status = Some(wire::SandboxStatus {
            state: if pending.is_some() { State::Pending } else { State::Running } as i32,
            create_time: Some(now.clone()),
            start_time: pending.is_none().then_some(now),
            effective_max_lifetime_seconds: i32::try_from(lifetime.as_secs()).unwrap_or(i32::MAX),
            ..Default::default()
        });
        let ready_at = pending.and_then(|d| Instant::now().checked_add(d));
        let mut held = self.lock();
        let mine = held.values().filter(|h| h.owned_by(&who)).count();
        if mine >= limits.per_key {
            return Err(Status::new(grpc::RESOURCE_EXHAUSTED, format!("{mine} sandboxes of this API key are alive, the most this server allows per key; stop one first")));
        }
        if held.len() >= limits.total {
            return Err(Status::new(grpc::RESOURCE_EXHAUSTED, format!("{} sandboxes are alive, the most this server holds; try again later", held.len())));
        }
        let fs = RootFs::create(&self.roots, &id, &cwd).map_err(|e| fs_status(e, &cwd))?;
        tracing::debug!(sandbox = %id, tags = ?spec.tags, "sandbox created");
        self.counter.fetch_add(1, Ordering::Relaxed);
        let h = Held {
            proto: proto.clone(),
            owner: who,
            fs: Arc::new(fs),
            memory_mb,
            env: container.environment_variables,
            cwd,
            expires: Instant::now() + lifetime,
            ready_at,
            turn: Arc::default(),
        };
        held.insert(id, h);
        self.peak.fetch_max(held.len(), Ordering::Relaxed);
        Ok(proto)
    }

    fn get(&self, who: &[u8], id: &str) -> Result<wire::Sandbox, Status> {
        if let Ok(p) = self.with_held(who, id, |h| {
            h.promote();
            h.proto.clone()
        }) {
            return Ok(p);
        }
        let ended = self.ended.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        ended.iter().rev().find(|(o, s)| s.sandbox_id == id && crate::http_server::same_secret(o, who)).map(|(_, s)| s.clone()).ok_or_else(|| not_found(id))
    }

    fn list(&self, who: &[u8], req: &wire::ListSandboxesRequest) -> wire::ListSandboxesResponse {
        let mut held = self.lock();
        held.values_mut().for_each(Held::promote);
        let mut sandboxes: Vec<wire::Sandbox> = held
            .values()
            .filter(|h| {
                let tags = h.proto.spec.as_ref().map(|s| s.tags.as_slice()).unwrap_or_default();
                h.owned_by(who) && req.tags.iter().all(|t| tags.contains(t))
            })
            .map(|h| h.proto.clone())
            .collect();
        sandboxes.sort_by(|a, b| a.sandbox_id.cmp(&b.sandbox_id));
        wire::ListSandboxesResponse { sandboxes, next_page_token: String::new() }
    }

    fn delete(&self, who: &[u8], req: &wire::DeleteSandboxRequest) -> Result<wire::DeleteSandboxResponse, Status> {
        let mine = self.with_held(who, &req.sandbox_id, |_| ()).is_ok();
        match mine.then(|| self.end(&req.sandbox_id, "deleted")).flatten() {
            Some(sandbox) => Ok(wire::DeleteSandboxResponse { sandbox: Some(sandbox) }),
            None if req.allow_missing => Ok(wire::DeleteSandboxResponse { sandbox: None }),
            None => Err(not_found(&req.sandbox_id)),
        }
    }

    async fn write_file(&self, who: &[u8], req: wire::WriteFileRequest) -> Result<wire::WriteFileResponse, Status> {
        let path = normalize(&req.path)?;
        let fs = self.with_held(who, &req.sandbox_id, |h| h.fs.clone())?;
        let limits = self.options.limits;
        let len = req.content.len() as u64;
        tokio::task::spawn_blocking(move || {
            let used = fs.usage(limits.files);
            if used.bytes + len > limits.disk_bytes || used.files + 1 > limits.files {
                return Err(Status::new(
                    grpc::RESOURCE_EXHAUSTED,
                    format!("writing {len} bytes to `{path}` would pass the sandbox's cap of {} bytes in {} files (it holds {} bytes in {} entries)", limits.disk_bytes, limits.files, used.bytes, used.files),
                ));
            }
            fs.write(&path, &req.content).map_err(|e| fs_status(e, &path))
        })
        .await
        .map_err(|e| Status::new(grpc::INTERNAL, e.to_string()))??;
        Ok(wire::WriteFileResponse {})
    }

    async fn read_file(&self, who: &[u8], req: &wire::ReadFileRequest) -> Result<wire::ReadFileResponse, Status> {
        let path = normalize(&req.path)?;
        let fs = self.with_held(who, &req.sandbox_id, |h| h.fs.clone())?;
        let max = self.options.limits.disk_bytes.min(MAX_REQUEST as u64);
        let (id, shown) = (req.sandbox_id.clone(), req.path.clone());
        let content = tokio::task::spawn_blocking(move || match fs.read(&path, max) {
            Err(FsError::Missing) => Err(Status::new(grpc::NOT_FOUND, format!("no file `{shown}` in sandbox `{id}`"))),
            r => r.map_err(|e| fs_status(e, &path)),
        })
        .await
        .map_err(|e| Status::new(grpc::INTERNAL, e.to_string()))??;
        Ok(wire::ReadFileResponse { content })
    }

    async fn exec(&self, who: &[u8], req: wire::ExecRequest, timeout: Duration) -> Result<wire::ExecResponse, Status> {
        let out = self.run_command(who, &req.sandbox_id, req.command, req.env, None, timeout).await?;
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
    fn stream_exec(self: Arc<Self>, who: Vec<u8>, req: Request<Incoming>) -> Response<ChannelBody> {
        let timeout = deadline(&req);
        let (tx, rx) = mpsc::channel(8);
        tokio::spawn(async move {
            let data = |m: wire::StreamResponse| Frame::data(grpc::frame(&wire::ExecStreamResponse { message: Some(m) }));
            let ready = data(wire::StreamResponse::Ready(wire::ExecStreamReady { ready_time: Some(wire::Timestamp::now()) }));
            let status = match read_stream_request(req.into_body(), &tx, ready, self.options.limits.stdin_bytes).await {
                Err(s) => s,
                Ok((init, stdin)) => match self.run_command(&who, &init.sandbox_id, init.command, init.env, Some(stdin), timeout).await {
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

    /// One command in the sandbox's root, after the one before it ended; a sandbox whose files
    /// then pass its caps is ended (its files removed) and the call says why.
    async fn run_command(&self, who: &[u8], id: &str, argv: Vec<String>, env: BTreeMap<String, String>, stdin: Option<Vec<u8>>, timeout: Duration) -> Result<Output, Status> {
        if argv.is_empty() {
            return Err(Status::new(grpc::INVALID_ARGUMENT, "the command is empty"));
        }
        let turn = self.with_held(who, id, |h| {
            h.promote();
            h.running().then(|| h.turn.clone())
        })?;
        let turn = turn.ok_or_else(|| Status::new(grpc::FAILED_PRECONDITION, format!("sandbox `{id}` is not running yet")))?;
        let _turn = turn.lock_owned().await;
        // Looked up again: the sandbox may have ended while the command waited its turn.
        let (fs, memory_mb, mut job_env, cwd) = self.with_held(who, id, |h| (h.fs.clone(), h.memory_mb, h.env.clone(), h.cwd.clone()))?;
        job_env.extend(env);
        let job = serde_json::json!({"argv": argv, "env": job_env}).to_string();
        let limits = self.options.limits;
        let fsize_mb = (limits.disk_bytes >> 20).clamp(1, Limits::default().fsize_mb);
        let req = ExecRequest {
            code: format!("JOB = \"{}\"\n{LAUNCHER}", B64.encode(job)),
            stdin: stdin.map(|s| String::from_utf8_lossy(&s).into_owned()),
            limits: Limits { timeout, memory_mb, fsize_mb, ..Limits::default() },
            ..ExecRequest::default()
        };
        let out = self.sandbox.run_in_root(req, id, &cwd).await.map_err(|e| Status::new(grpc::UNAVAILABLE, format!("the sandbox failed: {e}")))?;
        let used = tokio::task::spawn_blocking(move || fs.usage(limits.files)).await.map_err(|e| Status::new(grpc::INTERNAL, e.to_string()))?;
        if used.bytes > limits.disk_bytes || used.files > limits.files {
            self.end(id, "its files passed the server's cap");
            return Err(Status::new(
                grpc::RESOURCE_EXHAUSTED,
                format!("the command left more than the sandbox's cap of {} bytes in {} files ({} bytes, {} entries): sandbox `{id}` was ended", limits.disk_bytes, limits.files, used.bytes, used.files),
            ));
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

/// Reads a `StreamExec` request stream: the `init`, then stdin (at most `max_stdin` bytes)
/// until `close` or the end of the stream. `ready` is sent once `init` has arrived (the official client waits for it before
/// sending stdin).
async fn read_stream_request(mut body: Incoming, tx: &mpsc::Sender<Frame<Bytes>>, ready: Frame<Bytes>, max_stdin: usize) -> Result<(wire::ExecStreamInit, Vec<u8>), Status> {
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
                (Some(wire::StreamRequest::Stdin(b)), true) => {
                    if stdin.len() + b.len() > max_stdin {
                        return Err(Status::new(grpc::RESOURCE_EXHAUSTED, format!("more than {max_stdin} bytes of stdin")));
                    }
                    stdin.extend_from_slice(&b);
                }
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

fn fs_status(e: FsError, path: &str) -> Status {
    match e {
        FsError::Missing => Status::new(grpc::NOT_FOUND, format!("`{path}`: a folder on the way does not exist")),
        FsError::Invalid(m) => Status::new(grpc::INVALID_ARGUMENT, m),
        FsError::Io(e) => Status::new(grpc::INTERNAL, format!("`{path}`: {e}")),
    }
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

    #[test]
    fn a_sandbox_always_has_a_bounded_lifetime() {
        let l = ServerLimits::default();
        assert_eq!(l.lifetime(0), Duration::from_secs(3600));
        assert_eq!(l.lifetime(-5), Duration::from_secs(3600));
        assert_eq!(l.lifetime(60), Duration::from_secs(60));
        assert_eq!(l.lifetime(i32::MAX), Duration::from_secs(24 * 3600));
    }
}
