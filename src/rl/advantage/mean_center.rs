//! `mean_center`: reward minus the group mean, no division by the standard deviation (Dr. GRPO;
//! the origin pipeline's default), so a group's scale of rewards is kept.

use super::{AdvantageStrategy, mean};

/// Reward minus group mean.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MeanCenter;

impl AdvantageStrategy for MeanCenter {
    fn name(&self) -> &'static str {
        "mean_center"
    }
    fn advantages(&self, rewards: &[f64]) -> Vec<f64> {
        compute_advantages(rewards)
    }
}

/// The origin pipeline's `compute_advantages(rewards)`: each reward minus the group mean.
pub(crate) fn compute_advantages(rewards: &[f64]) -> Vec<f64> {
    let m = mean(rewards);
    rewards.iter().map(|r| r - m).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed() {
        // mean = (1 + 0 + 0 - 0.1) / 4 = 0.225
        let a = compute_advantages(&[1.0, 0.0, 0.0, -0.1]);
        let want = [0.775, -0.225, -0.225, -0.325];
        for (x, w) in a.iter().zip(want) {
            assert!((x - w).abs() < 1e-12, "{a:?}");
        }
    }
}
