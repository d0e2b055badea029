//! [`Error`]: loading a problem file failed (missing, unreadable, malformed, an unknown format).

use std::path::PathBuf;

/// Errors from loading problem files.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("cannot read `{}`", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file (or one line of a JSONL file) is not valid JSON.
    #[error("`{}` line {line}: invalid JSON", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// 1-based line (1 for a whole-file JSON array).
        line: usize,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// A JSON file whose top level is not an array of objects.
    #[error("`{}`: expected a JSON array of objects (or JSONL, one object per line)", path.display())]
    NotRows {
        /// The file.
        path: PathBuf,
    },
    /// A row matches no supported format (auto-detection), or not the one asked for.
    #[error("`{}` row {row}: {reason}", path.display())]
    Row {
        /// The file.
        path: PathBuf,
        /// 0-based row index.
        row: usize,
        /// What was expected and what was found.
        reason: String,
    },
}

impl Error {
    /// Whether the user can fix it (exit code 2): always, since every variant is a problem file
    /// the user named that is missing, unreadable or malformed.
    pub fn is_user_error(&self) -> bool {
        true
    }
}
