//! `sweeps/<sweep-id>/`: what `rlx sweep` leaves besides its members' run directories.
//!
//! ```text
//! sweeps/<sweep-id>/sweep.json   the SweepRecord: axes, members, each member's state
//! sweeps/<sweep-id>/<run-id>.out a member's console output (parallel sweeps only)
//! sweeps/<sweep-id>/slurm-<k>.sh  the batch script of the sweep's k-th Slurm submission
//! sweeps/<sweep-id>/slurm-<job>_<index>.out   a Slurm task's console output
//! ```
//!
//! `sweeps/` sits beside the runs root (`runs/` and `sweeps/` share a parent), so a sweep and its
//! runs move together. The members' run directories are ordinary runs under the runs root.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Error, SCHEMA_VERSION, io, json, now};
use crate::plan::sweep::{AxisRecord, Sweep};

/// The directory of every sweep, beside the runs root.
pub const SWEEPS_DIR: &str = "sweeps";
/// The record of one sweep, inside its directory.
pub const RECORD: &str = "sweep.json";

/// `sweep.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepRecord {
    /// Format version (the run directory's).
    pub schema_version: u32,
    /// `<name>-sweep-<hash>`, stable for the same grid.
    pub sweep_id: String,
    /// The spec, absolute.
    pub spec: PathBuf,
    /// The command line that launched the sweep.
    pub argv: Vec<String>,
    /// The axes, in command-line order.
    pub axes: Vec<AxisRecord>,
    /// Overrides applied to every member.
    pub fixed: Vec<String>,
    /// The grid points, in order.
    pub members: Vec<MemberRecord>,
    /// RFC 3339 time of the launch.
    pub created_at: String,
    /// RFC 3339 time of the last change.
    pub updated_at: String,
    /// `--sample N`: the configurations were drawn, not listed. Absent for a grid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample: Option<SampleRecord>,
    /// The Slurm job arrays submitted for this sweep (`--launcher slurm`), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slurm_jobs: Vec<SlurmJobRecord>,
}

/// How a sampled sweep drew its configurations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleRecord {
    /// Configurations drawn.
    pub n: usize,
    /// The seed of the draws (`--sample-seed`).
    pub seed: u64,
}

/// One `sbatch` of a sweep: a job array with one task per member it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmJobRecord {
    /// The job id `sbatch` answered (the array's job id).
    pub job_id: String,
    /// The `--array` value: the members' indices, and `%K` when throttled (`0-3,5%2`).
    pub array: String,
    /// The batch script submitted.
    pub script: PathBuf,
    /// RFC 3339 time of the submission.
    pub submitted_at: String,
}

/// The Slurm task that last ran a member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmTaskRecord {
    /// The job array's id.
    pub job_id: String,
    /// The task's array index (the member's index in the sweep).
    pub array_index: usize,
}

impl SlurmTaskRecord {
    /// `<job>_<index>`, as `squeue`, `sacct` and `scancel` name the task.
    pub fn task_id(&self) -> String {
        format!("{}_{}", self.job_id, self.array_index)
    }
}

/// One member of a sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberRecord {
    /// Its run id.
    pub run_id: String,
    /// Its run directory.
    pub dir: PathBuf,
    /// Axis key → value text.
    pub assignment: BTreeMap<String, String>,
    /// Every override of the member, fixed ones first, canonical (`optimizer.learning_rate=1e-5`).
    pub overrides: Vec<String>,
    /// For people, not programs (read the member's `status.json` for its state): before launch
    /// `new`, `finished` or `resume (2/3 steps, interrupted)`; after its process exits
    /// `finished`, `failed (exit 3)`, `failed (exit signal)` or `failed to start: ...`; once
    /// submitted to Slurm, `queued (job 12_0)` (`rlx sweep status` asks the scheduler after that).
    pub state: String,
    /// The member process's exit code, once it exited (not when a signal killed it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The Slurm task that last ran it (`--launcher slurm`); its state is in `squeue`/`sacct`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmTaskRecord>,
}

impl SweepRecord {
    /// The record of `sweep` at launch: `spec` as given to the command, the command line, and
    /// each member's state before launch (in member order).
    pub(crate) fn new(sweep: &Sweep, spec: &Path, argv: Vec<String>, states: &[String]) -> SweepRecord {
        let t = now();
        SweepRecord {
            schema_version: SCHEMA_VERSION,
            sweep_id: sweep.id.clone(),
            spec: std::path::absolute(spec).unwrap_or_else(|_| spec.to_path_buf()),
            argv,
            axes: sweep.axes.clone(),
            fixed: sweep.fixed.clone(),
            members: sweep
                .members
                .iter()
                .zip(states)
                .map(|(m, state)| MemberRecord {
                    run_id: m.plan.run_id.clone(),
                    dir: m.plan.run_dir(),
                    assignment: m.assignment.clone(),
                    overrides: m.overrides.iter().map(|o| o.canonical()).collect(),
                    state: state.clone(),
                    exit_code: None,
                    slurm: None,
                })
                .collect(),
            created_at: t.clone(),
            updated_at: t,
            sample: None,
            slurm_jobs: vec![],
        }
    }

    /// Keeps what an earlier launch of the same sweep recorded that this one does not redo:
    /// the Slurm jobs, and each member's last Slurm task and outcome.
    pub(crate) fn carry_over(&mut self, earlier: &SweepRecord) {
        self.slurm_jobs = earlier.slurm_jobs.clone();
        for m in &mut self.members {
            if let Some(e) = earlier.members.iter().find(|e| e.run_id == m.run_id) {
                m.slurm = e.slurm.clone();
                if m.exit_code.is_none() {
                    m.exit_code = e.exit_code;
                }
            }
        }
    }

    /// Records a Slurm submission: the job, and for each member index it runs, its task and
    /// state (`queued (job 12_0)`).
    ///
    /// # Panics
    /// When an index is not a member.
    pub(crate) fn add_slurm_job(&mut self, job: SlurmJobRecord, indices: &[usize]) {
        for &i in indices {
            let task = SlurmTaskRecord { job_id: job.job_id.clone(), array_index: i };
            let m = &mut self.members[i];
            m.state = format!("queued (job {})", task.task_id());
            m.exit_code = None;
            m.slurm = Some(task);
        }
        self.slurm_jobs.push(job);
        self.updated_at = now();
    }

    /// Records how member `index`'s process ended, stamping `updated_at`.
    ///
    /// # Panics
    /// When `index` is not a member.
    pub(crate) fn set_member(&mut self, index: usize, state: String, exit_code: Option<i32>) {
        let m = &mut self.members[index];
        m.state = state;
        m.exit_code = exit_code;
        self.updated_at = now();
    }
}

/// An open `sweeps/<sweep-id>/`.
#[derive(Debug, Clone)]
pub struct SweepDir {
    path: PathBuf,
}

impl SweepDir {
    /// Where `sweep` lives: `sweeps/<id>/` beside the runs root of its members.
    pub(crate) fn path_for(sweep: &Sweep) -> PathBuf {
        let root = sweep.members.first().map_or(PathBuf::from("runs"), |m| m.plan.log.root.clone());
        let parent = root.parent().map(Path::to_path_buf).unwrap_or_default();
        parent.join(SWEEPS_DIR).join(&sweep.id)
    }

    /// Creates (or reopens) the directory of `sweep`.
    ///
    /// # Errors
    /// I/O errors.
    pub(crate) fn create(sweep: &Sweep) -> Result<SweepDir, Error> {
        let path = Self::path_for(sweep);
        std::fs::create_dir_all(&path).map_err(io("cannot create sweep directory", &path))?;
        Ok(SweepDir { path })
    }

    /// Opens an existing sweep directory, reading its record to check that there is one this
    /// rlx can read.
    ///
    /// # Errors
    /// As [`SweepDir::record`].
    pub fn open(path: &Path) -> Result<SweepDir, Error> {
        let dir = SweepDir { path: path.to_path_buf() };
        dir.record()?;
        Ok(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the record is.
    pub fn record_path(&self) -> PathBuf {
        self.path.join(RECORD)
    }

    /// The sweep's record.
    ///
    /// # Errors
    /// [`Error::Missing`] without one; [`Error::NewerFormat`]; I/O errors and invalid content.
    pub fn record(&self) -> Result<SweepRecord, Error> {
        let path = self.record_path();
        json::read_versioned(&path)?.ok_or(Error::Missing { path })
    }

    /// Replaces the record, atomically: a reader (or a crash) never sees half of it.
    ///
    /// # Errors
    /// I/O errors.
    pub(crate) fn write_record(&self, record: &SweepRecord) -> Result<(), Error> {
        json::write(&self.record_path(), record)
    }

    /// Where member `run_id`'s console output goes when members run in parallel.
    pub(crate) fn member_output(&self, run_id: &str) -> PathBuf {
        self.path.join(format!("{run_id}.out"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> SweepRecord {
        SweepRecord {
            schema_version: SCHEMA_VERSION,
            sweep_id: "quick-sweep-ab12".into(),
            spec: "/w/spec.yaml".into(),
            argv: vec!["rlx".into(), "sweep".into()],
            axes: vec![AxisRecord { key: "optimizer.learning_rate".into(), values: vec!["1e-5".into(), "4e-5".into()], replicate: false }],
            fixed: vec![],
            members: vec![MemberRecord {
                run_id: "quick-1".into(),
                dir: "/w/runs/quick-1".into(),
                assignment: [("optimizer.learning_rate".to_string(), "1e-5".to_string())].into(),
                overrides: vec!["optimizer.learning_rate=1e-5".into()],
                state: "new".into(),
                exit_code: None,
                slurm: None,
            }],
            created_at: "2025-01-01T00:00:00Z".into(),
            updated_at: "2025-01-01T00:00:00Z".into(),
            sample: None,
            slurm_jobs: vec![],
        }
    }

    #[test]
    fn record_round_trips_through_the_directory() {
        let d = tempfile::tempdir().unwrap();
        let dir = SweepDir { path: d.path().join("sweeps/quick-sweep-ab12") };
        std::fs::create_dir_all(dir.path()).unwrap();
        assert!(matches!(dir.record().unwrap_err(), Error::Missing { .. }));
        let mut r = record();
        dir.write_record(&r).unwrap();
        assert_eq!(SweepDir::open(dir.path()).unwrap().record().unwrap(), r);
        let text = std::fs::read_to_string(dir.record_path()).unwrap();
        assert!(!text.contains("exit_code"), "absent until the member exits: {text}");
        r.set_member(0, "failed (exit 3)".into(), Some(3));
        dir.write_record(&r).unwrap();
        let back = dir.record().unwrap();
        assert_eq!((back.members[0].state.as_str(), back.members[0].exit_code), ("failed (exit 3)", Some(3)));
        assert_eq!(dir.member_output("quick-1"), dir.path().join("quick-1.out"));
    }

    #[test]
    fn slurm_submissions_are_recorded_and_carried_over() {
        let d = tempfile::tempdir().unwrap();
        let dir = SweepDir { path: d.path().to_path_buf() };
        let mut r = record();
        let job = SlurmJobRecord { job_id: "12".into(), array: "0".into(), script: "/w/sweeps/x/slurm-1.sh".into(), submitted_at: now() };
        r.add_slurm_job(job.clone(), &[0]);
        assert_eq!(r.members[0].state, "queued (job 12_0)");
        assert_eq!(r.members[0].slurm.as_ref().unwrap().task_id(), "12_0");
        dir.write_record(&r).unwrap();
        let back = dir.record().unwrap();
        assert_eq!(back, r);
        // A re-launch starts a fresh record and keeps the history.
        let mut again = record();
        again.created_at = "2026-01-01T00:00:00Z".into();
        again.carry_over(&back);
        assert_eq!(again.slurm_jobs, vec![job]);
        assert_eq!(again.members[0].slurm, r.members[0].slurm);
        assert_ne!(again.created_at, r.created_at, "the time of this launch");
        assert_eq!(again.members[0].state, "new", "the state is this launch's");
        // A record without the new fields (an older rlx's) still reads.
        let text = std::fs::read_to_string(dir.record_path()).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v.as_object_mut().unwrap().remove("slurm_jobs");
        v["members"][0].as_object_mut().unwrap().remove("slurm");
        let old: SweepRecord = serde_json::from_value(v).unwrap();
        assert!(old.slurm_jobs.is_empty() && old.members[0].slurm.is_none() && old.sample.is_none());
    }

    #[test]
    fn a_newer_sweep_record_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let dir = SweepDir { path: d.path().to_path_buf() };
        dir.write_record(&SweepRecord { schema_version: SCHEMA_VERSION + 1, ..record() }).unwrap();
        assert!(matches!(SweepDir::open(d.path()).unwrap_err(), Error::NewerFormat { .. }));
    }
}
