//! The remote-sandbox seam: what a hosted sandbox service must offer for rlx to grade in it
//! (create one with an image, resources, tags and timeouts; run a command with a deadline; write
//! and read files; stop it; list the ones carrying a tag), and the grader over it.
//!
//! The grader follows the reference workflow (origin document 002): a fresh sandbox per graded
//! completion, the harness and the job written into it, one command that runs our harness
//! (`harness.py fusion`, the semantics of the embedded sandbox, with a per-request nonce on the
//! verdict line), and the sandbox stopped on every path: after the verdict, on an error, and
//! when the grading future is dropped (a cancelled rollout, Ctrl-C) by a guard that stops it in
//! the background. A run killed outright leaves sandboxes behind; they carry the run's tag
//! (`rlx-job-<run id>`), and the next start with that tag (the resume) stops them first.
//!
//! With reuse per worker ([`PoolLimits::reuse`]) a sandbox that graded cleanly goes back to the
//! pool instead of being stopped, and the next grading takes it: each use writes its files to a
//! directory of its own, and the driver deletes every other directory before the program runs
//! and its own after the verdict, so one rollout's files are not the next one's. A sandbox whose
//! grading failed or ran past its deadline is stopped, not reused. The kept ones are stopped by
//! [`RemoteGrader::close`] (the run's end, on every way out) or, failing that, when the last
//! handle is dropped.
//!
//! A session ([`RemoteGrader::open_session`]) is a sandbox held for a whole conversation (the
//! `bash` tool keeps one per trajectory): created with the same spec, tags and pacing, its
//! commands run in it one after another, and it is stopped the same ways (closed when the
//! trajectory ends, else by `close` or when dropped).
//!
//! Bounds: at most `max_alive` sandboxes at once (a semaphore), and at most `creates_per_s`
//! creations per second (a spacing between creations), because hosted services throttle both.
//! Every failure of the service is an [`Error::Remote`] and becomes an `infra_error` verdict,
//! never a failed test. Adding a service (Modal, Daytona, E2B) is implementing
//! [`RemoteSandboxes`] for its client; docs/sandbox.md has the recipe.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use super::fusion::{new_nonce, parse_verdict_line};
use super::local::parse_tests;
use super::error::Error;
use super::harness;
use super::limits::GradeOptions;
use super::verdict::{Grader, Verdict};
use crate::data::Problem;
use crate::spec::types::Language;

/// What a sandbox is created with.
#[derive(Debug, Clone)]
pub struct CreateSpec {
    /// Container image (`python:3.11`, the reference's).
    pub image: String,
    /// Tags, for finding a run's sandboxes again.
    pub tags: Vec<String>,
    /// CPU request and limit (a Kubernetes quantity), `None`: the service's default.
    pub cpu: Option<String>,
    /// Memory request and limit, MiB.
    pub memory_mb: u64,
    /// The service ends the sandbox after this long even if rlx never stops it.
    pub max_lifetime: Duration,
    /// How long a new sandbox may take to become RUNNING before that is an infrastructure error.
    pub ready_timeout: Duration,
}

/// What a command did.
#[derive(Debug, Clone, Default)]
pub struct Executed {
    /// Stdout.
    pub stdout: Vec<u8>,
    /// Stderr.
    pub stderr: Vec<u8>,
    /// Exit code (128 + signal for a killed command).
    pub exit_code: i32,
    /// It ran past its deadline (and was ended by the service).
    pub timed_out: bool,
}

/// A hosted sandbox service.
pub trait RemoteSandboxes: Send + Sync + 'static {
    /// The service and its endpoint, for messages (never a key).
    fn describe(&self) -> String;
    /// Creates a sandbox and waits until it can run commands; its id.
    fn create(&self, spec: &CreateSpec) -> impl Future<Output = Result<String, Error>> + Send;
    /// Runs `argv` in sandbox `id`, ending it after `timeout`.
    fn exec(&self, id: &str, argv: &[String], timeout: Duration) -> impl Future<Output = Result<Executed, Error>> + Send;
    /// Writes a file (absolute path).
    fn write_file(&self, id: &str, path: &str, data: Vec<u8>) -> impl Future<Output = Result<(), Error>> + Send;
    /// Reads a file (absolute path).
    fn read_file(&self, id: &str, path: &str) -> impl Future<Output = Result<Vec<u8>, Error>> + Send;
    /// Stops and deletes a sandbox; one already gone is not an error.
    fn stop(&self, id: &str) -> impl Future<Output = Result<(), Error>> + Send;
    /// Sandboxes carrying `tag` that have not ended.
    fn list_tagged(&self, tag: &str) -> impl Future<Output = Result<Vec<String>, Error>> + Send;
}

/// Bounds on a grader's sandboxes.
#[derive(Debug, Clone, Copy)]
pub struct PoolLimits {
    /// Sandboxes alive at once.
    pub max_alive: usize,
    /// Creations per second.
    pub creates_per_s: f64,
    /// Keep a sandbox that graded cleanly for the next grading (one per worker) instead of
    /// stopping it.
    pub reuse: bool,
}

/// Where the grading files go in the sandbox: a directory per use below this one.
const DIR: &str = "/tmp/rlx-grade";

/// The driver: empty the grading root of other uses' directories (a reused sandbox), run our
/// harness from its own directory, whatever the command's working directory, then delete that
/// directory.
const MAIN: &str = "import os, shutil, sys
d = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(d)
for n in os.listdir(root):
    p = os.path.join(root, n)
    if p != d:
        shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
os.chdir(d)
sys.path.insert(0, d)
import harness
try:
    harness.fusion_main()
finally:
    os.chdir(root)
    shutil.rmtree(d, ignore_errors=True)
";

/// A kept sandbox is retired this far into its `max_lifetime` (the service would end it).
const RETIRE_AT: f64 = 0.8;

/// The sandboxes a grader holds, shared by its clones: every one not yet stopped (with its
/// creation time) and, with reuse, those waiting for the next grading.
struct Pool<R: RemoteSandboxes> {
    backend: Arc<R>,
    held: Mutex<HashMap<String, Instant>>,
    idle: Mutex<Vec<String>>,
    closed: AtomicBool,
    created: AtomicUsize,
}

impl<R: RemoteSandboxes> Pool<R> {
    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn stop(&self, id: &str) {
        if let Err(e) = self.backend.stop(id).await {
            tracing::warn!(sandbox = %id, "cannot stop a sandbox (its max lifetime ends it): {e}");
        }
        self.held().remove(id);
    }
}

impl<R: RemoteSandboxes> Drop for Pool<R> {
    /// The last handle is gone without [`RemoteGrader::close`] (an error before the run's end):
    /// the kept sandboxes are stopped in the background while the runtime lives.
    fn drop(&mut self) {
        let ids: Vec<String> = self.held().drain().map(|(id, _)| id).collect();
        if ids.is_empty() {
            return;
        }
        let backend = self.backend.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                for id in ids {
                    let _ = backend.stop(&id).await;
                }
            });
        }
    }
}

/// Grades through a [`RemoteSandboxes`] service.
pub struct RemoteGrader<R: RemoteSandboxes> {
    pool: Arc<Pool<R>>,
    spec: CreateSpec,
    alive: Arc<Semaphore>,
    spacing: Duration,
    next_create: Arc<tokio::sync::Mutex<tokio::time::Instant>>,
    reuse: bool,
}

impl<R: RemoteSandboxes> Clone for RemoteGrader<R> {
    fn clone(&self) -> Self {
        RemoteGrader {
            pool: self.pool.clone(),
            spec: self.spec.clone(),
            alive: self.alive.clone(),
            spacing: self.spacing,
            next_create: self.next_create.clone(),
            reuse: self.reuse,
        }
    }
}

/// Stops its sandbox when dropped without [`Live::release`] (an error path, a cancelled future).
struct Live<R: RemoteSandboxes> {
    pool: Arc<Pool<R>>,
    id: Option<String>,
}

impl<R: RemoteSandboxes> Live<R> {
    fn id(&self) -> &str {
        self.id.as_deref().unwrap_or_default()
    }

    /// Done with the sandbox: back to the pool when `keep` (and the grader is open), else stopped.
    async fn release(mut self, keep: bool) {
        let Some(id) = self.id.take() else { return };
        if keep && !self.pool.closed.load(Ordering::SeqCst) {
            self.pool.idle().push(id);
        } else {
            self.pool.stop(&id).await;
        }
    }
}

impl<R: RemoteSandboxes> Drop for Live<R> {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let pool = self.pool.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { pool.stop(&id).await });
        }
    }
}

/// A sandbox kept for one conversation: its commands run one after another and see the files
/// the ones before left. Stopped by [`Session::close`]; failing that by [`RemoteGrader::close`]
/// (the run's end) or, when dropped, in the background; a killed run's carry its tag.
pub struct Session<R: RemoteSandboxes>(Live<R>);

impl<R: RemoteSandboxes> Session<R> {
    /// The sandbox's id at the service.
    pub fn id(&self) -> &str {
        self.0.id()
    }

    /// Runs `argv` in the sandbox, ended after `timeout` ([`Executed::timed_out`]).
    ///
    /// # Errors
    /// The service failing ([`Error::Remote`]).
    pub async fn exec(&self, argv: &[String], timeout: Duration) -> Result<Executed, Error> {
        self.0.pool.backend.exec(self.id(), argv, timeout).await
    }

    /// Stops and deletes the sandbox.
    pub async fn close(self) {
        self.0.release(false).await;
    }
}

impl<R: RemoteSandboxes> RemoteGrader<R> {
    /// A grader creating sandboxes from `spec` within `limits`.
    pub fn new(backend: R, spec: CreateSpec, limits: PoolLimits) -> RemoteGrader<R> {
        let spacing = if limits.creates_per_s > 0.0 { Duration::from_secs_f64(1.0 / limits.creates_per_s) } else { Duration::ZERO };
        let pool = Pool { backend: Arc::new(backend), held: Mutex::default(), idle: Mutex::default(), closed: AtomicBool::new(false), created: AtomicUsize::new(0) };
        RemoteGrader {
            pool: Arc::new(pool),
            spec,
            alive: Arc::new(Semaphore::new(limits.max_alive.max(1))),
            spacing,
            next_create: Arc::new(tokio::sync::Mutex::new(tokio::time::Instant::now())),
            reuse: limits.reuse,
        }
    }

    /// The service.
    pub fn backend(&self) -> &R {
        &self.pool.backend
    }

    /// Sandboxes this grader holds now (grading, or kept for reuse).
    pub fn alive(&self) -> usize {
        self.pool.held().len()
    }

    /// Sandboxes this grader has created.
    pub fn created(&self) -> usize {
        self.pool.created.load(Ordering::SeqCst)
    }

    /// Stops the sandboxes carrying `tag` (a killed run's leftovers); how many.
    ///
    /// # Errors
    /// The service failing to list them.
    pub async fn stop_leftovers(&self, tag: &str) -> Result<usize, Error> {
        let ids = self.pool.backend.list_tagged(tag).await?;
        for id in &ids {
            self.pool.backend.stop(id).await?;
        }
        Ok(ids.len())
    }

    /// Stops every sandbox this grader still holds, kept or in use (the run's end: one still in
    /// use belongs to an abandoned grading), and keeps none from now on. How many were stopped.
    pub async fn close(&self) -> usize {
        self.pool.closed.store(true, Ordering::SeqCst);
        let ids: Vec<String> = self.pool.held().keys().cloned().collect();
        self.pool.idle().clear();
        for id in &ids {
            self.pool.stop(id).await;
        }
        ids.len()
    }

    /// Waits for a slot, then takes a kept sandbox (reuse) or, after the creation spacing,
    /// creates one.
    async fn acquire(&self) -> Result<(tokio::sync::OwnedSemaphorePermit, Live<R>), Error> {
        let permit = self.alive.clone().acquire_owned().await.map_err(|_| Error::Task("the sandbox pool is closed".into()))?;
        // No lifetime set: the service does not end sandboxes on its own.
        let retire = if self.spec.max_lifetime.is_zero() { Duration::MAX } else { self.spec.max_lifetime.mul_f64(RETIRE_AT) };
        loop {
            let Some(id) = self.pool.idle().pop() else { break };
            if self.pool.held().get(&id).is_some_and(|t| t.elapsed() < retire) {
                return Ok((permit, Live { pool: self.pool.clone(), id: Some(id) }));
            }
            self.pool.stop(&id).await;
        }
        Ok((permit, self.create().await?))
    }

    /// Creates a sandbox after the creation spacing, held (stopped by [`Self::close`] at the
    /// latest) and stopped when the guard is dropped unreleased.
    async fn create(&self) -> Result<Live<R>, Error> {
        {
            let mut next = self.next_create.lock().await;
            let now = tokio::time::Instant::now();
            if *next > now {
                tokio::time::sleep_until(*next).await;
            }
            *next = now.max(*next) + self.spacing;
        }
        let id = self.pool.backend.create(&self.spec).await?;
        self.pool.created.fetch_add(1, Ordering::SeqCst);
        self.pool.held().insert(id.clone(), Instant::now());
        Ok(Live { pool: self.pool.clone(), id: Some(id) })
    }

    /// A sandbox of its own for one conversation (the `bash` tool's trajectory), kept until
    /// [`Session::close`]. Paced like the grading sandboxes but not counted in `max_alive`: a
    /// session lives as long as its trajectory, and trajectories waiting on each other's slots
    /// while their own next turns wait on a whole round would never end.
    ///
    /// # Errors
    /// The service failing to create it ([`Error::Remote`]).
    pub async fn open_session(&self) -> Result<Session<R>, Error> {
        Ok(Session(self.create().await?))
    }

    /// One graded completion in a sandbox; the sandbox is stopped (or, with reuse, kept) before
    /// this returns.
    async fn grade_in_sandbox(&self, problem: &Problem, code: &str, opts: &GradeOptions) -> Result<Verdict, Error> {
        let total = problem.tests.len();
        let (job, expected) = harness::grade_job(problem, code, opts);
        let nonce = new_nonce();
        let expected = serde_json::json!({"nonce": nonce, "expected": expected.map(|e| e["expected"].clone())});
        let timeout = Duration::from_secs_f64(job["deadline_s"].as_f64().unwrap_or(60.0) + 10.0);
        let (_permit, live) = self.acquire().await?;
        // Not the nonce: the program can read its working directory.
        let dir = format!("{DIR}/{}", new_nonce());
        let files = [("harness.py", harness::SOURCE.as_bytes().to_vec()), ("job.json", job.to_string().into_bytes()), ("expected.json", expected.to_string().into_bytes()), ("main.py", MAIN.as_bytes().to_vec())];
        for (name, data) in files {
            self.pool.backend.write_file(live.id(), &format!("{dir}/{name}"), data).await?;
        }
        let out = self.pool.backend.exec(live.id(), &["python".to_owned(), format!("{dir}/main.py")], timeout).await?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let verdict = if out.timed_out { None } else { parse_verdict_line(&stdout, &nonce).map(|v| parse_tests(&v)) };
        live.release(self.reuse && matches!(verdict, Some(Ok(_)))).await;
        if out.timed_out {
            return Err(Error::Remote { attempts: 1, reason: format!("the grading command ran past {}s (the harness's own deadline plus 10 s)", timeout.as_secs()) });
        }
        match verdict {
            Some(Ok(tests)) => Ok(Verdict::from_tests(&problem.id, total, tests)),
            Some(Err(e)) => Err(Error::Remote { attempts: 1, reason: e }),
            None => {
                let stderr = String::from_utf8_lossy(&out.stderr);
                let tail: String = stderr.chars().rev().take(400).collect::<Vec<_>>().into_iter().rev().collect();
                Err(Error::Remote { attempts: 1, reason: format!("the harness reported no verdict (exit code {}, stderr: {tail})", out.exit_code) })
            }
        }
    }
}

impl<R: RemoteSandboxes> Grader for RemoteGrader<R> {
    async fn grade(&self, problem: &Problem, code: &str, opts: &GradeOptions) -> Verdict {
        let opts = &opts.for_problem(problem);
        let language = problem.language();
        if language != Language::Python || problem.checker_program().is_some() {
            let reason = format!("{} grades Python only, without checker programs; grade {} with `sandbox.kind: local`", self.pool.backend.describe(), problem.id);
            return Verdict::infra_error(&problem.id, problem.tests.len(), &Error::Remote { attempts: 0, reason });
        }
        match self.grade_in_sandbox(problem, code, opts).await {
            Ok(v) => v,
            Err(e) => Verdict::infra_error(&problem.id, problem.tests.len(), &e),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The pool's bookkeeping against an in-memory service (the protocol itself is tested
    //! against `rlx sandbox serve --protocol cwsandbox` in tests/cli/cwsandbox.rs).
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::data::{IoCase, Tests};

    #[derive(Default)]
    struct Memory {
        files: Mutex<BTreeMap<(String, String), Vec<u8>>>,
        alive: Mutex<std::collections::HashSet<String>>,
        created: AtomicUsize,
        peak: AtomicUsize,
        exec_delay: Duration,
    }

    impl RemoteSandboxes for Memory {
        fn describe(&self) -> String {
            "memory".into()
        }
        async fn create(&self, spec: &CreateSpec) -> Result<String, Error> {
            assert!(spec.tags.contains(&"rlx-job-t".to_owned()));
            let id = format!("m{}", self.created.fetch_add(1, Ordering::SeqCst));
            let mut alive = self.alive.lock().unwrap();
            alive.insert(id.clone());
            self.peak.fetch_max(alive.len(), Ordering::SeqCst);
            Ok(id)
        }
        async fn exec(&self, id: &str, argv: &[String], _timeout: Duration) -> Result<Executed, Error> {
            if argv[0] == "bash" {
                // A session's command: says which sandbox ran it.
                return Ok(Executed { stdout: id.as_bytes().to_vec(), ..Executed::default() });
            }
            tokio::time::sleep(self.exec_delay).await;
            let dir = argv[1].strip_suffix("/main.py").unwrap();
            assert!(dir.starts_with(DIR));
            let expected: serde_json::Value = serde_json::from_slice(&self.files.lock().unwrap()[&(id.to_owned(), format!("{dir}/expected.json"))]).unwrap();
            let line = format!("RLX-VERDICT {} {}\n", expected["nonce"].as_str().unwrap(), serde_json::json!({"tests": [{"status": "passed", "time_ms": 1}]}));
            Ok(Executed { stdout: line.into_bytes(), ..Executed::default() })
        }
        async fn write_file(&self, id: &str, path: &str, data: Vec<u8>) -> Result<(), Error> {
            self.files.lock().unwrap().insert((id.to_owned(), path.to_owned()), data);
            Ok(())
        }
        async fn read_file(&self, _id: &str, _path: &str) -> Result<Vec<u8>, Error> {
            Ok(vec![])
        }
        async fn stop(&self, id: &str) -> Result<(), Error> {
            self.alive.lock().unwrap().remove(id);
            Ok(())
        }
        async fn list_tagged(&self, _tag: &str) -> Result<Vec<String>, Error> {
            Ok(self.alive.lock().unwrap().iter().cloned().collect())
        }
    }

    fn problem() -> Problem {
        Problem { id: "p".into(), statement: String::new(), starter_code: None, tests: Tests::Stdin { cases: vec![IoCase { input: "1\n".into(), output: "1\n".into() }] }, metadata: Default::default() }
    }

    fn grader(delay: Duration, max_alive: usize) -> RemoteGrader<Memory> {
        pooled(delay, max_alive, false)
    }

    fn pooled(delay: Duration, max_alive: usize, reuse: bool) -> RemoteGrader<Memory> {
        let spec = CreateSpec { image: "python:3.11".into(), tags: vec!["rlx".into(), "rlx-job-t".into()], cpu: None, memory_mb: 1024, max_lifetime: Duration::from_secs(60), ready_timeout: Duration::from_secs(5) };
        RemoteGrader::new(Memory { exec_delay: delay, ..Memory::default() }, spec, PoolLimits { max_alive, creates_per_s: 0.0, reuse })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reuse_keeps_one_sandbox_per_worker_until_close() {
        let g = pooled(Duration::from_millis(20), 2, true);
        let (p, opts) = (problem(), GradeOptions::default());
        let verdicts = futures_util::future::join_all((0..6).map(|_| g.grade(&p, "print(1)", &opts))).await;
        assert!(verdicts.iter().all(|v| v.passed), "{verdicts:?}");
        assert_eq!((g.backend().created.load(Ordering::SeqCst), g.created()), (2, 2), "one sandbox per worker");
        assert_eq!(g.alive(), 2, "kept for the next grading");
        assert_eq!(g.close().await, 2);
        assert!(g.backend().alive.lock().unwrap().is_empty() && g.alive() == 0);
        // Closed: a grading still creates a sandbox but does not keep it.
        assert!(g.grade(&p, "print(1)", &opts).await.passed);
        assert!(g.backend().alive.lock().unwrap().is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_pool_bounds_sandboxes_alive_and_stops_every_one() {
        let g = grader(Duration::from_millis(20), 2);
        let (p, opts) = (problem(), GradeOptions::default());
        let verdicts = futures_util::future::join_all((0..6).map(|_| g.grade(&p, "print(1)", &opts))).await;
        assert!(verdicts.iter().all(|v| v.passed), "{verdicts:?}");
        assert_eq!(g.backend().created.load(Ordering::SeqCst), 6, "one sandbox per graded completion");
        assert_eq!(g.backend().peak.load(Ordering::SeqCst), 2, "never more than max_alive at once");
        assert!(g.backend().alive.lock().unwrap().is_empty());
    }

    /// Waits (a bounded while) for the background stops of dropped guards.
    async fn settled(g: &RemoteGrader<Memory>, alive: usize) -> usize {
        for _ in 0..100 {
            if g.backend().alive.lock().unwrap().len() == alive {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        g.backend().alive.lock().unwrap().len()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_session_keeps_its_sandbox_until_closed_dropped_or_the_grader_closes() {
        let g = grader(Duration::ZERO, 1);
        let (a, b) = (g.open_session().await.unwrap(), g.open_session().await.unwrap());
        assert_ne!(a.id(), b.id());
        // Sessions are not slots of `max_alive` (1): grading still gets one.
        assert!(g.grade(&problem(), "print(1)", &GradeOptions::default()).await.passed);
        let argv = ["bash".to_owned(), "-c".to_owned(), "true".to_owned()];
        for _ in 0..2 {
            assert_eq!(a.exec(&argv, Duration::from_secs(1)).await.unwrap().stdout, a.id().as_bytes(), "every command in the session's sandbox");
        }
        let b_id = b.id().to_owned();
        a.close().await;
        assert_eq!(g.backend().alive.lock().unwrap().iter().cloned().collect::<Vec<_>>(), [b_id]);
        drop(b);
        assert_eq!(settled(&g, 0).await, 0, "a dropped session is stopped in the background");
        let _kept = g.open_session().await.unwrap();
        assert_eq!((g.alive(), g.close().await), (1, 1), "the grader's close stops a session still held");
        assert!(g.backend().alive.lock().unwrap().is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_grade_still_stops_its_sandbox_and_leftovers_are_found_by_tag() {
        let g = grader(Duration::from_secs(30), 4);
        let (p, opts) = (problem(), GradeOptions::default());
        let cancelled = tokio::time::timeout(Duration::from_millis(200), g.grade(&p, "print(1)", &opts)).await;
        assert!(cancelled.is_err());
        for _ in 0..100 {
            if g.backend().alive.lock().unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(g.backend().alive.lock().unwrap().is_empty(), "the dropped grade's sandbox was stopped");
        // A sandbox a killed run left behind (created, never stopped) is found by its tag.
        g.backend().create(&g.spec).await.unwrap();
        assert_eq!(g.stop_leftovers("rlx-job-t").await.unwrap(), 1);
        assert!(g.backend().alive.lock().unwrap().is_empty());
    }
}
