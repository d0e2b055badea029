//! `rlx doctor RUN_DIR`: a run directory read back against the reference's smoke-test
//! expectations and the diagnostic signals, with the thresholds the run was started with (its
//! `resolved.json`; the defaults for runs older than the `diagnostics:` section). Works on a
//! running run too: it reads what has been written.

use std::path::Path;

use crate::runlog::{EventRecord, RunDir, files};
use crate::spec::health::Health;

use super::smoke::{self, Expectation};
use super::{Firing, Monitor};

/// What `rlx doctor` prints.
#[derive(Debug)]
pub struct Report {
    /// The run's id (its directory's name).
    pub run_id: String,
    /// Steps completed and planned, and the run's state (`finished`, `running`, ...).
    pub steps_done: u32,
    /// `schedule.max_steps`.
    pub max_steps: u32,
    /// `status.json`'s state.
    pub state: String,
    /// Why it stopped, when it failed or was interrupted.
    pub reason: Option<String>,
    /// The smoke-test expectations.
    pub smoke: Vec<Expectation>,
    /// Every signal that fires over the run's records.
    pub fired: Vec<Firing>,
    /// Diagnostic events recorded while the run went (`events.jsonl`).
    pub recorded: usize,
}

/// Reads `dir` and checks it.
///
/// # Errors
/// Not a run directory; unreadable or corrupt files.
pub fn doctor(dir: &Path) -> Result<Report, crate::runlog::Error> {
    let run = RunDir::open(dir)?;
    let status = run.status()?.expect("open checked status.json");
    let resolved: Option<serde_json::Value> = run.read_json(files::RESOLVED)?;
    let cfg: Health = resolved.as_ref().and_then(|r| serde_json::from_value(r["diagnostics"].clone()).ok()).unwrap_or_default();
    let max_steps = resolved.as_ref().and_then(|r| r["schedule"]["max_steps"].as_u64()).map_or(status.steps_done, |s| s as u32);
    let metrics = run.metrics()?.rows;
    let rollouts = run.rollouts()?.rows;
    let evals = run.eval_results()?.rows;
    let mut monitor = Monitor::new(cfg);
    let fired = super::replay(&mut monitor, &metrics, &rollouts, &evals);
    let recorded = run.events()?.rows.iter().filter(|e| matches!(e, EventRecord::Diagnostic { .. })).count();
    Ok(Report {
        run_id: dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned()),
        steps_done: status.steps_done,
        max_steps,
        state: format!("{:?}", status.state).to_lowercase(),
        reason: status.reason,
        smoke: smoke::check(&metrics, &evals, max_steps.max(1)),
        fired,
        recorded,
    })
}
