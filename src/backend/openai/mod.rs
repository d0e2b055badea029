//! The OpenAI-compatible backend: a [`Sampler`](super::Sampler) over a vLLM, llama.cpp or other
//! server's `/v1/completions` (token ids or text prompts, with log-probabilities) or
//! `/v1/chat/completions` (text only; evaluation and dry runs). Sampling only: it cannot train.
//!
//! - [`client`]: HTTP: one `reqwest` client, a concurrency limit, per-request timeouts, retries
//!   with exponential back-off on infrastructure failures only.
//! - [`wire`]: the request bodies and the parsing of replies in the dialects servers speak.
//! - [`tokens`]: the server's completion tokens as our tokenizer's ids, checked against it.
//! - [`sampler`]: [`OpenaiSampler`], one HTTP request per completion (seeded per completion).
//!
//! Failure policy: a connection refused or reset, a timeout, HTTP 429 or 5xx, and a reply that
//! is garbage or truncated are retried; once the retries are spent the error is an
//! infrastructure error ([`Error::is_infrastructure`]), which the engine turns into a dropped,
//! counted group, never a zero reward. A 4xx other than 429 is the request's fault (a wrong
//! model name, a server that takes no token ids) and stops the run with a hint.

pub(crate) mod client;
pub(crate) mod sampler;
pub(crate) mod tokens;
pub mod wire;

use std::sync::Arc;
use std::time::Duration;

pub use sampler::OpenaiSampler;

use crate::prompt::Tokenizer;

/// Which endpoint of the server samples (the plan's reading of `backend.api`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `/v1/completions`: rlx renders the prompt and the server reports tokens and logprobs.
    Completions,
    /// `/v1/chat/completions`: the server renders the conversation and returns text.
    Chat,
}

/// How `/v1/completions` receives the prompt (`backend.prompt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptEncoding {
    /// Token ids, exactly the prompt rlx rendered.
    Tokens,
    /// The rendered prompt as text, which the server tokenizes again.
    Text,
}

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

/// The backend's settings, from `backend:` in the spec.
#[derive(Debug, Clone)]
pub struct Config {
    /// Base URL ending in `/v1` (no trailing slash).
    pub base_url: String,
    /// Bearer token, when the key variable is set.
    pub api_key: Option<String>,
    /// The model name the server knows.
    pub model: String,
    /// Completions or chat.
    pub api: Api,
    /// Token ids or text prompts.
    pub prompt: PromptEncoding,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Per-request time limit.
    pub timeout: Duration,
    /// Retries of an infrastructure failure.
    pub max_retries: u32,
    /// First back-off; doubles per retry.
    pub backoff: Duration,
}

impl Config {
    /// Settings with the defaults of the spec (`completions`, token prompts, 8 in flight, 300 s,
    /// 4 retries from 0.5 s).
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Config {
        Config {
            base_url: base_url.into().trim_end_matches('/').to_string(),
            api_key: None,
            model: model.into(),
            api: Api::Completions,
            prompt: PromptEncoding::Tokens,
            concurrency: 8,
            timeout: Duration::from_secs(300),
            max_retries: 4,
            backoff: Duration::from_millis(500),
        }
    }
}

/// Connects to the server: lists its models (checking that it is up and serves
/// `config.model`, and learning which server it is), and returns a sampler on it. `tokenizer` is
/// the served model's tokenizer (from `model.base`), which renders prompts and checks the
/// server's tokens.
///
/// # Errors
/// A server that cannot be reached after the retries, or that does not serve the model.
pub async fn open(config: Config, tokenizer: Arc<Tokenizer>) -> Result<Arc<OpenaiSampler>, Error> {
    let client = client::Client::new(&config)?;
    let models = client.models().await?;
    let dialect = wire::Dialect::of(&models, &config.model).map_err(|available| Error::UnknownModel {
        base_url: config.base_url.clone(),
        model: config.model.clone(),
        available,
    })?;
    tracing::info!(base_url = %config.base_url, model = %config.model, ?dialect, "OpenAI-compatible server");
    Ok(Arc::new(OpenaiSampler::new(config, client, dialect, tokenizer)))
}
