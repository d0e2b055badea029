//! The seams themselves: [`Sampler`] and [`Trainer`] (design §3), the [`Pending`] reply their
//! methods return, and the [`Policy`] a run works with. See the parent's docs for submission
//! order.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::error::{Error, Result};
use crate::seam::{AdamParams, Datum, ForwardBackwardOutput, LossFn, OptimStepOutput, SampleRequest, SampledSequence, SamplingParams, StateRef, TopK};

/// A reply on its way: the request was submitted when the seam method returned; awaiting this
/// gives its result. Dropping it does not cancel the request (the backend still runs it, in
/// order), it only discards the reply.
pub type Pending<T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'static>>;
/// Generates completions: design §3 `Sampler`. Cheap to share (`Arc<dyn Sampler>`); requests
/// may be submitted from several tasks at once.
pub trait Sampler: Send + Sync {
    /// Submits one batch of prompts; the reply has one list of completions per request, in
    /// request order. Each request gets what it would get alone with its seed (up to
    /// floating-point rounding where the backend decodes prompts together, as the local one
    /// does: one decoding batch reads the weights once per token for every prompt).
    ///
    /// # Errors
    /// (In the reply.) Invalid parameters, an empty prompt or out-of-vocabulary tokens, backend
    /// failures.
    fn sample(&self, requests: Vec<SampleRequest>, params: &SamplingParams) -> Pending<Vec<Vec<SampledSequence>>>;

    /// How many [`Sampler::sample`] calls are worth keeping in flight at once: 2 for a backend
    /// that serves them one after the other (the next batch queued while one is graded), more
    /// for a remote service that runs them in parallel.
    fn max_in_flight(&self) -> usize {
        2
    }

    /// Submits: the log-probability of each prompt token given the ones before it (Tinker's
    /// `prompt_logprobs`, `compute_logprobs`), NaN at position 0. The default answers that the
    /// backend cannot.
    ///
    /// # Errors
    /// (In the reply.) An empty or out-of-vocabulary prompt, a backend failure, or a backend
    /// without it.
    fn prompt_logprobs(&self, prompt: Vec<u32>) -> Pending<Vec<f32>> {
        let _ = prompt;
        Box::pin(async { Err(Error::InvalidArgument { what: "prompt_logprobs", reason: "this backend cannot score prompts".into() }) })
    }
    /// Submits: the `k` most likely tokens at each prompt position given the ones before it,
    /// with their log-probabilities, most likely first (Tinker's `topk_prompt_logprobs`, which
    /// top-K distillation trains against); position 0 is empty. The default answers that the
    /// backend cannot.
    ///
    /// # Errors
    /// (In the reply.) As [`Sampler::prompt_logprobs`]; `k` of 0.
    fn prompt_topk_logprobs(&self, prompt: Vec<u32>, k: usize) -> Pending<Vec<TopK>> {
        let _ = (prompt, k);
        Box::pin(async { Err(Error::InvalidArgument { what: "topk_prompt_logprobs", reason: "this backend cannot score prompts".into() }) })
    }
    /// Submits one batch of prompts given both as tokens and as the conversation they render.
    /// A backend that samples from messages (an OpenAI-compatible chat endpoint, which applies
    /// the chat template itself) overrides it; the others sample the tokens, as
    /// [`Sampler::sample`]. The engine always calls this one, since it has both.
    ///
    /// # Errors
    /// (In the reply.) As [`Sampler::sample`].
    fn sample_chat(&self, requests: Vec<ChatRequest>, params: &SamplingParams) -> Pending<Vec<Vec<SampledSequence>>> {
        self.sample(requests.into_iter().map(|r| r.request).collect(), params)
    }

    /// Completions worth asking for in one [`Sampler::sample`] call: a backend that decodes a
    /// call's prompts together (the local one) wants many; one that sends a request per
    /// completion anyway wants one problem's group per call, so that a failure loses one group,
    /// not a batch.
    fn batch_rows(&self) -> usize {
        32
    }

    /// Whether a completion that ended on a stop token includes it, with its log-probability
    /// (as Tinker's and the local sampler's do). OpenAI-compatible servers end on a stop token
    /// without always returning it; training, which needs it, never runs on them.
    fn keeps_stop_tokens(&self) -> bool {
        true
    }
}

/// A prompt as tokens and as the conversation they render (see [`Sampler::sample_chat`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// The tokens, seed and number of completions.
    pub request: SampleRequest,
    /// The conversation, ending with the user's turn (or a tool's result).
    pub messages: Vec<crate::prompt::Message>,
    /// The tools the model may call, as OpenAI function schemas (empty: none). Assistant turns
    /// in `messages` hold their calls as Hermes `<tool_call>` text ([`crate::prompt::hermes`]).
    pub tools: Vec<serde_json::Value>,
}

/// Trains a policy: design §3 `Trainer`, Tinker's training client. Requests are served in the
/// order they were submitted.
pub trait Trainer: Send + Sync {
    /// Submits: compute the loss over `data` and add its gradient to the accumulated gradient.
    ///
    /// # Errors
    /// (In the reply.) An invalid datum, or a backend failure. Nothing is accumulated on error.
    fn forward_backward(&self, data: Vec<Datum>, loss: LossFn) -> Pending<ForwardBackwardOutput>;

    /// Submits: the loss and learner log-probabilities of `data` under the weights as of this
    /// point in the request order, without accumulating a gradient (Tinker's `forward`, a
    /// `forward_backward` with `forward_only`). The default answers that the backend cannot.
    ///
    /// # Errors
    /// (In the reply.) An invalid datum, a backend failure, or a backend without it.
    fn forward(&self, data: Vec<Datum>, loss: LossFn) -> Pending<ForwardBackwardOutput> {
        let _ = (data, loss);
        Box::pin(async { Err(Error::InvalidArgument { what: "forward", reason: "this backend cannot run a forward pass without a backward pass".into() }) })
    }

    /// Submits: as [`Trainer::forward_backward`], with `kl` added to the loss (`grpo.kl` in its
    /// loss form). The default answers that the backend cannot (Tinker's losses are fixed).
    ///
    /// # Errors
    /// (In the reply.) As `forward_backward`, or a backend without a KL loss term.
    fn forward_backward_kl(&self, data: Vec<Datum>, loss: LossFn, kl: crate::seam::KlLoss) -> Pending<ForwardBackwardOutput> {
        let _ = (data, loss, kl);
        Box::pin(async { Err(Error::InvalidArgument { what: "grpo.kl", reason: "this backend cannot add a KL term to its loss; use `grpo.kl.form: advantage` (k1)".into() }) })
    }

    /// Submits: score the following `forward`/`forward_backward`/`reference_logprobs` calls at
    /// `temperature` (the learner's logits divided by it). Backends whose learner cannot
    /// (Tinker's scores at 1) refuse any other value.
    ///
    /// # Errors
    /// (In the reply.) A temperature this backend cannot score at.
    fn set_learner_temperature(&self, temperature: f32) -> Pending<()> {
        Box::pin(async move {
            if temperature == 1.0 {
                Ok(())
            } else {
                Err(Error::InvalidArgument { what: "temperature", reason: format!("this backend's learner scores at temperature 1, not {temperature}") })
            }
        })
    }

    /// Submits: the reference policy's log-probabilities of each datum's targets (`grpo.kl`):
    /// the base model, without the adapter or the updates. The default answers that the
    /// backend has none.
    ///
    /// # Errors
    /// (In the reply.) An invalid datum, a backend failure, or a backend without a reference.
    fn reference_logprobs(&self, data: Vec<Datum>) -> Pending<Vec<Vec<f32>>> {
        let _ = data;
        Box::pin(async { Err(Error::InvalidArgument { what: "reference_logprobs", reason: "this backend has no reference policy for `grpo.kl`".into() }) })
    }

    /// Submits: the log-probabilities of each datum's targets under the teacher `teacher` (a
    /// model with the policy's tokenizer in `model.base` form, or a checkpoint's trainer state
    /// directory: `grpo.distill`), at temperature 1. The default answers that the backend has
    /// no teacher.
    ///
    /// # Errors
    /// (In the reply.) An invalid datum, a teacher that cannot be found or loaded, or a backend
    /// without one.
    fn teacher_logprobs(&self, teacher: crate::seam::ModelSource, data: Vec<Datum>) -> Pending<Vec<Vec<f32>>> {
        let _ = (teacher, data);
        Box::pin(async { Err(Error::InvalidArgument { what: "teacher_logprobs", reason: "this backend has no teacher for `grpo.distill`".into() }) })
    }

    /// Submits: as [`Trainer::teacher_logprobs`], the teacher a model on a Tinker-API service
    /// (`backend.kind: tinker`). The default answers that the backend has no such teacher.
    ///
    /// # Errors
    /// (In the reply.) An invalid datum, a teacher the service cannot open or whose base model is
    /// not the student's, a failed request, or a backend without one.
    fn tinker_teacher_logprobs(&self, teacher: super::tinker::Teacher, data: Vec<Datum>) -> Pending<Vec<Vec<f32>>> {
        let _ = (teacher, data);
        Box::pin(async { Err(Error::InvalidArgument { what: "teacher_logprobs", reason: "this backend cannot score a teacher on a Tinker service".into() }) })
    }

    /// Submits: apply the accumulated gradient with AdamW and reset it.
    ///
    /// # Errors
    /// (In the reply.) Invalid hyper-parameters, no accumulated gradient, a backend failure.
    fn optim_step(&self, adam: AdamParams) -> Pending<OptimStepOutput>;

    /// Submits: save weights and optimizer state under `name` (unique per run), to resume bit
    /// for bit; the reply names where it went.
    ///
    /// # Errors
    /// (In the reply.) I/O or service failures.
    fn save_state(&self, name: &str) -> Pending<StateRef>;

    /// Submits: restore what [`Trainer::save_state`] wrote.
    ///
    /// # Errors
    /// (In the reply.) I/O failures, or a state written by a different model/adapter layout.
    fn load_state(&self, state: &StateRef) -> Pending<()>;

    /// Whether the trainer and its samplers run on other machines (a remote service), so that
    /// sampling and training do not compete for this machine's cores: the engine then streams
    /// groups `grpo.max_steps_off_policy` steps deep rather than sampling one step ahead.
    fn runs_elsewhere(&self) -> bool {
        false
    }

    /// Submits: a sampler on a snapshot of the weights as of this point in the request order
    /// (later steps do not change it).
    ///
    /// # Errors
    /// (In the reply.) Backend failures.
    fn sampler(&self) -> Pending<Arc<dyn Sampler>>;
}

/// The policy a run works with, as [`open`] gives it.
#[derive(Clone)]
pub enum Policy {
    /// A policy that trains; its samplers come from [`Trainer::sampler`].
    Trainable(Arc<dyn Trainer>),
    /// A fixed policy that only samples (an OpenAI-compatible endpoint, a Tinker sampler path):
    /// enough for evaluation and dry runs.
    Fixed(Arc<dyn Sampler>),
}

impl Policy {
    /// A sampler on the current weights.
    ///
    /// # Errors
    /// Backend failures.
    pub async fn sampler(&self) -> Result<Arc<dyn Sampler>> {
        match self {
            Policy::Trainable(t) => t.sampler().await,
            Policy::Fixed(s) => Ok(s.clone()),
        }
    }

    /// The trainer, for a policy that trains.
    pub fn trainer(&self) -> Option<&Arc<dyn Trainer>> {
        match self {
            Policy::Trainable(t) => Some(t),
            Policy::Fixed(_) => None,
        }
    }
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Policy::Trainable(_) => "Policy::Trainable",
            Policy::Fixed(_) => "Policy::Fixed",
        })
    }
}
