//! What opening a Tinker policy needs: the service URL and key, the model and adapter, and the
//! retry timings.

use std::sync::Arc;

use super::error::Error;
use super::http::RetryPolicy;
use super::profile::Server;
use crate::seam::Finetune;

/// Tinker's production endpoint (the SDK's `DEFAULT_BASE_URL`).
pub const DEFAULT_BASE_URL: &str = "https://tinker.thinkingmachines.dev/services/tinker-prod";

/// Default bound on `asample` requests in flight (`backend.max_in_flight`).
pub const DEFAULT_MAX_IN_FLIGHT: usize = crate::spec::defaults::TINKER_MAX_IN_FLIGHT as usize;

/// Everything needed to open a Tinker policy.
#[derive(Clone)]
pub struct Options {
    /// Service URL: the spec's, else `$TINKER_BASE_URL`, else [`DEFAULT_BASE_URL`].
    pub base_url: String,
    /// The API key (read from the environment variable the spec names).
    pub api_key: String,
    /// The base model, as the service names it (`Qwen/Qwen3-4B-Instruct-2507`).
    pub base_model: String,
    /// The LoRA adapter.
    pub finetune: Finetune,
    /// Seed of the adapter's initialisation.
    pub seed: u64,
    /// Most `asample` requests in flight at once.
    pub max_in_flight: usize,
    /// Tokenizer for stop strings (see [`SamplerOptions::tokenizer`](super::SamplerOptions::tokenizer)).
    pub tokenizer: Option<Arc<crate::prompt::Tokenizer>>,
    /// `user_metadata` of the session (rlx puts the run id and spec name there).
    pub user_metadata: serde_json::Map<String, serde_json::Value>,
    /// Retry timings.
    pub retry: RetryPolicy,
    /// The server at `base_url` (`backend.server`); `None`: asked at first contact.
    pub server: Option<Server>,
}

impl Options {
    /// The service URL from the spec's `base_url` or the environment, and the key from the
    /// variable `api_key_env`.
    ///
    /// # Errors
    /// [`Error::NoKey`] when the variable is unset or empty.
    pub fn credentials(base_url: Option<&str>, api_key_env: &str) -> Result<(String, String), Error> {
        let base = base_url
            .map(str::to_string)
            .or_else(|| std::env::var("TINKER_BASE_URL").ok().filter(|s| !s.trim().is_empty()))
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_string());
        let key = std::env::var(api_key_env).ok().filter(|k| !k.trim().is_empty()).ok_or_else(|| Error::NoKey { var: api_key_env.to_string() })?;
        Ok((base.trim_end_matches('/').to_string(), key.trim().to_string()))
    }
}

