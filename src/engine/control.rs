//! How a run is steered from outside and how it ends: where its policy comes from, the stop
//! request a signal handler (or a test) raises, and the outcome.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::backend::Policy;

/// Where the run's policy comes from.
pub enum PolicySource {
    /// [`crate::backend::open`] on the plan: what `rlx run` does.
    Open,
    /// A policy opened by the caller (an embedding program, a test backend).
    Given(Policy),
}

/// A stop request shared between the signal handler and the engine. Passed explicitly (no
/// global), so tests can stop a run.
#[derive(Debug, Clone, Default)]
pub struct StopSignal(Arc<AtomicBool>);

impl StopSignal {
    /// Asks the run to stop at the next safe point.
    pub fn request(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    /// Whether a stop was asked for.
    pub fn requested(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// How a run ended (errors are `Err`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// Every step ran.
    Finished {
        /// Steps completed.
        steps: u32,
    },
    /// Stopped on request after `steps` completed steps; resumable.
    Interrupted {
        /// Steps completed.
        steps: u32,
    },
}
