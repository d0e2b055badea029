//! Opening a Tinker policy: a session, then a LoRA training model or a sampling session on it.
//! A sibling of the modules it calls (not the parent's code), so that they can name the
//! parent's types without a parent↔child cycle.

use std::sync::Arc;

use super::error::Error;
use super::future;
use super::http;
use super::options::Options;
use super::profile;
use super::sampler::{SamplerOptions, TinkerSampler};
use super::session::Session;
use super::teacher::{Remote, Teachers};
use super::trainer::TinkerTrainer;
use crate::backend::traits::Policy;
use crate::seam::Finetune;
use crate::tinker::{RequestType, wire};

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
    let profile = profile::for_client(&client, options.server).await;
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
    let remote = Remote { api_key: options.api_key.clone(), retry: options.retry.clone(), user_metadata: options.user_metadata.clone(), server: options.server };
    let teachers = Teachers::new(session.clone(), options.base_model.clone(), sampler.clone(), remote);
    Ok(Policy::Trainable(Arc::new(TinkerTrainer::start(session, model_id, teachers, sampler, profile))))
}

/// Creates a session and a sampling session on the base model, or on saved sampler weights
/// (`model_path`, `tinker://…`), and returns it as a fixed policy: evaluation without a
/// training model.
///
/// # Errors
/// No key, an unreachable service, a model or path the service does not know.
pub async fn open_sampler(options: Options, model_path: Option<String>) -> Result<Policy, Error> {
    let client = http::Client::new(&options.base_url, &options.api_key, options.retry.clone())?;
    let profile = profile::for_client(&client, options.server).await;
    let session = Session::create(client.clone(), options.user_metadata.clone(), &profile).await?;
    let id = session.create_sampling_session(model_path.is_none().then(|| options.base_model.clone()), model_path.clone()).await?;
    tracing::info!(session = %session.id(), sampler = %id, base_model = %options.base_model, model_path = ?model_path, "Tinker sampler ready");
    let sampler = SamplerOptions {
        in_flight: Arc::new(tokio::sync::Semaphore::new(options.max_in_flight.max(1))),
        max_in_flight: options.max_in_flight.max(1),
        tokenizer: options.tokenizer.clone(),
        seed_mask: profile.seed_mask,
    };
    Ok(Policy::Fixed(Arc::new(TinkerSampler::new(session, id, sampler))))
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
