//! The run directory, `runs/<run-id>/`: the only module that knows its layout (design §5).
//!
//! ```text
//! spec.yaml          the spec file as written
//! resolved.json      the spec after overrides and defaults (absolute paths)
//! provenance.json    rlx version, git state, overrides, template and dataset hashes, host
//! status.json        running | finished | failed | interrupted, steps done, why it ended
//! metrics.jsonl      one object per step: `step` plus flat `train/...`, `eval/...` keys
//! rollouts.jsonl     one object per completion
//! checkpoints.jsonl  one object per checkpoint
//! events.jsonl       run lifecycle events (start, resume, stop)
//! eval_results.jsonl per-problem evaluation results
//! checkpoints/       trainer states (weights + optimizer), one directory per checkpoint
//! logs.log           the human log (tracing)
//! ```
//!
//! Durability rules: whole-file JSON is written atomically (temp file + rename), so a reader
//! never sees half a `status.json`; JSONL lines are written with one `write` of the whole line
//! and flushed, and a torn last line (a crash mid-write) is skipped by readers with a warning and
//! cut off by the next writer, so it never glues onto the next record.

mod jsonl;
pub mod logfile;
mod provenance;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use jsonl::{JsonlWriter, Read as JsonlRead, read_jsonl};
pub use provenance::{Provenance, provenance};

use crate::spec::Plan;

/// Version of the run-directory format; bumped when a file changes incompatibly.
pub const SCHEMA_VERSION: u32 = 1;

/// File names inside a run directory.
pub mod files {
    /// The spec as written.
    pub const SPEC: &str = "spec.yaml";
    /// The resolved spec.
    pub const RESOLVED: &str = "resolved.json";
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
    /// Directory of checkpoint states.
    pub const CHECKPOINT_DIR: &str = "checkpoints";
    /// Human log.
    pub const LOG: &str = "logs.log";
}

/// Errors reading or writing a run directory.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read or written.
    #[error("{op} `{}`", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file holds something that is not what rlx writes there.
    #[error("`{}` line {line}: {message}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// 1-based line (1 for whole-file JSON).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// Another writer (usually another `rlx` process running the same experiment) holds the file.
    #[error("`{}` is being written by another process (is the same run already going?)", path.display())]
    Busy {
        /// The file.
        path: PathBuf,
    },
    /// The directory exists but holds a different experiment.
    #[error("`{}` holds run `{found}`, not `{expected}`", path.display())]
    Mismatch {
        /// The directory.
        path: PathBuf,
        /// The run id in its status.
        found: String,
        /// The run id asked for.
        expected: String,
    },
}

impl Error {
    /// Another process running the same experiment, or a directory holding another experiment:
    /// the user's to sort out. Anything else (I/O, corrupt files) is not.
    pub fn is_user_error(&self) -> bool {
        matches!(self, Error::Busy { .. } | Error::Mismatch { .. })
    }
}

pub(crate) fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io { op, path: path.to_path_buf(), source }
}

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
    /// Format version.
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
            max_steps: plan.spec.schedule.max_steps,
            reason: None,
            pid: Some(std::process::id()),
            started_at: now.clone(),
            updated_at: now,
        }
    }
}

/// Current time as RFC 3339 (UTC, seconds).
pub fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// One line of `checkpoints.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointRecord {
    /// `step-000009`.
    pub name: String,
    /// The last completed step the state includes.
    pub step: u32,
    /// Training problems consumed after that step (where the next step starts).
    pub data_cursor: u64,
    /// Trainer state (weights + optimizer moments), resumable: the backend's opaque state
    /// reference, a local path (relative to the run directory when inside it, so a run
    /// directory can be moved or copied and still resume) or a remote URI (`tinker://…`).
    pub state_path: Option<String>,
    /// Sampler weights for serving, when a backend writes them separately (a path or a URI).
    pub sampler_path: Option<String>,
    /// RFC 3339 time.
    pub time: String,
    /// `periodic`, `final` or `interrupt`.
    pub kind: String,
}

/// An open run directory.
#[derive(Debug, Clone)]
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    /// The directory a plan's run lives in: `<log.root>/<run-id>`.
    pub fn path_for(plan: &Plan) -> PathBuf {
        plan.spec.log.root.join(&plan.run_id)
    }

    /// Creates the run directory of `plan` and writes its spec, resolved spec and provenance; or
    /// reopens it if it exists (a re-run of the same experiment resumes it).
    ///
    /// # Errors
    /// I/O errors, and [`Error::Mismatch`] if the directory holds another run.
    pub fn create(plan: &Plan) -> Result<RunDir, Error> {
        let path = Self::path_for(plan);
        let dir = RunDir { path };
        if let Some(status) = dir.status()? {
            if status.run_id != plan.run_id {
                return Err(Error::Mismatch { path: dir.path.clone(), found: status.run_id, expected: plan.run_id.clone() });
            }
            return Ok(dir);
        }
        fs::create_dir_all(&dir.path).map_err(io("cannot create run directory", &dir.path))?;
        atomic_write(&dir.file(files::SPEC), plan.spec_text.as_bytes())?;
        dir.write_json(files::RESOLVED, &plan.spec)?;
        dir.write_json(files::PROVENANCE, &provenance(plan))?;
        dir.set_status(&Status::new(plan))?;
        Ok(dir)
    }

    /// Opens an existing run directory.
    ///
    /// # Errors
    /// When `path` has no `status.json`.
    pub fn open(path: &Path) -> Result<RunDir, Error> {
        let dir = RunDir { path: path.to_path_buf() };
        match dir.status()? {
            Some(_) => Ok(dir),
            None => Err(Error::Corrupt { path: dir.file(files::STATUS), line: 1, message: "not a run directory (no status.json)".into() }),
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A file inside the directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Writes a whole JSON file atomically.
    ///
    /// # Errors
    /// I/O errors.
    pub fn write_json<T: Serialize>(&self, name: &str, value: &T) -> Result<(), Error> {
        let mut bytes = serde_json::to_vec_pretty(value).expect("run files serialise");
        bytes.push(b'\n');
        atomic_write(&self.file(name), &bytes)
    }

    /// Reads a whole JSON file, `None` if absent.
    ///
    /// # Errors
    /// I/O errors and invalid content.
    pub fn read_json<T: for<'de> Deserialize<'de>>(&self, name: &str) -> Result<Option<T>, Error> {
        let path = self.file(name);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| Error::Corrupt { path, line: e.line(), message: e.to_string() }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("cannot read", &path)(e)),
        }
    }

    /// The current status, `None` for a directory that is not (yet) a run.
    ///
    /// # Errors
    /// I/O errors and invalid content.
    pub fn status(&self) -> Result<Option<Status>, Error> {
        self.read_json(files::STATUS)
    }

    /// Replaces the status (atomically), stamping `updated_at`.
    ///
    /// # Errors
    /// I/O errors.
    pub fn set_status(&self, status: &Status) -> Result<(), Error> {
        let mut s = status.clone();
        s.updated_at = now();
        self.write_json(files::STATUS, &s)
    }

    /// The last checkpoint whose state still exists: where a resumed run starts. A local
    /// `state_path` is returned resolved against the run directory (and must exist); a remote
    /// URI is returned as is (only its service can tell whether it exists).
    ///
    /// # Errors
    /// I/O errors and corrupt lines.
    pub fn last_checkpoint(&self) -> Result<Option<CheckpointRecord>, Error> {
        let read: jsonl::Read<CheckpointRecord> = read_jsonl(&self.file(files::CHECKPOINTS))?;
        Ok(read.rows.into_iter().rev().find_map(|mut c| {
            let state = c.state_path.as_ref()?;
            if is_uri(state) {
                return Some(c);
            }
            let abs = self.path.join(state);
            abs.exists().then(|| {
                c.state_path = Some(abs.display().to_string());
                c
            })
        }))
    }

    /// How `checkpoints.jsonl` records a state reference: a local path inside the run directory
    /// relative to it, anything else as given.
    pub fn relative_state(&self, state: &str) -> String {
        if is_uri(state) {
            return state.to_string();
        }
        match Path::new(state).strip_prefix(&self.path) {
            Ok(rel) => rel.display().to_string(),
            Err(_) => state.to_string(),
        }
    }

    /// Rewrites a JSONL file keeping only records whose `step` satisfies `keep` (records without
    /// a step are kept). Used on resume to drop what a crashed attempt wrote after its last
    /// checkpoint, so no step appears twice. Returns how many records were dropped.
    ///
    /// # Errors
    /// I/O errors and corrupt lines.
    pub fn retain_steps(&self, name: &str, keep: impl Fn(i64) -> bool) -> Result<usize, Error> {
        let path = self.file(name);
        let read: jsonl::Read<serde_json::Value> = read_jsonl(&path)?;
        let before = read.rows.len();
        let kept: Vec<&serde_json::Value> = read.rows.iter().filter(|r| r.get("step").and_then(serde_json::Value::as_i64).is_none_or(&keep)).collect();
        if kept.len() == before && read.torn_line.is_none() {
            return Ok(0);
        }
        let mut bytes = Vec::new();
        for r in &kept {
            bytes.extend(serde_json::to_vec(r).expect("values serialise"));
            bytes.push(b'\n');
        }
        atomic_write(&path, &bytes)?;
        Ok(before - kept.len())
    }

    /// Takes the run's exclusive lock (`.lock` in the directory), held until the returned file is
    /// dropped: one process runs an experiment at a time, so a second `rlx run` of the same spec
    /// (two sweeps launched at once) stops before it can touch the first one's files.
    ///
    /// # Errors
    /// [`Error::Busy`] when another process holds it; I/O errors.
    pub fn lock(&self) -> Result<fs::File, Error> {
        let path = self.file(".lock");
        let f = fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(io("cannot open", &path))?;
        match f.try_lock() {
            Ok(()) => Ok(f),
            Err(fs::TryLockError::WouldBlock) => Err(Error::Busy { path: self.path.clone() }),
            Err(fs::TryLockError::Error(e)) => Err(io("cannot lock", &path)(e)),
        }
    }

    /// An appender for one of the JSONL files.
    ///
    /// # Errors
    /// I/O errors.
    pub fn jsonl(&self, name: &str) -> Result<JsonlWriter, Error> {
        JsonlWriter::open(&self.file(name))
    }
}

/// Whether a state reference is a remote URI (`scheme://…`) rather than a local path.
fn is_uri(state: &str) -> bool {
    state.contains("://")
}

/// Writes `bytes` to `path` so that readers see either the old or the new content, never a mix:
/// a temp file in the same directory, fsynced, then renamed over the target.
///
/// # Errors
/// I/O errors.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io("cannot write", path)(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_whole_files() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.json");
        atomic_write(&p, b"{\"a\":1}").unwrap();
        atomic_write(&p, b"{\"a\":2}").unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "{\"a\":2}");
        // No temp files left behind.
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1);
    }
}
