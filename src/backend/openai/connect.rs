//! Connecting: list the server's models, check it serves the one asked for, and hand back a
//! sampler on it. A sibling of the modules it calls (not the parent's code), so that they can
//! name the parent's types without a parent↔child cycle.

use std::sync::Arc;

use super::client;
use super::config::Config;
use super::error::Error;
use super::sampler::OpenaiSampler;
use super::wire;
use crate::prompt::Tokenizer;

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
