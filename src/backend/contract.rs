//! The backend contract: what every [`Sampler`] and [`Trainer`] must do, checked through the
//! seams alone, so one suite runs against the local backend today and against Tinker and
//! OpenAI-compatible backends (or their local stand-ins) as they arrive. The integration test
//! `backend_contract` runs it on the local backend.
//!
//! Every clause is behavioural (shapes, seeds, the loss definitions of
//! Tinker's definitions computed from the returned log-probabilities, a gradient step
//! that makes the trained tokens likelier, bit-exact state round trips), since a remote backend
//! exposes no tensors. A failed clause is a [`Violation`] naming it.

use std::sync::Arc;

use super::traits::{Sampler, Trainer};
use crate::seam::{AdamParams, Datum, LossFn, LossFnInputs, SampleRequest, SampledSequence, SamplingParams, Stop, StopReason};

/// A broken clause of the contract.
#[derive(Debug, thiserror::Error)]
pub enum Violation {
    /// The backend answered with an error where the contract expects a result.
    #[error("{clause}: the backend failed")]
    Failed {
        /// The clause.
        clause: &'static str,
        /// The backend's error.
        #[source]
        source: super::error::Error,
    },
    /// The backend answered, wrongly.
    #[error("{clause}: {detail}")]
    Wrong {
        /// The clause.
        clause: &'static str,
        /// Expected versus found.
        detail: String,
    },
}

/// What the suite needs to know about the model behind a backend.
#[derive(Debug, Clone)]
pub struct Fixture {
    /// Token prompts to sample from (at least two, of different lengths).
    pub prompts: Vec<Vec<u32>>,
    /// Vocabulary size: sampled tokens must be below it.
    pub vocab_size: usize,
    /// A token to stop on.
    pub stop_token: u32,
    /// Tokens per completion (small: the suite samples a few dozen).
    pub max_tokens: usize,
}

fn wrong(clause: &'static str, detail: String) -> Violation {
    Violation::Wrong { clause, detail }
}

trait Clause<T> {
    fn clause(self, clause: &'static str) -> Result<T, Violation>;
}

impl<T> Clause<T> for super::error::Result<T> {
    fn clause(self, clause: &'static str) -> Result<T, Violation> {
        self.map_err(|source| Violation::Failed { clause, source })
    }
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * (1.0 + a.abs().max(b.abs()))
}

fn params(fx: &Fixture, temperature: f64) -> SamplingParams {
    SamplingParams { max_tokens: fx.max_tokens, temperature, top_p: 1.0, top_k: None, stop: vec![Stop::Token(fx.stop_token)], seed: None }
}

fn req(prompt: &[u32], n: usize, seed: u64) -> SampleRequest {
    SampleRequest { prompt: prompt.to_vec(), num_samples: n, seed: Some(seed), greedy: false }
}

/// Sampling: reply shapes, per-token log-probabilities, stop reasons, seeds (the same seed
/// gives the same completions, alone or in a batch), greedy decoding, and a clean error for an
/// empty prompt. A `stop` completion ends with the stop token when the sampler
/// [keeps stop tokens](Sampler::keeps_stop_tokens).
///
/// # Errors
/// The first clause the sampler breaks.
pub async fn check_sampler(sampler: &dyn Sampler, fx: &Fixture) -> Result<(), Violation> {
    let p = params(fx, 1.0);
    let (a, b) = (&fx.prompts[0], &fx.prompts[1]);
    let batch = vec![req(a, 3, 11), req(b, 0, 12), req(b, 2, 13)];
    let out = sampler.sample(batch, &p).await.clause("sample a batch")?;
    let counts: Vec<usize> = out.iter().map(Vec::len).collect();
    if counts != [3, 0, 2] {
        return Err(wrong("one reply per request, `num_samples` completions each", format!("asked [3, 0, 2], got {counts:?}")));
    }
    for seq in out.iter().flatten() {
        check_sequence(seq, fx, sampler.keeps_stop_tokens())?;
    }
    // Seeds: the same request again, and alone, gives the same tokens.
    let again = sampler.sample(vec![req(a, 3, 11)], &p).await.clause("sample again")?;
    for (x, y) in again[0].iter().zip(&out[0]) {
        if x.tokens != y.tokens {
            return Err(wrong("a seed fixes the completions, alone or in a batch", format!("{:?} then {:?}", y.tokens, x.tokens)));
        }
        if let Some((u, v)) = x.logprobs.iter().zip(&y.logprobs).find(|(u, v)| !close(f64::from(**u), f64::from(**v), 1e-3)) {
            return Err(wrong("a seed fixes the log-probabilities", format!("{v} then {u}")));
        }
    }
    let other = sampler.sample(vec![req(a, 3, 99)], &p).await.clause("sample with another seed")?;
    if other[0].iter().zip(&out[0]).all(|(x, y)| x.tokens == y.tokens) {
        return Err(wrong("different seeds give different samples at temperature 1", "three identical completions".into()));
    }
    // Greedy decoding is deterministic whatever the seed.
    let greedy = sampler.sample(vec![req(a, 2, 1), req(a, 1, 2)], &params(fx, 0.0)).await.clause("sample greedily")?;
    if greedy[0][0].tokens != greedy[0][1].tokens || greedy[0][0].tokens != greedy[1][0].tokens {
        return Err(wrong("temperature 0 is greedy", "greedy completions differ".into()));
    }
    // Bad input is an error, never a panic or an empty reply.
    if sampler.sample(vec![req(&[], 1, 0)], &p).await.is_ok() {
        return Err(wrong("an empty prompt is rejected", "it was accepted".into()));
    }
    Ok(())
}

fn check_sequence(seq: &SampledSequence, fx: &Fixture, keeps_stop: bool) -> Result<(), Violation> {
    if seq.logprobs.len() != seq.tokens.len() {
        return Err(wrong("one log-probability per sampled token", format!("{} tokens, {} logprobs", seq.tokens.len(), seq.logprobs.len())));
    }
    if let Some(lp) = seq.logprobs.iter().find(|lp| !lp.is_finite() || **lp > 1e-4) {
        return Err(wrong("log-probabilities are finite and at most 0", format!("found {lp}")));
    }
    if let Some(t) = seq.tokens.iter().find(|&&t| t as usize >= fx.vocab_size) {
        return Err(wrong("sampled tokens are in the vocabulary", format!("token {t} of {}", fx.vocab_size)));
    }
    match seq.stop_reason {
        StopReason::Length if seq.tokens.len() != fx.max_tokens => {
            Err(wrong("`length` means `max_tokens` tokens", format!("{} of {} tokens", seq.tokens.len(), fx.max_tokens)))
        }
        StopReason::Stop if keeps_stop && seq.tokens.last() != Some(&fx.stop_token) => {
            Err(wrong("`stop` ends with the stop token (kept, as in Tinker)", format!("{:?}", seq.tokens.last())))
        }
        // A sampler that does not keep stop tokens (an OpenAI-compatible server) still never
        // samples past one.
        StopReason::Stop if seq.tokens.iter().rev().skip(1).any(|&t| t == fx.stop_token) => {
            Err(wrong("nothing is sampled after the stop token", format!("{:?}", seq.tokens)))
        }
        _ => Ok(()),
    }
}

/// Training: the loss definitions against the returned log-probabilities, sampler and learner
/// agreeing on-policy, a gradient step that raises the likelihood of the trained tokens, sampler
/// snapshots unaffected by later steps, and state save/load restoring weights and optimizer
/// moments bit for bit. Leaves the trainer at a state it saved (named `contract-*`).
///
/// # Errors
/// The first clause the trainer breaks.
pub async fn check_trainer(trainer: &dyn Trainer, fx: &Fixture) -> Result<(), Violation> {
    let s0 = trainer.save_state("contract-0").await.clause("save a state")?;
    let sampler: Arc<dyn Sampler> = trainer.sampler().await.clause("take a sampler")?;
    let p = SamplingParams { stop: vec![], ..params(fx, 1.0) };
    let seqs = sampler.sample(vec![req(&fx.prompts[0], 2, 5)], &p).await.clause("sample for a datum")?.remove(0);
    let old = sampler.sample(vec![req(&fx.prompts[1], 2, 7)], &p).await.clause("sample a snapshot")?;
    let (prompt, seq) = (&fx.prompts[0], &seqs[0]);
    let mut tokens = prompt.clone();
    tokens.extend(&seq.tokens);
    let n = tokens.len() - 1;
    let completion = |v: f32| (0..n).map(|i| if i + 1 >= prompt.len() { v } else { 0.0 }).collect::<Vec<f32>>();
    let datum = |weights: Vec<f32>| Datum {
        model_input: tokens[..n].to_vec(),
        loss_fn_inputs: LossFnInputs { target_tokens: tokens[1..].to_vec(), weights: Some(weights), logprobs: None, advantages: None },
    };
    let mut q = vec![0.0; prompt.len() - 1];
    q.extend(&seq.logprobs);
    let pg = Datum {
        model_input: tokens[..n].to_vec(),
        loss_fn_inputs: LossFnInputs { target_tokens: tokens[1..].to_vec(), weights: None, logprobs: Some(q.clone()), advantages: Some(completion(1.5)) },
    };
    // The seams have no forward-only call: a cross_entropy pass with zero weights scores the
    // tokens and accumulates a zero gradient, which the next `load_state` discards.
    let forward = |d: Datum| async move {
        let out = trainer.forward_backward(vec![d], LossFn::CrossEntropy).await.clause("forward")?;
        Ok::<_, Violation>(out.outputs.into_iter().next().map(|o| o.logprobs).unwrap_or_default())
    };
    let ll = |lp: &[f32]| lp.iter().zip(completion(1.0)).map(|(l, w)| f64::from(*l) * f64::from(w)).sum::<f64>();

    // Cross-entropy: loss = −Σ w·logp, one output per datum, one logprob per position.
    let ce = trainer.forward_backward(vec![datum(completion(1.0))], LossFn::CrossEntropy).await.clause("cross_entropy forward_backward")?;
    let lp0 = ce.outputs.first().map(|o| o.logprobs.clone()).unwrap_or_default();
    if ce.outputs.len() != 1 || lp0.len() != n {
        return Err(wrong("one output per datum, one logprob per position", format!("{} outputs, {} logprobs for {n} positions", ce.outputs.len(), lp0.len())));
    }
    if !close(ce.loss, -ll(&lp0), 1e-4) {
        return Err(wrong("cross_entropy is −Σ weight·logp", format!("loss {} but −Σ w·logp = {}", ce.loss, -ll(&lp0))));
    }
    // On-policy: the learner scores the sampled tokens as the sampler did (temperature 1).
    let worst = seq.logprobs.iter().zip(&lp0[prompt.len() - 1..]).map(|(s, l)| (s - l).abs()).fold(0.0f32, f32::max);
    if worst > 2e-3 {
        return Err(wrong("sampler and learner agree on the log-probabilities of sampled tokens", format!("they differ by up to {worst}")));
    }
    // A step on that gradient makes the trained tokens likelier.
    let adam = AdamParams { learning_rate: 1e-2, ..AdamParams::default() };
    let step = trainer.optim_step(adam).await.clause("optim_step")?;
    if !step.grad_norm.is_some_and(|g| g.is_finite() && g > 0.0) {
        return Err(wrong("optim_step reports the gradient norm", format!("{:?}", step.grad_norm)));
    }
    let lp1 = forward(datum(completion(0.0))).await?;
    if ll(&lp1) <= ll(&lp0) {
        return Err(wrong("a cross_entropy step raises the likelihood of its targets", format!("Σ logp {} → {}", ll(&lp0), ll(&lp1))));
    }

    // Importance sampling on-policy: loss = −Σ ratio·A with ratio = exp(logp − q).
    trainer.load_state(&s0).await.clause("load a state")?;
    let is = trainer.forward_backward(vec![pg.clone()], LossFn::ImportanceSampling).await.clause("importance_sampling forward_backward")?;
    let lp = &is.outputs[0].logprobs;
    let a = completion(1.5);
    let expect: f64 = lp.iter().zip(&q).zip(&a).map(|((l, q), a)| -(f64::from(*l) - f64::from(*q)).exp() * f64::from(*a)).sum();
    if !close(is.loss, expect, 1e-3) {
        return Err(wrong("importance_sampling is −Σ exp(logp − q)·A", format!("loss {} but the formula gives {expect}", is.loss)));
    }
    let again = sampler.sample(vec![req(&fx.prompts[1], 2, 7)], &p).await.clause("sample the snapshot after a step")?;
    if again[0].iter().zip(&old[0]).any(|(x, y)| x.tokens != y.tokens) {
        return Err(wrong("a sampler is a snapshot: later steps do not change it", "its samples changed".into()));
    }

    // Round trips: loading s0 restores the weights exactly; the same step from s0 lands on the
    // same weights; a state saved mid-way restores the optimizer moments too.
    trainer.load_state(&s0).await.clause("load a state")?;
    let restored = forward(datum(completion(0.0))).await?;
    if restored != lp0 {
        return Err(wrong("load_state restores the weights bit for bit", "log-probabilities differ from before the step".into()));
    }
    trainer.load_state(&s0).await.clause("load a state")?;
    let _ = trainer.forward_backward(vec![datum(completion(1.0))], LossFn::CrossEntropy).await.clause("forward_backward")?;
    trainer.optim_step(adam).await.clause("optim_step")?;
    let s1 = trainer.save_state("contract-1").await.clause("save a state")?;
    let _ = trainer.forward_backward(vec![pg.clone()], LossFn::ImportanceSampling).await.clause("forward_backward")?;
    trainer.optim_step(adam).await.clause("optim_step")?;
    let first = forward(datum(completion(0.0))).await?;
    if first == lp1 {
        return Err(wrong("steps change the weights", "two steps left the log-probabilities of one".into()));
    }
    trainer.load_state(&s1).await.clause("load a state")?;
    let replay1 = forward(datum(completion(0.0))).await?;
    if replay1 != lp1 {
        return Err(wrong("a step from the same state is deterministic", "the replayed step landed elsewhere".into()));
    }
    trainer.load_state(&s1).await.clause("load a state")?;
    let _ = trainer.forward_backward(vec![pg], LossFn::ImportanceSampling).await.clause("forward_backward")?;
    trainer.optim_step(adam).await.clause("optim_step")?;
    let second = forward(datum(completion(0.0))).await?;
    if second != first {
        return Err(wrong("load_state restores the optimizer moments (bit-exact resume)", "the step after a reload differs".into()));
    }
    trainer.load_state(&s1).await.clause("load a state")?;
    Ok(())
}
