//! rlx's one quantile: linear interpolation between order statistics at position q·(n − 1)
//! (numpy's default, R's type 7), used for the sandbox latency percentiles of `metrics.jsonl`,
//! `rlx sandbox bench` and the bootstrap intervals of `rlx compare`. Three definitions (nearest
//! rank, rounded position, interpolated) once lived in those three places and disagreed on small
//! samples. Also the one binomial distribution (the median's interval here, McNemar's p and its
//! interval in `rl::signif`) and the ln Γ it rests on.

/// The `q` quantile (0 ≤ q ≤ 1) of sorted values; 0 for none.
pub(crate) fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (i, frac) = (pos.floor() as usize, pos.fract());
    if i + 1 >= sorted.len() { sorted[sorted.len() - 1] } else { sorted[i] + frac * (sorted[i + 1] - sorted[i]) }
}

/// A median and a distribution-free interval for it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MedianInterval {
    /// The sample median (interpolated, as [`quantile_sorted`] at ½).
    pub median: f64,
    /// Lower end: the j-th smallest value.
    pub lo: f64,
    /// Upper end: the j-th largest value.
    pub hi: f64,
    /// Its exact coverage, at least the confidence asked for.
    pub coverage: f64,
}

/// The median of `values` (which it sorts) with the order-statistic interval
/// [x₍ⱼ₎, x₍ₙ₋ⱼ₊₁₎] of the largest j whose coverage 1 − 2·P(Binomial(n, ½) < j) is at least
/// `confidence` (any continuous distribution: each value lies below the median with
/// probability ½). `None` when n is too small for that confidence (n < 6 at 95%) or past 1,000
/// (no benchmark repeats that often).
/// (Rejected: a bootstrap interval, which undercovers at the ten or so repetitions a
/// benchmark affords.)
pub fn median_interval(values: &mut [f64], confidence: f64) -> Option<MedianInterval> {
    let n = values.len();
    if n == 0 || n > 1000 {
        return None;
    }
    values.sort_by(f64::total_cmp);
    // P(B < j) for B ~ Binomial(n, ½), accumulated a term at a time (one cdf per j would be
    // quadratic in n).
    let mut below = 0.0;
    let mut best = None;
    for j in 1..=n / 2 {
        below += binomial_pmf(n as u64, (j - 1) as u64, 0.5);
        let coverage = 1.0 - 2.0 * below;
        if coverage < confidence {
            break;
        }
        best = Some((j, coverage));
    }
    let (j, coverage) = best?;
    Some(MedianInterval { median: quantile_sorted(values, 0.5), lo: values[j - 1], hi: values[n - j], coverage })
}

/// The `q` quantile of `values`, which it sorts.
pub fn quantile(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    quantile_sorted(values, q)
}

/// P(X = k) for X ~ Binomial(n, π), 0 < π < 1 (the one binomial of rlx's tests), through
/// logarithms so that n in the thousands does not underflow term by term. At π = ½ the two log
/// factors are one, `−n ln 2`, which keeps McNemar's p to the bit what it was before π became a
/// parameter.
pub(crate) fn binomial_pmf(n: u64, k: u64, pi: f64) -> f64 {
    #[allow(clippy::float_cmp)] // exactly ½, the sign tests' coin, not a computed π near it
    let ln_p = if pi == 0.5 { -(n as f64) * std::f64::consts::LN_2 } else { k as f64 * pi.ln() + (n - k) as f64 * (1.0 - pi).ln() };
    (ln_choose(n, k) + ln_p).exp()
}

fn ln_choose(n: u64, k: u64) -> f64 {
    ln_gamma(n as f64 + 1.0) - ln_gamma(k as f64 + 1.0) - ln_gamma((n - k) as f64 + 1.0)
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, 9 terms; relative error ~1e-15).
pub(crate) fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x)Γ(1−x) = π / sin(πx).
        return std::f64::consts::PI.ln() - (std::f64::consts::PI * x).sin().abs().ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = G[0];
    let t = x + 7.5;
    for (i, g) in G.iter().enumerate().skip(1) {
        a += g / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolates_between_order_statistics() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(quantile_sorted(&v, 0.5), 3.0);
        assert_eq!(quantile_sorted(&v, 0.25), 2.0);
        assert!((quantile_sorted(&v, 0.1) - 1.4).abs() < 1e-12);
        assert_eq!(quantile_sorted(&v, 1.0), 5.0);
        assert_eq!(quantile(&mut [3.0, 1.0, 2.0], 0.95), 2.9);
        assert_eq!(quantile(&mut [], 0.5), 0.0);
    }

    #[test]
    fn the_median_interval_is_the_order_statistic_one_with_exact_coverage() {
        // n = 6: P(B < 1) = 1/64, so [x₁, x₆] covers 1 − 2/64 = 96.9% ≥ 95%, and j = 2 would
        // cover only 1 − 2·7/64 = 78%.
        let mut v = [6.0, 1.0, 5.0, 2.0, 4.0, 3.0];
        let m = median_interval(&mut v, 0.95).expect("n = 6 suffices");
        assert_eq!((m.lo, m.median, m.hi), (1.0, 3.5, 6.0));
        assert!((m.coverage - 62.0 / 64.0).abs() < 1e-12);
        assert_eq!(median_interval(&mut [1.0, 2.0, 3.0, 4.0, 5.0], 0.95), None, "n = 5 cannot reach 95%");
        // n = 20: j = 6 (P(B ≤ 5) = 0.0207), the classic table's [x₆, x₁₅].
        let mut w: Vec<f64> = (1..=20).map(f64::from).collect();
        let m = median_interval(&mut w, 0.95).unwrap();
        assert_eq!((m.lo, m.hi), (6.0, 15.0));
        assert!(m.coverage >= 0.95 && m.coverage < 0.96, "{}", m.coverage);
    }
}
