//! [`open`]: the one `match` on the backend kind. Adding a backend is one module plus one arm
//! here; the engine never names a backend.

use std::path::PathBuf;

use std::sync::Arc;

use super::{Error, Policy, Result, local, openai, tinker};
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
        BackendChoice::Local { threads, max_tokens_per_microbatch, sample_weights, model_path } => {
            let path = super::model_source::locate(&r.model)?;
            let options = local::Options {
                threads: *threads,
                max_tokens_per_microbatch: *max_tokens_per_microbatch,
                sample_weights: *sample_weights,
                seed: plan.spec.seed,
                state_dir: cx.state_dir.clone(),
            };
            let policy = local::open(path, &r.finetune, options).await?;
            if let (Some(state), Some(trainer)) = (model_path, policy.trainer()) {
                // The checkpoint's parameters onto the base: samplers snapshot the trainer, so
                // every evaluation samples from them.
                trainer.load_state(&super::StateRef::local(state)).await?;
            }
            Ok(policy)
        }
        BackendChoice::Tinker { base_url, api_key_env, max_in_flight, model_path } => {
            let (base_url, api_key) = tinker::Options::credentials(base_url.as_deref(), api_key_env)?;
            let options = tinker::Options {
                base_url,
                api_key,
                base_model: plan.spec.model.base.clone(),
                finetune: r.finetune.clone(),
                seed: plan.spec.seed,
                max_in_flight: *max_in_flight,
                tokenizer: stop_text_tokenizer(plan)?,
                user_metadata: [("rlx_run".to_string(), plan.run_id.clone().into()), ("rlx_spec".to_string(), plan.spec.name.clone().into())].into_iter().collect(),
                retry: tinker::RetryPolicy::default(),
            };
            // An evaluation-only run needs no training model (Tinker bills for one).
            if plan.spec.schedule.max_steps == 0 {
                return Ok(tinker::open_sampler(options, model_path.clone()).await?);
            }
            Ok(tinker::open(options).await?)
        }
        BackendChoice::Openai { base_url, api_key_env, served_model, api, prompt, concurrency, timeout, max_retries } => {
            // The server samples; our tokenizer (from `model.base`: its tokenizer and template files,
            // not its weights) renders the prompts and checks the tokens it sends back.
            let model = super::model_source::locate_prompt_files(&r.model)?;
            let tokenizer = r.tokenizer.as_ref().map(super::model_source::locate_prompt_files).transpose()?;
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

/// The model's tokenizer when the spec has stop strings, which a remote sampler that stops only
/// on token ids applies after sampling (prompt files only: no weights are fetched).
fn stop_text_tokenizer(plan: &Plan) -> Result<Option<Arc<crate::prompt::Tokenizer>>> {
    let r = &plan.resolved;
    let has_text = |p: &super::SamplingParams| p.stop.iter().any(|s| matches!(s, super::Stop::Text(_)));
    if !has_text(&r.sampling) && !has_text(&r.eval_sampling) {
        return Ok(None);
    }
    let model = super::model_source::locate_prompt_files(&r.model)?;
    let tokenizer = r.tokenizer.as_ref().map(super::model_source::locate_prompt_files).transpose()?;
    let files = crate::prompt::model_files::load(&model, tokenizer.as_deref(), &r.chat_template).map_err(|e| Error::Tokenizer(crate::causes::causes(&e).join(": ")))?;
    Ok(Some(Arc::new(files.tokenizer)))
}
