//! Paired significance tests on per-problem outcomes: the exact McNemar test (binary
//! outcomes: one sample per problem, greedy pass@1) and the paired sign-flip permutation test
//! (per-problem estimates). `compare` reports them; `health` judges whether a run's eval moved
//! with them. Formulas in docs/compare.md.

use serde::Serialize;

pub(crate) use crate::quantile::ln_gamma;
use crate::quantile::binomial_pmf;
use crate::rng::SplitMix64;

/// The exact McNemar test on paired binary outcomes: `b` pairs where A passed and B failed, `c`
/// the reverse. Under H0 b ~ Binomial(b + c, ½):
/// p = min(1, 2 · Σ_{i ≤ min(b,c)} C(b+c, i) / 2^(b+c)); mid-p = p − C(b+c, min(b,c)) / 2^(b+c)
/// (Fagerland, Lydersen & Laake 2013 recommend the mid-p; both are reported).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct McNemar {
    /// Pairs A passed and B failed.
    pub b: u64,
    /// Pairs A failed and B passed.
    pub c: u64,
    /// Exact two-sided p-value.
    pub p: f64,
    /// Mid-p value.
    pub mid_p: f64,
}

/// [`McNemar`] for `b` and `c`.
pub(crate) fn mcnemar(b: u64, c: u64) -> McNemar {
    let q = b + c;
    let lo = b.min(c);
    if q == 0 {
        return McNemar { b, c, p: 1.0, mid_p: 1.0 };
    }
    let tail = binomial_cdf(q, lo, 0.5);
    let point = binomial_pmf(q, lo, 0.5);
    let p = (2.0 * tail).min(1.0);
    let mid_p = (2.0 * (tail - 0.5 * point)).clamp(0.0, 1.0);
    McNemar { b, c, p, mid_p }
}

/// The 95% interval of Δ = (b − c) / n (A's pass rate minus B's over `n` pairs) that agrees with
/// [`mcnemar`]: conditional on the m = b + c discordant pairs, b ~ Binomial(m, π) and
/// Δ = m(2π − 1)/n, so the Clopper–Pearson interval of π maps to one of Δ. Equal tails of 2.5%
/// each make it exclude 0 exactly when McNemar's two-sided p (twice the smaller tail) is below
/// 0.05. Why not the paired bootstrap the other metrics use: with few discordant pairs (4 up,
/// 0 down) every resample leans one way, and it gave [+2.0, +15.7] pp beside p = 0.125.
pub(crate) fn mcnemar_interval(b: u64, c: u64, n: u64) -> (f64, f64) {
    let m = b + c;
    if m == 0 || n == 0 {
        return (0.0, 0.0);
    }
    // π_lo: P(X ≥ b | π) = 2.5%; π_hi: P(X ≤ b | π) = 2.5%. Both tails are monotone in π.
    let lo = if b == 0 { 0.0 } else { bisect(|pi| 1.0 - binomial_cdf(m, b - 1, pi) - 0.025) };
    let hi = if b == m { 1.0 } else { bisect(|pi| 0.025 - binomial_cdf(m, b, pi)) };
    let delta = |pi: f64| m as f64 * (2.0 * pi - 1.0) / n as f64;
    (delta(lo), delta(hi))
}

/// The root in (0, 1) of `f`, increasing there.
fn bisect(f: impl Fn(f64) -> f64) -> f64 {
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if f(mid) < 0.0 { lo = mid } else { hi = mid }
    }
    0.5 * (lo + hi)
}

/// P(X ≤ k) for X ~ Binomial(n, π), 0 < π < 1: McNemar's p and its interval.
fn binomial_cdf(n: u64, k: u64, pi: f64) -> f64 {
    (0..=k.min(n)).map(|i| binomial_pmf(n, i, pi)).sum::<f64>().min(1.0)
}

/// The paired sign-flip permutation test of mean(d) = 0: under H0 the sign of each per-problem
/// difference is a fair coin, so p = P(|Σ ±dᵢ| ≥ |Σ dᵢ|). Exact enumeration of all 2^q sign
/// patterns of the q non-zero differences when q ≤ [`EXACT_SIGN_FLIP_MAX`] or when every
/// non-zero |dᵢ| is equal (then it is the binomial sign test, which for dᵢ ∈ {−1, 0, 1} is exactly
/// the exact McNemar test); otherwise `resamples` random patterns with
/// p = (1 + #{|T*| ≥ |T|}) / (resamples + 1) (Phipson & Smyth 2010: never 0).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct SignFlip {
    /// Non-zero differences.
    pub nonzero: usize,
    /// Two-sided p-value.
    pub p: f64,
    /// Whether `p` is exact (enumerated) rather than a Monte Carlo estimate.
    pub exact: bool,
}

/// Largest number of non-zero differences enumerated exactly (2^20 patterns).
pub(crate) const EXACT_SIGN_FLIP_MAX: usize = 20;

/// [`SignFlip`] of `d`; `seed` drives the Monte Carlo case.
pub(crate) fn sign_flip(d: &[f64], resamples: usize, seed: u64) -> SignFlip {
    const EPS: f64 = 1e-9;
    let nz: Vec<f64> = d.iter().copied().filter(|x| x.abs() > EPS).collect();
    let q = nz.len();
    if q == 0 {
        return SignFlip { nonzero: 0, p: 1.0, exact: true };
    }
    let t_obs = nz.iter().sum::<f64>().abs();
    let first = nz[0].abs();
    if nz.iter().all(|x| (x.abs() - first).abs() < EPS) {
        // Equal magnitudes: |T*| depends only on how many signs are positive.
        let plus = nz.iter().filter(|&&x| x > 0.0).count() as u64;
        let m = mcnemar(plus, q as u64 - plus);
        return SignFlip { nonzero: q, p: m.p, exact: true };
    }
    if q <= EXACT_SIGN_FLIP_MAX {
        let mut hits = 0u64;
        for pattern in 0u64..(1 << q) {
            let t: f64 = nz.iter().enumerate().map(|(i, x)| if pattern >> i & 1 == 1 { -x } else { *x }).sum();
            if t.abs() >= t_obs - EPS {
                hits += 1;
            }
        }
        return SignFlip { nonzero: q, p: hits as f64 / (1u64 << q) as f64, exact: true };
    }
    let mut rng = SplitMix64::new(seed);
    let mut hits = 0usize;
    for _ in 0..resamples {
        let t: f64 = nz.iter().map(|x| if rng.next_u64() >> 63 == 1 { -x } else { *x }).sum();
        if t.abs() >= t_obs - EPS {
            hits += 1;
        }
    }
    SignFlip { nonzero: q, p: (1 + hits) as f64 / (resamples + 1) as f64, exact: false }
}

