//! What can go wrong talking to Tinker, worded for the user who has to act on it.

use std::time::Duration;

/// Errors of the Tinker backend.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No API key in the environment.
    #[error("no Tinker API key: set `{var}` (keys start with `tml-`)")]
    NoKey {
        /// The variable the spec names (`backend.api_key_env`).
        var: String,
    },
    /// The API key cannot be sent.
    #[error("the Tinker API key is not usable: {reason}")]
    BadKey {
        /// Why.
        reason: String,
    },
    /// The HTTP client could not be set up.
    #[error("cannot connect to Tinker at {url}: {reason}")]
    Connect {
        /// The service URL.
        url: String,
        /// The cause chain.
        reason: String,
    },
    /// The first request of a session found nothing listening at the URL, or no such host: a
    /// setting to fix, not an outage to wait out.
    #[error("nothing answers at the Tinker URL `{url}` (it comes from `backend.base_url`, else `TINKER_BASE_URL`, else Tinker's own service): {reason}")]
    Unreachable {
        /// The service URL.
        url: String,
        /// The cause chain.
        reason: String,
    },
    /// The service kept failing (connection errors, 5xx, 429) for the whole retry budget.
    #[error("Tinker did not accept {path} after {after:.0?} of retries; last failure: {last}")]
    GaveUp {
        /// The endpoint.
        path: String,
        /// How long rlx tried.
        after: Duration,
        /// The last failure.
        last: String,
    },
    /// A status that is not retried (400, 401, 403, 404, 422, ...).
    #[error("Tinker answered HTTP {status} to {path}: {body}")]
    Status {
        /// The endpoint.
        path: String,
        /// The HTTP status.
        status: u16,
        /// The server's explanation.
        body: String,
    },
    /// Billing is not set up, for longer than the pause budget.
    #[error("Tinker refused {path} for billing reasons (HTTP 402) for {waited:.0?}; check the account's billing")]
    Billing {
        /// The endpoint.
        path: String,
        /// How long rlx waited.
        waited: Duration,
    },
    /// A request was accepted and then failed (reported by `retrieve_future`).
    #[error("Tinker request {request_id} failed ({category} error): {message}")]
    RequestFailed {
        /// The future.
        request_id: String,
        /// `user`, `server` or `unknown`.
        category: String,
        /// The server's message.
        message: String,
    },
    /// The server refused an operation in a 200 reply (`create_session`'s `error_message`).
    #[error("Tinker refused {what}: {message}")]
    Refused {
        /// The operation.
        what: String,
        /// The server's message.
        message: String,
    },
    /// The future is gone (410): the request must be submitted again.
    #[error("Tinker's future {request_id} expired (HTTP 410)")]
    Expired {
        /// The future.
        request_id: String,
    },
    /// A reply that does not follow the protocol.
    #[error("Tinker's reply to {path} does not follow the protocol: {reason}")]
    Protocol {
        /// The endpoint.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The service asks for a protocol feature rlx does not implement.
    #[error("unsupported Tinker feature: {what}")]
    Unsupported {
        /// The feature.
        what: String,
    },
    /// The server named (`backend.server`) or found at the URL cannot do what the spec asks.
    #[error("the `{server}` Tinker server cannot run `{setting}`: {reason}")]
    ServerLacks {
        /// The server (`skyrl`, `tinker`, ...).
        server: String,
        /// The spec setting (`grpo.loss`, `model.lora.rank`, ...).
        setting: String,
        /// Why, and what to use instead.
        reason: String,
    },
    /// A distillation teacher on another base model than the student's (the protocol does not
    /// say which tokenizer a sampler uses, so the base models must be the same).
    #[error("teacher `{teacher}` is served from base model `{served}`, the student's is `{student}`: distillation compares the two models token by token, and the Tinker protocol does not say which tokenizer a sampler uses, so a teacher must be on the student's base model")]
    TeacherBase {
        /// The teacher, as the spec resolved it.
        teacher: String,
        /// Its base model, as its server names it.
        served: String,
        /// The student's base model.
        student: String,
    },
    /// An earlier request of this training client failed after it took its `seq_id`; the
    /// server waits for that id forever, so nothing later can run.
    #[error("an earlier Tinker request of model {model_id} failed (seq_id {seq_id}), so later requests cannot run: {reason}")]
    Poisoned {
        /// The model.
        model_id: String,
        /// The id that never arrived.
        seq_id: i64,
        /// The first failure.
        reason: String,
    },
}

impl Error {
    /// Whether the user must act (a key, a model name, billing, a rejected argument) rather
    /// than rlx or the service having failed.
    pub fn is_user_error(&self) -> bool {
        match self {
            Error::NoKey { .. } | Error::BadKey { .. } | Error::Billing { .. } | Error::Refused { .. } | Error::Unsupported { .. } | Error::Unreachable { .. } | Error::ServerLacks { .. } | Error::TeacherBase { .. } => true,
            Error::Status { status, .. } => matches!(status, 400 | 401 | 403 | 404 | 422),
            Error::RequestFailed { category, .. } => category == "user",
            _ => false,
        }
    }
}
