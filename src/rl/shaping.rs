//! The GRPO variants that act on per-token advantages and rewards rather than inside a loss:
//! loss aggregation (`grpo.loss_agg`), DAPO's overlong reward shaping (`grpo.overlong`), the KL
//! penalty to the reference policy (`grpo.kl`) and the entropy estimate of sampled tokens.
//!
//! Why advantages: every backend's losses are token-level sums (see [`super::loss`]), and the
//! importance-sampling, PPO, CISPO and GSPO token losses are positively homogeneous in the
//! advantage (`ℓ(c·A) = c·ℓ(A)` for `c > 0`; PPO's `min` and GSPO's clip keep that), so dividing a
//! sequence's advantages by its normaliser *is* the aggregation, on the embedded trainer and on
//! Tinker alike. DRO's quadratic penalty does not scale with A, so the plan refuses `loss_agg`
//! other than `sum` with it. Formulas with references: docs/variants.md.

use crate::spec::types::{KlEstimator, LossAgg};

/// Errors in the shaping inputs (engine bugs rather than user input: the plan checks the spec).
#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum Error {
    /// The reference log-probabilities do not line up with the sampled tokens.
    #[error("{got} reference log-probabilities for {want} sampled tokens")]
    Lengths {
        /// Sampled tokens.
        want: usize,
        /// Reference values given.
        got: usize,
    },
}

/// The factor each sequence's per-token losses are multiplied by under `agg`, for the sequences
/// of one step with `lens[i]` sampled tokens each (`constant` is C; sequences with no sampled
/// token get 0, they contribute nothing anyway).
///
/// | `loss_agg` | factor of sequence i |
/// |---|---|
/// | `sum` | 1 |
/// | `sequence_mean` | 1 / (N · L_i) |
/// | `token_mean` | 1 / T, T = Σ L_i |
/// | `constant` | 1 / (N · C) |
pub(crate) fn agg_factors(agg: &LossAgg, lens: &[usize], constant: u32) -> Vec<f64> {
    let n = lens.len() as f64;
    let total: usize = lens.iter().sum();
    lens.iter()
        .map(|&l| {
            if l == 0 {
                return 0.0;
            }
            match agg {
                LossAgg::Sum => 1.0,
                LossAgg::SequenceMean => 1.0 / (n * l as f64),
                LossAgg::TokenMean => 1.0 / total as f64,
                LossAgg::Constant { .. } => 1.0 / (n * f64::from(constant.max(1))),
            }
        })
        .collect()
}

/// DAPO's soft overlong punishment (arXiv 2503.14476, eq. 13) of a completion of `len` tokens
/// with `max_tokens` = L_max and `cache` = L_cache, scaled by `penalty`:
/// 0 if `len` ≤ L_max − L_cache; `penalty` · ((L_max − L_cache) − `len`) / L_cache up to L_max;
/// −`penalty` beyond (a completion cannot be longer than `max_tokens` here; kept for the
/// definition).
pub(crate) fn overlong_penalty(len: usize, max_tokens: usize, cache: usize, penalty: f64) -> f64 {
    let free = max_tokens.saturating_sub(cache);
    if len <= free || cache == 0 {
        0.0
    } else if len <= max_tokens {
        penalty * (free as f64 - len as f64) / cache as f64
    } else {
        -penalty
    }
}

/// One token's KL estimate from the sampler's log-probability `q` and the reference's `r` of the
/// sampled token: k1 = q − r, k3 = exp(r − q) − (r − q) − 1.
pub(crate) fn kl_estimate(estimator: KlEstimator, q: f64, r: f64) -> f64 {
    match estimator {
        KlEstimator::K1 => q - r,
        KlEstimator::K3 => {
            let d = r - q;
            d.exp() - d - 1.0
        }
    }
}

/// The advantage form of the KL penalty: how each sampled token's penalty is shaped.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct KlPenalty {
    /// The estimator k.
    pub estimator: KlEstimator,
    /// β.
    pub coef: f64,
    /// Subtracted from every token's estimate (the batch's mean when centring, else 0).
    pub centre: f64,
    /// Each token's penalty is also charged to earlier sampled tokens, times `discount` per
    /// token between them (0: each pays its own).
    pub discount: f64,
}

/// Subtracts β·(k(t) − centre), discounted-summed over later sampled tokens, from the
/// advantage of every sampled token of a datum: `q` are the datum's sampler log-probabilities,
/// `reference` the reference's of the same targets, and a token is sampled where `sampled[t]`.
/// (The step's mean estimate, which centring needs, is the caller's: it spans every datum.)
///
/// # Errors
/// [`Error::Lengths`] when the three do not have one entry per target.
pub(crate) fn apply_kl(advantages: &mut [f32], q: &[f32], reference: &[f32], sampled: &[bool], p: KlPenalty) -> Result<(), Error> {
    if reference.len() != advantages.len() || q.len() != advantages.len() || sampled.len() != advantages.len() {
        return Err(Error::Lengths { want: advantages.len(), got: reference.len() });
    }
    // From the last token back: the running discounted sum of later penalties (tinker-cookbook's
    // `discounted_future_sum`, over positions, non-sampled ones contributing 0).
    let mut future = 0.0;
    for t in (0..advantages.len()).rev() {
        let own = if sampled[t] {
            p.coef * (kl_estimate(p.estimator, f64::from(q[t]), f64::from(reference[t])) - p.centre)
        } else {
            0.0
        };
        future = own + p.discount * future;
        if sampled[t] {
            advantages[t] = (f64::from(advantages[t]) - future) as f32;
        }
    }
    Ok(())
}

/// The entropy estimate of the sampling policy from its sampled tokens: −mean(q) over them, a
/// Monte Carlo estimate of the per-token entropy of the distribution the sampler drew from (the
/// tempered one at temperature ≠ 1; top-p/top-k truncation included), since
/// H = E_{y∼π}[−log π(y)]. `None` without tokens.
pub(crate) fn entropy_estimate<'a>(logprobs: impl IntoIterator<Item = &'a [f32]>) -> Option<f64> {
    let (mut sum, mut n) = (0.0, 0usize);
    for lp in logprobs {
        sum -= lp.iter().map(|&x| f64::from(x)).sum::<f64>();
        n += lp.len();
    }
    (n > 0).then(|| sum / n as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-9, "{a} != {b}");
    }

    #[test]
    fn aggregation_factors_by_hand() {
        // Three sequences of 2, 4 and 0 sampled tokens: N = 3, T = 6.
        let lens = [2, 4, 0];
        assert_eq!(agg_factors(&LossAgg::Sum, &lens, 0), vec![1.0, 1.0, 0.0]);
        let s = agg_factors(&LossAgg::SequenceMean, &lens, 0);
        close(s[0], 1.0 / 6.0);
        close(s[1], 1.0 / 12.0);
        let t = agg_factors(&LossAgg::TokenMean, &lens, 0);
        close(t[0], 1.0 / 6.0);
        close(t[1], 1.0 / 6.0);
        // Dr. GRPO: C = 96 for every sequence, whatever its length.
        let c = agg_factors(&LossAgg::Constant { tokens: Some(96) }, &lens, 96);
        close(c[0], 1.0 / 288.0);
        close(c[1], 1.0 / 288.0);
        assert_eq!(c[2], 0.0);
        // Each aggregation of per-token losses ℓ = 1 gives its mean: sequence_mean averages the
        // two non-empty sequences' means (1) over N = 3, token_mean is exactly 1.
        let total = |f: &[f64]| f.iter().zip(lens).map(|(f, l)| f * l as f64).sum::<f64>();
        close(total(&s), 2.0 / 3.0);
        close(total(&t), 1.0);
        close(total(&c), 6.0 / 288.0);
    }

    #[test]
    fn overlong_penalty_by_hand() {
        // L_max 96, L_cache 16: free up to 80 tokens, then linear down to −1 at 96.
        assert_eq!(overlong_penalty(80, 96, 16, 1.0), 0.0);
        close(overlong_penalty(81, 96, 16, 1.0), -1.0 / 16.0);
        close(overlong_penalty(88, 96, 16, 1.0), -0.5);
        close(overlong_penalty(96, 96, 16, 1.0), -1.0);
        close(overlong_penalty(96, 96, 16, 0.5), -0.5);
        close(overlong_penalty(97, 96, 16, 1.0), -1.0);
        assert_eq!(overlong_penalty(10, 96, 0, 1.0), 0.0);
    }

    #[test]
    fn kl_estimators_by_hand() {
        // q = −1, r = −1.5: k1 = 0.5; k3 = e^−0.5 + 0.5 − 1 = 0.106531.
        close(kl_estimate(KlEstimator::K1, -1.0, -1.5), 0.5);
        assert!((kl_estimate(KlEstimator::K3, -1.0, -1.5) - 0.106531).abs() < 1e-6);
        // Equal policies: both zero. k3 is never negative, k1 can be.
        close(kl_estimate(KlEstimator::K3, -0.7, -0.7), 0.0);
        assert!(kl_estimate(KlEstimator::K1, -2.0, -1.0) < 0.0);
        assert!(kl_estimate(KlEstimator::K3, -2.0, -1.0) > 0.0);
    }

    #[test]
    fn kl_penalty_touches_sampled_tokens_only() {
        let mut a = [0.0f32, 1.0, 1.0];
        let q = [0.0f32, -1.0, -2.0];
        let r = [-5.0f32, -1.5, -2.0];
        let plain = KlPenalty { estimator: KlEstimator::K1, coef: 0.1, centre: 0.0, discount: 0.0 };
        apply_kl(&mut a, &q, &r, &[false, true, true], plain).unwrap();
        assert_eq!(a[0], 0.0, "the prompt token keeps a zero advantage");
        assert!((f64::from(a[1]) - 0.95).abs() < 1e-6);
        assert_eq!(a[2], 1.0);
        assert_eq!(apply_kl(&mut a, &q, &r[..2], &[true; 3], plain), Err(Error::Lengths { want: 3, got: 2 }));
    }

    #[test]
    fn kl_penalty_centres_and_discounts_like_the_cookbook() {
        // k1 per sampled token: [0.5, 0.5, 1.0] at positions 1, 2, 4 (3 is a feedback token).
        let q = [0.0f32, -1.0, -1.0, 0.0, -1.0];
        let r = [0.0f32, -1.5, -1.5, 0.0, -2.0];
        let sampled = [false, true, true, false, true];
        let p = KlPenalty { estimator: KlEstimator::K1, coef: 1.0, centre: 0.6, discount: 0.5 };
        let mut a = [0.0f32; 5];
        apply_kl(&mut a, &q, &r, &sampled, p).unwrap();
        // Centred penalties [-0.1, -0.1, 0, 0.4]; discounted future sums from the end:
        // pos 4: 0.4; pos 3 (not sampled): 0.2; pos 2: -0.1 + 0.1 = 0; pos 1: -0.1 + 0 = -0.1.
        let want = [0.0, 0.1, 0.0, 0.0, -0.4];
        for (x, w) in a.iter().zip(want) {
            assert!((f64::from(*x) - w).abs() < 1e-6, "{a:?} vs {want:?}");
        }
    }

    #[test]
    fn entropy_estimate_is_minus_mean_logprob() {
        close(entropy_estimate([&[-1.0f32, -2.0][..], &[-3.0][..]]).unwrap(), 2.0);
        assert_eq!(entropy_estimate(std::iter::empty::<&[f32]>()), None);
    }
}
