//! Why a run could not proceed: the engine's one error type, with the exit-code split between
//! the user's mistakes and rlx's or a service's failures.

use crate::backend;
use crate::runlog;

/// Why a run could not proceed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The problems could not be loaded.
    #[error("cannot load the problems")]
    Data(#[source] crate::data::source::Error),
    /// Filters left no training problem.
    #[error("no training problems after filters")]
    NoProblems,
    /// The run trains, the backend cannot.
    #[error("`schedule.max_steps` is {steps}, but the backend cannot train")]
    CannotTrain {
        /// Steps asked for.
        steps: u32,
        /// Why the backend cannot.
        #[source]
        source: backend::Error,
    },
    /// The sandbox could not start.
    #[error("cannot start the sandbox")]
    Sandbox(#[source] crate::sandbox::Error),
    /// The run directory.
    #[error(transparent)]
    RunLog(#[from] runlog::Error),
    /// The backend.
    #[error(transparent)]
    Backend(#[from] backend::Error),
    /// Prompt rendering, tokenization or decoding.
    #[error(transparent)]
    Prompt(#[from] crate::prompt::Error),
    /// The Python reward failed more often than `reward.max_failures` allows: the user's bug,
    /// reported with the last failure's traceback.
    #[error(
        "the Python reward `{function}` in `{file}` failed {count} time(s), more than `reward.max_failures` ({max}) allows; the last, on problem `{problem}`, {failure}{}",
        if failure.traceback.is_empty() { String::new() } else { format!("\n{}", failure.traceback.trim_end()) }
    )]
    RewardFailures {
        /// The reward file as the user names it.
        file: String,
        /// The function.
        function: String,
        /// Failed calls so far.
        count: u32,
        /// `reward.max_failures`.
        max: u32,
        /// The problem of the last failure.
        problem: String,
        /// The last failure.
        failure: Box<crate::sandbox::reward::Failure>,
    },
    /// A diagnostic signal with `action: stop` fired; the run saved a checkpoint and can resume.
    #[error("stopped by the diagnostic `{signal}` at step {step} (diagnostics.{signal}.action: stop): {evidence}; remedy: {remedy}")]
    Diagnostic {
        /// The signal.
        signal: &'static str,
        /// The step it fired after.
        step: i64,
        /// What it saw.
        evidence: String,
        /// What to do.
        remedy: &'static str,
    },
    /// Every group of a step was dropped for sandbox infrastructure errors: the sandbox is down,
    /// and sampling on would only spend samples. The step is not counted; the run resumes at it.
    #[error("step {step}: all {groups} groups were dropped after sandbox infrastructure errors; the last: {last}")]
    SandboxDown {
        /// The step.
        step: u32,
        /// Its groups.
        groups: usize,
        /// The last infrastructure error seen.
        last: String,
    },
    /// A stage's data cannot be trained as the spec asks (rows the chat template cannot
    /// express with its `train_on`, a file gone since validation).
    #[error("stage `{stage}`: {reason}")]
    Stage {
        /// The stage's name.
        stage: String,
        /// What is wrong.
        reason: String,
    },
    /// A task of the run panicked or was cancelled (a bug).
    #[error("an internal task failed")]
    Task(#[from] tokio::task::JoinError),
}

impl Error {
    /// Whether the user can fix it by changing the spec, the data or the model (exit code 2)
    /// rather than it being a failure of rlx or of a service (exit code 3).
    pub fn is_user_error(&self) -> bool {
        match self {
            Error::NoProblems | Error::Stage { .. } | Error::CannotTrain { .. } | Error::RewardFailures { .. } | Error::Diagnostic { .. } => true,
            Error::SandboxDown { .. } => false,
            Error::Data(e) => e.is_user_error(),
            Error::Sandbox(e) => e.is_user_error(),
            Error::Backend(e) => e.is_user_error(),
            Error::Prompt(e) => e.is_user_error(),
            Error::RunLog(e) => e.is_user_error(),
            Error::Task(_) => false,
        }
    }
}
