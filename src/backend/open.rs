//! [`open`]: the one `match` on the backend kind. Adding a backend is one module plus one arm
//! here; the engine never names a backend.

use std::path::PathBuf;

use super::{Error, Policy, Result, local, openai};
use crate::spec::Plan;
use crate::spec::resolved::BackendChoice;

/// What a backend may need from the run beyond the spec.
#[derive(Debug, Clone)]
pub struct Context {
    /// Where a backend that keeps state on this machine writes it (the run's checkpoint
    /// directory); remote backends name their states themselves.
    pub state_dir: PathBuf,
}

/// Turns a resolved spec into the policy the run samples from and trains.
///
/// # Errors
/// A model that cannot be found or loaded, a backend this version cannot use.
pub async fn open(plan: &Plan, cx: &Context) -> Result<Policy> {
    let r = &plan.resolved;
    match &r.backend {
        BackendChoice::Local { threads, max_tokens_per_microbatch } => {
            let path = super::model_source::locate(&r.model)?;
            let options = local::Options { threads: *threads, max_tokens_per_microbatch: *max_tokens_per_microbatch, seed: plan.spec.seed, state_dir: cx.state_dir.clone() };
            local::open(path, &r.finetune, options).await
        }
        BackendChoice::Tinker { .. } => Err(Error::Unavailable {
            kind: "tinker",
            reason: "this version of rlx does not speak Tinker's protocol yet; use `backend: {kind: local}`".into(),
        }),
        BackendChoice::Openai { base_url, api_key_env, served_model, api, prompt, concurrency, timeout, max_retries } => {
            // The server samples; our tokenizer (from `model.base`) renders the prompts and
            // checks the tokens it sends back.
            let model = super::model_source::locate(&r.model)?;
            let tokenizer = r.tokenizer.as_ref().map(super::model_source::locate).transpose()?;
            let files = crate::prompt::model_files::load(&model, tokenizer.as_deref(), &r.chat_template).map_err(|e| Error::Model { path: model.clone(), reason: e.to_string() })?;
            let config = openai::Config {
                api_key: std::env::var(api_key_env).ok().filter(|k| !k.is_empty()),
                api: *api,
                prompt: *prompt,
                concurrency: *concurrency,
                timeout: *timeout,
                max_retries: *max_retries,
                ..openai::Config::new(base_url.clone(), served_model.clone())
            };
            let sampler = openai::open(config, std::sync::Arc::new(files.tokenizer)).await?;
            Ok(Policy::Fixed(sampler))
        }
    }
}
