//! Append-only JSON Lines: whole lines in, torn tails out.

use std::fs::{self, File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Error, io};

/// Appends JSON objects to a `.jsonl` file, one whole line per record.
#[derive(Debug)]
pub struct JsonlWriter {
    path: PathBuf,
    file: File,
    /// Bytes cut from a torn last line when the file was opened.
    pub repaired: usize,
}

impl JsonlWriter {
    /// Opens `path` for appending, creating it if needed. A torn last line (no trailing newline:
    /// a crash mid-write) is cut off first, so the next record starts on a line of its own.
    ///
    /// # Errors
    /// I/O errors.
    pub fn open(path: &Path) -> Result<JsonlWriter, Error> {
        let mut file = OpenOptions::new().create(true).read(true).append(true).open(path).map_err(io("cannot open", path))?;
        // One writer per file: the torn-tail repair below must never cut a line that another
        // writer is in the middle of appending. The lock is released when the writer drops.
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(Error::Busy { path: path.to_path_buf() }),
            Err(std::fs::TryLockError::Error(e)) => return Err(io("cannot lock", path)(e)),
        }
        let bytes = fs::read(path).map_err(io("cannot read", path))?;
        let mut repaired = 0;
        if !bytes.is_empty() && !bytes.ends_with(b"\n") {
            let keep = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            repaired = bytes.len() - keep;
            file.set_len(keep as u64).map_err(io("cannot repair", path))?;
            file.seek(SeekFrom::End(0)).map_err(io("cannot repair", path))?;
            tracing::warn!(file = %path.display(), bytes = repaired, "cut a torn last line left by an interrupted write");
        }
        Ok(JsonlWriter { path: path.to_path_buf(), file, repaired })
    }

    /// Appends one record as one line and flushes it to the OS.
    ///
    /// The line goes out in a single `write` on an `O_APPEND` file, so concurrent readers see
    /// whole lines, and a crash can at worst leave a tail without its newline, which readers skip.
    ///
    /// # Errors
    /// I/O errors.
    pub fn append<T: Serialize + ?Sized>(&mut self, record: &T) -> Result<(), Error> {
        let mut line = serde_json::to_vec(record).expect("records serialise");
        line.push(b'\n');
        self.file.write_all(&line).map_err(io("cannot append to", &self.path))?;
        self.file.flush().map_err(io("cannot flush", &self.path))
    }

    /// Forces appended lines to disk (at step boundaries).
    ///
    /// # Errors
    /// I/O errors.
    pub fn sync(&mut self) -> Result<(), Error> {
        self.file.sync_data().map_err(io("cannot sync", &self.path))
    }
}

/// What [`read_jsonl`] found.
#[derive(Debug)]
pub struct Read<T> {
    /// The records, in file order.
    pub rows: Vec<T>,
    /// A torn last line that was skipped (its 1-based line number), if any.
    pub torn_line: Option<usize>,
}

/// Reads every record of a `.jsonl` file. A missing file reads as empty.
///
/// A last line without its newline that does not parse is a torn write: it is skipped with a
/// warning. Any other line that does not parse is an error naming the line, never skipped,
/// because dropping a record silently would falsify the run's history.
///
/// # Errors
/// I/O errors and corrupt lines.
pub fn read_jsonl<T: DeserializeOwned>(path: &Path) -> Result<Read<T>, Error> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Read { rows: vec![], torn_line: None }),
        Err(e) => return Err(io("cannot read", path)(e)),
    };
    let text = String::from_utf8_lossy(&bytes);
    let complete = text.ends_with('\n');
    let lines: Vec<&str> = text.lines().collect();
    let mut rows = Vec::with_capacity(lines.len());
    let mut torn_line = None;
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(r) => rows.push(r),
            Err(_) if i + 1 == lines.len() && !complete => {
                tracing::warn!(file = %path.display(), line = i + 1, "skipping a torn last line (an interrupted write)");
                torn_line = Some(i + 1);
            }
            Err(e) => return Err(Error::Corrupt { path: path.to_path_buf(), line: i + 1, message: e.to_string() }),
        }
    }
    Ok(Read { rows, torn_line })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn torn_tail_is_skipped_then_repaired() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("m.jsonl");
        let mut w = JsonlWriter::open(&p).unwrap();
        w.append(&json!({"step": 0})).unwrap();
        w.append(&json!({"step": 1})).unwrap();
        drop(w);
        // A crash mid-write leaves half a line.
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"step\": 2, \"train/lo").unwrap();
        drop(f);
        let r: Read<Value> = read_jsonl(&p).unwrap();
        assert_eq!(r.rows.len(), 2);
        assert_eq!(r.torn_line, Some(3));
        // The next writer cuts the torn tail before appending.
        let mut w = JsonlWriter::open(&p).unwrap();
        assert_eq!(w.repaired, 21);
        w.append(&json!({"step": 2})).unwrap();
        let r: Read<Value> = read_jsonl(&p).unwrap();
        assert_eq!(r.rows.iter().map(|v| v["step"].as_i64().unwrap()).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(r.torn_line, None);
    }

    #[test]
    fn corruption_in_the_middle_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("m.jsonl");
        fs::write(&p, "{\"step\":0}\nnot json\n{\"step\":2}\n").unwrap();
        let err = read_jsonl::<Value>(&p).unwrap_err();
        assert!(matches!(err, Error::Corrupt { line: 2, .. }), "{err}");
        // A complete (newline-terminated) bad last line is corruption too, not a torn write.
        fs::write(&p, "{\"step\":0}\n{bad}\n").unwrap();
        assert!(read_jsonl::<Value>(&p).is_err());
    }

    #[test]
    fn missing_file_reads_empty() {
        let r: Read<Value> = read_jsonl(Path::new("/nonexistent/x.jsonl")).unwrap();
        assert!(r.rows.is_empty());
    }
}
