//! [`Follower`]: reads the complete lines of `metrics.jsonl` that one tracker has not mirrored
//! yet, from a cursor saved in the run directory (`sinks/<tracker>.json`).
//!
//! The cursor is a byte offset plus the step of the last line mirrored. The offset makes a
//! follow-up read cheap (only new bytes are read); the step makes it safe. A resumed run rewrites
//! `metrics.jsonl` (the engine drops what a crashed attempt wrote after its last checkpoint, then
//! appends the redone steps), so a saved offset can point into the middle of a different line.
//! The follower checks that the bytes just before the offset are the line it last mirrored; when
//! they are not it rescans the file from the start and skips every step at or below the saved one.
//! A step is therefore mirrored once, and none is skipped: a tracker keeps the values it was
//! first sent for a step the engine later redid (W&B cannot rewrite history anyway), which
//! `metrics.jsonl` records with the same seeds and the same weights.

use std::fs::File;
use std::io::{Read as _, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::super::{Error, MetricsLine, io, json};

/// Where a tracker stands in `metrics.jsonl`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Cursor {
    /// Byte offset just past the last line mirrored (0: nothing yet).
    pub offset: u64,
    /// Byte offset where that line starts.
    pub line_start: u64,
    /// Its step; `None` before the first line.
    pub step: Option<i64>,
}

/// What a tracker saves in `sinks/<tracker>.json`: its cursor and its own identity (the W&B run
/// id, the MLflow run id, the TensorBoard event file), written together so they cannot disagree.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Saved {
    /// The cursor.
    pub cursor: Cursor,
    /// The tracker's own state.
    #[serde(default)]
    pub sink: serde_json::Value,
}

/// One line to mirror, with the cursor to save once it is mirrored.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    /// The line.
    pub line: MetricsLine,
    /// The cursor just past it.
    pub cursor: Cursor,
}

/// Follows `metrics.jsonl` for one tracker.
#[derive(Debug)]
pub(crate) struct Follower {
    metrics: PathBuf,
    state: PathBuf,
    /// What is saved now.
    pub saved: Saved,
    /// Complete lines that did not parse (reported once each, never mirrored).
    pub bad_lines: Vec<u64>,
}

impl Follower {
    /// A follower of `metrics` whose state lives in `state` (read if present).
    ///
    /// # Errors
    /// I/O errors and a state file that is not JSON.
    pub(crate) fn open(metrics: &Path, state: &Path) -> Result<Follower, Error> {
        let saved = json::read(state)?.unwrap_or_default();
        Ok(Follower { metrics: metrics.to_path_buf(), state: state.to_path_buf(), saved, bad_lines: vec![] })
    }

    /// The lines not mirrored yet, in file order: complete lines (ending in a newline) whose step
    /// is above the saved one. A line still being written is left for the next call.
    ///
    /// # Errors
    /// I/O errors reading `metrics.jsonl`.
    pub(crate) fn pending(&mut self) -> Result<Vec<Pending>, Error> {
        let path = &self.metrics;
        let mut file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(io("cannot open", path)(e)),
        };
        let c = self.saved.cursor;
        let len = file.metadata().map_err(io("cannot read", path))?.len();
        // Read from the start of the last mirrored line, to check it is still there.
        let in_range = c.offset > 0 && c.offset <= len && c.line_start < c.offset;
        let from = if in_range { c.line_start } else { 0 };
        file.seek(SeekFrom::Start(from)).map_err(io("cannot read", path))?;
        let mut bytes = Vec::with_capacity((len - from) as usize);
        file.read_to_end(&mut bytes).map_err(io("cannot read", path))?;
        if c.offset == 0 {
            return Ok(self.collect(&bytes, 0, 0));
        }
        let last = (c.offset - from) as usize;
        let intact = in_range
            && bytes.get(..last).is_some_and(|l| l.ends_with(b"\n") && !l[..l.len() - 1].contains(&b'\n'))
            && serde_json::from_slice::<MetricsLine>(&bytes[..last]).is_ok_and(|l| Some(l.step) == c.step);
        if intact {
            return Ok(self.collect(&bytes, from, last));
        }
        // Rewritten since (a resume dropped lines): read it all again, by step.
        tracing::debug!(file = %path.display(), "metrics.jsonl changed under the saved offset; rescanning");
        if from > 0 {
            file.seek(SeekFrom::Start(0)).map_err(io("cannot read", path))?;
            bytes.clear();
            file.read_to_end(&mut bytes).map_err(io("cannot read", path))?;
        }
        Ok(self.collect(&bytes, 0, 0))
    }

    /// Complete lines of `bytes` (which start at file offset `base`) from index `start`.
    fn collect(&mut self, bytes: &[u8], base: u64, mut start: usize) -> Vec<Pending> {
        let mut out = vec![];
        let mut last_step = self.saved.cursor.step;
        while let Some(nl) = bytes[start..].iter().position(|&b| b == b'\n') {
            let end = start + nl + 1;
            let text = &bytes[start..end];
            let (line_start, offset) = (base + start as u64, base + end as u64);
            start = end;
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<MetricsLine>(text) {
                Ok(line) => {
                    if last_step.is_some_and(|s| line.step <= s) {
                        continue;
                    }
                    last_step = Some(line.step);
                    out.push(Pending { cursor: Cursor { offset, line_start, step: Some(line.step) }, line });
                }
                Err(e) => {
                    if !self.bad_lines.contains(&line_start) {
                        tracing::warn!(file = %self.metrics.display(), offset = line_start, "a metrics line that does not parse is not mirrored: {e}");
                        self.bad_lines.push(line_start);
                    }
                }
            }
        }
        out
    }

    /// Saves `cursor` (with the tracker's own state) once the lines up to it are mirrored.
    ///
    /// # Errors
    /// I/O errors.
    pub(crate) fn commit(&mut self, cursor: Cursor, sink: serde_json::Value) -> Result<(), Error> {
        self.saved = Saved { cursor, sink };
        json::write(&self.state, &self.saved)
    }

    /// Moves the cursor in memory only: for a tracker that saves it itself once the lines are
    /// durable ([`super::Mirror::SAVES_CURSOR`]).
    pub(crate) fn advance(&mut self, cursor: Cursor) {
        self.saved.cursor = cursor;
    }

    /// Reads the saved state again (another process may have moved it).
    ///
    /// # Errors
    /// I/O errors and a state file that is not JSON.
    pub(crate) fn reload(&mut self) -> Result<(), Error> {
        self.saved = json::read(&self.state)?.unwrap_or_default();
        Ok(())
    }

    /// Saves the tracker's own state without moving the cursor.
    ///
    /// # Errors
    /// I/O errors.
    pub(crate) fn save_sink(&mut self, sink: serde_json::Value) -> Result<(), Error> {
        self.commit(self.saved.cursor, sink)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn line(step: i64, v: f64) -> String {
        format!("{{\"step\":{step},\"train/loss\":{v}}}\n")
    }

    fn steps(p: &[Pending]) -> Vec<i64> {
        p.iter().map(|p| p.line.step).collect()
    }

    #[test]
    fn follows_complete_lines_and_resumes_from_the_saved_cursor() {
        let d = tempfile::tempdir().unwrap();
        let (m, s) = (d.path().join("metrics.jsonl"), d.path().join("state.json"));
        std::fs::write(&m, line(-1, 0.5) + &line(0, 1.0) + "{\"step\":1,\"train/").unwrap();
        let mut f = Follower::open(&m, &s).unwrap();
        let p = f.pending().unwrap();
        assert_eq!(steps(&p), vec![-1, 0], "the torn tail waits");
        f.commit(p[1].cursor, serde_json::json!({"id": "x"})).unwrap();
        std::fs::OpenOptions::new().append(true).open(&m).unwrap().write_all(b"loss\":2.0}\n").unwrap();
        // A new follower (a resumed process) starts from the saved cursor.
        let mut f = Follower::open(&m, &s).unwrap();
        assert_eq!(f.saved.sink["id"], "x");
        let p = f.pending().unwrap();
        assert_eq!(steps(&p), vec![1]);
        assert_eq!(p[0].line.get("train/loss"), Some(2.0));
        f.commit(p[0].cursor, serde_json::Value::Null).unwrap();
        assert!(f.pending().unwrap().is_empty());
    }

    #[test]
    fn a_rewritten_file_is_rescanned_by_step() {
        let d = tempfile::tempdir().unwrap();
        let (m, s) = (d.path().join("metrics.jsonl"), d.path().join("state.json"));
        std::fs::write(&m, line(-1, 0.5) + &line(0, 1.0) + &line(1, 2.0) + &line(2, 3.0)).unwrap();
        let mut f = Follower::open(&m, &s).unwrap();
        let p = f.pending().unwrap();
        f.commit(p[3].cursor, serde_json::Value::Null).unwrap();
        // Resume from a checkpoint after step 0: steps 1 and 2 are dropped, then redone with
        // longer lines, so the old offset lands inside another line.
        std::fs::write(&m, line(-1, 0.5) + &line(0, 1.0) + &line(1, 2.25) + &line(2, 3.25) + &line(3, 4.0)).unwrap();
        let p = f.pending().unwrap();
        assert_eq!(steps(&p), vec![3], "steps 1 and 2 were mirrored already");
        f.commit(p[0].cursor, serde_json::Value::Null).unwrap();
        // Shorter than the saved offset: rescanned too.
        std::fs::write(&m, line(-1, 0.5) + &line(0, 1.0)).unwrap();
        assert!(f.pending().unwrap().is_empty());
        std::fs::OpenOptions::new().append(true).open(&m).unwrap().write_all(line(4, 5.0).as_bytes()).unwrap();
        assert_eq!(steps(&f.pending().unwrap()), vec![4]);
    }

    #[test]
    fn a_corrupt_complete_line_is_skipped_not_fatal() {
        let d = tempfile::tempdir().unwrap();
        let (m, s) = (d.path().join("metrics.jsonl"), d.path().join("state.json"));
        std::fs::write(&m, line(0, 1.0) + "not json\n" + &line(1, 2.0)).unwrap();
        let mut f = Follower::open(&m, &s).unwrap();
        assert_eq!(steps(&f.pending().unwrap()), vec![0, 1]);
        assert_eq!(f.bad_lines.len(), 1);
        assert!(Follower::open(&d.path().join("none.jsonl"), &s).unwrap().pending().unwrap().is_empty());
    }
}
