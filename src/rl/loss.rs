//! Policy-gradient and supervised loss definitions, shared by every backend.
//!
//! The definitions are Tinker's (its loss-function documentation, https://tinker-docs.thinkingmachines.ai/losses), so a spec's `grpo.loss` means
//! the same objective whether the local candle trainer or the Tinker service computes it. All are
//! token-level **sums**: nothing is divided by a token or sequence count (scale advantages or
//! weights to normalise). Notation, per target token: `logp` learner log-prob, `q` sampler log-prob
//! (the datum's `logprobs`), `A` advantage, `w` weight, `r = exp(logp - q)`, `sg` stop-gradient.
//!
//! | loss | value |
//! |---|---|
//! | `cross_entropy` | `-Σ w·logp` |
//! | `importance_sampling` | `-Σ r·A` |
//! | `ppo` | `-Σ min(r·A, clip(r, lo, hi)·A)` (defaults lo 0.8, hi 1.2) |
//! | `cispo` | `-Σ sg(clip(r, lo, hi))·logp·A` (defaults lo 0.0, hi 4.0) |
//! | `dro` | `-Σ (logp·A − ½β(logp − q)²)` (default β 0.05) |
//! | `gspo` | `-Σ min(s·A, clip(s, lo, hi)·A)`, `s = exp(Σ_t m_t (logp_t − q_t) / Σ_t m_t)` per datum, `m_t = [A_t ≠ 0]` (defaults lo 0.9997, hi 1.0004) |
//! | `masked_importance_sampling` | `-Σ sg(r·[ρ ≤ cap])·logp·A`, ρ = r per token, or the datum's `s` (as gspo's) with `sequence` |
//!
//! On-policy distillation (`grpo.distill`, engine/distill.rs) changes no loss: it sets the
//! advantage of each sampled token to `A_t = A_task − coef·(q_t − log p_teacher(y_t))` (the
//! task's term kept only with `task_reward`) and trains it with the loss above, by default
//! `importance_sampling`.
//!
//! `gspo` (Zheng et al. 2025, arXiv 2507.18071) is rlx's, not Tinker's: the ratio is the
//! sequence's geometric mean of token ratios over its sampled tokens (those with a non-zero
//! advantage), shared by every token of the sequence and clipped as a whole; the token sum above
//! with `grpo.loss_agg: sequence_mean` is the paper's objective (1/G) Σ_i min(s_i A_i, clip(s_i) A_i).
//! Tinker's protocol names a `gspo` loss without defining it (reference/tinker-protocol.md §5.3),
//! so rlx does not send it there.
//!
//! [`token_loss`] is the formula on plain numbers (for `gspo`, of a one-token sequence) and
//! [`datum_loss`] that of a whole datum: the reference definitions, used by tests and as
//! executable documentation. The local backend's differentiable version on candle tensors is
//! `backend::local::loss_tensor`, tested against it. Padding that a backend adds to batch datums is excluded with the `valid` mask;
//! it is not part of the definition.

use std::collections::BTreeMap;

/// Errors in a loss configuration.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The loss name is not one of the five.
    #[error("unknown loss function `{0}` (expected one of cross_entropy, importance_sampling, ppo, cispo, dro, gspo, masked_importance_sampling)")]
    UnknownLossFn(String),
    /// A `loss_fn_config` key that the loss does not take.
    #[error("loss `{loss}` takes no config key `{key}`")]
    UnknownConfigKey {
        /// The loss.
        loss: &'static str,
        /// The key.
        key: String,
    },
    /// A config value out of range.
    #[error("loss `{loss}`: {reason}")]
    InvalidConfig {
        /// The loss.
        loss: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// A loss function with its config: Tinker's `loss_fn` + `loss_fn_config`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "loss_fn", rename_all = "snake_case")]
pub enum LossFn {
    /// Weighted negative log-likelihood (supervised fine-tuning).
    CrossEntropy,
    /// REINFORCE with an importance weight for off-policy samples.
    ImportanceSampling,
    /// PPO's clipped surrogate; thresholds are on the ratio itself.
    Ppo {
        /// Lower ratio bound (Tinker default 0.8).
        clip_low_threshold: f64,
        /// Upper ratio bound (Tinker default 1.2).
        clip_high_threshold: f64,
    },
    /// CISPO: REINFORCE weighted by a clipped, stop-gradient ratio.
    Cispo {
        /// Lower ratio bound (Tinker default 0.0).
        clip_low_threshold: f64,
        /// Upper ratio bound (Tinker default 4.0).
        clip_high_threshold: f64,
    },
    /// GSPO: PPO's clipped objective on the sequence-level (length-normalised) ratio.
    Gspo {
        /// Lower sequence-ratio bound (default 0.9997).
        clip_low_threshold: f64,
        /// Upper sequence-ratio bound (default 1.0004).
        clip_high_threshold: f64,
    },
    /// DRO: REINFORCE with a quadratic penalty on the log-ratio.
    Dro {
        /// Penalty coefficient β.
        beta: f64,
    },
    /// Masked importance sampling (rlx's; verl's and TRL's rollout correction by rejection):
    /// REINFORCE weighted by the stop-gradient ratio, with tokens (or whole datums) whose ratio
    /// exceeds `cap` left out rather than truncated.
    MaskedImportanceSampling {
        /// Largest ratio kept.
        cap: f64,
        /// Mask whole datums by their sequence ratio (geometric mean over action tokens).
        sequence: bool,
    },
}

impl LossFn {
    /// PPO with Tinker's default thresholds.
    pub const PPO: LossFn = LossFn::Ppo { clip_low_threshold: 0.8, clip_high_threshold: 1.2 };
    /// CISPO with Tinker's default thresholds.
    pub const CISPO: LossFn = LossFn::Cispo { clip_low_threshold: 0.0, clip_high_threshold: 4.0 };
    /// GSPO with the paper's clip range (ε_low 3e-4, ε_high 4e-4 around 1).
    pub const GSPO: LossFn = LossFn::Gspo { clip_low_threshold: 0.9997, clip_high_threshold: 1.0004 };

    /// Build from Tinker's wire form: a name and a `loss_fn_config` map (missing keys take
    /// defaults; `dro`'s `beta` defaults to 0.05, the value in Tinker's docs).
    ///
    /// # Errors
    /// An unknown name, an unknown key, or a threshold pair with `lo > hi`.
    pub fn from_tinker(name: &str, config: &BTreeMap<String, f64>) -> Result<Self, Error> {
        let (loss, keys): (LossFn, &[&str]) = match name {
            "cross_entropy" => (LossFn::CrossEntropy, &[]),
            "importance_sampling" => (LossFn::ImportanceSampling, &[]),
            "ppo" => (Self::PPO, &["clip_low_threshold", "clip_high_threshold"]),
            "cispo" => (Self::CISPO, &["clip_low_threshold", "clip_high_threshold"]),
            "dro" => (LossFn::Dro { beta: 0.05 }, &["beta"]),
            "gspo" => (Self::GSPO, &["clip_low_threshold", "clip_high_threshold"]),
            "masked_importance_sampling" => (LossFn::MaskedImportanceSampling { cap: 2.0, sequence: false }, &["cap", "sequence"]),
            other => return Err(Error::UnknownLossFn(other.to_string())),
        };
        if let Some(key) = config.keys().find(|k| !keys.contains(&k.as_str())) {
            return Err(Error::UnknownConfigKey { loss: loss.name(), key: key.clone() });
        }
        let get = |k: &str, d: f64| config.get(k).copied().unwrap_or(d);
        let loss = match loss {
            LossFn::Ppo { clip_low_threshold: lo, clip_high_threshold: hi } => {
                LossFn::Ppo { clip_low_threshold: get("clip_low_threshold", lo), clip_high_threshold: get("clip_high_threshold", hi) }
            }
            LossFn::Cispo { clip_low_threshold: lo, clip_high_threshold: hi } => {
                LossFn::Cispo { clip_low_threshold: get("clip_low_threshold", lo), clip_high_threshold: get("clip_high_threshold", hi) }
            }
            LossFn::Gspo { clip_low_threshold: lo, clip_high_threshold: hi } => {
                LossFn::Gspo { clip_low_threshold: get("clip_low_threshold", lo), clip_high_threshold: get("clip_high_threshold", hi) }
            }
            LossFn::Dro { beta } => LossFn::Dro { beta: get("beta", beta) },
            LossFn::MaskedImportanceSampling { cap, sequence } => LossFn::MaskedImportanceSampling { cap: get("cap", cap), sequence: get("sequence", f64::from(u8::from(sequence))) != 0.0 },
            other => other,
        };
        loss.validate()?;
        Ok(loss)
    }

    /// Check the config values.
    ///
    /// # Errors
    /// Non-finite values or `lo > hi`.
    pub fn validate(&self) -> Result<(), Error> {
        let loss = self.name();
        match *self {
            LossFn::Ppo { clip_low_threshold: lo, clip_high_threshold: hi }
            | LossFn::Cispo { clip_low_threshold: lo, clip_high_threshold: hi }
            | LossFn::Gspo { clip_low_threshold: lo, clip_high_threshold: hi }
                if !(lo.is_finite() && hi.is_finite() && lo <= hi) => {
                    return Err(Error::InvalidConfig { loss, reason: format!("expected clip_low_threshold <= clip_high_threshold, found {lo} and {hi}") });
                }
            LossFn::Dro { beta } if !beta.is_finite() => {
                return Err(Error::InvalidConfig { loss, reason: format!("beta must be finite, found {beta}") });
            }
            LossFn::MaskedImportanceSampling { cap, .. } if !(cap.is_finite() && cap >= 1.0) => {
                return Err(Error::InvalidConfig { loss, reason: format!("cap must be at least 1, found {cap}") });
            }
            _ => {}
        }
        Ok(())
    }

    /// Tinker's name for the loss.
    pub fn name(&self) -> &'static str {
        match self {
            LossFn::CrossEntropy => "cross_entropy",
            LossFn::ImportanceSampling => "importance_sampling",
            LossFn::Ppo { .. } => "ppo",
            LossFn::Cispo { .. } => "cispo",
            LossFn::Dro { .. } => "dro",
            LossFn::Gspo { .. } => "gspo",
            LossFn::MaskedImportanceSampling { .. } => "masked_importance_sampling",
        }
    }

    /// Tinker's `loss_fn_config` for this loss (empty for the losses without parameters).
    pub fn config(&self) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        match *self {
            LossFn::Ppo { clip_low_threshold, clip_high_threshold }
            | LossFn::Cispo { clip_low_threshold, clip_high_threshold }
            | LossFn::Gspo { clip_low_threshold, clip_high_threshold } => {
                m.insert("clip_low_threshold".into(), clip_low_threshold);
                m.insert("clip_high_threshold".into(), clip_high_threshold);
            }
            LossFn::Dro { beta } => {
                m.insert("beta".into(), beta);
            }
            LossFn::MaskedImportanceSampling { cap, sequence } => {
                m.insert("cap".into(), cap);
                m.insert("sequence".into(), f64::from(u8::from(sequence)));
            }
            _ => {}
        }
        m
    }

    /// Whether the loss reads `logprobs` and `advantages` (all but cross_entropy).
    pub fn is_policy_gradient(&self) -> bool {
        !matches!(self, LossFn::CrossEntropy)
    }

    /// Whether the loss couples the tokens of a datum (its ratio is the sequence's): a backend
    /// must then see each datum whole, and only rlx's own trainers compute it.
    pub fn is_sequence_level(&self) -> bool {
        matches!(self, LossFn::Gspo { .. } | LossFn::MaskedImportanceSampling { sequence: true, .. })
    }

    fn clip(&self) -> Option<(f64, f64)> {
        match *self {
            LossFn::Ppo { clip_low_threshold, clip_high_threshold }
            | LossFn::Cispo { clip_low_threshold, clip_high_threshold }
            | LossFn::Gspo { clip_low_threshold, clip_high_threshold } => {
                Some((clip_low_threshold, clip_high_threshold))
            }
            LossFn::MaskedImportanceSampling { cap, .. } => Some((0.0, cap)),
            _ => None,
        }
    }
}

/// The loss of one token under `loss`, on plain numbers: the reference definition (for `gspo`,
/// of a sequence of this one token; see [`datum_loss`]).
pub(crate) fn token_loss(loss: &LossFn, logp: f64, q: f64, advantage: f64, weight: f64) -> f64 {
    let r = (logp - q).exp();
    match *loss {
        LossFn::Gspo { clip_low_threshold: lo, clip_high_threshold: hi } => -(r * advantage).min(r.clamp(lo, hi) * advantage),
        LossFn::CrossEntropy => -weight * logp,
        LossFn::ImportanceSampling => -r * advantage,
        LossFn::Ppo { clip_low_threshold: lo, clip_high_threshold: hi } => -(r * advantage).min(r.clamp(lo, hi) * advantage),
        LossFn::Cispo { clip_low_threshold: lo, clip_high_threshold: hi } => -r.clamp(lo, hi) * logp * advantage,
        LossFn::Dro { beta } => -(logp * advantage - 0.5 * beta * (logp - q).powi(2)),
        LossFn::MaskedImportanceSampling { cap, .. } => if r <= cap { -r * logp * advantage } else { 0.0 },
    }
}

/// The sequence ratio `s` of GSPO for one datum: the geometric mean of the token ratios over the
/// tokens with a non-zero advantage (1 when there are none).
pub(crate) fn sequence_ratio(logp: &[f64], q: &[f64], advantages: &[f64]) -> f64 {
    let (mut sum, mut n) = (0.0, 0usize);
    for i in 0..logp.len() {
        if advantages[i] != 0.0 {
            sum += logp[i] - q[i];
            n += 1;
        }
    }
    if n == 0 { 1.0 } else { (sum / n as f64).exp() }
}

/// The loss of one datum (its per-token values) under `loss`: the reference definition of every
/// loss, the sequence-level ones included.
pub(crate) fn datum_loss(loss: &LossFn, logp: &[f64], q: &[f64], advantages: &[f64], weights: &[f64]) -> f64 {
    match *loss {
        LossFn::Gspo { clip_low_threshold: lo, clip_high_threshold: hi } => {
            let s = sequence_ratio(logp, q, advantages);
            advantages.iter().map(|&a| -(s * a).min(s.clamp(lo, hi) * a)).sum()
        }
        LossFn::MaskedImportanceSampling { cap, sequence: true } => {
            if sequence_ratio(logp, q, advantages) > cap {
                return 0.0;
            }
            (0..logp.len()).map(|i| -(logp[i] - q[i]).exp() * logp[i] * advantages[i]).sum()
        }
        _ => (0..logp.len()).map(|i| token_loss(loss, logp[i], q[i], advantages[i], weights[i])).sum(),
    }
}

/// Diagnostics of one loss evaluation, over "action" tokens (valid tokens with a non-zero
/// advantage for policy-gradient losses, a non-zero weight for cross_entropy).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LossStats {
    /// Number of action tokens.
    pub tokens: usize,
    /// Mean of `r = exp(logp - q)` over action tokens (policy-gradient losses; 1 on-policy).
    pub ratio_mean: f64,
    /// Largest ratio seen.
    pub ratio_max: f64,
    /// Fraction of action tokens whose ratio lies outside the clip range (ppo, cispo).
    pub clip_fraction: f64,
    /// Mean learner log-prob over action tokens (−entropy estimate on-policy).
    pub logp_mean: f64,
    /// Mean `q − logp` over action tokens (Tinker's `kl_sample_train_v1`).
    pub kl_sample_train: f64,
}

/// Diagnostics for `loss` given flat per-token values (valid tokens only).
pub(crate) fn stats(loss: &LossFn, logp: &[f32], q: &[f32], advantages: &[f32], weights: &[f32]) -> LossStats {
    let mut s = LossStats::default();
    let (mut rsum, mut clipped, mut lsum, mut klsum) = (0.0, 0usize, 0.0, 0.0);
    for i in 0..logp.len() {
        let action = if loss.is_policy_gradient() { advantages[i] != 0.0 } else { weights[i] != 0.0 };
        if !action {
            continue;
        }
        s.tokens += 1;
        let (lp, qq) = (f64::from(logp[i]), f64::from(q[i]));
        let r = (lp - qq).exp();
        rsum += r;
        s.ratio_max = s.ratio_max.max(r);
        if let Some((lo, hi)) = loss.clip()
            && (r < lo || r > hi) {
                clipped += 1;
            }
        lsum += lp;
        klsum += qq - lp;
    }
    if s.tokens > 0 {
        let n = s.tokens as f64;
        s.ratio_mean = rsum / n;
        s.clip_fraction = clipped as f64 / n;
        s.logp_mean = lsum / n;
        s.kl_sample_train = klsum / n;
    }
    if !loss.is_policy_gradient() {
        s.ratio_mean = 0.0;
        s.ratio_max = 0.0;
        s.kl_sample_train = 0.0;
    }
    s
}

/// [`stats`] over datums given one at a time (`(logp, q, advantages, weights)` each); for a
/// sequence-level loss the clip fraction counts the action tokens whose *sequence* ratio lies
/// outside the clip range, since that is what the loss clips.
pub(crate) fn datum_stats<'a>(loss: &LossFn, datums: impl IntoIterator<Item = [&'a [f32]; 4]>) -> LossStats {
    let (mut lp, mut q, mut a, mut w) = (vec![], vec![], vec![], vec![]);
    let (mut clipped, mut action) = (0usize, 0usize);
    for [l, qq, aa, ww] in datums {
        if let (true, Some((lo, hi))) = (loss.is_sequence_level(), loss.clip()) {
            let f = |x: &[f32]| x.iter().map(|&v| f64::from(v)).collect::<Vec<f64>>();
            let s = sequence_ratio(&f(l), &f(qq), &f(aa));
            let n = aa.iter().filter(|&&x| x != 0.0).count();
            action += n;
            clipped += if s < lo || s > hi { n } else { 0 };
        }
        lp.extend_from_slice(l);
        q.extend_from_slice(qq);
        a.extend_from_slice(aa);
        w.extend_from_slice(ww);
    }
    let mut st = stats(loss, &lp, &q, &a, &w);
    if loss.is_sequence_level() {
        st.clip_fraction = if action == 0 { 0.0 } else { clipped as f64 / action as f64 };
    }
    st
}

/// The hand-computed example the loss tests share (these and `backend::local::loss_tensor`'s):
/// two action tokens and one prompt token (A = 0).
/// logp = [-1.0, -0.5, -2.0], q = [0.0, -0.7, -1.5], A = [0, 2, -1], w = [0, 1, 1].
/// r = [e^-1, e^0.2, e^-0.5] = [0.367879, 1.221403, 0.606531].
#[cfg(test)]
pub(crate) mod example {
    pub(crate) const LOGP: [f32; 3] = [-1.0, -0.5, -2.0];
    pub(crate) const Q: [f32; 3] = [0.0, -0.7, -1.5];
    pub(crate) const A: [f32; 3] = [0.0, 2.0, -1.0];
    pub(crate) const W: [f32; 3] = [0.0, 1.0, 1.0];
}

#[cfg(test)]
mod tests {
    use super::example::{A, LOGP, Q, W};
    use super::*;

    #[test]
    fn wire_form_round_trips_and_rejects_unknowns() {
        for loss in [LossFn::CrossEntropy, LossFn::ImportanceSampling, LossFn::PPO, LossFn::CISPO, LossFn::Dro { beta: 0.05 }, LossFn::GSPO] {
            assert_eq!(LossFn::from_tinker(loss.name(), &loss.config()).unwrap(), loss);
        }
        assert!(matches!(LossFn::from_tinker("grpo", &BTreeMap::new()), Err(Error::UnknownLossFn(_))));
        let bad: BTreeMap<String, f64> = [("clip_low".to_string(), 0.1)].into();
        assert!(matches!(LossFn::from_tinker("ppo", &bad), Err(Error::UnknownConfigKey { .. })));
        let inverted: BTreeMap<String, f64> = [("clip_low_threshold".to_string(), 2.0)].into();
        assert!(LossFn::from_tinker("ppo", &inverted).is_err());
    }

    #[test]
    fn gspo_by_hand() {
        // Action tokens 1 and 2: mean log-ratio (0.2 − 0.5)/2 = −0.15, s = e^−0.15 = 0.860708.
        let (lp, q, a, w) = (LOGP.map(f64::from), Q.map(f64::from), A.map(f64::from), W.map(f64::from));
        let s = sequence_ratio(&lp, &q, &a);
        assert!((s - 0.860708).abs() < 1e-6);
        // Wide range: unclipped, −s·ΣA = −0.860708·(2 − 1).
        let wide = LossFn::Gspo { clip_low_threshold: 0.5, clip_high_threshold: 1.5 };
        assert!((datum_loss(&wide, &lp, &q, &a, &w) + 0.860708).abs() < 1e-6);
        // Default range [0.9997, 1.0004]: s is below it. Token 1 (A = 2): min(2s, 2·0.9997) = 2s;
        // token 2 (A = −1): min(−s, −0.9997) = −0.9997. Loss −(1.721416 − 0.9997) = −0.721716.
        assert!((datum_loss(&LossFn::GSPO, &lp, &q, &a, &w) + 0.721716).abs() < 1e-6);
        // A one-token sequence is token_loss's `gspo`, which is PPO's formula.
        let one = |l: &LossFn| datum_loss(l, &lp[1..2], &q[1..2], &a[1..2], &w[1..2]);
        assert!((one(&LossFn::GSPO) - token_loss(&LossFn::Ppo { clip_low_threshold: 0.9997, clip_high_threshold: 1.0004 }, lp[1], q[1], a[1], w[1])).abs() < 1e-12);
        // No action token: ratio 1, loss 0.
        assert_eq!(sequence_ratio(&lp[..1], &q[..1], &a[..1]), 1.0);
        // Every token of the datum is counted as clipped.
        let st = datum_stats(&LossFn::GSPO, [[&LOGP[..], &Q[..], &A[..], &W[..]]]);
        assert_eq!((st.tokens, st.clip_fraction), (2, 1.0));
        let st = datum_stats(&wide, [[&LOGP[..], &Q[..], &A[..], &W[..]]]);
        assert_eq!(st.clip_fraction, 0.0);
    }

    #[test]
    fn ppo_clip_higher_by_hand() {
        // DAPO's clip-higher: lo 0.8, hi 1.28. Token 1 (r = 1.221403, A = 2) is inside the
        // raised upper bound: −r·A = −2.442806 instead of the clipped −2.4 at hi 1.2.
        let higher = LossFn::Ppo { clip_low_threshold: 0.8, clip_high_threshold: 1.28 };
        assert!((token_loss(&higher, -0.5, -0.7, 2.0, 1.0) + 2.442806).abs() < 1e-6);
        assert!((token_loss(&LossFn::PPO, -0.5, -0.7, 2.0, 1.0) + 2.4).abs() < 1e-9);
        // The lower bound is unchanged: token 2 (r = 0.606531, A = −1) is clipped at 0.8.
        assert!((token_loss(&higher, -2.0, -1.5, -1.0, 1.0) - 0.8).abs() < 1e-9);
    }

    #[test]
    fn stats_count_action_tokens_and_clipping() {
        let s = stats(&LossFn::PPO, &LOGP, &Q, &A, &W);
        assert_eq!(s.tokens, 2);
        assert!((s.clip_fraction - 1.0).abs() < 1e-12);
        assert!((s.ratio_mean - (1.221403 + 0.606531) / 2.0).abs() < 1e-5);
    }
}
