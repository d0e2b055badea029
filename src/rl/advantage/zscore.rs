//! `zscore`: (reward − mean) / (std + eps), the original GRPO normalisation, with the
//! *population* std (divide by G). TRL's `GRPOTrainer` divides by the *sample* std (torch's
//! `std()`, G − 1), so its advantages are smaller by √((G−1)/G) (0.935 at G = 8); with Adam
//! that constant scale barely matters, with plain SGD it is a learning-rate change.

use super::{AdvantageStrategy, mean};

/// Group-standardised rewards.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Zscore {
    /// Added to the standard deviation so uniform groups give zeros, not NaN.
    pub eps: f64,
}

impl AdvantageStrategy for Zscore {
    fn name(&self) -> &'static str {
        "zscore"
    }
    fn advantages(&self, rewards: &[f64]) -> Vec<f64> {
        let m = mean(rewards);
        let var = mean(&rewards.iter().map(|r| (r - m) * (r - m)).collect::<Vec<_>>());
        let d = var.sqrt() + self.eps;
        rewards.iter().map(|r| (r - m) / d).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed() {
        // [1, 0]: mean 0.5, population std 0.5 → [1, -1] (up to eps).
        let a = Zscore { eps: 0.0 }.advantages(&[1.0, 0.0]);
        assert_eq!(a, vec![1.0, -1.0]);
        // [2, 0, 0, 0]: mean 0.5, var (2.25 + 3·0.25)/4 = 0.75, std 0.8660...
        let a = Zscore { eps: 0.0 }.advantages(&[2.0, 0.0, 0.0, 0.0]);
        assert!((a[0] - 1.5 / 0.75f64.sqrt()).abs() < 1e-12);
        assert!((a[1] + 0.5 / 0.75f64.sqrt()).abs() < 1e-12);
        // A uniform group is zero, not NaN.
        assert_eq!(Zscore { eps: 1e-6 }.advantages(&[0.3, 0.3]), vec![0.0, 0.0]);
    }
}
