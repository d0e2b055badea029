//! The unbiased pass@k estimator (Chen et al. 2021): with n samples of which c are correct,
//! pass@k = 1 − C(n−c, k) / C(n, k), computed as a product so large n does not overflow.

/// pass@k for one problem. `k > n` is clamped to n (every sample is drawn).
pub fn pass_at_k(n: u32, c: u32, k: u32) -> f64 {
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

/// Mean pass@k over problems, each given as (n, c).
pub fn mean_pass_at_k(results: &[(u32, u32)], k: u32) -> f64 {
    if results.is_empty() {
        return 0.0;
    }
    results.iter().map(|&(n, c)| pass_at_k(n, c, k)).sum::<f64>() / results.len() as f64
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
        assert!((mean_pass_at_k(&[(4, 4), (4, 0)], 1) - 0.5).abs() < 1e-12);
    }
}
