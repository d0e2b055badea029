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
//! - [`remote`] and [`cwsandbox`]: a hosted sandbox service (CoreWeave Sandbox) and rlx's own
//!   server of its protocol.
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
//!
//! This file is the folder's face: it declares the parts and re-exports what callers name. The
//! types live in the parts that define them, and the parts import them from there (never
//! through this file): limits.rs ([`Limits`], [`GradeOptions`]), exec.rs (the [`Sandbox`] seam),
//! verdict.rs (the [`Grader`] seam and its [`Verdict`]), error.rs ([`Error`]) and any.rs
//! ([`AnyGrader`], every backend behind one type).

pub(crate) mod admission;
mod any;
pub(crate) mod compare;
pub mod cwsandbox;
mod error;
mod exec;
pub(crate) mod extract;
pub mod fusion;
pub(crate) mod grade_loop;
pub mod harness;
pub mod lang;
mod limits;
pub mod local;
pub mod pch;
pub(crate) mod preflight;
pub(crate) mod proc_tree;
pub mod remote;
pub mod reward;
pub mod server;
pub(crate) mod start;
mod verdict;

pub use any::{AnyGrader, RemoteSession};
pub use error::Error;
pub use exec::{ExecOutput, ExecRequest, ExecStatus, Protection, Sandbox};
pub use extract::{extract_code, extract_code_in};
pub use grade_loop::{Graded, grade_all, grade_group};
pub use limits::{GradeOptions, Limits};
pub use preflight::preflight;
pub use start::{Started, start, start_for};
pub use verdict::{Grader, Progress, Submission, TestResult, TestStatus, Verdict, VerdictStatus};
