//! `viewer::Error`: why a run's completions cannot be shown.

use std::path::PathBuf;

/// Errors selecting completions from a run directory.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The path is not a run directory.
    #[error("`{}` is not a run directory (no status.json)", path.display())]
    NotARun {
        /// The path given.
        path: PathBuf,
    },
    /// A file of the run could not be read.
    #[error("cannot read `{}`", path.display())]
    Read {
        /// The run directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: crate::runlog::Error,
    },
    /// The run has no completions of the kind asked for.
    #[error("`{}` holds no completions in {file}{why}", path.display())]
    Empty {
        /// The run directory.
        path: PathBuf,
        /// `rollouts.jsonl` or `eval_rollouts.jsonl`.
        file: &'static str,
        /// A likely reason, with its leading `: `.
        why: String,
    },
    /// `--step` names a step with no completions.
    #[error("no completions at step {step} in {file} (steps with completions: {available})")]
    UnknownStep {
        /// The step asked for.
        step: i64,
        /// The file read.
        file: &'static str,
        /// The steps that have completions, abbreviated.
        available: String,
    },
    /// `--problem` names a problem with no completions at the selected step(s).
    #[error("no completions of problem `{problem}` {at} in {file} ({count} problem(s) there: {available})")]
    UnknownProblem {
        /// The id asked for.
        problem: String,
        /// `at step 3` or `at any step`.
        at: String,
        /// The file read.
        file: &'static str,
        /// How many problems there are.
        count: usize,
        /// Some of their ids.
        available: String,
        /// The closest id, for "did you mean".
        suggestion: Option<String>,
    },
}

impl Error {
    /// Whether the user can fix it: everything but an unreadable file.
    pub(crate) fn is_user_error(&self) -> bool {
        match self {
            Error::Read { source, .. } => matches!(source, crate::runlog::Error::NewerFormat { .. }) || source.is_user_error(),
            Error::NotARun { .. } | Error::Empty { .. } | Error::UnknownStep { .. } | Error::UnknownProblem { .. } => true,
        }
    }

    /// A `did you mean` hint, when there is one.
    pub(crate) fn hint(&self) -> Option<String> {
        match self {
            Error::UnknownProblem { suggestion: Some(s), .. } => Some(format!("did you mean `{s}`?")),
            Error::UnknownStep { step: -1, file, .. } if *file == crate::runlog::files::ROLLOUTS => {
                Some("step −1 is the baseline evaluation: add `--eval`".into())
            }
            _ => None,
        }
    }
}
