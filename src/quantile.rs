//! rlx's one quantile: linear interpolation between order statistics at position q·(n − 1)
//! (numpy's default, R's type 7), used for the sandbox latency percentiles of `metrics.jsonl`,
//! `rlx sandbox bench` and the bootstrap intervals of `rlx compare`. Three definitions (nearest
//! rank, rounded position, interpolated) once lived in those three places and disagreed on small
//! samples.

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
        below += crate::rl::signif::binomial_pmf(n as u64, (j - 1) as u64, 0.5);
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
