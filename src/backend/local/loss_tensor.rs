//! The differentiable loss on candle tensors: the formulas of [`crate::rl::loss`] (whose table is
//! the definition) as a scalar the local trainer backpropagates. Kept out of `rl`, which is plain
//! numbers, so that only the backend that computes with candle depends on it.

use candle_core::Tensor;

use crate::seam::{KlKind, LossFn};

/// Per-token inputs as tensors of one shape (typically `[batch, seq]`, f32).
#[derive(Debug, Clone)]
pub(crate) struct TokenInputs {
    /// `weights` (cross_entropy), ones where absent.
    pub weights: Tensor,
    /// Sampler log-probs `q`, zeros where absent.
    pub logprobs: Tensor,
    /// Advantages `A`, zeros where absent.
    pub advantages: Tensor,
    /// 1 on real tokens, 0 on padding a backend added to batch datums.
    pub valid: Tensor,
    /// The KL-to-reference term ([`crate::seam::KlLoss`]), when the loss has one.
    pub kl: Option<KlTensors>,
}

/// A KL term's per-token inputs, in the shape of the others.
#[derive(Debug, Clone)]
pub(crate) struct KlTensors {
    /// The reference's log-probabilities of the targets.
    pub reference: Tensor,
    /// Its coefficient per token (0 where the term does not apply).
    pub coef: Tensor,
    /// The estimator.
    pub kind: KlKind,
}

/// The differentiable loss (a scalar tensor) of `loss` for learner log-probs `logp`.
///
/// # Errors
/// Shape mismatches between `logp` and `inputs`.
pub(crate) fn loss_tensor(loss: &LossFn, logp: &Tensor, inputs: &TokenInputs) -> candle_core::Result<Tensor> {
    let TokenInputs { weights, logprobs: q, advantages: a, valid, kl } = inputs;
    let per_token = match *loss {
        LossFn::CrossEntropy => (logp * weights)?,
        LossFn::ImportanceSampling => ((logp - q)?.exp()? * a)?,
        LossFn::Ppo { clip_low_threshold: lo, clip_high_threshold: hi } => {
            let r = (logp - q)?.exp()?;
            let clipped = r.clamp(lo as f32, hi as f32)?;
            (r * a)?.minimum(&(clipped * a)?)?
        }
        LossFn::Cispo { clip_low_threshold: lo, clip_high_threshold: hi } => {
            let w = (logp - q)?.exp()?.clamp(lo as f32, hi as f32)?.detach();
            ((w * logp)? * a)?
        }
        LossFn::Dro { beta } => {
            let d = (logp - q)?;
            ((logp * a)? - (d.sqr()? * (0.5 * beta))?)?
        }
        LossFn::Gspo { clip_low_threshold: lo, clip_high_threshold: hi } => {
            let s = sequence_ratio(logp, q, a, valid)?.broadcast_as(logp.shape())?;
            let clipped = s.clamp(lo as f32, hi as f32)?;
            (&s * a)?.minimum(&(clipped * a)?)?
        }
        LossFn::MaskedImportanceSampling { cap, sequence } => {
            let r = (logp - q)?.exp()?;
            let kept = if sequence { sequence_ratio(logp, q, a, valid)?.broadcast_as(logp.shape())?.le(cap)? } else { r.le(cap)? };
            let w = (r * kept.to_dtype(logp.dtype())?)?.detach();
            ((w * logp)? * a)?
        }
    };
    let policy = (per_token * valid)?.sum_all()?.neg()?;
    match kl {
        None => Ok(policy),
        Some(kl) => policy + kl_term(logp, q, kl)?.mul(valid)?.sum_all()?,
    }
}

/// c_t · r_t · k(logp_t, ref_t) per token, r_t = exp(logp_t − q_t) differentiable: the
/// sampled sum's expected gradient is ∇ E_{π_θ}[k] = ∇KL(π_θ‖π_ref) for k1 and k3 alike.
fn kl_term(logp: &Tensor, q: &Tensor, kl: &KlTensors) -> candle_core::Result<Tensor> {
    let d = (&kl.reference - logp)?;
    let k = match kl.kind {
        KlKind::K1 => d.neg()?,
        KlKind::K3 => ((d.exp()? - &d)? - 1.0)?,
    };
    let r = (logp - q)?.exp()?;
    (r * k)? * &kl.coef
}

/// GSPO's sequence ratio per row of `[.., t]` inputs, keeping the last dimension (size 1):
/// `exp(Σ_t m_t (logp_t − q_t) / max(1, Σ_t m_t))`, `m_t` = 1 on valid tokens with a non-zero
/// advantage (a datum is one row, never split across micro-batches, so a row is a sequence).
fn sequence_ratio(logp: &Tensor, q: &Tensor, a: &Tensor, valid: &Tensor) -> candle_core::Result<Tensor> {
    let last = logp.rank().saturating_sub(1);
    let m = (a.ne(0.0)?.to_dtype(logp.dtype())? * valid)?;
    let n = m.sum_keepdim(last)?.maximum(1.0)?;
    ((logp - q)? * &m)?.sum_keepdim(last)?.div(&n)?.exp()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rl::loss::example::{A, LOGP, Q, W};
    use crate::rl::loss::{datum_loss, token_loss};
    use candle_core::{Device, Var};

    fn eval(loss: &LossFn) -> (f64, Vec<f32>) {
        let dev = Device::Cpu;
        let logp = Var::from_slice(&LOGP, 3, &dev).unwrap();
        let t = |v: &[f32]| Tensor::from_slice(v, 3, &dev).unwrap();
        let inputs = TokenInputs { weights: t(&W), logprobs: t(&Q), advantages: t(&A), valid: t(&[1.0, 1.0, 1.0]), kl: None };
        let l = loss_tensor(loss, logp.as_tensor(), &inputs).unwrap();
        let g = l.backward().unwrap();
        let grad = g.get(logp.as_tensor()).unwrap().to_vec1::<f32>().unwrap();
        (f64::from(l.to_vec0::<f32>().unwrap()), grad)
    }

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-5, "{a} != {b}");
    }

    #[test]
    fn cross_entropy_by_hand() {
        // -(0·-1 + 1·-0.5 + 1·-2) = 2.5; d/dlogp = -w.
        let (l, g) = eval(&LossFn::CrossEntropy);
        close(l, 2.5);
        assert_eq!(g, vec![0.0, -1.0, -1.0]);
    }

    #[test]
    fn importance_sampling_by_hand() {
        // -(1.221403·2 + 0.606531·-1) = -1.836275; d/dlogp = -r·A.
        let (l, g) = eval(&LossFn::ImportanceSampling);
        close(l, -1.836275);
        close(g[1].into(), -2.442806);
        close(g[2].into(), 0.606531);
        assert_eq!(g[0], 0.0);
    }

    #[test]
    fn ppo_by_hand() {
        // Token 1: r=1.2214 > 1.2, A>0 -> min(2.4428, 1.2·2=2.4) = 2.4 (clipped, no gradient).
        // Token 2: r=0.6065 < 0.8, A<0 -> min(-0.6065, -0.8) = -0.8 (clipped, no gradient).
        let (l, g) = eval(&LossFn::PPO);
        close(l, -(2.4 - 0.8));
        assert_eq!(g, vec![0.0, 0.0, 0.0]);
        // Wider thresholds: unclipped, equals importance sampling.
        let wide = LossFn::Ppo { clip_low_threshold: 0.5, clip_high_threshold: 1.5 };
        let (l, g) = eval(&wide);
        close(l, -1.836275);
        close(g[1].into(), -2.442806);
    }

    #[test]
    fn cispo_by_hand() {
        // -(clip(r)·logp·A): token 1: 1.221403·-0.5·2 = -1.221403; token 2: 0.606531·-2·-1 = 1.213061.
        // Sum = -0.008342 -> loss 0.008342. Gradient: -sg(clip(r))·A = [-, -2.442806, 0.606531].
        let (l, g) = eval(&LossFn::CISPO);
        close(l, 0.008342);
        close(g[1].into(), -2.442806);
        close(g[2].into(), 0.606531);
        // Clipping the weight at 1.0 changes token 1 only.
        let tight = LossFn::Cispo { clip_low_threshold: 0.0, clip_high_threshold: 1.0 };
        let (l, _) = eval(&tight);
        close(l, -(-1.0 + 1.213061));
    }

    #[test]
    fn dro_by_hand() {
        // -Σ(logp·A − ½β(logp−q)²), β=0.1: token0: −(0 − 0.05·1) = 0.05; token1: −(−1 − 0.05·0.04) = 1.002;
        // token2: −(2 − 0.05·0.25) = −1.9875. Sum = −0.9355.
        let (l, g) = eval(&LossFn::Dro { beta: 0.1 });
        close(l, -0.9355);
        // d/dlogp = −A + β(logp − q): [−0.1, −2 + 0.02, 1 − 0.05].
        close(g[0].into(), -0.1);
        close(g[1].into(), -1.98);
        close(g[2].into(), 0.95);
    }

    #[test]
    fn tensor_matches_scalar_reference() {
        let f = |x: [f32; 3]| x.map(f64::from);
        let wide_gspo = LossFn::Gspo { clip_low_threshold: 0.5, clip_high_threshold: 1.5 };
        let masked = |cap, sequence| LossFn::MaskedImportanceSampling { cap, sequence };
        for loss in [LossFn::CrossEntropy, LossFn::ImportanceSampling, LossFn::PPO, LossFn::CISPO, LossFn::Dro { beta: 0.3 }, LossFn::GSPO, wide_gspo, masked(1.1, false), masked(2.0, false), masked(1.0, true), masked(0.5, true)] {
            let want: f64 = (0..3).map(|i| token_loss(&loss, LOGP[i].into(), Q[i].into(), A[i].into(), W[i].into())).sum();
            let want = if loss.is_sequence_level() { datum_loss(&loss, &f(LOGP), &f(Q), &f(A), &f(W)) } else { want };
            close(eval(&loss).0, want);
        }
    }

    #[test]
    fn gspo_by_hand() {
        // s = e^−0.15 = 0.860708 over the two action tokens (rl::loss's gspo_by_hand).
        // Unclipped: L = −s·ΣA_t, ΣA = 1; ds/dlogp_t = s/2 on action tokens, so
        // dL/dlogp_t = −ΣA·s/2 = −0.430354 on tokens 1 and 2, 0 on the prompt token.
        let (l, g) = eval(&LossFn::Gspo { clip_low_threshold: 0.5, clip_high_threshold: 1.5 });
        close(l, -0.860708);
        assert_eq!(g[0], 0.0);
        close(g[1].into(), -0.430354);
        close(g[2].into(), -0.430354);
        // Default range: token 2 takes the clipped branch (constant), token 1 the unclipped one:
        // L = −(2s − 0.9997), dL/dlogp_t = −2·s/2 = −0.860708 on both action tokens.
        let (l, g) = eval(&LossFn::GSPO);
        close(l, -0.721716);
        close(g[1].into(), -0.860708);
        close(g[2].into(), -0.860708);
    }

    #[test]
    fn masked_importance_sampling_by_hand() {
        // r = [e^-1, e^0.2, e^-0.5]; cap 1.1 masks token 1 (1.2214), keeps token 2 (0.6065):
        // L = −0.606531·(−2)·(−1) = −1.213061, dL/dlogp = −sg(w)·A = [0, 0, 0.606531].
        let (l, g) = eval(&LossFn::MaskedImportanceSampling { cap: 1.1, sequence: false });
        close(l, -1.213061);
        assert_eq!((g[0], g[1]), (0.0, 0.0));
        close(g[2].into(), 0.606531);
        // By sequence: s = e^−0.15 = 0.8607 ≤ 1.1 keeps both tokens (CISPO without clipping);
        // cap 0.8 < s masks the whole datum.
        let (l, _) = eval(&LossFn::MaskedImportanceSampling { cap: 1.1, sequence: true });
        close(l, -(1.221403 * -0.5 * 2.0) - 1.213061);
        let (l, g) = eval(&LossFn::MaskedImportanceSampling { cap: 0.8, sequence: true });
        close(l, 0.0);
        assert!(g.iter().all(|&x| x == 0.0));
    }

    #[test]
    fn kl_term_by_hand() {
        // logp = [-1, -0.5, -2], q = [0, -0.7, -1.5], ref = [-1, -0.9, -1.0], c = [0, 0.5, 0.5];
        // importance sampling with A = 0 isolates the KL term. d = ref − logp = [0, −0.4, 1.0],
        // r = [e^-1, e^0.2, e^-0.5].
        let dev = Device::Cpu;
        let t = |v: &[f32]| Tensor::from_slice(v, 3, &dev).unwrap();
        for (kind, k, dk) in [
            // k1 = −d, dk/dlogp = 1; k3 = e^d − d − 1, dk/dlogp = 1 − e^d.
            (KlKind::K1, [0.0, 0.4, -1.0], [1.0, 1.0, 1.0]),
            (KlKind::K3, [0.0, (-0.4f64).exp() + 0.4 - 1.0, 1f64.exp() - 2.0], [0.0, 1.0 - (-0.4f64).exp(), 1.0 - 1f64.exp()]),
        ] {
            let logp = Var::from_slice(&LOGP, 3, &dev).unwrap();
            let kl = KlTensors { reference: t(&[-1.0, -0.9, -1.0]), coef: t(&[0.0, 0.5, 0.5]), kind };
            let inputs = TokenInputs { weights: t(&W), logprobs: t(&Q), advantages: t(&[0.0; 3]), valid: t(&[1.0; 3]), kl: Some(kl) };
            let l = loss_tensor(&LossFn::ImportanceSampling, logp.as_tensor(), &inputs).unwrap();
            let g = l.backward().unwrap().get(logp.as_tensor()).unwrap().to_vec1::<f32>().unwrap();
            let r = [(-1.0f64).exp(), 0.2f64.exp(), (-0.5f64).exp()];
            let want: f64 = (1..3).map(|i| 0.5 * r[i] * k[i]).sum();
            close(l.to_vec0::<f32>().unwrap().into(), want);
            // d/dlogp (c·r·k) = c·r·(k + dk/dlogp).
            for i in 1..3 {
                close(g[i].into(), 0.5 * r[i] * (k[i] + dk[i]));
            }
            assert_eq!(g[0], 0.0, "a zero coefficient adds nothing");
        }
    }

    #[test]
    fn gspo_ratios_are_per_row_and_ignore_padding() {
        // Two rows: the example, and a one-token row padded to three (padding has A ≠ 0 to check
        // that `valid` masks it out of the sequence mean).
        let dev = Device::Cpu;
        let t = |v: &[f32]| Tensor::from_slice(v, (2, 3), &dev).unwrap();
        let logp = Var::from_slice(&[-1.0f32, -0.5, -2.0, -0.3, -9.0, -9.0], (2, 3), &dev).unwrap();
        let inputs = TokenInputs {
            weights: t(&[0.0, 1.0, 1.0, 1.0, 0.0, 0.0]),
            logprobs: t(&[0.0, -0.7, -1.5, -0.4, 0.0, 0.0]),
            advantages: t(&[0.0, 2.0, -1.0, 1.0, 5.0, 5.0]),
            valid: t(&[1.0, 1.0, 1.0, 1.0, 0.0, 0.0]),
            kl: None,
        };
        let wide = LossFn::Gspo { clip_low_threshold: 0.0, clip_high_threshold: 10.0 };
        let l = loss_tensor(&wide, logp.as_tensor(), &inputs).unwrap().to_vec0::<f32>().unwrap();
        // Row 1: −0.860708; row 2: s = e^0.1 = 1.105171, −s·1.
        close(l.into(), -0.860708 - 1.105171);
    }

}
