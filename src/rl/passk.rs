//! The unbiased pass@k estimator (Chen et al. 2021): with n samples of which c are correct,
//! pass@k = 1 − C(n−c, k) / C(n, k), computed as a product so large n does not overflow.

/// pass@k for one problem. `k > n` is clamped to n (every sample is drawn).
pub(crate) fn pass_at_k(n: u32, c: u32, k: u32) -> f64 {
    let c = c.min(n);
    let k = k.min(n);
    if n == 0 || k == 0 {
        return 0.0;
    }
    if n - c < k {
        return 1.0;
    }
    // C(n−c, k)/C(n, k) = Π_{i=n−c+1}^{n} (1 − k/i)
    let mut miss = 1.0;
    for i in (n - c + 1)..=n {
        miss *= 1.0 - f64::from(k) / f64::from(i);
    }
    1.0 - miss
}

/// The mean of per-problem pass@k values and the half-width of its 95% confidence interval
/// (normal approximation over problems: 1.96 · sample standard deviation / √N; 0 for fewer
/// than two problems). Problems are the unit of sampling, so this is the interval that says
/// whether two models differ on the benchmark's population, not on these samples.
pub(crate) fn mean_and_ci95(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let mean = values.iter().sum::<f64>() / n;
    if values.len() < 2 {
        return (mean, 0.0);
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, 1.96 * (var / n).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binom(n: u64, k: u64) -> f64 {
        if k > n {
            return 0.0;
        }
        (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
    }

    #[test]
    fn hand_computed() {
        assert_eq!(pass_at_k(1, 1, 1), 1.0);
        assert_eq!(pass_at_k(1, 0, 1), 0.0);
        assert!((pass_at_k(10, 3, 1) - 0.3).abs() < 1e-12);
        // 1 - C(2,2)/C(4,2) = 1 - 1/6
        assert!((pass_at_k(4, 2, 2) - 5.0 / 6.0).abs() < 1e-12);
        assert_eq!(pass_at_k(5, 4, 2), 1.0);
        assert_eq!(pass_at_k(0, 0, 1), 0.0);
    }

    #[test]
    fn matches_the_binomial_definition() {
        for n in 1..=12u32 {
            for c in 0..=n {
                for k in 1..=n {
                    let want = 1.0 - binom(u64::from(n - c), u64::from(k)) / binom(u64::from(n), u64::from(k));
                    assert!((pass_at_k(n, c, k) - want).abs() < 1e-9, "n={n} c={c} k={k}");
                }
            }
        }
    }

    #[test]
    fn confidence_interval_of_a_proportion() {
        // 100 problems, 30 solved: sd = sqrt(0.3·0.7·100/99), half-width 1.96·sd/10.
        let v: Vec<f64> = (0..100).map(|i| if i < 30 { 1.0 } else { 0.0 }).collect();
        let (m, h) = mean_and_ci95(&v);
        assert!((m - 0.3).abs() < 1e-12);
        assert!((h - 1.96 * (0.21f64 * 100.0 / 99.0).sqrt() / 10.0).abs() < 1e-12);
        assert_eq!(mean_and_ci95(&[0.5]), (0.5, 0.0));
        assert_eq!(mean_and_ci95(&[]), (0.0, 0.0));
    }
}
