//! Reinforcement-learning math shared by every backend: loss definitions ([`loss`], Tinker's),
//! advantage and reward strategies (behind name registries selected by the spec), the variants
//! that shape advantages and rewards ([`shaping`]: loss aggregation, overlong penalty, KL,
//! entropy) and the pass@k estimator.
//!
//! Everything here is a pure function of numbers: no problems, no models, no I/O.

pub(crate) mod advantage;
pub(crate) mod loss;
pub(crate) mod passk;
pub(crate) mod reward;
pub(crate) mod shaping;
pub(crate) mod signif;
