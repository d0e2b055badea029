//! Running untrusted code and grading it.
//!
//! Two seams: [`Sandbox`] runs one program (code, stdin, files, limits) and reports its exit
//! status, output, time and resource verdict; [`Grader`] checks code against a
//! [`Problem`](crate::data::Problem)'s tests and returns a [`Verdict`] with per-test results.
//!
//! Backends:
//! - [`local`]: embedded and isolated (namespaces, chroot, unprivileged uid, rlimits, PID-namespace
//!   kill), with warm Python workers that fork per submission. Implements both seams.
//! - [`fusion`]: a Sandbox Fusion `/run_code` client; grades by sending our harness.
//! - [`server`]: a Sandbox-Fusion-compatible HTTP server over [`local`].
//!
//! The grading harness itself is Python we wrote ([`harness`], `harness.py`), embedded in the
//! binary; it implements the LiveCodeBench comparison semantics. [`extract`] pulls the code out of
//! a model completion. [`start()`] is the one way to start a sandbox from its spec section (it
//! warns when isolation is missing); [`grade_loop`] is the one grading loop, which retries
//! infrastructure errors ([`grade_all`] for many completions, [`grade_group`] for a group).
//! [`reward`] runs the user's Python reward function in the same isolation as submissions.
//!
//! Infrastructure failures never become failed tests: they are [`VerdictStatus::InfraError`].

pub(crate) mod admission;
pub(crate) mod compare;
pub mod cwsandbox;
pub(crate) mod extract;
pub mod fusion;
pub(crate) mod grade_loop;
pub mod harness;
pub mod lang;
pub mod local;
pub mod pch;
pub(crate) mod preflight;
pub(crate) mod proc_tree;
pub mod remote;
pub mod reward;
pub mod server;
pub(crate) mod start;

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::data::Problem;
use crate::spec::types::Language;

pub use extract::{extract_code, extract_code_in};
pub use grade_loop::{Graded, grade_all, grade_group};
pub use preflight::preflight;
pub use start::{Started, start, start_for};

/// Resource limits for one program or one test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// Wall-clock limit per test (per run for [`Sandbox::run`]); CPU time is capped at this
    /// rounded up plus one second.
    pub timeout: Duration,
    /// Address-space limit in MiB (0: none).
    pub memory_mb: u64,
    /// Stdout beyond this many bytes ends the test as `output_limit`.
    pub output_bytes: usize,
    /// Stderr beyond this many bytes is dropped (the program keeps running).
    pub stderr_bytes: usize,
    /// Processes (RLIMIT_NPROC) for the sandbox uid.
    pub nproc: u32,
    /// Largest file the program may write, in MiB.
    pub fsize_mb: u64,
    /// Open file descriptors.
    pub nofile: u32,
    /// Wall-clock limit of the compile step of a compiled language.
    pub compile_timeout: Duration,
}

impl Default for Limits {
    /// LiveCodeBench's 6 s per test; 1 GiB (verl's default memory limit); 16 MiB of stdout;
    /// Sandbox Fusion's 10 s to compile.
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(6),
            memory_mb: 1024,
            output_bytes: 16 << 20,
            stderr_bytes: 64 << 10,
            nproc: 64,
            fsize_mb: 64,
            nofile: 256,
            compile_timeout: Duration::from_secs(10),
        }
    }
}

/// The isolation actually in force, as probed by the local sandbox at start-up.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Protection {
    /// Workers run in a user namespace of their own (when rlx is not root).
    pub user_namespace: bool,
    /// No network: a fresh network namespace with only a down loopback.
    pub network_namespace: bool,
    /// A private mount namespace with a read-only root; only the working directory is writable.
    pub mount_namespace: bool,
    /// Programs run in a PID namespace of their worker that is emptied (SIGKILL, reap) after
    /// every submission: forked, daemonised and signal-ignoring children die too.
    pub pid_namespace: bool,
    /// Programs run under an unprivileged uid (root only; rlx as a normal user is already one).
    pub unprivileged_uid: bool,
    /// setrlimit limits (CPU, address space, processes, file size, open files, no core dumps).
    pub rlimits: bool,
    /// What is missing and why, one line each.
    #[serde(default)]
    pub notes: Vec<String>,
}

impl Protection {
    /// True when every layer this platform could offer is in force.
    pub fn is_complete(&self) -> bool {
        self.network_namespace && self.mount_namespace && self.pid_namespace && self.rlimits
    }
}

/// One program to run (the `/run_code` shape).
#[derive(Debug, Clone, Default)]
pub struct ExecRequest {
    /// The source, run as `__main__` from `main.py` in a fresh working directory (Python), or
    /// built from the language's source file and run (compiled languages).
    pub code: String,
    /// Stdin; `None` is an empty stdin.
    pub stdin: Option<String>,
    /// Files written into the working directory first (relative paths only).
    pub files: BTreeMap<String, Vec<u8>>,
    /// Files read back after the run (relative paths; missing ones are left out).
    pub fetch_files: Vec<String>,
    /// Limits; `timeout` is the wall-clock limit of the whole run (the compile step has its
    /// own, `compile_timeout`).
    pub limits: Limits,
    /// The language of `code` (Python by default); a compiled one is built first.
    pub language: Language,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecStatus {
    /// Exited with this code.
    Exited(i32),
    /// Killed by this signal (not by us).
    Signaled(i32),
    /// Killed at the wall-clock deadline, or by the CPU-time limit.
    TimedOut,
    /// Killed because stdout passed `Limits::output_bytes`.
    OutputLimit,
}

/// The outcome of [`Sandbox::run`].
#[derive(Debug, Clone)]
pub struct ExecOutput {
    /// How it ended.
    pub status: ExecStatus,
    /// Stdout, at most `output_bytes`.
    pub stdout: Vec<u8>,
    /// Stderr, at most `stderr_bytes`.
    pub stderr: Vec<u8>,
    /// Stderr was cut.
    pub stderr_truncated: bool,
    /// Wall time from start to exit.
    pub time: Duration,
    /// Fetched files (relative path → bytes).
    pub files: BTreeMap<String, Vec<u8>>,
    /// The compile step, for a compiled language; when it failed the program did not run
    /// (`status` is then `Exited(0)` and nothing else is set).
    pub compile: Option<lang::Compiled>,
}

/// Sandbox failures: always infrastructure, never the program's fault.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No Python interpreter could be started.
    #[error("cannot start the Python interpreter `{python}`")]
    Python {
        /// The interpreter tried.
        python: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A worker failed to start or died; `stderr` is its last words.
    #[error("sandbox worker {slot} failed: {reason}{}", if stderr.is_empty() { String::new() } else { format!("; its stderr: {stderr}") })]
    Worker {
        /// Worker slot.
        slot: usize,
        /// What happened.
        reason: String,
        /// The end of the worker's stderr.
        stderr: String,
    },
    /// `strict` was asked for and a layer is missing.
    #[error("sandbox isolation incomplete: {}", missing.join("; "))]
    Incomplete {
        /// The missing layers.
        missing: Vec<String>,
    },
    /// The harness refused the request (for example a file path leaving the working directory).
    #[error("sandbox rejected the request: {0}")]
    Rejected(String),
    /// I/O on the sandbox's own files.
    #[error("sandbox I/O on `{path}`")]
    Io {
        /// The path.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A completion names a problem that the problem file does not have.
    #[error("completion {index} names problem `{id}`, which is not in the problem file")]
    UnknownProblem {
        /// 0-based completion index.
        index: usize,
        /// The id.
        id: String,
    },
    /// A grading task panicked or was cancelled.
    #[error("grading task failed: {0}")]
    Task(String),
    /// The Sandbox Fusion URL cannot be used (not `http://`, not a URL).
    #[error("invalid sandbox URL `{url}`: {reason}")]
    Url {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The check before a run's first sample failed: the sandbox cannot grade.
    #[error("{sandbox} cannot grade: {reason}")]
    Preflight {
        /// Which sandbox, and the setting that names it.
        sandbox: String,
        /// What failed.
        reason: String,
        /// What to do (the CLI prints it as a `help:` line).
        hint: String,
    },
    /// A language's compiler is not installed: the machine cannot grade that language.
    #[error("{language} needs the compiler `{compiler}`, which is not installed (looked in {searched})")]
    Toolchain {
        /// The language.
        language: String,
        /// The compiler's name.
        compiler: String,
        /// Where it was looked for.
        searched: String,
    },
    /// A remote sandbox failed (transport error, 5xx, SandboxError), after retries.
    #[error("remote sandbox failed after {attempts} attempt(s): {reason}")]
    Remote {
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        reason: String,
    },
}

impl Error {
    /// Whether the user can fix it by changing the spec or the arguments (exit code 2): a strict
    /// sandbox on a machine without some isolation layer, a bad URL or one where no Sandbox
    /// Fusion answers, a completion for an unknown problem. Everything else is the sandbox failing (exit code 3).
    pub fn is_user_error(&self) -> bool {
        matches!(self, Error::Incomplete { .. } | Error::Url { .. } | Error::UnknownProblem { .. } | Error::Toolchain { .. })
            || matches!(self, Error::Preflight { sandbox, .. } if sandbox.starts_with("Sandbox Fusion") || sandbox.starts_with("CoreWeave Sandbox"))
    }
}

/// Runs one program in isolation.
pub trait Sandbox: Send + Sync {
    /// Run `req` and report how it ended.
    ///
    /// # Errors
    /// Only infrastructure failures; a crashing or timed-out program is an `Ok` result.
    fn run(&self, req: ExecRequest) -> impl Future<Output = Result<ExecOutput, Error>> + Send;
}

/// Overall verdict status of one completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictStatus {
    /// Every test passed.
    Passed,
    /// At least one test failed.
    Failed,
    /// No code block in the completion.
    FormatError,
    /// The sandbox failed; the code was not judged.
    InfraError,
}

/// Result of one test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestStatus {
    /// Output matched.
    Passed,
    /// Ran to completion with the wrong output (or a failed assert).
    WrongAnswer,
    /// Raised, exited non-zero, or was killed by a signal.
    RuntimeError,
    /// Passed the wall-clock or CPU limit.
    Timeout,
    /// Ran out of memory (MemoryError under the address-space limit).
    MemoryLimit,
    /// Wrote more than the output limit.
    OutputLimit,
    /// The program did not compile (every test of a compiled language's submission; the first
    /// carries the compiler's output as `error`).
    CompileError,
}

/// One test's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestResult {
    /// Outcome.
    pub status: TestStatus,
    /// Wall time of the test in milliseconds.
    pub time_ms: u64,
    /// For a wrong answer: what the program printed (stdin tests) or returned (functional
    /// tests), clipped to 600 characters. The error feedback of multi-attempt rollouts shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub got: Option<String>,
    /// For a failed test: the end of what the program wrote to stderr (the traceback), clipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The grade of one completion: the `rlx grade` output line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The problem graded against.
    pub problem_id: String,
    /// Overall status.
    pub status: VerdictStatus,
    /// All tests passed (LiveCodeBench's all-pass verdict).
    pub passed: bool,
    /// Tests that passed.
    pub tests_passed: usize,
    /// Tests the problem has.
    pub tests_total: usize,
    /// Per-test results, in test order (shorter than `tests_total` only with fail-fast).
    pub tests: Vec<TestResult>,
    /// For `infra_error`: what failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The language graded, when it is not Python.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<Language>,
    /// The compile step of a compiled language.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile: Option<lang::Compiled>,
}

impl Verdict {
    /// A verdict from per-test results.
    pub fn from_tests(problem_id: &str, tests_total: usize, tests: Vec<TestResult>) -> Verdict {
        let tests_passed = tests.iter().filter(|t| t.status == TestStatus::Passed).count();
        let passed = tests_total > 0 && tests_passed == tests_total;
        Verdict {
            problem_id: problem_id.to_owned(),
            status: if passed { VerdictStatus::Passed } else { VerdictStatus::Failed },
            passed,
            tests_passed,
            tests_total,
            tests,
            error: None,
            language: None,
            compile: None,
        }
    }

    /// A submission that did not compile: every test a compile error (only the first with
    /// fail-fast), the first carrying the compiler's output.
    pub fn compile_error(problem_id: &str, tests_total: usize, compiled: lang::Compiled, fail_fast: bool) -> Verdict {
        let n = if fail_fast { tests_total.min(1) } else { tests_total };
        let what = if compiled.status == "timeout" { "the compiler ran past its time limit".to_owned() } else { compiled.output.clone() };
        let tests = (0..n)
            .map(|i| TestResult { status: TestStatus::CompileError, time_ms: 0, got: None, error: (i == 0).then(|| clip_start(&what, 2000)) })
            .collect();
        Verdict { compile: Some(compiled), ..Verdict::from_tests(problem_id, tests_total, tests) }
    }

    /// For a judged submission in a compiled language, whether it failed to compile (a compile
    /// timeout included); `None` for Python, a missing code block or an infrastructure failure.
    /// The compile-error rate of a step or an eval is the share of `Some(true)`.
    pub fn compile_failed(&self) -> Option<bool> {
        let compiled = self.language.is_some_and(|l| l.toolchain().is_some());
        let judged = matches!(self.status, VerdictStatus::Passed | VerdictStatus::Failed);
        (compiled && judged).then(|| self.compile.as_ref().is_some_and(|c| !c.ok()))
    }

    /// The same verdict, saying which language was graded (when not Python).
    pub fn in_language(mut self, language: Language) -> Verdict {
        self.language = (language != Language::Python).then_some(language);
        self
    }

    /// No code block to run.
    pub fn format_error(problem_id: &str, tests_total: usize) -> Verdict {
        Verdict {
            problem_id: problem_id.to_owned(),
            status: VerdictStatus::FormatError,
            passed: false,
            tests_passed: 0,
            tests_total,
            tests: vec![],
            error: None,
            language: None,
            compile: None,
        }
    }

    /// The sandbox failed.
    pub fn infra_error(problem_id: &str, tests_total: usize, err: &dyn std::error::Error) -> Verdict {
        let mut msg = err.to_string();
        let mut src = err.source();
        while let Some(s) = src {
            msg.push_str(": ");
            msg.push_str(&s.to_string());
            src = s.source();
        }
        Verdict {
            problem_id: problem_id.to_owned(),
            status: VerdictStatus::InfraError,
            passed: false,
            tests_passed: 0,
            tests_total,
            tests: vec![],
            error: Some(msg),
            language: None,
            compile: None,
        }
    }
}

/// The start of `s`, at most `chars` characters, marked when cut (a compiler's first error is
/// the one that counts).
pub(crate) fn clip_start(s: &str, chars: usize) -> String {
    match s.char_indices().nth(chars) {
        Some((i, _)) => format!("{}\n... (cut)", &s[..i]),
        None => s.to_owned(),
    }
}

/// Grading options shared by the backends (default: [`Limits::default`], no fail-fast).
#[derive(Debug, Clone, Default)]
pub struct GradeOptions {
    /// Limits per test (`timeout` is the per-test limit, LiveCodeBench's 6 s by default).
    pub limits: Limits,
    /// Stop at the first failing test, as the reference harness does; `tests` is then shorter.
    pub fail_fast: bool,
}

impl GradeOptions {
    /// These options for `problem`: the time and memory limits its row carried (as its source
    /// scaled or capped them, see [`crate::spec::types::RowLimits`]) replace the sandbox-wide
    /// ones.
    pub fn for_problem(&self, problem: &Problem) -> GradeOptions {
        let mut opts = self.clone();
        if let Some(t) = problem.time_limit_s() {
            opts.limits.timeout = Duration::from_secs_f64(t.clamp(0.01, 600.0));
        }
        if let Some(m) = problem.memory_limit_mb() {
            opts.limits.memory_mb = m;
        }
        opts
    }
}

/// Checks code against a problem's tests.
pub trait Grader: Send + Sync {
    /// Grade already-extracted `code`. Never fails: infrastructure failures come back as
    /// [`VerdictStatus::InfraError`] verdicts.
    fn grade(&self, problem: &Problem, code: &str, opts: &GradeOptions) -> impl Future<Output = Verdict> + Send;
}

/// Either backend behind one type, for callers that pick it at run time (the spec's
/// `sandbox.kind`, `rlx grade --sandbox`): [`Grader`] is not object-safe.
#[derive(Clone)]
pub enum AnyGrader {
    /// The embedded sandbox.
    Local(local::LocalSandbox),
    /// A Sandbox Fusion server (boxed: the HTTP client is large next to the pool handle).
    Fusion(Box<fusion::FusionClient>),
    /// A hosted sandbox service behind the remote seam: CoreWeave Sandbox (Aviato).
    Remote(Box<remote::RemoteGrader<cwsandbox::client::CwClient>>),
}

impl AnyGrader {
    /// Stops what the grader keeps between gradings (a remote pool's sandboxes, with reuse per
    /// worker); nothing for the others. Call it once grading is over, on every way out.
    pub async fn close(&self) {
        if let AnyGrader::Remote(r) = self {
            let n = r.close().await;
            if n > 0 {
                tracing::info!(stopped = n, created = r.created(), "remote sandboxes stopped at the end");
            }
        }
    }
}

impl Grader for AnyGrader {
    async fn grade(&self, problem: &Problem, code: &str, opts: &GradeOptions) -> Verdict {
        match self {
            AnyGrader::Local(g) => g.grade(problem, code, opts).await,
            AnyGrader::Fusion(g) => g.grade(problem, code, opts).await,
            AnyGrader::Remote(g) => g.grade(problem, code, opts).await,
        }
    }
}

/// What to grade: a completion (model text, code extracted here) or code as is.
#[derive(Debug, Clone)]
pub enum Submission {
    /// Model output; the last fenced code block is graded, none is a format error.
    Completion(String),
    /// Code to grade directly.
    Code(String),
}

/// Progress of [`grade_all`], one call per finished completion (in completion order, not input
/// order). Implemented by the CLI's progress bar.
pub trait Progress: Send + Sync {
    /// One more completion graded.
    fn graded(&self, verdict: &Verdict);
}

impl Progress for () {
    fn graded(&self, _: &Verdict) {}
}
