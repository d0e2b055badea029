//! Reinforcement-learning math shared by every backend: loss definitions ([`loss`], Tinker's),
//! advantage and reward strategies (behind name registries selected by the spec), the variants
//! that shape advantages and rewards ([`shaping`]: loss aggregation, overlong penalty, KL,
//! entropy) and the pass@k estimator.
//!
//! Everything here is a pure function of numbers: no problems, no models, no I/O.

pub mod advantage;
pub mod loss;
pub mod passk;
pub mod reward;
pub mod shaping;
