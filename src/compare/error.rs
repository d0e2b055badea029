//! `compare::Error`: what can stop a comparison.

use std::path::PathBuf;

/// Errors loading or comparing runs.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// A run or sweep directory could not be read.
    #[error("cannot read `{}`", path.display())]
    Read {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: crate::runlog::Error,
    },
    /// A path named on the command line does not exist.
    #[error("`{}` does not exist", path.display())]
    NotFound {
        /// The path.
        path: PathBuf,
    },
    /// A path named on the command line is neither a run, a sweep, nor a directory of runs.
    #[error("`{}` is not a run directory (no status.json), a sweep directory (no sweep.json) or a directory of runs", path.display())]
    NotARun {
        /// The path.
        path: PathBuf,
    },
    /// Nothing to compare.
    #[error("no run directories found in {given}")]
    NoRuns {
        /// What was given, for the message.
        given: String,
    },
    /// `--baseline` names no arm or run.
    #[error("`--baseline {given}` matches no run or arm (runs are #1..#{runs}; arms: {arms})")]
    UnknownBaseline {
        /// The value given.
        given: String,
        /// How many runs there are.
        runs: usize,
        /// The arm labels.
        arms: String,
    },
    /// `--metric` names a metric no run has.
    #[error("no run has metric `{metric}` ({known} metric names found)")]
    UnknownMetric {
        /// The name given.
        metric: String,
        /// The closest known name.
        suggestion: Option<String>,
        /// How many names the runs have.
        known: usize,
    },
    /// `--sort` names neither a column nor a reported metric.
    #[error("cannot sort by `{given}`: use `run`, `status`, `steps`, `wall`, `tokens` or one of the `--metric`s")]
    UnknownSort {
        /// The value given.
        given: String,
    },
    /// Writing a report file failed.
    #[error("cannot write `{}`", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Whether the user can fix it: a wrong path or flag, or a run from a newer rlx (upgrade).
    /// I/O failures and corrupt files are not the user's.
    pub(crate) fn is_user_error(&self) -> bool {
        match self {
            Error::Read { source, .. } => matches!(source, crate::runlog::Error::NewerFormat { .. } | crate::runlog::Error::Missing { .. }),
            Error::NotFound { .. } | Error::NotARun { .. } | Error::NoRuns { .. } | Error::UnknownBaseline { .. } | Error::UnknownMetric { .. } | Error::UnknownSort { .. } => true,
            Error::Write { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
        }
    }
}
