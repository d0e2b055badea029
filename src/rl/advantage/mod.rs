//! Group rewards → advantages. One file per strategy; [`strategy`] is the registry the spec's
//! `grpo.advantage.kind` selects from.

mod mean_center;
mod rloo;
mod zscore;

pub(crate) use mean_center::MeanCenter;
pub(crate) use rloo::Rloo;
pub(crate) use zscore::Zscore;

use crate::spec::types::Advantage;

/// Below this magnitude an advantage counts as zero (the origin pipeline's threshold).
pub(crate) const ZERO: f64 = 1e-8;

/// Turns the rewards of one group (the completions of one problem) into advantages.
pub(crate) trait AdvantageStrategy: Send + Sync {
    /// The spec name (`mean_center`, ...).
    fn name(&self) -> &'static str;
    /// One advantage per reward, same order. An empty group gives an empty vector.
    fn advantages(&self, rewards: &[f64]) -> Vec<f64>;
}

/// The strategy a spec asks for.
pub(crate) fn strategy(spec: &Advantage) -> Box<dyn AdvantageStrategy> {
    match spec {
        Advantage::MeanCenter => Box::new(MeanCenter),
        Advantage::Zscore { eps } => Box::new(Zscore { eps: *eps }),
        Advantage::Rloo => Box::new(Rloo),
    }
}

/// True when a group carries no learning signal: every advantage is (numerically) zero, i.e.
/// every completion scored the same.
pub(crate) fn should_skip(advantages: &[f64]) -> bool {
    advantages.iter().all(|a| a.abs() < ZERO)
}

pub(crate) fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() { 0.0 } else { xs.iter().sum::<f64>() / xs.len() as f64 }
}

#[cfg(test)]
mod tests {
    use super::mean_center::compute_advantages;
    use super::*;

    #[test]
    fn skip_only_uniform_groups() {
        assert!(should_skip(&[0.0, 0.0, 0.0]));
        assert!(should_skip(&[1e-9, -1e-9]));
        assert!(should_skip(&[]));
        assert!(!should_skip(&[0.0, 0.5, -0.5]));
        assert!(should_skip(&compute_advantages(&[1.0, 1.0, 1.0, 1.0])));
        assert!(should_skip(&compute_advantages(&[-0.1, -0.1])));
        assert!(!should_skip(&compute_advantages(&[0.0, 1.0])));
    }

    #[test]
    fn registry_follows_the_spec() {
        assert_eq!(strategy(&Advantage::MeanCenter).name(), "mean_center");
        assert_eq!(strategy(&Advantage::Zscore { eps: 1e-6 }).name(), "zscore");
        assert_eq!(strategy(&Advantage::Rloo).name(), "rloo");
    }

    #[test]
    fn every_strategy_centres_a_group_and_keeps_order() {
        let rewards = [1.0, 0.0, -0.1, 1.0, 0.0];
        for s in [strategy(&Advantage::MeanCenter), strategy(&Advantage::Zscore { eps: 1e-6 }), strategy(&Advantage::Rloo)] {
            let a = s.advantages(&rewards);
            assert_eq!(a.len(), rewards.len());
            assert!(mean(&a).abs() < 1e-12, "{}: {a:?}", s.name());
            // Better reward, larger advantage.
            assert!(a[0] > a[1] && a[1] > a[2], "{}: {a:?}", s.name());
            assert_eq!(a[0], a[3]);
            assert!(s.advantages(&[]).is_empty());
        }
    }
}
