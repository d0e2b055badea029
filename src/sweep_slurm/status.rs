//! `rlx sweep status SWEEP_DIR`: each member's state, from its run directory (how far the run
//! got, which is the truth about the experiment) and from the scheduler (where its task is),
//! for sweeps launched either way.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::scheduler::{self, TaskState};
use crate::runlog::sweep::SweepRecord;
use crate::runlog::{RunDir, State};

/// One member's line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberStatus {
    /// Its index (and array index under Slurm).
    pub index: usize,
    /// Its run id.
    pub run_id: String,
    /// The run directory's state (`finished`, `running`, `interrupted`, `failed`), or `None`
    /// before the run started.
    pub run_state: Option<State>,
    /// Steps done and asked for, when the run started.
    pub steps: Option<(u32, u32)>,
    /// Its last Slurm task (`12_0`), when Slurm ran it.
    pub task: Option<String>,
    /// The task's state in `squeue` (pending or running), else in `sacct` (ended), when either
    /// knows it.
    pub scheduler: Option<TaskState>,
}

/// What the scheduler said about a sweep's jobs, and why it said nothing where it did not.
#[derive(Debug, Clone, Default)]
pub(crate) struct SchedulerView {
    /// `squeue`'s tasks, or why there are none (not installed, failed).
    pub queue: Option<Result<BTreeMap<String, TaskState>, String>>,
    /// `sacct`'s tasks, or why there are none (accounting disabled, not installed).
    pub accounting: Option<Result<BTreeMap<String, TaskState>, String>>,
}

impl SchedulerView {
    /// Asks `squeue` and `sacct` about the sweep's jobs (nothing when it has none).
    pub(crate) fn query(record: &SweepRecord) -> SchedulerView {
        let jobs: Vec<String> = record.slurm_jobs.iter().map(|j| j.job_id.clone()).collect();
        if jobs.is_empty() {
            return SchedulerView::default();
        }
        SchedulerView {
            queue: Some(scheduler::queue(&jobs).map_err(|e| e.to_string())),
            accounting: Some(scheduler::accounting(&jobs).map_err(|e| e.to_string())),
        }
    }

    /// The state of task `id`: the queue's while it is there, else accounting's.
    fn task(&self, id: &str) -> Option<TaskState> {
        let from = |m: &Option<Result<BTreeMap<String, TaskState>, String>>| m.as_ref().and_then(|r| r.as_ref().ok()).and_then(|m| m.get(id).cloned());
        from(&self.queue).or_else(|| from(&self.accounting))
    }
}

/// Where member `dir` (as recorded: relative to the directory `rlx sweep` ran in) is, seen from
/// here: as recorded when that exists, else beside the sweep directory's `sweeps/` (the layout
/// `rlx sweep` writes), so the status reads from anywhere.
pub(crate) fn member_dir(sweep_dir: &Path, recorded: &Path) -> PathBuf {
    if recorded.is_absolute() || recorded.exists() {
        return recorded.to_path_buf();
    }
    // sweeps/<id> sits beside the runs root: <base>/sweeps/<id> and <base>/<runs>/<run-id>.
    if let Some(base) = sweep_dir.parent().and_then(Path::parent) {
        let runs_root_name = recorded.parent().and_then(Path::file_name);
        let run_name = recorded.file_name();
        if let (Some(r), Some(n)) = (runs_root_name, run_name) {
            let candidate = base.join(r).join(n);
            if candidate.exists() {
                return candidate;
            }
        }
    }
    recorded.to_path_buf()
}

/// Each member's status, in member order.
pub(crate) fn members(sweep_dir: &Path, record: &SweepRecord, view: &SchedulerView) -> Vec<MemberStatus> {
    record
        .members
        .iter()
        .enumerate()
        .map(|(index, m)| {
            let status = RunDir::open(&member_dir(sweep_dir, &m.dir)).ok().and_then(|d| d.status().ok().flatten());
            let task = m.slurm.as_ref().map(|t| t.task_id());
            MemberStatus {
                index,
                run_id: m.run_id.clone(),
                run_state: status.as_ref().map(|s| s.state),
                steps: status.as_ref().map(|s| (s.steps_done, s.max_steps)),
                scheduler: task.as_deref().and_then(|t| view.task(t)),
                task,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_first_then_accounting() {
        let mut q = BTreeMap::new();
        q.insert("12_0".to_string(), TaskState { state: "RUNNING".into(), detail: None });
        q.insert("12_2".to_string(), TaskState { state: "COMPLETED".into(), detail: None });
        let mut a = BTreeMap::new();
        a.insert("12_0".to_string(), TaskState { state: "FAILED".into(), detail: Some("130:0".into()) });
        a.insert("12_1".to_string(), TaskState { state: "COMPLETED".into(), detail: Some("0:0".into()) });
        let v = SchedulerView { queue: Some(Ok(q)), accounting: Some(Ok(a)) };
        assert_eq!(v.task("12_0").unwrap().state, "RUNNING");
        assert_eq!(v.task("12_1").unwrap().state, "COMPLETED");
        assert_eq!(v.task("12_9"), None);
        let none = SchedulerView { queue: Some(Err("`squeue` is not on PATH".into())), accounting: None };
        assert_eq!(none.task("12_0"), None);
    }

    #[test]
    fn member_dirs_resolve_beside_the_sweep() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("runs/q-1")).unwrap();
        let sweep = d.path().join("sweeps/q-sweep");
        assert_eq!(member_dir(&sweep, Path::new("runs/q-1")), d.path().join("runs/q-1"));
        assert_eq!(member_dir(&sweep, Path::new("runs/q-2")), PathBuf::from("runs/q-2"));
    }
}
