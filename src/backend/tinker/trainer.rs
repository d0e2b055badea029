//! A Tinker training client behind the [`Trainer`] seam.
//!
//! Every request addressed to a model carries the next `seq_id` (1, 2, 3, … per model, no
//! gaps), and the server runs a model's requests in `seq_id` order, waiting for a missing id
//! forever (SDK 0.38.0). So one task per trainer (the *submitter*) takes requests in
//! the order the seam methods were called, gives each its `seq_id`, and submits it — retrying
//! with the same `seq_id` and idempotency key until the server has accepted it — before it
//! submits the next. Accepted requests are then polled concurrently, so `forward_backward` and
//! `optim_step` submitted back to back are both queued at the service before either is awaited
//! (§7). A submission that fails for good leaves a gap no later request can cross: the trainer
//! is then *poisoned* and says why, instead of hanging.
//!
//! Rejected alternative: a mutex around "allocate `seq_id` and submit". It gives the same order,
//! but a caller that drops its reply before the lock is reached would leave a gap; the
//! submitter owns the sequence whatever callers do with their replies.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::future::{self, Accept};
use super::http::Body;
use super::profile::{Profile, Wire};
use super::sampler::{SamplerOptions, TinkerSampler};
use super::session::Session;
use super::teacher::{Teacher, Teachers};
use super::convert;
use super::error::Error as TinkerError;
use crate::backend::error::{Error, Result};
use crate::backend::traits::{Pending, Sampler, Trainer};
use crate::seam::{AdamParams, Datum, ForwardBackwardOutput, LossFn, OptimStepOutput, StateRef};
use crate::tinker::RequestType;
use crate::tinker::wire::{self, literal};

/// A request waiting for its turn at the submitter.
enum Op {
    ForwardBackward { data: Vec<Datum>, loss: LossFn, forward_only: bool, reply: oneshot::Sender<Result<ForwardBackwardOutput>> },
    OptimStep { adam: AdamParams, reply: oneshot::Sender<Result<OptimStepOutput>> },
    SaveState { name: String, reply: oneshot::Sender<Result<StateRef>> },
    LoadState { state: StateRef, reply: oneshot::Sender<Result<()>> },
    Sampler { reply: oneshot::Sender<Result<Arc<dyn Sampler>>> },
}

/// The [`Trainer`]: a handle to the submitter task.
pub struct TinkerTrainer {
    ops: mpsc::UnboundedSender<Op>,
    /// The reference policy of `grpo.kl` and distillation teachers: sampling sessions opened on
    /// first use. Scoring with them needs no place in the training requests' order.
    teachers: Arc<Teachers>,
}

/// Limits on one `forward_backward` request (§5.3, the SDK's `fwdbwd_max_chunk_len` and
/// `fwdbwd_max_chunk_bytes_count`): bigger batches go as several requests, one `seq_id` each.
const MAX_CHUNK_DATUMS: usize = 1024;
const MAX_CHUNK_BYTES: usize = 5_000_000;

impl TinkerTrainer {
    /// A trainer for the existing model `model_id` of `session`, scoring with `teachers`.
    pub(crate) fn start(session: Arc<Session>, model_id: String, teachers: Teachers, sampler: SamplerOptions, profile: Profile) -> Self {
        let (ops, rx) = mpsc::unbounded_channel();
        tokio::spawn(Submitter { session, model_id, next_seq: 1, steps: 0, poisoned: None, sampler, profile }.run(rx));
        TinkerTrainer { ops, teachers: Arc::new(teachers) }
    }

    /// Each datum's target log-probabilities under `teacher` (see [`super::teacher`]).
    fn score(&self, teacher: Teacher, data: Vec<Datum>) -> Pending<Vec<Vec<f32>>> {
        let teachers = self.teachers.clone();
        Box::pin(async move {
            let sampler = teachers.sampler(&teacher).await?;
            super::teacher::score(&sampler, &data).await
        })
    }

    fn send<T: Send + 'static>(&self, make: impl FnOnce(oneshot::Sender<Result<T>>) -> Op) -> Pending<T> {
        let (tx, rx) = oneshot::channel();
        let sent = self.ops.send(make(tx));
        Box::pin(async move {
            if sent.is_err() {
                return Err(gone("the request could not be queued"));
            }
            rx.await.unwrap_or_else(|_| Err(gone("the request was dropped without an answer")))
        })
    }
}

fn gone(reason: &str) -> Error {
    Error::Gone { what: "Tinker training client", reason: reason.into() }
}

impl Trainer for TinkerTrainer {
    fn runs_elsewhere(&self) -> bool {
        true
    }

    fn forward_backward(&self, data: Vec<Datum>, loss: LossFn) -> Pending<ForwardBackwardOutput> {
        self.send(|reply| Op::ForwardBackward { data, loss, forward_only: false, reply })
    }

    fn forward(&self, data: Vec<Datum>, loss: LossFn) -> Pending<ForwardBackwardOutput> {
        self.send(|reply| Op::ForwardBackward { data, loss, forward_only: true, reply })
    }

    fn optim_step(&self, adam: AdamParams) -> Pending<OptimStepOutput> {
        self.send(|reply| Op::OptimStep { adam, reply })
    }

    fn save_state(&self, name: &str) -> Pending<StateRef> {
        let name = name.to_string();
        self.send(|reply| Op::SaveState { name, reply })
    }

    /// The cookbook's KL reference (reference/tinker-protocol.md §10.9): `compute_logprobs` of
    /// each datum's whole sequence on a sampling session of the base model.
    fn reference_logprobs(&self, data: Vec<Datum>) -> Pending<Vec<Vec<f32>>> {
        self.score(self.teachers.reference(), data)
    }

    /// The cookbook's on-policy distillation: as the reference, on the teacher's sampling
    /// session.
    fn tinker_teacher_logprobs(&self, teacher: Teacher, data: Vec<Datum>) -> Pending<Vec<Vec<f32>>> {
        self.score(teacher, data)
    }

    fn load_state(&self, state: &StateRef) -> Pending<()> {
        let state = state.clone();
        self.send(|reply| Op::LoadState { state, reply })
    }

    fn sampler(&self) -> Pending<Arc<dyn Sampler>> {
        self.send(|reply| Op::Sampler { reply })
    }
}

/// The task that owns the model's `seq_id` sequence.
struct Submitter {
    session: Arc<Session>,
    model_id: String,
    next_seq: i64,
    steps: u64,
    /// Why the sequence broke, once it has.
    poisoned: Option<String>,
    sampler: SamplerOptions,
    /// What the server accepts (its wire, its losses, how states come back).
    profile: Profile,
}

impl Submitter {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Op>) {
        while let Some(op) = rx.recv().await {
            match op {
                Op::ForwardBackward { data, loss, forward_only, reply } => self.forward_backward(data, loss, forward_only, reply).await,
                Op::OptimStep { adam, reply } => self.optim_step(adam, reply).await,
                Op::SaveState { name, reply } => self.save_state(name, reply).await,
                Op::LoadState { state, reply } => {
                    let r = self.load_state(&state).await;
                    let _ = reply.send(r);
                }
                Op::Sampler { reply } => self.sampler(reply).await,
            }
        }
    }

    fn check(&self) -> Result<(), TinkerError> {
        match &self.poisoned {
            Some(reason) => Err(TinkerError::Poisoned { model_id: self.model_id.clone(), seq_id: self.next_seq, reason: reason.clone() }),
            None => Ok(()),
        }
    }

    /// Takes the next `seq_id` and submits `body` under it; a failure poisons the trainer.
    async fn submit(&mut self, path: &'static str, body: impl FnOnce(i64) -> Body, method: &'static str) -> Result<wire::UntypedApiFuture, TinkerError> {
        self.check()?;
        let seq = self.next_seq;
        self.next_seq += 1;
        let body = body(seq);
        let client = self.session.client().clone();
        let submitted = match client.submit(path, &body, method).await {
            Ok(bytes) => super::http::parse_json::<wire::UntypedApiFuture>(path, &bytes),
            Err(e) => Err(e),
        };
        if let Err(e) = &submitted {
            self.poisoned = Some(crate::causes::causes(e).join(": "));
            self.next_seq = seq;
        }
        submitted
    }

    async fn forward_backward(&mut self, data: Vec<Datum>, loss: LossFn, forward_only: bool, reply: oneshot::Sender<Result<ForwardBackwardOutput>>) {
        if let Err(e) = data.iter().enumerate().try_for_each(|(i, d)| d.validate(i, &loss)) {
            let _ = reply.send(Err(e.into()));
            return;
        }
        if loss.is_sequence_level() {
            // Tinker names a `gspo` loss without defining it (reference/tinker-protocol.md §5.3);
            // sending rlx's GSPO under that name would train on an objective nobody checked.
            let reason = format!("Tinker does not define rlx's `{}` loss; use `ppo` (with clip-higher) on Tinker", loss.name());
            let _ = reply.send(Err(Error::InvalidArgument { what: "loss_fn", reason }));
            return;
        }
        if !self.profile.supports_loss(loss.name()) {
            let server = self.profile.server;
            let reason = format!("its losses are {}; choose one of them in `grpo.loss` (and set `backend.server: {server}` so that `rlx validate` says so before a run)", self.profile.losses.join(", "));
            let _ = reply.send(Err(TinkerError::ServerLacks { server: server.to_string(), setting: format!("grpo.loss: {{kind: {}}}", loss.name()), reason }.into()));
            return;
        }
        let wire = self.profile.wire;
        // Chunks go one after another, each accepted before the next is sent, whatever
        // `parallel_fwdbwd_chunks` says: servers that order a model's requests by arrival
        // (SkyRL) then apply them in `seq_id` order too.
        let mut polls = Vec::new();
        for chunk in chunks(&data) {
            let model_id = self.model_id.clone();
            let method = if forward_only { "TrainingClient.forward" } else { "TrainingClient.forward_backward" };
            let path = if wire == Wire::Json && forward_only { crate::tinker::path::FORWARD } else { "/api/v1/forward_backward" };
            let body = |seq| match wire {
                Wire::Protobuf => Body::Proto(convert::forward_backward_body(&model_id, seq, chunk, &loss, forward_only)),
                Wire::Json => Body::Json(convert::forward_backward_json_body(&model_id, seq, chunk, &loss, forward_only)),
            };
            let submitted = self.submit(path, body, method).await;
            match submitted {
                Ok(s) => polls.push((s.request_id, chunk.len())),
                Err(e) => {
                    let _ = reply.send(Err(e.into()));
                    return;
                }
            }
        }
        let client = self.session.client().clone();
        tokio::spawn(async move {
            let mut outputs = Vec::with_capacity(data.len());
            let mut loss_sum = 0.0;
            for (request_id, n) in polls {
                let kind = if forward_only { RequestType::Forward } else { RequestType::ForwardBackward };
                let accept = if wire == Wire::Protobuf { Accept::Proto } else { Accept::Json };
                let out = match future::retrieve(&client, &request_id, kind, accept).await {
                    Ok(p) => convert::forward_backward_payload(p, n),
                    Err(e) => Err(e),
                };
                match out {
                    Ok((logprobs, loss)) => {
                        loss_sum += loss;
                        outputs.extend(logprobs);
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e.into()));
                        return;
                    }
                }
            }
            let _ = reply.send(convert::fb_output(&data, &loss, outputs, loss_sum));
        });
    }

    async fn optim_step(&mut self, adam: AdamParams, reply: oneshot::Sender<Result<OptimStepOutput>>) {
        let model_id = self.model_id.clone();
        let body = |seq: i64| Body::json(&wire::OptimStepRequest { model_id, seq_id: Some(seq as u64), r#type: literal::OptimStep, adam_params: Some(adam), optimizer_params: None });
        let submitted = self.submit("/api/v1/optim_step", body, "TrainingClient.optim_step").await;
        self.steps += 1;
        let step = self.steps;
        let client = self.session.client().clone();
        tokio::spawn(async move {
            let r = async {
                let s = submitted?;
                let r: wire::OptimStepResponse = future::retrieve_json(&client, &s.request_id, RequestType::OptimStep).await?;
                Ok::<_, TinkerError>(convert::optim_output(r, step))
            };
            let _ = reply.send(r.await.map_err(Into::into));
        });
    }

    async fn save_state(&mut self, name: String, reply: oneshot::Sender<Result<StateRef>>) {
        let model_id = self.model_id.clone();
        let body = |seq: i64| {
            Body::json(&wire::SaveWeightsRequest { model_id, path: Some(name), seq_id: Some(seq as u64), ttl_seconds: None, overwrite: false, user_metadata: None, r#type: literal::SaveWeights })
        };
        let submitted = self.submit("/api/v1/save_weights", body, "TrainingClient.save_state").await;
        let client = self.session.client().clone();
        tokio::spawn(async move {
            let r = async {
                let s = submitted?;
                let r: wire::SaveWeightsResponse = future::retrieve_json(&client, &s.request_id, RequestType::SaveWeights).await?;
                Ok::<_, TinkerError>(StateRef(r.path))
            };
            let _ = reply.send(r.await.map_err(Into::into));
        });
    }

    /// Creates a new model from the saved state, with its optimizer moments (the SDK's
    /// `create_training_client_from_state_with_optimizer`; the per-model `load_state` is
    /// deprecated, §12), and addresses every later request to it.
    async fn load_state(&mut self, state: &StateRef) -> Result<()> {
        self.check()?;
        if !state.0.starts_with("tinker://") {
            return Err(Error::InvalidArgument { what: "state", reason: format!("`{state}` is not a Tinker state (tinker://…); it was written by another backend") });
        }
        if !self.profile.create_from_state {
            return self.load_into_model(state).await;
        }
        let model_seq = self.session.next_model_seq();
        let body = wire::LoadWeightsRequest {
            model_id: None,
            seq_id: None,
            session_id: Some(self.session.id().to_string()),
            model_seq_id: Some(u64::from(model_seq)),
            base_model: None,
            user_metadata: None,
            path: state.0.clone(),
            optimizer: true,
            optimizer_config: None,
            weights_access_token: None,
            r#type: literal::LoadWeights,
        };
        let client = self.session.client().clone();
        let s: wire::UntypedApiFuture = client.post_json("/api/v1/load_weights", &body, "ServiceClient.create_training_client_from_state_with_optimizer").await?;
        let _: wire::LoadWeightsResponse = future::retrieve_json(&client, &s.request_id, RequestType::LoadWeights).await?;
        self.model_id = format!("{}:train:{model_seq}", self.session.id());
        self.next_seq = 1;
        tracing::info!(model_id = %self.model_id, from = %state, "Tinker model restored");
        Ok(())
    }

    /// The older wire's `load_weights` into the existing model (its next `seq_id`), weights and
    /// optimizer state both, for servers that cannot create a model from a state (SkyRL).
    async fn load_into_model(&mut self, state: &StateRef) -> Result<()> {
        let model_id = self.model_id.clone();
        let path = state.0.clone();
        let body = |seq: i64| {
            Body::json(&wire::LoadWeightsRequest {
                model_id: Some(model_id),
                seq_id: Some(seq as u64),
                session_id: None,
                model_seq_id: None,
                base_model: None,
                user_metadata: None,
                path,
                optimizer: true,
                optimizer_config: None,
                weights_access_token: None,
                r#type: literal::LoadWeights,
            })
        };
        let s = self.submit("/api/v1/load_weights", body, "TrainingClient.load_state_with_optimizer").await?;
        let client = self.session.client().clone();
        let _: wire::LoadWeightsResponse = future::retrieve_json(&client, &s.request_id, RequestType::LoadWeights).await?;
        tracing::info!(model_id = %self.model_id, from = %state, server = %self.profile.server, "Tinker model restored in place");
        Ok(())
    }

    async fn sampler(&mut self, reply: oneshot::Sender<Result<Arc<dyn Sampler>>>) {
        let model_id = self.model_id.clone();
        let sampling_seq = self.session.next_sampling_seq();
        let body = |seq: i64| {
            Body::json(&wire::SaveWeightsForSamplerRequest {
                model_id,
                path: None,
                sampling_session_seq_id: Some(u64::from(sampling_seq)),
                kind: "snapshot".into(),
                seq_id: Some(seq as u64),
                ttl_seconds: None,
                user_metadata: None,
                r#type: literal::SaveWeightsForSampler,
            })
        };
        let submitted = self.submit("/api/v1/save_weights_for_sampler", body, "TrainingClient.save_weights_and_get_sampling_client").await;
        let (session, options) = (self.session.clone(), self.sampler.clone());
        tokio::spawn(async move {
            let r = async {
                let s = submitted?;
                let r: wire::SaveWeightsForSamplerResponse = future::retrieve_json(session.client(), &s.request_id, RequestType::SaveWeightsForSampler).await?;
                let id = r.sampling_session_id.ok_or_else(|| TinkerError::Protocol { path: "save_weights_for_sampler".into(), reason: "no `sampling_session_id` in the result".into() })?;
                Ok::<_, TinkerError>(Arc::new(TinkerSampler::new(session, id, options)) as Arc<dyn Sampler>)
            };
            let _ = reply.send(r.await.map_err(Into::into));
        });
    }
}

/// Consecutive chunks of at most [`MAX_CHUNK_DATUMS`] datums and [`MAX_CHUNK_BYTES`] estimated
/// bytes (4 per token plus the tensors' raw bytes), as the SDK splits them.
fn chunks(data: &[Datum]) -> Vec<&[Datum]> {
    let size = |d: &Datum| {
        let i = &d.loss_fn_inputs;
        let floats = [&i.weights, &i.logprobs, &i.advantages].iter().filter_map(|v| v.as_ref()).map(|v| 4 * v.len()).sum::<usize>();
        4 * d.model_input.len() + 8 * i.target_tokens.len() + floats
    };
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, d) in data.iter().enumerate() {
        let s = size(d);
        if i > start && (i - start >= MAX_CHUNK_DATUMS || bytes + s > MAX_CHUNK_BYTES) {
            out.push(&data[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += s;
    }
    if start < data.len() {
        out.push(&data[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seam::LossFnInputs;

    fn datum(n: usize) -> Datum {
        Datum { model_input: vec![1; n], loss_fn_inputs: LossFnInputs { target_tokens: vec![2; n], weights: Some(vec![1.0; n]), logprobs: None, advantages: None } }
    }

    #[test]
    fn chunks_split_by_count_and_by_bytes_and_keep_order() {
        let data: Vec<Datum> = (0..2500).map(|_| datum(4)).collect();
        let c = chunks(&data);
        assert_eq!(c.iter().map(|c| c.len()).collect::<Vec<_>>(), [1024, 1024, 452]);
        // 16 bytes per token: 100k tokens is 1.6 MB, so three fit in 5 MB and the fourth does not.
        let big: Vec<Datum> = (0..4).map(|_| datum(100_000)).collect();
        assert_eq!(chunks(&big).iter().map(|c| c.len()).collect::<Vec<_>>(), [3, 1]);
        assert!(chunks(&[]).is_empty());
    }
}
