//! `rloo`: leave-one-out baseline, reward minus the mean of the group's other rewards
//! (REINFORCE Leave-One-Out). Equals `G/(G−1)` × mean-centred rewards.

use super::AdvantageStrategy;

/// Reward minus the mean of the others.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Rloo;

impl AdvantageStrategy for Rloo {
    fn name(&self) -> &'static str {
        "rloo"
    }
    fn advantages(&self, rewards: &[f64]) -> Vec<f64> {
        let n = rewards.len();
        if n < 2 {
            // No other completion to compare with: no signal.
            return vec![0.0; n];
        }
        let total: f64 = rewards.iter().sum();
        rewards.iter().map(|r| r - (total - r) / (n - 1) as f64).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed() {
        // [1, 0, 0]: 1 - 0 = 1; 0 - (1+0)/2 = -0.5.
        assert_eq!(Rloo.advantages(&[1.0, 0.0, 0.0]), vec![1.0, -0.5, -0.5]);
        assert_eq!(Rloo.advantages(&[1.0]), vec![0.0]);
    }
}
