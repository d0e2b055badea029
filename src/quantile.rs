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

/// The `q` quantile of `values`, which it sorts.
pub(crate) fn quantile(values: &mut [f64], q: f64) -> f64 {
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
}
