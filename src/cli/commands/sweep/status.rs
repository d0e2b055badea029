//! `rlx sweep status SWEEP_DIR`: one line per member, from its run directory and, for a Slurm
//! sweep, from `squeue` (pending and running tasks) and `sacct` (ended tasks) where they answer.

use std::path::Path;

use crate::cli::{exit, printer};
use crate::runlog::sweep::{RECORD, SweepDir};
use crate::sweep_slurm::status::{self, SchedulerView};

pub(super) fn status(dir: &Path) -> anyhow::Result<u8> {
    if !dir.join(RECORD).is_file() {
        printer::error_message(
            &format!("`{}` is not a sweep directory (no {RECORD})", dir.display()),
            &["`rlx sweep` prints where a sweep is: `sweeps/<sweep-id>` beside the runs root".into()],
        );
        return Ok(exit::USAGE);
    }
    let sweep = SweepDir::open(dir)?;
    let record = sweep.record()?;
    let view = SchedulerView::query(&record);
    let members = status::members(dir, &record, &view);
    let jobs: Vec<&str> = record.slurm_jobs.iter().map(|j| j.job_id.as_str()).collect();
    let how = if jobs.is_empty() { "local".to_string() } else { format!("Slurm job(s) {}", jobs.join(", ")) };
    printer::out(format!("sweep {}: {} run(s), {how}", record.sweep_id, members.len()));
    let width = members.iter().map(|m| m.run_id.len()).max().unwrap_or(0);
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for m in &members {
        let state = m.run_state.map_or_else(|| "not started".to_string(), |s| format!("{s:?}").to_lowercase());
        let run = match m.steps {
            Some((done, max)) => format!("{state} {done}/{max}"),
            None => state.clone(),
        };
        *counts.entry(state).or_default() += 1;
        let mut line = format!("  {:width$}  {run:<18}", m.run_id, width = width);
        if let Some(task) = &m.task {
            line.push_str(&format!("  task {task:<10}"));
            match &m.scheduler {
                Some(t) => {
                    line.push_str(&format!("  {}", t.state));
                    if let Some(d) = &t.detail {
                        line.push_str(&format!(" ({d})"));
                    }
                }
                None => line.push_str("  (not in squeue/sacct)"),
            }
        }
        printer::out(line.trim_end());
    }
    let summary: Vec<String> = counts.iter().map(|(k, n)| format!("{n} {k}")).collect();
    printer::status(summary.join(", "));
    for (what, answer) in [("squeue", &view.queue), ("sacct", &view.accounting)] {
        if let Some(Err(e)) = answer {
            printer::status(format!("note: no {what}: {e}"));
        }
    }
    Ok(exit::OK)
}
