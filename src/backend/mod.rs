//! Backends: the `Sampler` and `Trainer` seams of design §3, the wire-level data they exchange,
//! and [`open`], the one place that turns a resolved spec into a backend.
//!
//! The data types mirror Tinker's so that a spec means the same objective on every backend
//! (reference/tinker-protocol.md §5.3–5.6): [`Datum`] is Tinker's datum (`model_input` tokens +
//! `loss_fn_inputs`), [`LossFn`] is its `loss_fn` + `loss_fn_config` (the formulas live in
//! [`crate::rl::loss`]), [`AdamParams`] is its `adam_params`, [`SamplingParams`]/[`SampledSequence`]
//! are its `asample` request and response.
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
//! object-safe. The local backend is a handle to a thread that owns the model (style.md §e).

use std::collections::BTreeMap;
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

pub use open::{Context, open};

pub use crate::rl::loss::{LossFn, LossStats};

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
    /// A tensor operation failed (shape bug or out of memory).
    #[error("tensor operation failed")]
    Tensor(#[from] candle_core::Error),
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

/// Convenience alias for backend results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One training example: Tinker's `Datum`.
///
/// Position `i` of `model_input` predicts `loss_fn_inputs.target_tokens[i]`; every per-token input
/// has the same length as `model_input` (tinker-protocol.md §5.3, §10.7).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Datum {
    /// The input tokens (prompt followed by all sampled tokens but the last).
    pub model_input: Vec<u32>,
    /// The per-token loss inputs.
    pub loss_fn_inputs: LossFnInputs,
}

/// Tinker's `loss_fn_inputs` for one datum. Which fields a loss needs: see [`LossFn`].
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LossFnInputs {
    /// The token each position must predict.
    pub target_tokens: Vec<u32>,
    /// Per-token weights (cross_entropy); absent means all ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<Vec<f32>>,
    /// Sampler log-probabilities of the targets (policy-gradient losses); 0 on prompt tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Vec<f32>>,
    /// Per-token advantages (policy-gradient losses); 0 on prompt tokens masks them out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advantages: Option<Vec<f32>>,
}

impl Datum {
    /// Check lengths and the inputs `loss` needs; `index` is used in the error.
    ///
    /// # Errors
    /// [`Error::InvalidDatum`] naming the first problem found.
    pub fn validate(&self, index: usize, loss: &LossFn) -> Result<()> {
        let bad = |reason: String| Err(Error::InvalidDatum { index, reason });
        let n = self.model_input.len();
        if n == 0 {
            return bad("`model_input` is empty".into());
        }
        let inp = &self.loss_fn_inputs;
        if inp.target_tokens.len() != n {
            return bad(format!(
                "`target_tokens` has {} entries, `model_input` has {n}",
                inp.target_tokens.len()
            ));
        }
        for (name, v) in [("weights", &inp.weights), ("logprobs", &inp.logprobs), ("advantages", &inp.advantages)] {
            if let Some(v) = v {
                if v.len() != n {
                    return bad(format!("`{name}` has {} entries, `model_input` has {n}", v.len()));
                }
                if let Some(x) = v.iter().find(|x| !x.is_finite()) {
                    return bad(format!("`{name}` contains the non-finite value {x}"));
                }
            }
        }
        if loss.is_policy_gradient() {
            if inp.advantages.is_none() {
                return bad(format!("loss `{}` needs `advantages`", loss.name()));
            }
            if inp.logprobs.is_none() {
                return bad(format!("loss `{}` needs `logprobs`", loss.name()));
            }
        }
        Ok(())
    }
}

/// Per-datum output of `forward_backward`: Tinker's `loss_fn_outputs[i]`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DatumOutput {
    /// Learner log-probabilities of the targets (temperature 1, full distribution).
    pub logprobs: Vec<f32>,
}

/// Result of one `forward_backward` call.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ForwardBackwardOutput {
    /// The loss as a token-level sum over the batch (`loss:sum` in Tinker's metrics).
    pub loss: f64,
    /// Per-datum learner log-probabilities.
    pub outputs: Vec<DatumOutput>,
    /// Diagnostics: ratio statistics, clip fraction, token count (see [`LossStats`]).
    pub stats: LossStats,
}

/// Result of one `optim_step`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OptimStepOutput {
    /// Global L2 norm of the accumulated gradient before clipping.
    pub grad_norm: f64,
    /// Whether clipping scaled the gradient down.
    pub clipped: bool,
    /// Optimizer steps taken so far, this one included.
    pub step: u64,
    /// Flat metrics (`optim/grad_norm`, ...) for the run log.
    pub metrics: BTreeMap<String, f64>,
}

/// Tinker's `AdamParams`: decoupled-weight-decay Adam (AdamW) with optional global-norm clipping.
/// Also the wire type (`tinker::wire::AdamParams`): a request that leaves a field out gets the
/// SDK default, as Tinker's server does.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct AdamParams {
    /// Step size.
    pub learning_rate: f64,
    /// First-moment decay.
    pub beta1: f64,
    /// Second-moment decay.
    pub beta2: f64,
    /// Added to the root of the second moment.
    pub eps: f64,
    /// Decoupled weight decay, applied as `p -= lr * weight_decay * p` (PyTorch AdamW).
    pub weight_decay: f64,
    /// Clip the global gradient L2 norm to this value; 0 disables clipping.
    pub grad_clip_norm: f64,
}

impl Default for AdamParams {
    /// Tinker SDK defaults (tinker-protocol.md §5.4).
    fn default() -> Self {
        Self { learning_rate: 1e-4, beta1: 0.9, beta2: 0.95, eps: 1e-12, weight_decay: 0.0, grad_clip_norm: 0.0 }
    }
}

/// Which projections get LoRA adapters, and their size (Tinker's `lora_config`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LoraConfig {
    /// Rank `r`.
    pub rank: usize,
    /// Scale numerator `α` (the update is scaled by `α / r`).
    pub alpha: f64,
    /// Short module names: any of `q_proj`, `k_proj`, `v_proj`, `o_proj`, `gate_proj`,
    /// `up_proj`, `down_proj`, `lm_head`.
    pub targets: Vec<String>,
}

impl LoraConfig {
    /// Rank `rank`, `α = 2r`, on all attention and MLP projections (PEFT's "all-linear" minus the
    /// head).
    pub fn all_linear(rank: usize) -> Self {
        let targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"];
        Self { rank, alpha: 2.0 * rank as f64, targets: targets.iter().map(|s| s.to_string()).collect() }
    }

    /// `α / r`.
    pub fn scale(&self) -> f64 {
        self.alpha / self.rank as f64
    }
}

/// Which weights a trainer updates.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Finetune {
    /// Every weight.
    Full,
    /// Low-rank adapters on a frozen base.
    Lora(LoraConfig),
}

/// A stop condition for sampling.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// Stop after this token is sampled (it is included in the output, as in Tinker).
    Token(u32),
    /// Stop once the decoded completion contains this text (the completion keeps the token that
    /// completed it). Needs a sampler with a tokenizer.
    Text(String),
}

/// Tinker's `SamplingParams`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SamplingParams {
    /// Upper bound on generated tokens per completion.
    pub max_tokens: usize,
    /// Softmax temperature; 0 means greedy decoding.
    pub temperature: f64,
    /// Nucleus sampling mass in (0, 1]; 1 disables it.
    pub top_p: f64,
    /// Keep only the k most likely tokens; `None` (Tinker's -1) disables it.
    pub top_k: Option<usize>,
    /// Stop conditions; empty means run to `max_tokens` (use the model's EOS tokens explicitly).
    pub stop: Vec<Stop>,
    /// Seed: the same seed, prompt, params and weights give the same completions. `None` draws one.
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self { max_tokens: 256, temperature: 1.0, top_p: 1.0, top_k: None, stop: Vec::new(), seed: None }
    }
}

impl SamplingParams {
    /// Check ranges.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a negative or non-finite temperature, `top_p` outside (0, 1],
    /// or `top_k == Some(0)`.
    pub fn validate(&self) -> Result<()> {
        let bad = |what, reason: String| Err(Error::InvalidArgument { what, reason });
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return bad("temperature", format!("expected a finite value >= 0, found {}", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p", format!("expected a value in (0, 1], found {}", self.top_p));
        }
        if self.top_k == Some(0) {
            return bad("top_k", "expected at least 1 (or none to disable)".into());
        }
        Ok(())
    }
}

/// Why a completion ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StopReason {
    /// A stop token or string was produced.
    Stop,
    /// `max_tokens` (or the model's context) was reached.
    Length,
}

/// One sampled completion: Tinker's `SampledSequence`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SampledSequence {
    /// Generated tokens (the prompt is not repeated).
    pub tokens: Vec<u32>,
    /// Log-probability of each generated token; which distribution is backend-specific and
    /// documented by each backend (local: [`local::sampler`]).
    pub logprobs: Vec<f32>,
    /// Why it ended.
    pub stop_reason: StopReason,
}

/// One prompt of a [`Sampler::sample`] call.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleRequest {
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// Completions wanted.
    pub num_samples: usize,
    /// This prompt's seed (overrides `SamplingParams::seed`).
    pub seed: Option<u64>,
}

/// A reply on its way: the request was submitted when the seam method returned; awaiting this
/// gives its result. Dropping it does not cancel the request (the backend still runs it, in
/// order), it only discards the reply.
pub type Pending<T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'static>>;

/// A saved training state (weights + optimizer moments), named the way its backend names it: a
/// local path (`/…/runs/<id>/checkpoints/step-000004`) or a remote URI (`tinker://…`). The engine
/// stores it in `checkpoints.jsonl` and hands it back to [`Trainer::load_state`]; only the
/// backend that wrote it interprets it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct StateRef(pub String);

impl StateRef {
    /// A local state at `path`.
    pub fn local(path: &std::path::Path) -> Self {
        StateRef(path.display().to_string())
    }
    /// Whether it names a remote state (`scheme://…`) rather than a local path.
    pub fn is_remote(&self) -> bool {
        self.0.contains("://")
    }
    /// The local path, for a local state.
    pub fn as_path(&self) -> Option<&std::path::Path> {
        (!self.is_remote()).then(|| std::path::Path::new(&self.0))
    }
}

impl std::fmt::Display for StateRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

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
