//! The error every backend's seam methods answer with, and its [`Result`]: a child of its own so
//! that the backends (which build it) name it here, not through the parent that declares them
//! (the parent↔child knot `tests/cli/architecture.rs` refuses).

use std::path::PathBuf;

use super::openai::error::Error as OpenaiError;
use super::tinker::error::Error as TinkerError;

/// Errors of every backend.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A datum is malformed (lengths differ, a required input is missing, a token is out of range).
    #[error("datum {index} is invalid: {reason}")]
    InvalidDatum {
        /// Position of the datum in the batch.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A request parameter is out of range or inconsistent.
    #[error("invalid {what}: {reason}")]
    InvalidArgument {
        /// The parameter.
        what: &'static str,
        /// Why it is rejected.
        reason: String,
    },
    /// An unknown loss function, config key or value.
    #[error(transparent)]
    Loss(#[from] crate::rl::loss::Error),
    /// A model directory, checkpoint or state file could not be read or written.
    #[error("{action} `{path}`")]
    Io {
        /// What was being done ("read", "write", ...).
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A model file is not in the expected format (missing tensor, wrong shape, unsupported arch).
    #[error("model `{path}`: {reason}")]
    Model {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A saved training state does not match this trainer (different model or adapter layout).
    #[error("state `{path}` does not match this trainer: {reason}")]
    StateMismatch {
        /// The state directory.
        path: PathBuf,
        /// What differs.
        reason: String,
    },
    /// The tokenizer could not be built or failed to encode/decode.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The chat template failed to compile or render.
    #[error("chat template: {0}")]
    Template(String),
    /// A tensor operation failed (shape bug or out of memory). The cause is the tensor library's
    /// error, boxed so that the seam's error names no tensor library (the HTTP backends have none).
    #[error("tensor operation failed")]
    Tensor(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The spec asks for a backend this build cannot use (yet).
    #[error("backend `{kind}` is not available: {reason}")]
    Unavailable {
        /// `tinker`, `openai`, ...
        kind: &'static str,
        /// Why, and what to do instead.
        reason: String,
    },
    /// The spec asks a sampler-only backend to train.
    #[error("backend `{kind}` can only sample; training needs a backend that can train")]
    CannotTrain {
        /// The backend.
        kind: &'static str,
    },
    /// The Tinker service failed or refused a request.
    #[error(transparent)]
    Tinker(#[from] TinkerError),
    /// An OpenAI-compatible server failed or answered wrongly (see [`OpenaiError`]).
    #[error(transparent)]
    Openai(#[from] OpenaiError),
    /// The thread or service serving this backend stopped answering (it panicked, or the
    /// connection closed); the request may or may not have run.
    #[error("the {what} stopped: {reason}")]
    Gone {
        /// `local trainer`, `local sampler`, ...
        what: &'static str,
        /// What is known (a panic message, a closed channel).
        reason: String,
    },
}

impl Error {
    /// Whether the error is the user's to fix (a missing or malformed model, a backend this
    /// build lacks, bad arguments) rather than a failure of rlx or of a service.
    pub fn is_user_error(&self) -> bool {
        matches!(self, Error::Model { .. } | Error::Unavailable { .. } | Error::CannotTrain { .. } | Error::StateMismatch { .. } | Error::Template(_))
            || matches!(self, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
            || matches!(self, Error::Tinker(e) if e.is_user_error())
            || matches!(self, Error::Openai(e) if e.is_user_error())
    }

    /// Whether the error is an infrastructure failure that survived its retries (a server down,
    /// timing out or answering garbage): the engine drops the groups it hit and counts them,
    /// never scoring them as the model's failure.
    pub fn is_infrastructure(&self) -> bool {
        matches!(self, Error::Openai(e) if e.is_infrastructure())
    }
}

impl From<crate::seam::Invalid> for Error {
    fn from(e: crate::seam::Invalid) -> Self {
        match e {
            crate::seam::Invalid::Datum { index, reason } => Error::InvalidDatum { index, reason },
            crate::seam::Invalid::Argument { what, reason } => Error::InvalidArgument { what, reason },
        }
    }
}

/// Convenience alias for backend results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

