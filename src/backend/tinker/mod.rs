//! The Tinker backend: rlx's own client of Tinker's HTTP protocol (as the `tinker` SDK 0.38.0
//! speaks it, [`crate::tinker`]), behind the [`Trainer`] and [`Sampler`] seams.
//!
//! | module | job |
//! |---|---|
//! | [`http`] | one request, the submission retry policy, URL joining, authentication |
//! | [`future`] | polling `retrieve_future` until a result is there |
//! | [`session`] | client config, `create_session`, heartbeats, `finish` |
//! | [`trainer`] | a LoRA training model: `seq_id` order, pipelined submission |
//! | [`sampler`] | a sampling session: `asample` with many requests in flight |
//! | [`convert`] | rlx's data to Tinker's protobuf and JSON and back |
//! | [`profile`] | which server is at the URL (hosted Tinker, `rlx serve`, SkyRL, ...) and what it accepts |
//!
//! What rlx does not implement: the JWT credential exchange (a service that asks for it gets a
//! clear error), zstd-compressed bodies (optional for clients), telemetry (rlx sends none),
//! custom losses, and images.
//!
//! [`Trainer`]: crate::backend::Trainer
//! [`Sampler`]: crate::backend::Sampler

use std::sync::Arc;

use crate::tinker::{RequestType, wire};

pub(crate) mod convert;
mod error;
pub(crate) mod future;
pub(crate) mod http;
pub mod profile;
pub(crate) mod sampler;
pub(crate) mod session;
pub(crate) mod trainer;

pub use error::Error;
pub use http::RetryPolicy;
pub use profile::{Profile, Server, Wire};
pub use sampler::{SamplerOptions, TinkerSampler};
pub use session::Session;
pub use trainer::TinkerTrainer;

use super::Policy;
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
    /// Tokenizer for stop strings (see [`SamplerOptions::tokenizer`]).
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

/// What `create_model`'s `lora_config` can say: Tinker adapts whole groups of projections.
///
/// # Errors
/// [`Error::Unsupported`] for full fine-tuning, or targets that split a group (the spec check
/// reports these first, with a location).
pub fn lora_config(finetune: &Finetune, seed: u64) -> Result<wire::LoraConfig, Error> {
    let Finetune::Lora(l) = finetune else {
        return Err(Error::Unsupported { what: "full fine-tuning (Tinker trains LoRA adapters; set `model.finetune: lora`)".into() });
    };
    let has = |m: &str| l.targets.iter().any(|t| t == m);
    let group = |names: &[&str]| -> Result<bool, Error> {
        let n = names.iter().filter(|m| has(m)).count();
        if n != 0 && n != names.len() {
            return Err(Error::Unsupported { what: format!("LoRA on only some of {} (Tinker adapts all of them or none)", names.join(", ")) });
        }
        Ok(n == names.len())
    };
    let attn = group(&["q_proj", "k_proj", "v_proj", "o_proj"])?;
    let mlp = group(&["gate_proj", "up_proj", "down_proj"])?;
    // Python ints are unbounded, but JSON readers (and the service's protobufs) stop at i64.
    Ok(wire::LoraConfig { rank: l.rank as u32, seed: Some(seed & (i64::MAX as u64)), train_unembed: has("lm_head"), train_mlp: mlp, train_attn: attn })
}

/// Creates a session and a LoRA training model on it, and returns it as a trainable policy.
///
/// # Errors
/// No key, an unreachable service, a model the service does not offer, a refused LoRA config.
pub async fn open(options: Options) -> Result<Policy, Error> {
    let client = http::Client::new(&options.base_url, &options.api_key, options.retry.clone())?;
    let profile = server_profile(&client, options.server).await;
    let lora = lora_config(&options.finetune, options.seed & profile.seed_mask)?;
    if let (Some(max), Finetune::Lora(l)) = (profile.max_lora_rank, &options.finetune)
        && l.rank as u32 > max
    {
        return Err(Error::ServerLacks {
            server: profile.server.to_string(),
            setting: "model.lora.rank".into(),
            reason: format!("rank {} is above its default `max_lora_rank` of {max}; lower the rank, or start the server with a larger `max_lora_rank` in its backend config", l.rank),
        });
    }
    let session = Session::create(client.clone(), options.user_metadata.clone(), &profile).await?;
    let model_seq = session.next_model_seq();
    let body = wire::CreateModelRequest {
        session_id: session.id().to_string(),
        model_seq_id: u64::from(model_seq),
        base_model: options.base_model.clone(),
        user_metadata: None,
        lora_config: Some(lora),
        optimizer_config: wire::OptimizerConfig::default(),
        r#type: wire::literal::CreateModel,
    };
    let submitted: wire::UntypedApiFuture = client.post_json("/api/v1/create_model", &body, "ServiceClient.create_lora_training_client").await?;
    let created: wire::CreateModelResponse = future::retrieve_json(&client, &submitted.request_id, RequestType::CreateModel).await?;
    let model_id = created.model_id;
    let ask = wire::GetInfoRequest { model_id: model_id.clone(), r#type: wire::literal::GetInfo };
    let info: wire::GetInfoResponse = client.post_json("/api/v1/get_info", &ask, "TrainingClient.get_info").await?;
    tracing::info!(session = %session.id(), model_id = %model_id, base_model = %options.base_model, tokenizer = ?info.model_data.tokenizer_id, lora_rank = ?info.lora_rank, "Tinker training model ready");
    let sampler = SamplerOptions {
        in_flight: Arc::new(tokio::sync::Semaphore::new(options.max_in_flight.max(1))),
        max_in_flight: options.max_in_flight.max(1),
        tokenizer: options.tokenizer.clone(),
        seed_mask: profile.seed_mask,
    };
    Ok(Policy::Trainable(Arc::new(TinkerTrainer::start(session, model_id, options.base_model.clone(), sampler, profile))))
}

/// The declared server's profile, else the one [`profile::discover`] finds at the URL.
async fn server_profile(client: &http::Client, declared: Option<Server>) -> Profile {
    let server = match declared {
        Some(s) => s,
        None => {
            let found = profile::discover(client).await;
            if found != Server::Tinker {
                tracing::info!(server = %found, url = %client.base_url(), "found a `{found}` Tinker server (set `backend.server` to say so and skip the probe)");
            }
            found
        }
    };
    server.profile()
}

/// Creates a session and a sampling session on the base model, or on saved sampler weights
/// (`model_path`, `tinker://…`), and returns it as a fixed policy: evaluation without a
/// training model.
///
/// # Errors
/// No key, an unreachable service, a model or path the service does not know.
pub async fn open_sampler(options: Options, model_path: Option<String>) -> Result<Policy, Error> {
    let client = http::Client::new(&options.base_url, &options.api_key, options.retry.clone())?;
    let profile = server_profile(&client, options.server).await;
    let session = Session::create(client.clone(), options.user_metadata.clone(), &profile).await?;
    let body = wire::CreateSamplingSessionRequest {
        session_id: session.id().to_string(),
        sampling_session_seq_id: u64::from(session.next_sampling_seq()),
        base_model: model_path.is_none().then(|| options.base_model.clone()),
        model_path: model_path.clone(),
        r#type: wire::literal::CreateSamplingSession,
    };
    let created: wire::CreateSamplingSessionResponse = client.post_json("/api/v1/create_sampling_session", &body, "ServiceClient.create_sampling_client").await?;
    tracing::info!(session = %session.id(), sampler = %created.sampling_session_id, base_model = %options.base_model, model_path = ?model_path, "Tinker sampler ready");
    let sampler = SamplerOptions {
        in_flight: Arc::new(tokio::sync::Semaphore::new(options.max_in_flight.max(1))),
        max_in_flight: options.max_in_flight.max(1),
        tokenizer: options.tokenizer.clone(),
        seed_mask: profile.seed_mask,
    };
    Ok(Policy::Fixed(Arc::new(TinkerSampler::new(session, created.sampling_session_id, sampler))))
}

/// The cause chain of an HTTP client error in one line (reqwest hides the useful part, such as
/// "connection refused", in its sources).
pub(crate) fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    crate::causes::causes(e).join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seam::LoraConfig;

    #[test]
    fn lora_configs_map_whole_groups_and_refuse_partial_ones() {
        let all = lora_config(&Finetune::Lora(LoraConfig::all_linear(16)), 7).unwrap();
        assert_eq!(serde_json::to_value(all).unwrap(), serde_json::json!({"rank": 16, "seed": 7, "train_unembed": false, "train_mlp": true, "train_attn": true}));
        let attn = LoraConfig { targets: ["q_proj", "k_proj", "v_proj", "o_proj"].map(String::from).to_vec(), ..LoraConfig::all_linear(8) };
        assert!(!lora_config(&Finetune::Lora(attn), 1).unwrap().train_mlp);
        let partial = LoraConfig { targets: vec!["q_proj".into(), "v_proj".into()], ..LoraConfig::all_linear(8) };
        assert!(lora_config(&Finetune::Lora(partial), 1).unwrap_err().to_string().contains("q_proj, k_proj, v_proj, o_proj"));
        assert!(lora_config(&Finetune::Full, 1).is_err());
    }
}
