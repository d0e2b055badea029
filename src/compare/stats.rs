//! The statistics `compare` reports, in plain Rust over `&[f64]`: Student t quantiles and tails
//! (for seed intervals and Welch's test), the exact McNemar test, the paired sign-flip
//! permutation test, and the paired bootstrap over problems with a seeded RNG.
//!
//! Why hand-written: statrs would bring the t distribution (3 new crates without its default
//! nalgebra), but the bootstrap, the sign-flip test and McNemar are not in it, and a bootstrap CI
//! must be bit-reproducible across crate upgrades (`rand`'s `StdRng` algorithm is not a
//! stability promise), so the RNG is a fixed SplitMix64 here. Definitions are in
//! docs/compare.md; every function below states its formula.

use serde::Serialize;

// The same generator `data::filter` shuffles with: a fixed stream, so a seed gives the same
// intervals in every rlx version.
use crate::quantile::quantile_sorted;
use crate::rng::SplitMix64;

// The paired tests live with the other pure functions of numbers: `health` judges runs with them
// too, and sits below `compare`.
pub(crate) use crate::rl::signif::{McNemar, SignFlip, ln_gamma, mcnemar, mcnemar_interval, sign_flip};

/// Mean of `xs`; `NaN` when empty.
pub(crate) fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// Sample standard deviation (divisor m − 1); `NaN` for fewer than 2 values.
pub(crate) fn sd(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return f64::NAN;
    }
    let m = mean(xs);
    (xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64).sqrt()
}

/// A two-sided interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Interval {
    /// Lower end.
    pub lo: f64,
    /// Upper end.
    pub hi: f64,
}

/// Mean of `m` seeds with its 95% t interval `x̄ ± t₀.₉₇₅,ₘ₋₁ · s/√m`.
///
/// A t interval rather than a percentile bootstrap: with 3 seeds a percentile bootstrap covers
/// about 68% instead of 95% (measured by simulation), and z = 1.96 about 81%.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct SeedMean {
    /// Seeds (values) averaged.
    pub m: usize,
    /// Their mean.
    pub mean: f64,
    /// Their sample standard deviation; `None` for one seed.
    pub sd: Option<f64>,
    /// The 95% t interval; `None` for one seed (no interval is possible).
    pub ci: Option<Interval>,
}

/// [`SeedMean`] of `xs` (non-empty).
pub(crate) fn seed_mean(xs: &[f64]) -> SeedMean {
    let m = xs.len();
    let mu = mean(xs);
    if m < 2 {
        return SeedMean { m, mean: mu, sd: None, ci: None };
    }
    let s = sd(xs);
    let half = t_quantile(0.975, (m - 1) as f64) * s / (m as f64).sqrt();
    SeedMean { m, mean: mu, sd: Some(s), ci: Some(Interval { lo: mu - half, hi: mu + half }) }
}

/// Welch's two-sample t test of `a` against `b` (the recipe-level comparison of two arms over
/// their seeds): Δ = ā − b̄, SE = √(s²_a/m_a + s²_b/m_b), Welch–Satterthwaite df, 95% CI
/// Δ ± t₀.₉₇₅,df · SE, two-sided p.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Welch {
    /// ā − b̄.
    pub delta: f64,
    /// Its standard error.
    pub se: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: f64,
    /// 95% interval of Δ.
    pub ci: Interval,
    /// Two-sided p-value of Δ = 0.
    pub p: f64,
}

/// [`Welch`] of `a` against `b`; `None` unless both have at least 2 values and some spread.
pub(crate) fn welch(a: &[f64], b: &[f64]) -> Option<Welch> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let (va, vb) = (sd(a).powi(2) / a.len() as f64, sd(b).powi(2) / b.len() as f64);
    let se = (va + vb).sqrt();
    if se <= 0.0 || !se.is_finite() {
        return None;
    }
    let df = (va + vb).powi(2) / (va.powi(2) / (a.len() - 1) as f64 + vb.powi(2) / (b.len() - 1) as f64);
    let delta = mean(a) - mean(b);
    let half = t_quantile(0.975, df) * se;
    let p = 2.0 * t_sf((delta / se).abs(), df);
    Some(Welch { delta, se, df, ci: Interval { lo: delta - half, hi: delta + half }, p: p.min(1.0) })
}

/// The paired bootstrap over problems: `resamples` times, draw P problems with replacement and
/// take the mean of their differences; the 95% CI is the 2.5th and 97.5th percentiles of those
/// means (linear interpolation between order statistics, numpy's default). Problems are the
/// resampling unit because they are what a new eval set would redraw.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Bootstrap {
    /// Mean of the differences.
    pub mean: f64,
    /// 95% percentile interval.
    pub ci: Interval,
    /// Resamples drawn.
    pub resamples: usize,
    /// RNG seed.
    pub seed: u64,
}

/// [`Bootstrap`] of the mean of `d` (non-empty).
pub(crate) fn paired_bootstrap(d: &[f64], resamples: usize, seed: u64) -> Bootstrap {
    let p = d.len();
    let mut rng = SplitMix64::new(seed);
    let mut means: Vec<f64> = (0..resamples.max(1))
        .map(|_| (0..p).map(|_| d[rng.below(p as u64) as usize]).sum::<f64>() / p as f64)
        .collect();
    means.sort_by(f64::total_cmp);
    Bootstrap { mean: mean(d), ci: Interval { lo: quantile_sorted(&means, 0.025), hi: quantile_sorted(&means, 0.975) }, resamples, seed }
}


/// Holm's step-down adjustment of `ps` (the family of tests one report makes: each arm against
/// the baseline): sort ascending, p₍ᵢ₎ · (m − i) for i = 0..m−1, made monotone by a running
/// maximum and capped at 1; returned in the input's order. Holm rather than Bonferroni: the same
/// guarantee (family-wise error ≤ α under any dependence) and never less power.
pub(crate) fn holm(ps: &[f64]) -> Vec<f64> {
    let m = ps.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| ps[a].total_cmp(&ps[b]));
    let mut out = vec![f64::NAN; m];
    let mut running = 0.0f64;
    for (rank, &i) in order.iter().enumerate() {
        running = running.max(ps[i] * (m - rank) as f64).min(1.0);
        out[i] = running;
    }
    out
}

/// An equivalence test of a paired mean difference within ±`margin` (two one-sided tests,
/// Schuirmann 1987) on per-problem differences: t₁ = (d̄ + M)/SE tests H₀: μ ≤ −M, t₂ = (d̄ − M)/SE
/// tests H₀: μ ≥ M, each against Student's t with P − 1 df, SE = s/√P over the P problems.
/// Equivalent within M only when both reject at 5%: p = max(p₁, p₂) < 0.05, the same as the 90%
/// t interval lying inside (−M, M). A t test rather than the sign-flip: shifting the differences by
/// M breaks the symmetry the sign-flip test needs under its null.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Tost {
    /// The margin M (the metric's units, 0–1 for a rate).
    pub margin: f64,
    /// Mean difference.
    pub mean: f64,
    /// Its standard error.
    pub se: f64,
    /// Degrees of freedom (problems − 1).
    pub df: f64,
    /// p of H₀: μ ≤ −M.
    pub p_lower: f64,
    /// p of H₀: μ ≥ M.
    pub p_upper: f64,
    /// max(p_lower, p_upper).
    pub p: f64,
    /// The 90% t interval of the mean.
    pub ci90: Interval,
    /// Whether both one-sided tests reject at 5%.
    pub equivalent: bool,
}

/// [`Tost`] of `d` within ±`margin`; `None` for fewer than 2 differences. All-equal differences
/// (SE 0) are equivalent exactly when their mean lies strictly inside the margin.
pub(crate) fn tost(d: &[f64], margin: f64) -> Option<Tost> {
    let p = d.len();
    if p < 2 {
        return None;
    }
    let (mu, df) = (mean(d), (p - 1) as f64);
    let se = sd(d) / (p as f64).sqrt();
    let (p_lower, p_upper, half) = if se > 0.0 {
        (t_sf((mu + margin) / se, df), t_sf((margin - mu) / se, df), t_quantile(0.95, df) * se)
    } else {
        let inside = |x: f64| if x > 0.0 { 0.0 } else { 1.0 };
        (inside(mu + margin), inside(margin - mu), 0.0)
    };
    let pv = p_lower.max(p_upper);
    Some(Tost { margin, mean: mu, se, df, p_lower, p_upper, p: pv, ci90: Interval { lo: mu - half, hi: mu + half }, equivalent: pv < 0.05 })
}

/// Upper tail P(T > t) of Student's t with `df` degrees of freedom (t ≥ 0), through the
/// regularized incomplete beta function: P(T > t) = ½ · I_{df/(df+t²)}(df/2, ½).
pub(crate) fn t_sf(t: f64, df: f64) -> f64 {
    if t.is_nan() {
        return f64::NAN;
    }
    if t.is_infinite() {
        return if t > 0.0 { 0.0 } else { 1.0 };
    }
    let tail = 0.5 * inc_beta(df / 2.0, 0.5, df / (df + t * t));
    if t >= 0.0 { tail } else { 1.0 - tail }
}

/// The `p` quantile of Student's t with `df` (possibly fractional) degrees of freedom, found by
/// bisection on [`t_sf`] to 1e-12.
pub(crate) fn t_quantile(p: f64, df: f64) -> f64 {
    if p == 0.5 {
        return 0.0;
    }
    if p < 0.5 {
        return -t_quantile(1.0 - p, df);
    }
    let target = 1.0 - p;
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    while t_sf(hi, df) > target {
        hi *= 2.0;
        if hi > 1e12 {
            return f64::INFINITY;
        }
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if t_sf(mid, df) > target { lo = mid } else { hi = mid }
        if hi - lo < 1e-12 * hi.max(1.0) {
            break;
        }
    }
    0.5 * (lo + hi)
}

/// Regularized incomplete beta I_x(a, b), by its continued fraction (modified Lentz), using the
/// symmetry I_x(a,b) = 1 − I_{1−x}(b,a) where the fraction converges slowly.
fn inc_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    if x < (a + 1.0) / (a + b + 2.0) {
        ln_front.exp() * beta_cf(a, b, x) / a
    } else {
        1.0 - ln_front.exp() * beta_cf(b, a, 1.0 - x) / b
    }
}

fn beta_cf(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let away_from_zero = |v: f64| if v.abs() < TINY { TINY } else { v };
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 / away_from_zero(1.0 - qab * x / qap);
    let mut h = d;
    // One step of the modified Lentz method: the factor by which term `aa` changes the fraction.
    let mut lentz = |aa: f64| {
        d = 1.0 / away_from_zero(1.0 + aa * d);
        c = away_from_zero(1.0 + aa / c);
        d * c
    };
    for m in 1..=500 {
        let m = f64::from(m);
        let m2 = 2.0 * m;
        h *= lentz(m * (b - m) * x / ((qam + m2) * (a + m2)));
        let del = lentz(-(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)));
        h *= del;
        if (del - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn t_quantiles_match_tables() {
        // Two-sided 95% critical values, as scipy 1.14.1 stats.t.ppf(0.975, df) gives them.
        for (df, want) in [(1.0, 12.706_204_736), (2.0, 4.302_652_730), (3.0, 3.182_446_305), (4.0, 2.776_445_105), (9.0, 2.262_157_163), (30.0, 2.042_272_456)] {
            let got = t_quantile(0.975, df);
            assert!(close(got, want, 1e-6), "df {df}: {got} vs {want}");
        }
        // A fractional df (Welch): scipy 1.14.1 stats.t.ppf(0.975, 3.5) = 2.94008864.
        assert!(close(t_quantile(0.975, 3.5), 2.940_088_64, 1e-6), "{}", t_quantile(0.975, 3.5));
        // scipy 1.14.1 stats.t.sf(2.0, 5) = 0.0509697394.
        assert!(close(t_sf(2.0, 5.0), 0.050_969_739, 1e-8), "{}", t_sf(2.0, 5.0));
        assert!(close(t_sf(0.0, 7.0), 0.5, 1e-12));
        assert!(close(t_quantile(0.025, 2.0), -4.302_652_730, 1e-6));
    }

    #[test]
    fn seed_mean_by_hand() {
        // 0.40, 0.45, 0.50: mean 0.45, sd 0.05, half-width 4.302653 · 0.05 / √3 = 0.124207.
        let s = seed_mean(&[0.40, 0.45, 0.50]);
        assert_eq!(s.m, 3);
        assert!(close(s.mean, 0.45, 1e-12));
        assert!(close(s.sd.unwrap(), 0.05, 1e-12));
        let ci = s.ci.unwrap();
        assert!(close(ci.lo, 0.45 - 0.124_206_9, 1e-6) && close(ci.hi, 0.45 + 0.124_206_9, 1e-6), "{ci:?}");
        let one = seed_mean(&[0.3]);
        assert_eq!((one.m, one.sd, one.ci), (1, None, None));
    }

    #[test]
    fn welch_by_hand() {
        // a = 1,2,3 (var 1), b = 2,4,6,8 (var 20/3): va = 1/3, vb = 5/3, SE = √2,
        // df = 2² / ((1/3)²/2 + (5/3)²/3) = 4 / (1/18 + 25/27) = 4.0755...
        let w = welch(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.0, 8.0]).unwrap();
        assert!(close(w.delta, -3.0, 1e-12));
        assert!(close(w.se, 2f64.sqrt(), 1e-12));
        let df = 4.0 / (1.0 / 18.0 + 25.0 / 27.0);
        assert!(close(w.df, df, 1e-12));
        // scipy 1.14.1 stats.ttest_ind([1,2,3], [2,4,6,8], equal_var=False): t = −2.1213,
        // df = 4.07547, p = 0.0999128643.
        assert!(close(w.p, 0.099_912_864_3, 1e-8), "{}", w.p);
        assert!(welch(&[1.0], &[2.0, 3.0]).is_none());
    }

    #[test]
    fn holm_by_hand() {
        // p = (0.01, 0.04, 0.03) over m = 3: sorted 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 →
        // monotone 0.03, 0.06, 0.06 (statsmodels multipletests(method="holm") gives the same).
        let h = holm(&[0.01, 0.04, 0.03]);
        for (got, want) in h.iter().zip([0.03, 0.06, 0.06]) {
            assert!(close(*got, want, 1e-12), "{h:?}");
        }
        // One test is its own adjustment; large ones cap at 1.
        assert_eq!(holm(&[0.2]), vec![0.2]);
        assert_eq!(holm(&[0.5, 0.6]), vec![1.0, 1.0]);
        assert!(holm(&[]).is_empty());
    }

    #[test]
    fn tost_known_answers() {
        // d = (0.1, −0.1, 0.0, 0.2, −0.2, 0.0, 0.1, −0.1, 0.0, 0.0): mean 0, sd √(0.12/9) = 0.11547,
        // SE 0.036515; margin 0.1: t = ±2.7386 with 9 df, one-sided p = scipy 1.14.1
        // stats.t.sf(2.7386, 9) = 0.011470: equivalent within 0.1, not within 0.05 (t = 1.369,
        // p = 0.1021).
        let d = [0.1, -0.1, 0.0, 0.2, -0.2, 0.0, 0.1, -0.1, 0.0, 0.0];
        let t = tost(&d, 0.1).unwrap();
        assert!(close(t.se, 0.036_514_837, 1e-8), "{t:?}");
        assert!(close(t.p, 0.011_47, 2e-4) && t.equivalent, "{t:?}");
        assert!(close(t.p_lower, t.p_upper, 1e-12));
        let narrow = tost(&d, 0.05).unwrap();
        assert!(close(narrow.p, 0.1021, 2e-4) && !narrow.equivalent, "{narrow:?}");
        // A shifted mean: one side rejects, the other does not, and the larger p decides.
        let shifted: Vec<f64> = d.iter().map(|x| x + 0.08).collect();
        let s = tost(&shifted, 0.1).unwrap();
        assert!(s.p_lower < 0.001 && s.p_upper > 0.2 && !s.equivalent, "{s:?}");
        // The 90% interval inside the margin ⇔ equivalent.
        assert!(t.ci90.lo > -0.1 && t.ci90.hi < 0.1 && (s.ci90.hi > 0.1));
        // Constant differences: inside the margin or not, exactly.
        assert!(tost(&[0.02; 5], 0.05).unwrap().equivalent);
        assert!(!tost(&[0.07; 5], 0.05).unwrap().equivalent);
        assert!(tost(&[0.1], 0.2).is_none());
    }

    #[test]
    fn mcnemar_interval_is_clopper_pearson_and_agrees_with_the_test() {
        // All discordant pairs one way: π_lo = 0.025^(1/m) in closed form, π_hi = 1. 4 up, 0 down
        // over 51 problems (p = 0.125): Δ ∈ [4(2·0.3976 − 1)/51, 4/51] = [−1.61, +7.84] pp.
        let (lo, hi) = mcnemar_interval(4, 0, 51);
        assert!(close(lo, 4.0 * (2.0 * 0.025f64.powf(0.25) - 1.0) / 51.0, 1e-9), "{lo}");
        assert!(close(hi, 4.0 / 51.0, 1e-9) && lo < 0.0, "{hi}");
        // 9 of 10 (the textbook Clopper–Pearson interval [0.5550, 0.9975]): 9 up, 1 down over 51.
        let (lo, hi) = mcnemar_interval(9, 1, 51);
        assert!(close(lo, 10.0 * (2.0 * 0.5550 - 1.0) / 51.0, 1e-4) && close(hi, 10.0 * (2.0 * 0.9975 - 1.0) / 51.0, 1e-4), "{lo} {hi}");
        // Mirror image for the other direction.
        let (l2, h2) = mcnemar_interval(1, 9, 51);
        assert!(close(l2, -hi, 1e-9) && close(h2, -lo, 1e-9));
        // It excludes 0 exactly when McNemar's p is below 0.05, over every split of up to 30.
        for m in 1..=30u64 {
            for b in 0..=m {
                let (lo, hi) = mcnemar_interval(b, m - b, 60);
                assert_eq!(lo > 0.0 || hi < 0.0, mcnemar(b, m - b).p < 0.05, "b = {b}, c = {}", m - b);
            }
        }
    }

    #[test]
    fn mcnemar_known_answers() {
        // b = 11, c = 6 (the quickstart's 11 problems up and 6 down): 2·Σ_{i≤6} C(17,i)/2^17 =
        // 2·21778/131072 = 0.332306 (by hand; scipy 1.14.1 stats.binomtest(6, 17).pvalue =
        // 0.332305908203125).
        let m = mcnemar(11, 6);
        assert!(close(m.p, 2.0 * 21_778.0 / 131_072.0, 1e-12), "{}", m.p);
        assert!(close(m.p, 0.3323, 1e-4));
        // mid-p = p − C(17,6)/2^17 = 0.332306 − 12376/131072 = 0.237885.
        assert!(close(m.mid_p, (2.0 * 21_778.0 - 2.0 * 0.5 * 12_376.0) / 131_072.0, 1e-12), "{}", m.mid_p);
        // b=9, c=3 → 0.146 / 0.092; b=41, c=15 → 6.9e−4 / 4.6e−4
        // (scipy binomtest: 0.14599609375 and 0.000685564).
        let m = mcnemar(9, 3);
        assert!(close(m.p, 0.146, 1e-3) && close(m.mid_p, 0.092, 1e-3), "{m:?}");
        let m = mcnemar(41, 15);
        assert!(close(m.p, 6.9e-4, 0.05e-4) && close(m.mid_p, 4.6e-4, 0.05e-4), "{m:?}");
        // Symmetric, ties give 1, nothing discordant gives 1.
        assert_eq!(mcnemar(6, 11).p, mcnemar(11, 6).p);
        assert_eq!(mcnemar(5, 5).p, 1.0);
        assert_eq!(mcnemar(0, 0).p, 1.0);
        // Large counts do not underflow: b = 600, c = 400 is far out (z ≈ 6.3).
        let big = mcnemar(600, 400).p;
        assert!(big > 0.0 && big < 1e-8, "{big}");
    }

    #[test]
    fn sign_flip_equals_mcnemar_on_binary_differences() {
        let mut d = vec![1.0; 11];
        d.extend(vec![-1.0; 6]);
        d.extend(vec![0.0; 23]);
        let s = sign_flip(&d, 1000, 1);
        assert!(s.exact && s.nonzero == 17);
        assert!(close(s.p, mcnemar(11, 6).p, 1e-12));
    }

    #[test]
    fn sign_flip_enumerates_small_cases_exactly() {
        // d = (0.5, 0.25, 0.25): |T| = 1; of the 8 sign patterns, T ∈ {±1, ±0.5, ±0, ±0} ⇒
        // |T*| ≥ 1 for the two patterns with all signs equal: p = 2/8.
        let s = sign_flip(&[0.5, 0.25, 0.25, 0.0], 1000, 1);
        assert!(s.exact);
        assert!(close(s.p, 0.25, 1e-12), "{}", s.p);
        // Monte Carlo beyond 20: never 0, close to the exact binomial answer for ±1/±0.5 data.
        let mut many: Vec<f64> = (0..30).map(|i| if i % 2 == 0 { 0.5 } else { 1.0 }).collect();
        many.extend([-0.5, -1.0]);
        let mc = sign_flip(&many, 20_000, 7);
        assert!(!mc.exact && mc.p > 0.0 && mc.p < 1e-3, "{mc:?}");
    }

    /// The exact bootstrap distribution of the mean of d ∈ {−1, 0, 1} with counts (b, c, z) over
    /// P = b + c + z problems: (X − Y)/P with (X, Y, ·) ~ Multinomial(P; b/P, c/P, z/P).
    fn exact_bootstrap_quantiles(b: usize, c: usize, z: usize) -> (f64, f64) {
        let p = b + c + z;
        let (pb, pc, pz) = (b as f64 / p as f64, c as f64 / p as f64, z as f64 / p as f64);
        let ln_fact = |n: usize| ln_gamma(n as f64 + 1.0);
        let mut mass: std::collections::BTreeMap<i64, f64> = Default::default();
        for x in 0..=p {
            for y in 0..=(p - x) {
                let w = p - x - y;
                let ln = ln_fact(p) - ln_fact(x) - ln_fact(y) - ln_fact(w) + x as f64 * pb.ln() + y as f64 * pc.ln() + if w > 0 { w as f64 * pz.ln() } else { 0.0 };
                *mass.entry(x as i64 - y as i64).or_default() += ln.exp();
            }
        }
        let (mut acc, mut lo, mut hi) = (0.0, None, None);
        for (&k, &m) in &mass {
            acc += m;
            if lo.is_none() && acc >= 0.025 {
                lo = Some(k as f64 / p as f64);
            }
            if hi.is_none() && acc >= 0.975 {
                hi = Some(k as f64 / p as f64);
            }
        }
        (lo.unwrap(), hi.unwrap())
    }

    #[test]
    fn bootstrap_matches_the_exact_resampling_distribution() {
        // 40 problems, 11 better, 6 worse, 23 tied: the bootstrap percentiles must land on the
        // exact multinomial quantiles of the resampled mean, within one problem's step (1/40).
        let mut d = vec![1.0; 11];
        d.extend(vec![-1.0; 6]);
        d.extend(vec![0.0; 23]);
        let (lo, hi) = exact_bootstrap_quantiles(11, 6, 23);
        let bs = paired_bootstrap(&d, 20_000, 0);
        assert!(close(bs.mean, 5.0 / 40.0, 1e-12));
        assert!(close(bs.ci.lo, lo, 1.0 / 40.0 + 1e-9), "{} vs {lo}", bs.ci.lo);
        assert!(close(bs.ci.hi, hi, 1.0 / 40.0 + 1e-9), "{} vs {hi}", bs.ci.hi);
        // The interval straddles 0 here, as the McNemar p = 0.33 says it should.
        assert!(bs.ci.lo < 0.0 && bs.ci.hi > 0.0, "{bs:?}");
        // Seeded: the same seed gives the same interval, another seed a slightly different one.
        assert_eq!(paired_bootstrap(&d, 20_000, 0), bs);
        // A constant difference has a degenerate interval.
        let c = paired_bootstrap(&[0.25; 12], 1000, 3);
        assert_eq!((c.ci.lo, c.ci.hi), (0.25, 0.25));
    }
}
