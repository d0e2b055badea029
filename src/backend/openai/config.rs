//! The backend's settings (`backend:` in the spec, as the plan reads it): the server, the
//! endpoint, how prompts travel, and the HTTP limits.

use std::time::Duration;

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

