//! `rlx doctor RUN_DIR`: a run directory read back against the reference's smoke-test
//! expectations and the diagnostic signals, with the thresholds the run was started with (its
//! `resolved.json`; the defaults for runs older than the `diagnostics:` section). Works on a
//! running run too: it reads what has been written.

use std::path::Path;

use crate::runlog::{EventRecord, RunDir, files};
use crate::spec::health::Health;

use super::categories::{self, Breakdown, DataFile};
use super::smoke::{self, Expectation};
use super::{Firing, Monitor};

/// What `rlx doctor` prints.
#[derive(Debug)]
pub struct Report {
    /// The run's id (its directory's name).
    pub run_id: String,
    /// Steps completed and planned, and the run's state (`finished`, `running`, ...).
    pub steps_done: u32,
    /// Steps the run plans in all (`status.json`; every stage's of a staged run).
    pub steps_planned: u32,
    /// `schedule.max_steps`: the GRPO stage's length in a staged run, what the smoke test
    /// scales to.
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
    /// pass@1 by problem category, first eval → last, when the records name categories.
    pub categories: Option<Breakdown>,
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
    let stage = grpo_stage(&metrics, &evals);
    let recorded = run.events()?.rows.iter().filter(|e| matches!(e, EventRecord::Diagnostic { .. })).count();
    Ok(Report {
        run_id: dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned()),
        steps_done: status.steps_done,
        steps_planned: status.max_steps,
        // A staged run's `schedule.max_steps` is its GRPO stage's, the length the smoke test
        // scales to.
        max_steps,
        state: format!("{:?}", status.state).to_lowercase(),
        reason: status.reason,
        smoke: smoke::check(&stage.0, &stage.1, max_steps.max(1)),
        categories: categories::breakdown(&stage.1, &eval_files(resolved.as_ref(), &run)),
        fired,
        recorded,
    })
}

/// The eval data files the run's config names, with the SHA-256 provenance recorded for each.
fn eval_files(resolved: Option<&serde_json::Value>, run: &RunDir) -> Vec<DataFile> {
    let sums: Vec<Option<String>> = run.provenance().ok().map(|p| p.datasets.into_iter().filter(|d| d.split == crate::runlog::Split::Eval && d.stage.is_none()).map(|d| d.sha256).collect()).unwrap_or_default();
    let sources = resolved.and_then(|r| r["data"]["eval"].as_array().cloned()).unwrap_or_default();
    sources
        .iter()
        .enumerate()
        .filter_map(|(i, s)| Some(DataFile { path: s["path"].as_str()?.into(), format: s["format"].as_str().map(str::to_owned), sha256: sums.get(i).cloned().flatten() }))
        .collect()
}

/// The GRPO stage of a staged run as the smoke test reads a run: the supervised stages' lines
/// (those naming a `stage`) and their evals left out, and the GRPO stage's steps counted from 0,
/// so that the reference's windows fall on its steps. A run without stages is returned as it is.
fn grpo_stage(metrics: &[crate::runlog::MetricsLine], evals: &[crate::runlog::EvalResultRecord]) -> (Vec<crate::runlog::MetricsLine>, Vec<crate::runlog::EvalResultRecord>) {
    let offset = metrics.iter().filter(|m| m.get(crate::runlog::metrics::STAGE).is_some()).map(|m| m.step + 1).max().unwrap_or(0);
    let shift = |step: i64| if step < 0 { Some(step) } else { (step >= offset).then_some(step - offset) };
    let m = metrics.iter().filter_map(|l| shift(l.step).map(|step| crate::runlog::MetricsLine { step, values: l.values.clone() })).collect();
    let e = evals.iter().filter_map(|r| shift(r.step).map(|step| crate::runlog::EvalResultRecord { step, ..r.clone() })).collect();
    (m, e)
}
