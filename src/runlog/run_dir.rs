//! [`RunDir`]: an open `runs/<run-id>/`, with a typed reader for each of its files.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::jsonl::{self, JsonlWriter, Read, read_jsonl};
use super::{CheckpointRecord, Error, EvalResultRecord, EventRecord, MetricsLine, Provenance, RolloutRecord, Status, files, io, json, now};
use crate::plan::Plan;

/// An open run directory.
#[derive(Debug, Clone)]
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    /// Creates the run directory of `plan` and writes its spec, resolved spec and provenance; or
    /// reopens it if it exists (a re-run of the same experiment resumes it).
    ///
    /// # Errors
    /// I/O errors; [`Error::Mismatch`] if the directory holds another run;
    /// [`Error::NewerFormat`] if a newer rlx wrote it.
    pub fn create(plan: &Plan) -> Result<RunDir, Error> {
        let path = plan.run_dir();
        let dir = RunDir { path };
        if let Some(status) = dir.status()? {
            if status.run_id != plan.run_id {
                return Err(Error::Mismatch { path: dir.path.clone(), found: status.run_id, expected: plan.run_id.clone() });
            }
            return Ok(dir);
        }
        fs::create_dir_all(&dir.path).map_err(io("cannot create run directory", &dir.path))?;
        json::atomic_write(&dir.file(files::SPEC), plan.written.text.as_bytes())?;
        dir.write_json(files::RESOLVED, &crate::plan::record::to_json(plan))?;
        dir.write_json(files::PROVENANCE, &Provenance::of(plan))?;
        dir.set_status(&Status::new(plan))?;
        Ok(dir)
    }

    /// Opens an existing run directory (any state: running, crashed, failed, finished).
    ///
    /// `status.json` is read here, so a directory from a newer rlx is refused before any of its
    /// other files is read: its `schema_version` covers them all.
    ///
    /// # Errors
    /// When `path` has no `status.json`; [`Error::NewerFormat`]; I/O errors and invalid content.
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
        json::write(&self.file(name), value)
    }

    /// Reads a whole JSON file, `None` if absent. No version check: prefer the typed readers.
    ///
    /// # Errors
    /// I/O errors and invalid content.
    pub fn read_json<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, Error> {
        json::read(&self.file(name))
    }

    /// The current status, `None` for a directory that is not (yet) a run.
    ///
    /// # Errors
    /// [`Error::NewerFormat`]; I/O errors and invalid content.
    pub fn status(&self) -> Result<Option<Status>, Error> {
        json::read_versioned(&self.file(files::STATUS))
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

    /// `provenance.json`.
    ///
    /// # Errors
    /// [`Error::Missing`] without one; [`Error::NewerFormat`]; I/O errors and invalid content.
    pub fn provenance(&self) -> Result<Provenance, Error> {
        let path = self.file(files::PROVENANCE);
        json::read_versioned(&path)?.ok_or(Error::Missing { path })
    }

    /// Rewrites `provenance.json` (atomically) after `edit` changed it: how the engine records
    /// what it learns while setting up (`data`, `prompt_tokens`, `sandbox`).
    ///
    /// # Errors
    /// As [`RunDir::provenance`], and I/O errors writing it.
    pub fn update_provenance(&self, edit: impl FnOnce(&mut Provenance)) -> Result<(), Error> {
        let mut p = self.provenance()?;
        edit(&mut p);
        self.write_json(files::PROVENANCE, &p)
    }

    /// `metrics.jsonl`, one line per step in file order (the baseline eval first, at step −1).
    /// A torn last line is skipped and reported in [`Read::torn_line`].
    ///
    /// # Errors
    /// I/O errors; [`Error::Corrupt`] for a bad line other than a torn last one.
    pub fn metrics(&self) -> Result<Read<MetricsLine>, Error> {
        read_jsonl(&self.file(files::METRICS))
    }

    /// `rollouts.jsonl`; a torn last line is skipped.
    ///
    /// # Errors
    /// As [`RunDir::metrics`].
    pub fn rollouts(&self) -> Result<Read<RolloutRecord>, Error> {
        read_jsonl(&self.file(files::ROLLOUTS))
    }

    /// `eval_results.jsonl`; a torn last line is skipped.
    ///
    /// # Errors
    /// As [`RunDir::metrics`].
    pub fn eval_results(&self) -> Result<Read<EvalResultRecord>, Error> {
        read_jsonl(&self.file(files::EVAL_RESULTS))
    }

    /// `eval_rollouts.jsonl`; a torn last line is skipped; missing (runs before it existed)
    /// reads as empty.
    ///
    /// # Errors
    /// As [`RunDir::metrics`].
    pub fn eval_rollouts(&self) -> Result<Read<crate::runlog::EvalSampleRecord>, Error> {
        read_jsonl(&self.file(files::EVAL_ROLLOUTS))
    }

    /// `events.jsonl`; a torn last line is skipped.
    ///
    /// # Errors
    /// As [`RunDir::metrics`].
    pub fn events(&self) -> Result<Read<EventRecord>, Error> {
        read_jsonl(&self.file(files::EVENTS))
    }

    /// `checkpoints.jsonl` as written (state paths relative to the run directory); a torn last
    /// line is skipped.
    ///
    /// # Errors
    /// As [`RunDir::metrics`].
    pub fn checkpoints(&self) -> Result<Read<CheckpointRecord>, Error> {
        read_jsonl(&self.file(files::CHECKPOINTS))
    }

    /// The last checkpoint whose state still exists: where a resumed run starts. A local
    /// `state_path` is returned resolved against the run directory (and must exist); a remote
    /// URI is returned as is (only its service can tell whether it exists).
    ///
    /// # Errors
    /// I/O errors and corrupt lines.
    pub fn last_checkpoint(&self) -> Result<Option<CheckpointRecord>, Error> {
        Ok(self.checkpoints()?.rows.into_iter().rev().find_map(|mut c| {
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
    /// Works on untyped lines so that it serves every file and keeps keys it does not know.
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
        json::atomic_write(&path, &bytes)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runlog::{SCHEMA_VERSION, State, VerdictStatus};
    use std::io::Write;

    /// A run directory as a crashed (or still running) run leaves it, without a `Plan`.
    fn running_dir() -> (tempfile::TempDir, RunDir) {
        let d = tempfile::tempdir().unwrap();
        let status = Status {
            schema_version: SCHEMA_VERSION,
            run_id: "r-1".into(),
            state: State::Running,
            steps_done: 1,
            max_steps: 3,
            reason: None,
            pid: Some(1),
            started_at: now(),
            updated_at: now(),
        };
        json::write(&d.path().join(files::STATUS), &status).unwrap();
        let dir = RunDir::open(d.path()).unwrap();
        (d, dir)
    }

    fn append_torn(dir: &RunDir, name: &str, text: &str) {
        fs::OpenOptions::new().append(true).create(true).open(dir.file(name)).unwrap().write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn typed_readers_skip_a_torn_last_line() {
        let (_d, dir) = running_dir();
        let mut m = dir.jsonl(files::METRICS).unwrap();
        m.append(&MetricsLine::new(-1, [(crate::runlog::metrics::eval::pass_at(1), 0.5)].into())).unwrap();
        m.append(&MetricsLine::new(0, [(crate::runlog::metrics::train::LOSS.to_string(), 1.0)].into())).unwrap();
        drop(m);
        append_torn(&dir, files::METRICS, r#"{"step": 1, "train/lo"#);
        let read = dir.metrics().unwrap();
        assert_eq!(read.rows.iter().map(|l| l.step).collect::<Vec<_>>(), vec![-1, 0]);
        assert_eq!(read.torn_line, Some(3));
        assert_eq!(read.rows[0].pass_at(1), Some(0.5));

        let mut e = dir.jsonl(files::EVENTS).unwrap();
        e.append(&EventRecord::start(0)).unwrap();
        drop(e);
        append_torn(&dir, files::EVENTS, r#"{"event":"fin"#);
        let events = dir.events().unwrap();
        assert!(matches!(events.rows[..], [EventRecord::Start { dropped_records: 0, .. }]));
        assert_eq!(events.torn_line, Some(2));

        append_torn(&dir, files::ROLLOUTS, "{\"step\":0,\"problem_id\":\"p\",\"group\":0,\"sample\":0,\"text\":\"\",\"code\":null,\"status\":\"format_error\",\"tests_passed\":0,\"tests_total\":3,\"reward\":null,\"advantage\":0.0,\"skipped\":true,\"stop_reason\":\"length\",\"tokens\":8,\"attempts\":1}\n{\"step\":0,");
        let r = dir.rollouts().unwrap();
        assert_eq!(r.rows.len(), 1);
        assert_eq!(r.rows[0].completion.status, VerdictStatus::FormatError);
        assert!(r.rows[0].reward.is_nan());
        assert_eq!(r.torn_line, Some(2));

        append_torn(&dir, files::EVAL_RESULTS, r#"{"step":-1,"problem_id":"p","n":2,"correct":1,"statuses":["passed","failed"],"tests_passed":[3,1],"metrics":{"pass@1":0.5}}"#);
        // A last line without its newline that parses is whole (only its newline is missing).
        let e = dir.eval_results().unwrap();
        assert_eq!((e.rows.len(), e.torn_line), (1, None));
        assert_eq!(e.rows[0].metrics.get(1), Some(0.5));
    }

    #[test]
    fn missing_files_read_empty_but_provenance_is_required() {
        let (_d, dir) = running_dir();
        assert!(dir.metrics().unwrap().rows.is_empty());
        assert!(dir.rollouts().unwrap().rows.is_empty());
        assert!(dir.checkpoints().unwrap().rows.is_empty());
        let err = dir.provenance().unwrap_err();
        assert!(matches!(err, Error::Missing { .. }), "{err}");
        assert!(dir.update_provenance(|_| {}).is_err());
    }

    #[test]
    fn a_run_from_a_newer_rlx_is_refused_with_a_clear_error() {
        let (d, dir) = running_dir();
        let mut status: serde_json::Value = dir.read_json(files::STATUS).unwrap().unwrap();
        status["schema_version"] = (SCHEMA_VERSION + 1).into();
        // A newer format may also have reshaped fields; the version check comes first.
        status["state"] = serde_json::json!({"kind": "paused"});
        dir.write_json(files::STATUS, &status).unwrap();
        for err in [RunDir::open(d.path()).unwrap_err(), dir.status().unwrap_err()] {
            match &err {
                Error::NewerFormat { path, found, supported } => {
                    assert_eq!(path, &dir.file(files::STATUS));
                    assert_eq!((*found, *supported), (SCHEMA_VERSION + 1, SCHEMA_VERSION));
                }
                other => panic!("{other}"),
            }
            assert!(err.to_string().contains("written by a newer rlx"), "{err}");
        }
        dir.write_json(files::PROVENANCE, &serde_json::json!({"schema_version": SCHEMA_VERSION + 1})).unwrap();
        assert!(matches!(dir.provenance().unwrap_err(), Error::NewerFormat { .. }));
    }
}
