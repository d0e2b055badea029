//! What a program or a test may use: [`Limits`] (time, memory, output, processes, files) and
//! the grading options built on them ([`GradeOptions`]), with a problem's own limits applied.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::data::Problem;

/// Resource limits for one program or one test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// Wall-clock limit per test (per run for [`Sandbox::run`](super::Sandbox::run)); CPU time is capped at this
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

