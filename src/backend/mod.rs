//! Backends: the `Sampler` and `Trainer` seams of design §3, the wire-level data they exchange,
//! and [`open`], the one place that turns a resolved spec into a backend.
//!
//! The data the seams exchange ([`crate::seam`]) mirror Tinker's, so that a spec means the same
//! objective on every backend.
//!
//! Implementations: [`local`] (candle, in-process, CPU), [`openai`] (an OpenAI-compatible
//! server, sampling only). Each is one module and one arm of [`open`].
//!
//! # Submission order and requests in flight
//! Every seam method *submits* its request when it is called and returns a [`Pending`] reply:
//! the engine can keep many sample requests in flight, and submit `forward_backward` and
//! `optim_step` back to back before awaiting either (Tinker pipelines exactly that). A backend
//! serves one trainer's requests in the order they were submitted. Rejected alternative: `async
//! fn` in the traits — an async fn does nothing until polled, so two calls joined together would
//! be submitted in whatever order the executor polls them, and `dyn Trainer` would not be
//! object-safe. The local backend is a handle to a thread that owns the model.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

pub mod contract;
pub mod local;
pub(crate) mod model_source;
pub mod tinker;
mod open;
pub mod openai;

pub use open::{BackendChoice, Context, OpenOptions, open};

use crate::seam::{AdamParams, Datum, ForwardBackwardOutput, LossFn, OptimStepOutput, SampleRequest, SampledSequence, SamplingParams, StateRef};


/// Errors of every backend.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A datum is malformed (lengths differ, a required input is missing, a token is out of range).
    #[error("datum {index} is invalid: {reason}")]
    InvalidDatum {
        /// Position of the datum in the batch.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A request parameter is out of range or inconsistent.
    #[error("invalid {what}: {reason}")]
    InvalidArgument {
        /// The parameter.
        what: &'static str,
        /// Why it is rejected.
        reason: String,
    },
    /// An unknown loss function, config key or value.
    #[error(transparent)]
    Loss(#[from] crate::rl::loss::Error),
    /// A model directory, checkpoint or state file could not be read or written.
    #[error("{action} `{path}`")]
    Io {
        /// What was being done ("read", "write", ...).
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A model file is not in the expected format (missing tensor, wrong shape, unsupported arch).
    #[error("model `{path}`: {reason}")]
    Model {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A saved training state does not match this trainer (different model or adapter layout).
    #[error("state `{path}` does not match this trainer: {reason}")]
    StateMismatch {
        /// The state directory.
        path: PathBuf,
        /// What differs.
        reason: String,
    },
    /// The tokenizer could not be built or failed to encode/decode.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The chat template failed to compile or render.
    #[error("chat template: {0}")]
    Template(String),
    /// A tensor operation failed (shape bug or out of memory). The cause is the tensor library's
    /// error, boxed so that the seam's error names no tensor library (the HTTP backends have none).
    #[error("tensor operation failed")]
    Tensor(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The spec asks for a backend this build cannot use (yet).
    #[error("backend `{kind}` is not available: {reason}")]
    Unavailable {
        /// `tinker`, `openai`, ...
        kind: &'static str,
        /// Why, and what to do instead.
        reason: String,
    },
    /// The spec asks a sampler-only backend to train.
    #[error("backend `{kind}` can only sample; training needs a backend that can train")]
    CannotTrain {
        /// The backend.
        kind: &'static str,
    },
    /// The Tinker service failed or refused a request.
    #[error(transparent)]
    Tinker(#[from] tinker::Error),
    /// An OpenAI-compatible server failed or answered wrongly (see [`openai::Error`]).
    #[error(transparent)]
    Openai(#[from] openai::Error),
    /// The thread or service serving this backend stopped answering (it panicked, or the
    /// connection closed); the request may or may not have run.
    #[error("the {what} stopped: {reason}")]
    Gone {
        /// `local trainer`, `local sampler`, ...
        what: &'static str,
        /// What is known (a panic message, a closed channel).
        reason: String,
    },
}

impl Error {
    /// Whether the error is the user's to fix (a missing or malformed model, a backend this
    /// build lacks, bad arguments) rather than a failure of rlx or of a service.
    pub fn is_user_error(&self) -> bool {
        matches!(self, Error::Model { .. } | Error::Unavailable { .. } | Error::CannotTrain { .. } | Error::StateMismatch { .. } | Error::Template(_))
            || matches!(self, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
            || matches!(self, Error::Tinker(e) if e.is_user_error())
            || matches!(self, Error::Openai(e) if e.is_user_error())
    }

    /// Whether the error is an infrastructure failure that survived its retries (a server down,
    /// timing out or answering garbage): the engine drops the groups it hit and counts them,
    /// never scoring them as the model's failure.
    pub fn is_infrastructure(&self) -> bool {
        matches!(self, Error::Openai(e) if e.is_infrastructure())
    }
}

impl From<crate::seam::Invalid> for Error {
    fn from(e: crate::seam::Invalid) -> Self {
        match e {
            crate::seam::Invalid::Datum { index, reason } => Error::InvalidDatum { index, reason },
            crate::seam::Invalid::Argument { what, reason } => Error::InvalidArgument { what, reason },
        }
    }
}

/// Convenience alias for backend results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

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
    /// The conversation, ending with the user's turn.
    pub messages: Vec<crate::prompt::Message>,
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
