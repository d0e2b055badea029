//! The data that crosses the `Sampler`/`Trainer` seam (design §3), shared by every layer that
//! builds, sends or reads it: the engine builds [`Datum`]s and [`SamplingParams`], the backends
//! and the Tinker wire carry them, `rl` computes the losses they name. It imports nothing of rlx
//! but the loss definitions ([`crate::rl::loss`]), which a `forward_backward` request names.
//!
//! The types mirror Tinker's so that a spec means the same objective on every backend
//! (as the `tinker` SDK 0.38.0 (https://github.com/thinking-machines-lab/tinker) defines them): [`Datum`] is Tinker's datum (`model_input` tokens +
//! `loss_fn_inputs`), [`LossFn`] is its `loss_fn` + `loss_fn_config`, [`AdamParams`] is its
//! `adam_params`, [`SamplingParams`]/[`SampledSequence`] are its `asample` request and response.
//!
//! Why a module of its own rather than `backend`: `rl`, `tinker`, `plan` and the engine all
//! speak this vocabulary, and `backend` imports `rl` and `tinker`; with the types in `backend`
//! the three formed import cycles.

use std::collections::BTreeMap;

pub mod datum;
pub mod model_source;

pub use datum::{make_datum, make_multiturn_datum};
pub use model_source::{ModelSource, SourceError, looks_like_path};

pub use crate::rl::loss::{LossFn, LossStats};

/// A request that no backend can serve as written: the seam's own checks, before a backend runs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Invalid {
    /// A datum is malformed (lengths differ, a required input is missing, a value is not finite).
    #[error("datum {index} is invalid: {reason}")]
    Datum {
        /// Position of the datum in the batch.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A request parameter is out of range or inconsistent.
    #[error("invalid {what}: {reason}")]
    Argument {
        /// The parameter.
        what: &'static str,
        /// Why it is rejected.
        reason: String,
    },
}

/// One training example: Tinker's `Datum`.
///
/// Position `i` of `model_input` predicts `loss_fn_inputs.target_tokens[i]`; every per-token input
/// has the same length as `model_input` (SDK 0.38.0).
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
    /// [`Invalid::Datum`] naming the first problem found.
    pub fn validate(&self, index: usize, loss: &LossFn) -> Result<(), Invalid> {
        let bad = |reason: String| Err(Invalid::Datum { index, reason });
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
    /// Learner log-probabilities of the targets (full distribution, at the learner's temperature: 1 on Tinker).
    pub logprobs: Vec<f32>,
}

/// A KL-to-reference term added to a `forward_backward`'s loss, differentiated through the
/// learner: Σ_t c_t · r_t · k(logp_t, ref_t) with r_t = exp(logp_t − q_t) the importance ratio
/// to the sampler and k the estimator. Its expected gradient over tokens sampled from q is
/// ∇KL(π‖π_ref) for both estimators (E_π[k] = KL(π‖π_ref) for each, and the ratio makes the
/// sampled sum an estimate of that expectation under π_θ itself), where k3 in the advantage
/// form follows ∇KL(π‖ref) − ∇KL(ref‖π), which cancels near the reference.
#[derive(Debug, Clone, PartialEq)]
pub struct KlLoss {
    /// The estimator k.
    pub estimator: KlKind,
    /// Per datum, the reference's log-probabilities of its targets.
    pub reference: Vec<Vec<f32>>,
    /// Per datum, the coefficient c_t of each target (β times the datum's aggregation factor on
    /// sampled tokens, 0 elsewhere).
    pub coef: Vec<Vec<f32>>,
}

/// A per-token estimator of KL(π‖π_ref) at a token y ∼ π, with d = log π_ref(y) − log π(y).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KlKind {
    /// k1 = −d.
    K1,
    /// k3 = e^d − d − 1.
    K3,
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
    /// Global L2 norm of the accumulated gradient before clipping; `None` when the backend does
    /// not report one (a Tinker-API server may not): absent stays absent in the run log, rather
    /// than a NaN that the `loss_exploding` diagnostic would read as an explosion.
    pub grad_norm: Option<f64>,
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
    /// Tinker SDK defaults (SDK 0.38.0).
    fn default() -> Self {
        Self { learning_rate: 1e-4, beta1: 0.9, beta2: 0.95, eps: 1e-12, weight_decay: 0.0, grad_clip_norm: 0.0 }
    }
}

/// Which learning rates are legal where: two rules on purpose, kept side by side here so that
/// they are read (and changed) together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LearningRateRule {
    /// One optimizer step (`optim_step`, every backend, and `rlx serve` for its clients): finite
    /// and >= 0. A step at 0 is legal: a client that schedules its rate (Tinker's cookbook)
    /// may warm up from 0 or decay to it, and Tinker accepts it.
    Step,
    /// A run's `optimizer.learning_rate`: finite and > 0. rlx holds a run's rate constant, so a
    /// spec at 0 would train nothing; that is a mistake to report before the run starts, not a
    /// schedule's endpoint.
    Run,
}

impl AdamParams {
    /// Checks `learning_rate` against `rule`.
    ///
    /// # Errors
    /// What is wrong, worded to follow the parameter's name ("must be > 0, found 0").
    pub fn check_learning_rate(learning_rate: f64, rule: LearningRateRule) -> Result<(), String> {
        let lr = learning_rate;
        match rule {
            LearningRateRule::Step if !(lr.is_finite() && lr >= 0.0) => Err(format!("must be finite and >= 0, found {lr}")),
            LearningRateRule::Run if lr.is_infinite() => Err(format!("must be finite, found {lr}")),
            // `!(lr > 0.0)` rather than `lr <= 0.0`: NaN must fail too.
            #[allow(clippy::neg_cmp_op_on_partial_ord)]
            LearningRateRule::Run if !(lr > 0.0) => Err(format!("must be > 0, found {lr}")),
            _ => Ok(()),
        }
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
    /// [`Invalid::Argument`] for a negative or non-finite temperature, `top_p` outside (0, 1],
    /// or `top_k == Some(0)`.
    pub fn validate(&self) -> Result<(), Invalid> {
        let bad = |what, reason: String| Err(Invalid::Argument { what, reason });
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
    /// documented by each backend (the local one: `backend::local::sampler`).
    pub logprobs: Vec<f32>,
    /// Why it ended.
    pub stop_reason: StopReason,
}

/// The most likely tokens at one position with their log-probabilities, most likely first
/// (empty where a position is not scored: a prompt's first token).
pub type TopK = Vec<(u32, f32)>;

/// One prompt of a `Sampler::sample` call.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleRequest {
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// Completions wanted.
    pub num_samples: usize,
    /// This prompt's seed (overrides `SamplingParams::seed`).
    pub seed: Option<u64>,
    /// Decode this prompt greedily (temperature 0; top-p and top-k do nothing there) whatever
    /// the call's `SamplingParams` say: an eval asks for its greedy answers beside its sampled
    /// ones in one call, so that a local sampler prefills each prompt once for both.
    pub greedy: bool,
}

impl SampleRequest {
    /// The sampling parameters this request decodes with: `params`, at temperature 0 when the
    /// request is greedy (its seed is applied by each backend, as before).
    pub fn params<'p>(&self, params: &'p SamplingParams) -> std::borrow::Cow<'p, SamplingParams> {
        if self.greedy && params.temperature != 0.0 {
            std::borrow::Cow::Owned(SamplingParams { temperature: 0.0, ..params.clone() })
        } else {
            std::borrow::Cow::Borrowed(params)
        }
    }
}


/// A saved training state (weights + optimizer moments), named the way its backend names it: a
/// local path (`/…/runs/<id>/checkpoints/step-000004`) or a remote URI (`tinker://…`). The engine
/// stores it in `checkpoints.jsonl` and hands it back to `Trainer::load_state`; only the
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

#[cfg(test)]
mod tests {
    use super::{AdamParams, LearningRateRule};

    #[test]
    fn a_step_may_have_learning_rate_zero_and_a_run_may_not() {
        let check = |lr: f64, rule| AdamParams::check_learning_rate(lr, rule);
        for lr in [1e-4, 1.0] {
            assert_eq!((check(lr, LearningRateRule::Step), check(lr, LearningRateRule::Run)), (Ok(()), Ok(())));
        }
        assert_eq!(check(0.0, LearningRateRule::Step), Ok(()));
        assert_eq!(check(0.0, LearningRateRule::Run), Err("must be > 0, found 0".to_string()));
        assert_eq!(check(-1.0, LearningRateRule::Run), Err("must be > 0, found -1".to_string()));
        for lr in [-1e-9, f64::NAN, f64::INFINITY] {
            assert!(check(lr, LearningRateRule::Step).is_err() && check(lr, LearningRateRule::Run).is_err(), "{lr}");
        }
    }
}
