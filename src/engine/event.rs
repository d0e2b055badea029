//! What the engine tells the outside world while it runs. The CLI turns events into progress bars
//! and console lines; tests collect them. The engine never prints.

use std::collections::BTreeMap;

/// Something that happened during a run.
#[derive(Debug, Clone)]
pub enum Event {
    /// The run starts (or resumes at `first_step`).
    Started {
        /// Run id.
        run_id: String,
        /// Run directory.
        dir: std::path::PathBuf,
        /// First step to run (0, or the step after the last checkpoint).
        first_step: u32,
        /// Steps in the run.
        max_steps: u32,
        /// Train and eval problem counts.
        problems: (usize, usize),
    },
    /// A phase starts: `sample`, `grade`, `train`, `eval` with `total` units of work.
    Phase {
        /// Step (−1 for the baseline eval).
        step: i64,
        /// Phase name.
        phase: &'static str,
        /// Units (completions, problems) it will process.
        total: u64,
    },
    /// Units of the current phase finished.
    Progress {
        /// Phase name.
        phase: &'static str,
        /// Units done since the last event.
        done: u64,
    },
    /// A training step finished; `metrics` is its metrics line.
    Step {
        /// Step index.
        step: u32,
        /// The flat metrics written to metrics.jsonl.
        metrics: BTreeMap<String, f64>,
    },
    /// An evaluation finished.
    Eval {
        /// Step (−1 for the baseline).
        step: i64,
        /// `eval/...` metrics.
        metrics: BTreeMap<String, f64>,
    },
    /// A checkpoint was written.
    Checkpoint {
        /// Step it holds.
        step: u32,
        /// The backend's state reference: a local path or a remote URI.
        state: String,
    },
    /// A warning worth a line on the console (sandbox degraded, groups dropped, ...).
    Warning(String),
}

/// Receives events. Implementations must be cheap: the engine calls them inline.
pub trait EventSink: Send + Sync {
    /// One event.
    fn event(&self, event: Event);
}

impl EventSink for () {
    fn event(&self, _: Event) {}
}

impl<F: Fn(Event) + Send + Sync> EventSink for F {
    fn event(&self, event: Event) {
        self(event)
    }
}

/// Tracker warnings: on the console (through the sink) and in `logs.log`.
pub(crate) fn warn(sink: &dyn EventSink, warnings: Vec<String>) {
    for w in warnings {
        tracing::info!("warning: {w}");
        sink.event(Event::Warning(w));
    }
}
