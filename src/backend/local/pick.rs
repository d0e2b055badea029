//! Choosing the next token from a row of logits, with its log-probability: shared by both
//! decoding paths (candle's in `sampler`, the hand-written one in `decode::batch`), so a leaf
//! rather than a part of either.
//!
//! The log-probability is the sampled token's under **the distribution it was actually drawn
//! from**: logits divided by the temperature, restricted to the top-k tokens and then to the
//! top-p nucleus, renormalised (`sampler`'s doc: "Which log-probabilities"). Greedy decoding
//! (`temperature = 0`) reports the untempered model log-probability of the chosen token.

use crate::rng::SplitMix64 as Rng;
use crate::seam::SamplingParams;

/// Choose the next token from `logits` and report its log-probability (the module's doc).
pub(crate) fn pick(logits: &[f32], params: &SamplingParams, rng: &mut Rng, scratch: &mut Vec<(f32, u32)>) -> (u32, f32) {
    if params.temperature == 0.0 {
        let (tok, _) = logits.iter().enumerate().fold((0usize, f32::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b });
        return (tok as u32, log_softmax_at(logits, tok, 1.0));
    }
    let inv_t = (1.0 / params.temperature) as f32;
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let truncating = params.top_k.is_some_and(|k| k < logits.len()) || params.top_p < 1.0;
    if !truncating {
        // Full distribution: no sort needed. Sums in f64 so the logprob is exact to f32.
        let z: f64 = logits.iter().map(|&x| f64::from((x - max) * inv_t).exp()).sum();
        let mut u = rng.uniform() * z;
        let mut tok = logits.len() - 1;
        for (i, &x) in logits.iter().enumerate() {
            let p = f64::from((x - max) * inv_t).exp();
            if u < p {
                tok = i;
                break;
            }
            u -= p;
        }
        let lp = f64::from((logits[tok] - max) * inv_t) - z.ln();
        return (tok as u32, lp as f32);
    }
    scratch.clear();
    scratch.extend(logits.iter().enumerate().map(|(i, &x)| ((x - max) * inv_t, i as u32)));
    // Descending by logit, ties by token id: a total order makes the result deterministic.
    scratch.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    if let Some(k) = params.top_k {
        scratch.truncate(k.max(1));
    }
    let probs: Vec<f64> = scratch.iter().map(|(x, _)| f64::from(*x).exp()).collect();
    let z: f64 = probs.iter().sum();
    let mut kept = probs.len();
    if params.top_p < 1.0 {
        // Smallest prefix whose mass reaches top_p (at least one token).
        let mut acc = 0.0;
        for (i, p) in probs.iter().enumerate() {
            acc += p / z;
            if acc >= params.top_p {
                kept = i + 1;
                break;
            }
        }
    }
    let zk: f64 = probs[..kept].iter().sum();
    let mut u = rng.uniform() * zk;
    let mut idx = kept - 1;
    for (i, p) in probs[..kept].iter().enumerate() {
        if u < *p {
            idx = i;
            break;
        }
        u -= p;
    }
    (scratch[idx].1, (probs[idx] / zk).ln() as f32)
}

fn log_softmax_at(logits: &[f32], i: usize, temp: f32) -> f32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let z: f64 = logits.iter().map(|&x| f64::from((x - max) / temp).exp()).sum();
    (f64::from((logits[i] - max) / temp) - z.ln()) as f32
}
