//! Backends: the `Sampler` and `Trainer` seams of design §3 and the wire-level data they exchange.
//!
//! The engine is generic over [`Sampler`] and [`Trainer`]. The data types mirror Tinker's so that a
//! spec means the same objective on every backend (reference/tinker-protocol.md §5.3–5.6):
//! [`Datum`] is Tinker's datum (`model_input` tokens + `loss_fn_inputs`), [`LossFn`] is its
//! `loss_fn` + `loss_fn_config` (the formulas live in [`crate::rl::loss`]), [`AdamParams`] is its
//! `adam_params`, [`SamplingParams`]/[`SampledSequence`] are its `asample` request and response.
//!
//! Implementations: [`local`] (candle, in-process, CPU). A Tinker HTTP backend and an
//! OpenAI-compatible sampler implement the same traits later.
//!
//! # Blocking, and where to call from
//! The trait methods are blocking. CPU model work must not run on an async executor anyway
//! (style.md §e: a dedicated `std::thread` owns the model and serves requests from a channel), and
//! a blocking signature lets that thread call the backend directly. An HTTP backend implements them
//! with its own runtime handle, or the engine wraps calls in `spawn_blocking`. Rejected
//! alternative: `async fn` in the traits, which would force the local backend to fake async around
//! compute and makes the traits non-object-safe.

use std::collections::BTreeMap;
use std::path::PathBuf;

pub mod local;
pub mod model_source;

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
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
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

/// One prompt of a [`Sampler::sample_batch`] call.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleRequest {
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// Completions wanted.
    pub num_samples: usize,
    /// This prompt's seed (overrides `SamplingParams::seed`).
    pub seed: Option<u64>,
}

/// Generates completions: design §3 `Sampler`.
pub trait Sampler: Send {
    /// Sample `num_samples` completions of `prompt`.
    ///
    /// # Errors
    /// Invalid parameters, an empty prompt or out-of-vocabulary tokens, backend failures.
    fn sample(&mut self, prompt: &[u32], num_samples: usize, params: &SamplingParams) -> Result<Vec<SampledSequence>>;

    /// Samples several prompts, one result list per request, in request order. Each request
    /// gets what [`Sampler::sample`] with its seed would give (up to floating-point rounding
    /// where the backend batches prompts together, as the local one does: one decoding batch
    /// reads the weights once per token for every prompt).
    ///
    /// # Errors
    /// As [`Sampler::sample`], for any request.
    fn sample_batch(&mut self, requests: &[SampleRequest], params: &SamplingParams) -> Result<Vec<Vec<SampledSequence>>> {
        requests
            .iter()
            .map(|r| {
                let mut p = params.clone();
                p.seed = r.seed.or(p.seed);
                self.sample(&r.prompt, r.num_samples, &p)
            })
            .collect()
    }
}

/// Trains a policy: design §3 `Trainer`, Tinker's training client.
pub trait Trainer: Send {
    /// The sampler type handed out by [`Trainer::sampler`].
    type Sampler: Sampler;

    /// Compute the loss over `data` and add its gradient to the accumulated gradient.
    ///
    /// # Errors
    /// An invalid datum, or a backend failure. Nothing is accumulated on error.
    fn forward_backward(&mut self, data: &[Datum], loss: &LossFn) -> Result<ForwardBackwardOutput>;

    /// Apply the accumulated gradient with AdamW and reset it.
    ///
    /// # Errors
    /// Invalid hyper-parameters, or a backend failure.
    fn optim_step(&mut self, adam: &AdamParams) -> Result<OptimStepOutput>;

    /// Save weights and optimizer state, to resume bit for bit.
    ///
    /// # Errors
    /// I/O failures.
    fn save_state(&mut self, path: &std::path::Path) -> Result<()>;

    /// Restore what [`Trainer::save_state`] wrote.
    ///
    /// # Errors
    /// I/O failures, or a state written by a different model/adapter layout.
    fn load_state(&mut self, path: &std::path::Path) -> Result<()>;

    /// A sampler on a snapshot of the current weights (later steps do not change it).
    ///
    /// # Errors
    /// Backend failures.
    fn sampler(&mut self) -> Result<Self::Sampler>;
}
