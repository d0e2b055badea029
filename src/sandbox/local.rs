//! The embedded sandbox: a pool of warm, isolated Python workers.
//!
//! Each slot owns one worker process running `harness.py worker` (see the process tree at the top
//! of `harness.py`). The worker is started once with a scrubbed environment in its own process
//! group, isolates itself (namespaces, read-only root, private `/tmp`), imports the harness, and
//! then forks per submission, from a zygote that never holds a job (no submission can find
//! another's code, inputs or expected outputs in its memory); a submission costs one fork (more
//! only when a test times out or crashes the program) instead of an interpreter start-up
//! (Sandbox Fusion pays ~9 ms of start-up and ~120 ms of numpy import per request,
//! measured against Sandbox Fusion, docs/sandbox.md).
//!
//! Concurrency ([`super::admission`]): up to `workers` submissions run at once, and more (up to
//! `max_in_flight`, one worker process each) only while some in flight wait without using the
//! CPU. The first `workers` workers start eagerly, the extra ones on first use. A worker that
//! misses its deadline or breaks the protocol is killed (its whole process group; the
//! submission's processes die with it through `PR_SET_PDEATHSIG` and the PID namespace) and
//! restarted on the next use, so one bad submission never poisons a slot; so is a worker that
//! lost the zygote that forks the programs' processes and says `retire` (it will not fork
//! another from its own memory, which holds earlier jobs). An exchange with a worker runs on a
//! task of its own and always completes, even when its caller gives up (an HTTP client that
//! disconnects): a half-finished exchange would hand its reply to the next job.
//!
//! Warm workers preload the modules submissions commonly import (numpy among them, when the
//! interpreter has it; see `PRELOAD` in `harness.py`) before they fork, so a submission that
//! imports them finds them in `sys.modules`, and warm them up (`warm_up`: the forks inherit
//! specialized bytecode; module globals are put back). Each submission is still a fresh fork:
//! what one does to a preloaded module (mutating numpy, `sys.modules`, builtins) dies with its
//! process. A request's files reach the worker as raw bytes after the job frame, not base64.
//!
//! Each slot runs programs under its own uid (when rlx is root): RLIMIT_NPROC counts per uid, so
//! a fork bomb in one slot cannot starve another. Uids are `1_000_000 + (pid % 10_000)·65_536 +
//! slot number within the process`, far from any real account.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::admission::Admission;
use super::harness;
use super::lang::{self, Build, Compiled};
use super::error::Error;
use super::exec::{ExecOutput, ExecRequest, ExecStatus, Protection, Sandbox};
use super::limits::{GradeOptions, Limits};
use super::verdict::{Grader, TestResult, TestStatus, Verdict};
use crate::data::Problem;

/// Configuration of the local sandbox.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    /// Submissions that may use the CPU at once (default: the number of cores).
    pub workers: usize,
    /// Submissions in flight at once, counting those that wait on a sleep, a lock or a deadline
    /// without using the CPU; each holds a worker process. `None`: 4 × `workers`.
    pub max_in_flight: Option<usize>,
    /// Python interpreter; `None` resolves `python3` on `PATH` to its real executable.
    pub python: Option<PathBuf>,
    /// Refuse to start when an isolation layer is missing instead of degrading.
    pub strict: bool,
    /// Use namespaces when the kernel allows them (default). Off only to exercise the degraded
    /// mode (tests) or where namespaces misbehave; the loss is reported in [`Protection`].
    pub namespaces: bool,
    /// Persistent writable roots (the CoreWeave-protocol server's containers): every job runs
    /// in a root of its own kept between jobs ([`LocalSandbox::run_in_root`]), and no job runs
    /// outside one. Needs the mount namespace. Off for graders, which keep a fresh working
    /// directory per submission.
    pub persistent_roots: bool,
}

impl Default for LocalConfig {
    fn default() -> Self {
        LocalConfig {
            workers: std::thread::available_parallelism().map_or(2, |n| n.get()),
            max_in_flight: None,
            python: None,
            strict: false,
            namespaces: true,
            persistent_roots: false,
        }
    }
}

/// The embedded sandbox and grader. Cheap to clone; the workers die with the last clone.
#[derive(Clone)]
pub struct LocalSandbox {
    inner: Arc<Inner>,
}

struct Inner {
    slots: Vec<tokio::sync::Mutex<Option<Worker>>>,
    admission: Arc<Admission>,
    spawner: Spawner,
    protection: Protection,
    preload: Preload,
    binaries: lang::SharedCache,
    /// The root of the precompiled headers the workers bind read-only ([`super::pch`]); `None`
    /// when they are off or the sandbox has no mount namespace (a program could then reach the
    /// directory writable).
    pch: Option<PathBuf>,
}

/// What the warm workers preloaded (see `PRELOAD` in `harness.py`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Preload {
    /// Modules imported before forking.
    pub modules: Vec<String>,
    /// Modules the interpreter could not import, with the reason (numpy when it is not installed).
    pub missing: BTreeMap<String, String>,
}

/// What starting a worker needs; cloned into start-up tasks.
#[derive(Clone)]
struct Spawner {
    python: PathBuf,
    dir: PathBuf,
    uid_base: u32,
    namespaces: bool,
    /// Host directories bound read-only at the same path in the workers' root.
    ro_dirs: Vec<PathBuf>,
    /// The host directory of the persistent roots (`LocalConfig::persistent_roots`).
    roots: Option<PathBuf>,
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    stderr_tail: Arc<Mutex<Vec<u8>>>,
    slot: usize,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for slot in &self.slots {
            if let Ok(mut w) = slot.try_lock()
                && let Some(w) = w.take()
            {
                w.kill();
            }
        }
        let _ = std::fs::remove_dir_all(&self.spawner.dir);
    }
}

/// The start of this process's sandbox directories' names in the temp directory.
fn temp_prefix() -> String {
    format!("rlx-sandbox-{}-", std::process::id())
}

/// Removes this process's sandbox directories, for an exit that skips destructors (a second
/// SIGINT or SIGTERM quits at once).
pub fn remove_temp_dirs() {
    let prefix = temp_prefix();
    for entry in std::fs::read_dir(std::env::temp_dir()).into_iter().flatten().flatten() {
        if entry.file_name().to_str().is_some_and(|n| n.starts_with(&prefix)) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl LocalSandbox {
    /// Start the workers and probe the isolation they achieved.
    ///
    /// # Errors
    /// [`Error::Python`] or [`Error::Worker`] when a worker cannot start; [`Error::Incomplete`]
    /// when `strict` and a layer is missing.
    pub async fn start(config: LocalConfig) -> Result<LocalSandbox, Error> {
        let python = match config.python {
            Some(p) => p,
            None => resolve_python().await?,
        };
        static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("{}{n}", temp_prefix()));
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |source| Error::Io { path, source }
        };
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        set_mode(&dir, 0o711).map_err(io(&dir))?;
        let harness_path = dir.join("harness.py");
        std::fs::write(&harness_path, harness::SOURCE).map_err(io(&harness_path))?;
        let workers = config.workers.max(1);
        let admission = Admission::new(workers, config.max_in_flight.unwrap_or(4 * workers));
        let slots = admission.slots();
        // Distinct uid ranges per process and per sandbox in it (tests start many): uids of
        // two live pools must never meet, since the process limit and (without a PID
        // namespace) the final kill work per uid.
        static NEXT_SLOT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let first = NEXT_SLOT.fetch_add(slots as u32, std::sync::atomic::Ordering::Relaxed) % 65_536;
        let uid_base = 1_000_000 + (std::process::id() % 10_000) * 65_536 + first;
        let pch = super::pch::root().filter(|r| make_pch_root(r));
        let roots = if config.persistent_roots {
            let roots = dir.join("roots");
            std::fs::create_dir_all(&roots).map_err(io(&roots))?;
            set_mode(&roots, 0o700).map_err(io(&roots))?;
            Some(roots)
        } else {
            None
        };
        let spawner = Spawner { python, dir, uid_base, namespaces: config.namespaces, ro_dirs: pch.iter().cloned().collect(), roots };
        let mut inner = Inner {
            slots: Vec::new(),
            admission: admission.clone(),
            spawner: spawner.clone(),
            protection: Protection::default(),
            preload: Preload::default(),
            binaries: lang::SharedCache::default(),
            pch: None,
        };
        let mut set = tokio::task::JoinSet::new();
        for slot in 0..workers {
            let sp = spawner.clone();
            set.spawn(async move { (slot, spawn_worker(&sp, slot).await) });
        }
        // Slots beyond `workers` start on first use: most pools never need them.
        let mut started: Vec<Option<Worker>> = (0..slots).map(|_| None).collect();
        let mut hello = None;
        while let Some(joined) = set.join_next().await {
            let (slot, result) = joined.map_err(|e| Error::Worker { slot: 0, reason: e.to_string(), stderr: String::new() })?;
            let (worker, prot, preload) = result?;
            admission.set_pid(slot, worker.child.id().unwrap_or(0));
            hello.get_or_insert((prot, preload));
            started[slot] = Some(worker);
        }
        inner.slots = started.into_iter().map(tokio::sync::Mutex::new).collect();
        (inner.protection, inner.preload) = hello.unwrap_or_default();
        inner.pch = pch.filter(|_| inner.protection.mount_namespace);
        if config.strict && !inner.protection.is_complete() {
            let mut missing = inner.protection.notes.clone();
            if missing.is_empty() {
                missing.push("an isolation layer is unavailable".into());
            }
            return Err(Error::Incomplete { missing });
        }
        Ok(LocalSandbox { inner: Arc::new(inner) })
    }

    /// The isolation in force (the same for every worker).
    pub fn protection(&self) -> &Protection {
        &self.inner.protection
    }

    /// The host directory that holds the persistent roots, one directory per root: `None`
    /// unless [`LocalConfig::persistent_roots`] was asked for and the workers have the mount
    /// namespace that shows them.
    pub fn roots_dir(&self) -> Option<&Path> {
        self.inner.spawner.roots.as_deref().filter(|_| self.inner.protection.mount_namespace)
    }

    /// Runs `req` in the persistent root `root` (a directory name under [`Self::roots_dir`],
    /// which the caller creates) with `cwd` as its working directory: absolute paths are the
    /// root's, whatever the program or its shell opens, and what it writes stays for the next
    /// job of the same root. The caller must not run two jobs of one root at once.
    ///
    /// # Errors
    /// As [`Sandbox::run`]; [`Error::Rejected`] without persistent roots.
    pub async fn run_in_root(&self, req: ExecRequest, root: &str, cwd: &str) -> Result<ExecOutput, Error> {
        if self.roots_dir().is_none() {
            return Err(Error::Rejected("this sandbox has no persistent roots".into()));
        }
        self.exec(req, Some((root, cwd))).await
    }

    /// The Python interpreter the workers run.
    pub fn python(&self) -> &Path {
        &self.inner.spawner.python
    }

    /// What the workers preloaded.
    pub fn preload(&self) -> &Preload {
        &self.inner.preload
    }

    /// The compiler's argv for a `language` source compiled with `flags` (the language's
    /// defaults when `None`) in this sandbox, precompiled header included; `None` for an
    /// interpreted language. For tests and benchmarks that check what the compile step runs.
    ///
    /// # Errors
    /// [`Error::Toolchain`] when the compiler is missing.
    pub fn compile_argv(&self, language: crate::spec::types::Language, flags: Option<&[String]>) -> Result<Option<Vec<String>>, Error> {
        let b = lang::build(language, "", flags, &Limits::default(), self.inner.pch.as_deref())?;
        Ok(b.map(|b| b.job["compile"].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_owned)).collect()))
    }

    /// Process ids of the workers started so far (for CPU accounting in benchmarks).
    pub fn worker_pids(&self) -> Vec<u32> {
        (0..self.inner.slots.len()).filter_map(|s| self.inner.admission.pid(s)).collect()
    }

    /// Submissions that may use the CPU at once.
    pub fn workers(&self) -> usize {
        self.inner.admission.workers()
    }

    /// Submissions that may be in flight at once (worker slots).
    pub fn max_in_flight(&self) -> usize {
        self.inner.slots.len()
    }

    /// The uids programs run under (when rlx is root): `base..base+max_in_flight`.
    pub fn uid_range(&self) -> std::ops::Range<u32> {
        let base = self.inner.spawner.uid_base;
        base..base + self.inner.slots.len() as u32
    }

    /// Send one job to a worker once admitted, and wait for its reply. The exchange runs on its
    /// own task: it completes (and frees its slot) even if this future is dropped.
    ///
    /// `files` are the bytes of the job's `file_names`, sent raw after the job frame.
    async fn call(&self, job: Value, files: Vec<Vec<u8>>, expected: Option<Value>, deadline: Duration, memory_mb: u64) -> Result<Value, Error> {
        let guard = self.inner.admission.admit(memory_mb).await;
        let this = self.clone();
        tokio::spawn(async move {
            let result = this.call_on(guard.slot, &job, &files, expected.as_ref(), deadline).await;
            drop(guard);
            result
        })
        .await
        .map_err(|e| Error::Task(e.to_string()))?
    }

    async fn call_on(&self, slot: usize, job: &Value, files: &[Vec<u8>], expected: Option<&Value>, deadline: Duration) -> Result<Value, Error> {
        let mut guard = self.inner.slots[slot].lock().await;
        if guard.is_none() {
            let (w, _, _) = spawn_worker(&self.inner.spawner, slot).await?;
            self.inner.admission.set_pid(slot, w.child.id().unwrap_or(0));
            *guard = Some(w);
        }
        let worker = guard.as_mut().expect("just filled");
        // The harness enforces the job's own deadline; this outer one only catches a wedged
        // worker, so it adds a generous margin.
        let outer = deadline + Duration::from_secs(10);
        let exchange = async {
            write_frame(&mut worker.stdin, job).await?;
            for bytes in files {
                write_raw_frame(&mut worker.stdin, bytes).await?;
            }
            if let Some(e) = expected {
                write_frame(&mut worker.stdin, e).await?;
            }
            worker.stdin.flush().await?;
            read_frame(&mut worker.stdout).await
        };
        let outcome = tokio::time::timeout(outer, exchange).await;
        let failure = match outcome {
            Ok(Ok(Some(v))) if v.get("retire").and_then(Value::as_bool) == Some(true) => {
                // The worker lost the process that forks the programs' processes and will not
                // fork another from its own memory, which holds earlier jobs (`RETIRE` in
                // harness.py): its reply stands, and the next job on this slot starts a fresh
                // worker.
                guard.take().expect("present").kill();
                return Ok(v);
            }
            Ok(Ok(Some(v))) => return Ok(v),
            Ok(Ok(None)) => "worker closed its pipe".to_owned(),
            Ok(Err(e)) => format!("worker pipe: {e}"),
            Err(_) => format!("no reply within {outer:?}"),
        };
        let w = guard.take().expect("present");
        let stderr = w.stderr_text();
        w.kill();
        Err(Error::Worker { slot, reason: failure, stderr })
    }
}

impl Worker {
    fn kill(mut self) {
        if let Some(pid) = self.child.id() {
            // SAFETY: kill(2) on the worker's own process group (it was spawned with
            // process_group(0), so pgid == pid); no memory is touched.
            unsafe {
                libc::kill(-(pid as i32), libc::SIGKILL);
            }
        }
        let _ = self.child.start_kill();
        let slot = self.slot;
        // Reap in the background so no zombie is left; outside a runtime, kill_on_drop suffices.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = self.child.wait().await;
                let _ = slot;
            });
        }
    }

    fn stderr_text(&self) -> String {
        let tail = self.stderr_tail.lock().expect("stderr lock");
        String::from_utf8_lossy(&tail).trim().to_owned()
    }
}

async fn resolve_python() -> Result<PathBuf, Error> {
    // Resolve shims (pyenv's costs ~150 ms per start) to the interpreter itself, once.
    let python = crate::switches::PYTHON.var_os().unwrap_or_else(|| "python3".into());
    let out = Command::new(&python)
        .args(["-I", "-c", "import sys; print(sys.executable)"])
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|source| Error::Python { python: python.to_string_lossy().into_owned(), source })?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() || path.is_empty() {
        return Err(Error::Python {
            python: python.to_string_lossy().into_owned(),
            source: std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_owned()),
        });
    }
    Ok(PathBuf::from(path))
}

/// Creates the root of the precompiled headers (readable by the programs' uids) so the workers
/// can bind it; `false` (headers off, with a warning) when it cannot be.
fn make_pch_root(root: &Path) -> bool {
    match std::fs::create_dir_all(root).and_then(|()| set_mode(root, 0o755)) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(dir = %root.display(), "C++ compiles run without precompiled headers: cannot create their directory: {e}");
            false
        }
    }
}

fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

async fn spawn_worker(inner: &Spawner, slot: usize) -> Result<(Worker, Protection, Preload), Error> {
    let werr = |reason: String, stderr: String| Error::Worker { slot, reason, stderr };
    let root_dir = inner.dir.join(format!("root-{slot}"));
    let work_dir = inner.dir.join(format!("work-{slot}"));
    for d in [&root_dir, &work_dir] {
        std::fs::create_dir_all(d).map_err(|source| Error::Io { path: d.display().to_string(), source })?;
    }
    let _ = set_mode(&work_dir, 0o711);
    let uid = inner.uid_base + slot as u32;
    let cfg = json!({
        "uid": uid,
        "gid": uid,
        "root_dir": root_dir,
        "fallback_tmp": work_dir,
        "tmp_mb": 512,
        "namespaces": inner.namespaces,
        "ro_dirs": inner.ro_dirs,
        "roots": inner.roots,
    });
    let mut cmd = Command::new(&inner.python);
    cmd.arg("-I")
        .arg(inner.dir.join("harness.py"))
        .arg("worker")
        .arg(cfg.to_string())
        // A scrubbed environment: nothing of ours (API keys, tokens) reaches the programs.
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LC_ALL", "C.UTF-8")
        .env("HOME", "/tmp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|source| Error::Python { python: inner.python.display().to_string(), source })?;
    let stdin = child.stdin.take().expect("piped");
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let stderr_tail = Arc::new(Mutex::new(Vec::new()));
    let tail = stderr_tail.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf).await {
            if n == 0 {
                break;
            }
            let mut t = tail.lock().expect("stderr lock");
            t.extend_from_slice(&buf[..n]);
            let excess = t.len().saturating_sub(8192);
            t.drain(..excess);
        }
    });
    let worker_stderr = || String::from_utf8_lossy(&stderr_tail.lock().expect("stderr lock")).trim().to_owned();
    let hello = match tokio::time::timeout(Duration::from_secs(60), read_frame(&mut stdout)).await {
        Ok(Ok(Some(v))) => v,
        Ok(Ok(None)) => {
            let _ = child.wait().await;
            return Err(werr("exited during start-up".into(), worker_stderr()));
        }
        Ok(Err(e)) => return Err(werr(format!("start-up pipe: {e}"), worker_stderr())),
        Err(_) => return Err(werr("no start-up reply within 60 s".into(), worker_stderr())),
    };
    let protection: Protection = serde_json::from_value(hello["protection"].clone())
        .map_err(|e| werr(format!("bad start-up reply: {e}"), String::new()))?;
    let preload = Preload {
        modules: serde_json::from_value(hello["preloaded"].clone()).unwrap_or_default(),
        missing: serde_json::from_value(hello["not_preloaded"].clone()).unwrap_or_default(),
    };
    Ok((Worker { child, stdin, stdout, stderr_tail, slot }, protection, preload))
}

async fn write_frame(w: &mut ChildStdin, v: &Value) -> std::io::Result<()> {
    let body = serde_json::to_vec(v).map_err(std::io::Error::other)?;
    let len = u32::try_from(body.len()).map_err(|_| std::io::Error::other("frame over 4 GiB"))?;
    w.write_all(&len.to_be_bytes()).await?;
    w.write_all(&body).await
}

/// A file's bytes as they are, length-prefixed (see `read_files` in `harness.py`).
async fn write_raw_frame(w: &mut ChildStdin, bytes: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(bytes.len()).map_err(|_| std::io::Error::other("file over 4 GiB"))?;
    w.write_all(&len.to_be_bytes()).await?;
    w.write_all(bytes).await
}

async fn read_frame(r: &mut ChildStdout) -> std::io::Result<Option<Value>> {
    let mut head = [0u8; 4];
    match r.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut body = vec![0u8; u32::from_be_bytes(head) as usize];
    r.read_exact(&mut body).await?;
    serde_json::from_slice(&body).map(Some).map_err(std::io::Error::other)
}

/// Parse the harness's per-test entries.
pub(crate) fn parse_tests(reply: &Value) -> Result<Vec<TestResult>, String> {
    if let Some(e) = reply.get("error").and_then(Value::as_str) {
        return Err(e.to_owned());
    }
    let tests = reply.get("tests").and_then(Value::as_array).ok_or("harness reply without `tests`")?;
    tests
        .iter()
        .map(|t| {
            let status: TestStatus = serde_json::from_value(t["status"].clone())
                .map_err(|_| format!("harness reported unknown test status {}", t["status"]))?;
            let text = |k: &str| t[k].as_str().map(str::to_string);
            Ok(TestResult { status, time_ms: t["time_ms"].as_u64().unwrap_or(0), got: text("got"), error: text("error") })
        })
        .collect()
}

impl LocalSandbox {
    /// For a compiled language: add the build to `job` (or the cached program, as a file) and
    /// return its cache key. `None` for interpreted languages.
    fn prepare_build(&self, job: &mut Value, build: Option<Build>, files: &mut Vec<Vec<u8>>, cacheable: bool) -> Option<[u8; 32]> {
        let build = build?;
        job["lang"] = build.job;
        let extra = build.timeout.as_secs_f64() + 5.0;
        job["deadline_s"] = (job["deadline_s"].as_f64().unwrap_or(60.0) + extra).into();
        if !cacheable {
            return None;
        }
        let cached = self.inner.binaries.lock().expect("binary cache lock").get(&build.key);
        if let Some(bin) = cached {
            job["lang"]["cached"] = true.into();
            let names = job.get("file_names").and_then(Value::as_array).cloned().unwrap_or_default();
            let mut names: Vec<Value> = names;
            names.push(lang::BINARY.into());
            job["file_names"] = names.into();
            files.push(bin.as_ref().clone());
        }
        Some(build.key)
    }

    /// The compile step's outcome from a reply, keeping a newly built program (or a diagnosed
    /// compile error) in the cache.
    fn take_compiled(&self, reply: &mut Value, key: Option<[u8; 32]>) -> Option<Compiled> {
        let c = reply.get_mut("compile")?;
        let binary = c.as_object_mut().and_then(|m| m.remove("binary"));
        if let (Some(key), Some(b)) = (key, binary.as_ref().and_then(Value::as_str))
            && let Ok(bytes) = B64.decode(b)
        {
            self.inner.binaries.lock().expect("binary cache lock").put(key, bytes);
        }
        let compiled = Compiled::from_reply(c);
        if let Some(key) = key {
            self.inner.binaries.lock().expect("binary cache lock").put_failed(key, &compiled);
        }
        Some(compiled)
    }

    /// The cached compile error of a source sent again, if the compiler refused it before.
    fn failed_before(&self, build: Option<&Build>) -> Option<Compiled> {
        self.inner.binaries.lock().expect("binary cache lock").failed(&build?.key)
    }
}

impl Grader for LocalSandbox {
    async fn grade(&self, problem: &Problem, code: &str, opts: &GradeOptions) -> Verdict {
        let opts = &opts.for_problem(problem);
        let total = problem.tests.len();
        let language = problem.language();
        let (mut job, expected) = harness::grade_job(problem, code, opts);
        let mut limits = opts.limits.clone();
        if let Some(t) = problem.compile_timeout_s() {
            limits.compile_timeout = Duration::from_secs_f64(t.clamp(0.1, 600.0));
        }
        let build = match lang::build(language, code, problem.compile_flags().as_deref(), &limits, self.inner.pch.as_deref()) {
            Ok(b) => b,
            Err(e) => return Verdict::infra_error(&problem.id, total, &e).in_language(language),
        };
        if let Some(c) = self.failed_before(build.as_ref()) {
            return Verdict::compile_error(&problem.id, total, c, opts.fail_fast).in_language(language);
        }
        let mut files = Vec::new();
        let key = self.prepare_build(&mut job, build, &mut files, true);
        if let Some(src) = problem.checker_program() {
            match lang::checker_job(src, &limits, total) {
                Ok((ck, extra)) => {
                    job["checker_prog"] = ck;
                    job["deadline_s"] = (job["deadline_s"].as_f64().unwrap_or(60.0) + extra).into();
                }
                Err(e) => return Verdict::infra_error(&problem.id, total, &e).in_language(language),
            }
        }
        let deadline = Duration::from_secs_f64(job["deadline_s"].as_f64().unwrap_or(60.0));
        let verdict = match self.call(job, files, expected, deadline, opts.limits.memory_mb).await {
            Ok(mut reply) => {
                let compiled = self.take_compiled(&mut reply, key);
                match (parse_tests(&reply), compiled) {
                    (Err(e), _) if reply["problem_fault"] == true => Verdict::problem_at_fault(&problem.id, total, &Error::Rejected(e)),
                    (Ok(_), Some(c)) if !c.ok() => Verdict::compile_error(&problem.id, total, c, opts.fail_fast),
                    (Ok(tests), compiled) => Verdict { compile: compiled, ..Verdict::from_tests(&problem.id, total, tests) },
                    (Err(e), _) => Verdict::infra_error(&problem.id, total, &Error::Rejected(e)),
                }
            }
            Err(e) => Verdict::infra_error(&problem.id, total, &e),
        };
        verdict.in_language(language)
    }
}

impl Sandbox for LocalSandbox {
    async fn run(&self, req: ExecRequest) -> Result<ExecOutput, Error> {
        self.exec(req, None).await
    }
}

impl LocalSandbox {
    /// [`Sandbox::run`], in a persistent root (`(name, working directory)`) when given.
    async fn exec(&self, req: ExecRequest, root: Option<(&str, &str)>) -> Result<ExecOutput, Error> {
        // Only a program without files may share a built program with another (see `lang`).
        let cacheable = req.files.is_empty() && root.is_none();
        let (names, mut files): (Vec<String>, Vec<Vec<u8>>) = req.files.into_iter().unzip();
        let mut job = harness::run_job(&req.code, req.stdin.as_deref(), &names, &req.fetch_files, &req.limits);
        if let Some((name, cwd)) = root {
            job["root"] = name.into();
            job["cwd"] = cwd.into();
        }
        let build = lang::build(req.language, &req.code, None, &req.limits, self.inner.pch.as_deref())?;
        if let Some(c) = self.failed_before(build.as_ref().filter(|_| cacheable)) {
            return Ok(ExecOutput { status: ExecStatus::Exited(0), stdout: vec![], stderr: vec![], stderr_truncated: false, time: Duration::ZERO, files: BTreeMap::new(), compile: Some(c) });
        }
        let key = self.prepare_build(&mut job, build, &mut files, cacheable);
        let deadline = Duration::from_secs_f64(job["deadline_s"].as_f64().unwrap_or(60.0));
        let mut reply = self.call(job, files, None, deadline, req.limits.memory_mb).await?;
        if let Some(e) = reply.get("error").and_then(Value::as_str) {
            return Err(Error::Rejected(e.to_owned()));
        }
        let compile = self.take_compiled(&mut reply, key);
        if compile.as_ref().is_some_and(|c| !c.ok()) {
            return Ok(ExecOutput { status: ExecStatus::Exited(0), stdout: vec![], stderr: vec![], stderr_truncated: false, time: Duration::ZERO, files: BTreeMap::new(), compile });
        }
        let t = &reply["tests"][0];
        let decode = |k: &str| B64.decode(t[k].as_str().unwrap_or_default()).unwrap_or_default();
        let status = match t["status"].as_str() {
            Some("timeout") => ExecStatus::TimedOut,
            Some("output_limit") => ExecStatus::OutputLimit,
            _ => match t["signal"].as_i64() {
                Some(sig) => ExecStatus::Signaled(sig as i32),
                None => ExecStatus::Exited(t["exit"].as_i64().unwrap_or(0) as i32),
            },
        };
        let files = reply["files"]
            .as_object()
            .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), B64.decode(v.as_str()?).ok()?))).collect())
            .unwrap_or_default();
        Ok(ExecOutput {
            status,
            stdout: decode("stdout"),
            stderr: decode("stderr"),
            stderr_truncated: t["stderr_truncated"].as_bool().unwrap_or(false),
            time: Duration::from_millis(t["time_ms"].as_u64().unwrap_or(0)),
            files,
            compile,
        })
    }
}
