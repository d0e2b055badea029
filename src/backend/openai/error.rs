//! What can go wrong talking to an OpenAI-compatible server, and which failures are the
//! infrastructure's (retried, then counted) rather than the user's.

/// Errors of the OpenAI-compatible backend.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No answer: connection refused or reset, DNS, a timeout; after every retry.
    #[error("no answer from `{url}` after {attempts} attempt(s)")]
    Unreachable {
        /// The request URL.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        #[source]
        source: reqwest::Error,
    },
    /// The server answered with an error status. 429 and 5xx were retried first.
    #[error("`{url}` answered HTTP {status} after {attempts} attempt(s): {body}")]
    Status {
        /// The request URL.
        url: String,
        /// HTTP status.
        status: u16,
        /// Attempts made.
        attempts: u32,
        /// The start of the reply body.
        body: String,
    },
    /// The reply is not what the protocol promises (not JSON, truncated, fields missing, as
    /// many log-probabilities as tokens missing), after every retry.
    #[error("`{url}` sent a malformed reply after {attempts} attempt(s): {reason}")]
    Malformed {
        /// The request URL.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// What is wrong.
        reason: String,
    },
    /// The server's tokens are not our tokenizer's: the served model is not `model.base`, or
    /// the server re-tokenized differently.
    #[error("the server's tokens disagree with our tokenizer: {detail}")]
    TokenMismatch {
        /// Where and how.
        detail: String,
    },
    /// `backend.served_model` is not among the server's models.
    #[error("`{base_url}` does not serve `{model}`; it serves {available}")]
    UnknownModel {
        /// The base URL.
        base_url: String,
        /// The model asked for.
        model: String,
        /// What `/v1/models` lists.
        available: String,
    },
    /// A request the backend cannot make (an empty prompt, bad parameters).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// Our tokenizer failed to encode or decode.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
}

impl Error {
    /// Whether retries were spent on a failure of the server or the network (the engine drops
    /// the group and counts it).
    pub fn is_infrastructure(&self) -> bool {
        match self {
            Error::Unreachable { .. } | Error::Malformed { .. } | Error::TokenMismatch { .. } => true,
            Error::Status { status, .. } => *status == 429 || *status >= 500,
            Error::UnknownModel { .. } | Error::Invalid(_) | Error::Tokenizer(_) => false,
        }
    }

    /// Whether the user can fix it in the spec (a model name, a prompt encoding, a key).
    pub fn is_user_error(&self) -> bool {
        match self {
            Error::UnknownModel { .. } | Error::Invalid(_) => true,
            Error::Status { status, .. } => (400..500).contains(status) && *status != 429,
            _ => false,
        }
    }
}

