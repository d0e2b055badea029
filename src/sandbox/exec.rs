//! The one-program seam: [`Sandbox`] runs an [`ExecRequest`] (code, stdin, files, limits) and
//! reports an [`ExecOutput`]; [`Protection`] says which isolation layers are in force.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::Error;
use super::lang::Compiled;
use super::limits::Limits;
use crate::spec::types::Language;

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
    pub compile: Option<Compiled>,
}


/// Runs one program in isolation.
pub trait Sandbox: Send + Sync {
    /// Run `req` and report how it ended.
    ///
    /// # Errors
    /// Only infrastructure failures; a crashing or timed-out program is an `Ok` result.
    fn run(&self, req: ExecRequest) -> impl Future<Output = Result<ExecOutput, Error>> + Send;
}

