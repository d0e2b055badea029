//! `status.json`: where a run is (running, finished, failed, interrupted) and how far it got.
//! Its `schema_version` is the run directory's: readers check it before reading anything else.

use serde::{Deserialize, Serialize};

use super::SCHEMA_VERSION;
use crate::plan::Plan;

/// Lifecycle of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// In progress (or crashed without a chance to say so).
    Running,
    /// Completed every step.
    Finished,
    /// Stopped by an error.
    Failed,
    /// Stopped by SIGINT/SIGTERM; resumable.
    Interrupted,
}

/// `status.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// Format version of the run directory.
    pub schema_version: u32,
    /// The run id.
    pub run_id: String,
    /// Where the run is.
    pub state: State,
    /// Training steps completed.
    pub steps_done: u32,
    /// Training steps asked for.
    pub max_steps: u32,
    /// Why it ended, for failed and interrupted runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Process id of the run while `running`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// RFC 3339 time the run first started.
    pub started_at: String,
    /// RFC 3339 time of this status.
    pub updated_at: String,
}

impl Status {
    /// The status of a run of `plan` starting now in this process.
    pub fn new(plan: &Plan) -> Status {
        let now = now();
        Status {
            schema_version: SCHEMA_VERSION,
            run_id: plan.run_id.clone(),
            state: State::Running,
            steps_done: 0,
            max_steps: plan.schedule.max_steps,
            reason: None,
            pid: Some(std::process::id()),
            started_at: now.clone(),
            updated_at: now,
        }
    }
}

/// Current time as RFC 3339 (UTC, seconds): the `time`, `created_at` and `updated_at` of every
/// record.
pub fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}
