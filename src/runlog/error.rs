//! `runlog::Error`: what can go wrong reading or writing a run or sweep directory.

use std::path::{Path, PathBuf};

/// Errors reading or writing a run directory.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read or written.
    #[error("{op} `{}`", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file holds something that is not what rlx writes there.
    #[error("`{}` line {line}: {message}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// 1-based line (1 for whole-file JSON).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A file that every run (or sweep) directory has is not there.
    #[error("`{}` is missing", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// The file was written by a newer rlx whose format this one cannot read: reading on would
    /// misread fields rather than fail, so the reader stops here.
    #[error(
        "`{}` was written by a newer rlx (format version {found}; this rlx reads up to {supported}); upgrade rlx",
        path.display()
    )]
    NewerFormat {
        /// The file.
        path: PathBuf,
        /// Its `schema_version`.
        found: u32,
        /// [`super::SCHEMA_VERSION`] of this build.
        supported: u32,
    },
    /// Another writer (usually another `rlx` process running the same experiment) holds the file.
    #[error("`{}` is being written by another process (is the same run already going?)", path.display())]
    Busy {
        /// The file.
        path: PathBuf,
    },
    /// The directory exists but holds a different experiment.
    #[error("`{}` holds run `{found}`, not `{expected}`", path.display())]
    Mismatch {
        /// The directory.
        path: PathBuf,
        /// The run id in its status.
        found: String,
        /// The run id asked for.
        expected: String,
    },
}

impl Error {
    /// Another process running the same experiment, or a directory holding another experiment:
    /// the user's to sort out. Anything else (I/O, corrupt files, a newer format) is not.
    pub fn is_user_error(&self) -> bool {
        matches!(self, Error::Busy { .. } | Error::Mismatch { .. })
    }
}

/// Wraps an I/O error with what was being done to which file.
pub(crate) fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io { op, path: path.to_path_buf(), source }
}
