//! The run directory, `runs/<run-id>/`: the only module that knows its layout (design §5), and
//! the typed records of each file. Writers (the engine) and readers (the console, tests,
//! `compare`) share these types, so a file's shape is defined once.
//!
//! ```text
//! spec.yaml          the spec file as written
//! resolved.json      the plan: the spec after overrides with every default applied (absolute paths)
//! provenance.json    Provenance: rlx version, git state, overrides, template and data hashes
//! status.json        Status: running | finished | failed | interrupted, steps done, why it ended
//! metrics.jsonl      MetricsLine per step: `step` plus flat `train/...`, `eval/...` keys
//! rollouts.jsonl     RolloutRecord per completion
//! checkpoints.jsonl  CheckpointRecord per checkpoint
//! events.jsonl       EventRecord per lifecycle event (start, resume, stop)
//! eval_results.jsonl EvalResultRecord per problem per evaluation
//! checkpoints/       trainer states (weights + optimizer), one directory per checkpoint
//! logs.log           the human log (tracing)
//! sinks/             tracker cursors and ids (`log.sinks`, [`sinks`]): wandb.json, mlflow.json, ...
//! ```
//!
//! Sweeps keep their record in `sweeps/<sweep-id>/` beside the runs root ([`sweep`]).
//!
//! Durability rules: whole-file JSON is written atomically (temp file + rename), so a reader
//! never sees half a `status.json`; JSONL lines are written with one `write` of the whole line
//! and flushed, and a torn last line (a crash mid-write) is skipped by readers with a warning and
//! cut off by the next writer, so it never glues onto the next record.
//!
//! Versioning: `status.json`, `provenance.json` and `sweep.json` carry [`SCHEMA_VERSION`]; a file
//! with a higher one is refused with [`Error::NewerFormat`] before anything else is read. The
//! JSONL files carry none: [`RunDir::open`] reads `status.json` first, so its version covers
//! them. Adding a key or an event kind does not bump the version (readers skip what they do not
//! know); changing what an existing key means does. Version 2: `resolved.json` holds the plan's
//! values (every default applied; `crate::plan::record`, which also reads version 1's).

mod error;
mod events;
mod json;
mod jsonl;
pub mod logfile;
pub mod metrics;
mod nan;
mod provenance;
mod records;
mod run_dir;
pub(crate) mod sinks;
mod status;
pub mod sweep;

pub use error::Error;
pub(crate) use error::io;
pub use events::EventRecord;
pub use jsonl::{JsonlWriter, Read, read_jsonl};
pub use metrics::MetricsLine;
pub use provenance::{Data, DataSet, Dataset, Git, Host, ModelIds, PromptTokens, Provenance, Split, Template};
pub use records::{Attempt, CheckpointRecord, Completion, EvalResultRecord, EvalSampleRecord, PassAtK, PromptMessage, Protocol, RolloutRecord, StopReason, TestOutcome, TestRecord, ToolCallRecord, VerdictStatus};
pub use run_dir::RunDir;
pub use status::{State, Status, now};

/// Version of the run-directory format; bumped when a file changes incompatibly.
pub const SCHEMA_VERSION: u32 = 2;

/// File names inside a run directory.
pub mod files {
    /// The spec as written.
    pub const SPEC: &str = "spec.yaml";
    /// The resolved spec.
    pub const RESOLVED: &str = crate::plan::record::FILE;
    /// Where the run came from.
    pub const PROVENANCE: &str = "provenance.json";
    /// Run state.
    pub const STATUS: &str = "status.json";
    /// Per-step metrics.
    pub const METRICS: &str = "metrics.jsonl";
    /// Per-completion records.
    pub const ROLLOUTS: &str = "rollouts.jsonl";
    /// Checkpoint records.
    pub const CHECKPOINTS: &str = "checkpoints.jsonl";
    /// Lifecycle events.
    pub const EVENTS: &str = "events.jsonl";
    /// Per-problem evaluation results.
    pub const EVAL_RESULTS: &str = "eval_results.jsonl";
    /// Per-completion evaluation records.
    pub const EVAL_ROLLOUTS: &str = "eval_rollouts.jsonl";
    /// Directory of checkpoint states.
    pub const CHECKPOINT_DIR: &str = "checkpoints";
    /// Human log.
    pub const LOG: &str = "logs.log";
    /// Tracker state: `<tracker>.json` (cursor into `metrics.jsonl`, tracker run id), the W&B
    /// helper's log.
    pub const SINKS: &str = "sinks";
}
