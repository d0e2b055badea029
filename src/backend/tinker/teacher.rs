//! Models the Tinker trainer scores datums with, on a sampling session of their own: the
//! teacher of on-policy distillation (`grpo.distill`, a `distill` stage) and the reference
//! policy of `grpo.kl` (the student's base model, on the student's server).
//!
//! A teacher is a `tinker://` path (sampler weights, or a training state the server can sample
//! from) or a base model the service serves, on the student's server or on another one
//! (`teacher.base_url`: its own client and session, the same API key). Each is opened once per
//! run, on first use, and kept. Scoring is the cookbook's `compute_logprobs` of each datum's
//! whole sequence, all of a call's datums in flight at once, bounded by the sampler's
//! `max_in_flight` semaphore and retried as every sample is ([`super::sampler`]): a teacher that
//! stays unreachable fails the step as an infrastructure error, never scores zero.
//!
//! The protocol says which base model a sampling session serves (`GET /api/v1/samplers/{id}`)
//! but not which tokenizer, so a teacher on another base model than the student's is refused
//! when it is opened (rejected: comparing the two models' `get_info` tokenizer ids, which only a
//! training model answers; and trusting the spec, which would train the student toward noise).

use std::collections::HashMap;
use std::sync::Arc;

use super::error::Error as TinkerError;
use super::http::{self, RetryPolicy};
use super::profile::Server;
use super::sampler::{SamplerOptions, TinkerSampler};
use super::session::Session;
use crate::backend::error::{Error, Result};
use crate::backend::traits::Sampler;
use crate::seam::Datum;
use crate::tinker::wire;

/// A model on a Tinker-API service that scores datums: [`crate::backend::Trainer::tinker_teacher_logprobs`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Teacher {
    /// What the service samples.
    pub model: TeacherModel,
    /// Another server's URL; `None`: the student's.
    pub base_url: Option<String>,
}

/// What a teacher's sampling session samples.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TeacherModel {
    /// Saved weights (`tinker://…`, `create_sampling_session`'s `model_path`).
    Path(String),
    /// A base model as the service names it (`base_model`).
    Base(String),
}

impl std::fmt::Display for Teacher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.model {
            TeacherModel::Path(p) | TeacherModel::Base(p) => f.write_str(p)?,
        }
        match &self.base_url {
            Some(url) => write!(f, " at {url}"),
            None => Ok(()),
        }
    }
}

/// What opening a session on another server takes: the student's key and client settings.
#[derive(Clone)]
pub(crate) struct Remote {
    pub(crate) api_key: String,
    pub(crate) retry: RetryPolicy,
    pub(crate) user_metadata: serde_json::Map<String, serde_json::Value>,
    /// `backend.server`, when the teacher's URL is the student's; another URL is asked.
    pub(crate) server: Option<Server>,
}

/// The run's scoring models, opened on first use.
pub(crate) struct Teachers {
    /// The student's session.
    session: Arc<Session>,
    /// The student's base model, as the service names it.
    student_base: String,
    /// The student's samplers' options (its `max_in_flight` semaphore).
    sampler: SamplerOptions,
    remote: Remote,
    /// Held while one is opened, so that each is opened once.
    opened: tokio::sync::Mutex<HashMap<Teacher, Arc<TinkerSampler>>>,
}

impl Teachers {
    pub(crate) fn new(session: Arc<Session>, student_base: String, sampler: SamplerOptions, remote: Remote) -> Self {
        Teachers { session, student_base, sampler, remote, opened: tokio::sync::Mutex::new(HashMap::new()) }
    }

    /// The reference policy of `grpo.kl`: the student's base model on its server.
    pub(crate) fn reference(&self) -> Teacher {
        Teacher { model: TeacherModel::Base(self.student_base.clone()), base_url: None }
    }

    /// `teacher`'s sampler, opened (and its base model checked) on first use.
    ///
    /// # Errors
    /// An unreachable server, a path or model the service does not know, a teacher on another
    /// base model than the student's.
    pub(crate) async fn sampler(&self, teacher: &Teacher) -> Result<Arc<TinkerSampler>> {
        let mut opened = self.opened.lock().await;
        if let Some(s) = opened.get(teacher) {
            return Ok(s.clone());
        }
        let sampler = Arc::new(self.open(teacher).await?);
        opened.insert(teacher.clone(), sampler.clone());
        Ok(sampler)
    }

    async fn open(&self, teacher: &Teacher) -> Result<TinkerSampler> {
        let (session, options) = match &teacher.base_url {
            None => (self.session.clone(), self.sampler.clone()),
            Some(url) => {
                let client = http::Client::new(url.trim_end_matches('/'), &self.remote.api_key, self.remote.retry.clone())?;
                let same = client.base_url() == self.session.client().base_url();
                let profile = super::profile::for_client(&client, if same { self.remote.server } else { None }).await;
                let session = Session::create(client, self.remote.user_metadata.clone(), &profile).await?;
                // Its own bound: another server's capacity is not the student's.
                let max = self.sampler.max_in_flight;
                let options = SamplerOptions { in_flight: Arc::new(tokio::sync::Semaphore::new(max)), max_in_flight: max, tokenizer: None, seed_mask: profile.seed_mask };
                (session, options)
            }
        };
        let (base_model, model_path) = match &teacher.model {
            TeacherModel::Base(b) => (Some(b.clone()), None),
            TeacherModel::Path(p) => (None, Some(p.clone())),
        };
        let id = session.create_sampling_session(base_model, model_path).await?;
        let served = match &teacher.model {
            TeacherModel::Base(b) => b.clone(),
            TeacherModel::Path(_) => {
                let info: wire::GetSamplerResponse = session.client().get_json(&format!("/api/v1/samplers/{id}"), "SamplingClient.get_base_model").await?;
                info.base_model
            }
        };
        if served != self.student_base {
            return Err(TinkerError::TeacherBase { teacher: teacher.to_string(), served, student: self.student_base.clone() }.into());
        }
        tracing::info!(teacher = %teacher, sampler = %id, "Tinker teacher ready");
        Ok(TinkerSampler::new(session, id, options))
    }
}

/// Each datum's target log-probabilities under `sampler`: the `compute_logprobs` of its whole
/// sequence (`model_input` + its last target), where target `i` is the prompt's position
/// `i + 1` (position 0 has no score). All are submitted before the first is awaited.
///
/// # Errors
/// A failed request, or a reply of the wrong length.
pub(crate) async fn score(sampler: &TinkerSampler, data: &[Datum]) -> Result<Vec<Vec<f32>>> {
    let pending: Vec<_> = data.iter().map(|d| sampler.prompt_logprobs(sequence(d))).collect();
    let mut out = Vec::with_capacity(data.len());
    for (d, p) in data.iter().zip(pending) {
        out.push(targets(d, p.await?)?);
    }
    Ok(out)
}

/// The whole sequence a datum trains on: its input and its last target.
fn sequence(d: &Datum) -> Vec<u32> {
    let mut seq = d.model_input.clone();
    seq.extend(d.loss_fn_inputs.target_tokens.last());
    seq
}

/// The targets' log-probabilities out of the sequence's prompt log-probabilities.
fn targets(d: &Datum, prompt: Vec<f32>) -> Result<Vec<f32>> {
    let n = d.model_input.len();
    if prompt.len() != n + 1 {
        return Err(Error::InvalidArgument { what: "prompt_logprobs", reason: format!("{} values for a sequence of {} tokens", prompt.len(), n + 1) });
    }
    Ok(prompt[1..].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seam::LossFnInputs;

    #[test]
    fn target_i_is_the_sequence_position_i_plus_1() {
        // Tokens 5 6 7 8: input 5 6 7, targets 6 7 8; the sequence scored is 5 6 7 8.
        let d = Datum { model_input: vec![5, 6, 7], loss_fn_inputs: LossFnInputs { target_tokens: vec![6, 7, 8], ..Default::default() } };
        assert_eq!(sequence(&d), [5, 6, 7, 8]);
        let scored = targets(&d, vec![f32::NAN, -0.6, -0.7, -0.8]).unwrap();
        assert_eq!(scored, [-0.6, -0.7, -0.8], "target 0 (token 6) is position 1");
        assert!(targets(&d, vec![f32::NAN, -0.6, -0.7]).is_err(), "a reply of the wrong length");
    }
}
