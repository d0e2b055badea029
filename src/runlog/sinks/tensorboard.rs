//! TensorBoard: event files written by rlx itself, one scalar per metric per step.
//!
//! An event file is a sequence of TFRecords (u64 length, masked CRC32C of the length, the data,
//! masked CRC32C of the data), each holding an `Event` protobuf; the first says
//! `file_version: "brain.Event:2"`. The messages are declared here with prost derive (no
//! `protoc`), keeping only the fields rlx writes. Rejected: `tensorboard-rs` (unmaintained since
//! 2022, protobuf 2.x) and `tboard` (needs `protoc` at build time).
//!
//! One file per run, named once and kept in `sinks/tensorboard.json` with its length after the
//! last mirrored line. A resumed run cuts the file back to that length before appending: a record
//! written just before a crash, but not committed, would otherwise appear twice, and a torn
//! record would make TensorBoard stop reading the file there.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use prost::Message;
use serde::{Deserialize, Serialize};

use super::follow::Cursor;
use super::mirror::{Mirror, SinkError};
use crate::runlog::MetricsLine;

/// `tensorflow.Event`, the fields rlx writes.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Event {
    /// Seconds since the epoch.
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    /// Global step.
    #[prost(int64, tag = "2")]
    pub step: i64,
    /// What the event carries.
    #[prost(oneof = "What", tags = "3, 5")]
    pub what: Option<What>,
}

/// `Event.what`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum What {
    /// The first record of a file: `brain.Event:2`.
    #[prost(string, tag = "3")]
    FileVersion(String),
    /// Values at a step.
    #[prost(message, tag = "5")]
    Summary(Summary),
}

/// `tensorflow.Summary`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Summary {
    /// The values.
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<Value>,
}

/// `tensorflow.Summary.Value` with a `simple_value`, which TensorBoard reads as a scalar.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Value {
    /// The metric name (`train/loss`); TensorBoard groups by what precedes the `/`.
    #[prost(string, tag = "1")]
    pub tag: String,
    /// The value (TensorBoard scalars are f32). A member of a oneof in TensorFlow's proto, so it
    /// must be written even when 0 (a plain proto3 field would drop zeros, and TensorBoard would
    /// then see a value of no kind and skip it).
    #[prost(float, optional, tag = "2")]
    pub simple_value: Option<f32>,
}

/// TFRecord's masked CRC32C (a rotated, offset CRC, so that a CRC of data holding CRCs is not
/// degenerate).
fn masked_crc(bytes: &[u8]) -> u32 {
    let crc = crc32c::crc32c(bytes);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// One TFRecord around `data`.
pub(crate) fn record(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
    out
}

/// The event of one metrics line.
pub(crate) fn line_event(line: &MetricsLine, wall_time: f64) -> Event {
    let value = line.values.iter().map(|(k, &v)| Value { tag: k.clone(), simple_value: Some(v as f32) }).collect();
    Event { wall_time, step: line.step, what: Some(What::Summary(Summary { value })) }
}

fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// What `sinks/tensorboard.json` keeps besides the cursor.
#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    /// The event file (absolute).
    file: Option<PathBuf>,
    /// Its length after the last committed line.
    length: u64,
}

/// Writes a run's metrics as TensorBoard scalars into `dir`.
#[derive(Debug)]
pub(crate) struct TensorBoard {
    dir: PathBuf,
    state: State,
    file: Option<File>,
    /// The saved state was for another directory.
    moved: bool,
}

impl TensorBoard {
    /// A writer into `dir`, continuing the file named in `saved` (the tracker's saved state).
    pub(crate) fn new(dir: PathBuf, saved: &serde_json::Value) -> TensorBoard {
        let mut state: State = serde_json::from_value(saved.clone()).unwrap_or_default();
        let moved = state.file.as_ref().is_some_and(|f| f.parent() != Some(dir.as_path()));
        if moved {
            state = State::default();
        }
        TensorBoard { dir, state, file: None, moved }
    }

    /// Opens the event file: the saved one cut back to its committed length, or a new one.
    fn open(&mut self) -> Result<&mut File, SinkError> {
        if self.file.is_none() {
            let err = |what: &str, p: &Path, e: std::io::Error| SinkError::Failed(format!("cannot {what} `{}`: {e}", p.display()));
            let file = match &self.state.file {
                Some(p) if p.exists() => {
                    let f = OpenOptions::new().append(true).open(p).map_err(|e| err("open", p, e))?;
                    f.set_len(self.state.length).map_err(|e| err("truncate", p, e))?;
                    f
                }
                _ => {
                    std::fs::create_dir_all(&self.dir).map_err(|e| err("create", &self.dir, e))?;
                    let host = hostname();
                    let secs = now() as u64;
                    let p = self.dir.join(format!("events.out.tfevents.{secs}.{host}.{}.0", std::process::id()));
                    let mut f = OpenOptions::new().create(true).append(true).open(&p).map_err(|e| err("create", &p, e))?;
                    let head = Event { wall_time: now(), step: 0, what: Some(What::FileVersion("brain.Event:2".into())) };
                    let bytes = record(&head.encode_to_vec());
                    f.write_all(&bytes).map_err(|e| err("write", &p, e))?;
                    self.state = State { file: Some(p), length: bytes.len() as u64 };
                    f
                }
            };
            self.file = Some(file);
        }
        Ok(self.file.as_mut().expect("just opened"))
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is a valid, writable buffer of the length passed; gethostname NUL-terminates
    // within it or truncates.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let name = if rc == 0 { String::from_utf8_lossy(&buf[..buf.iter().position(|&b| b == 0).unwrap_or(buf.len())]).into_owned() } else { String::new() };
    let name: String = name.chars().filter(|c| c.is_ascii_alphanumeric() || "-_".contains(*c)).collect();
    if name.is_empty() { "localhost".into() } else { name }
}

impl Mirror for TensorBoard {
    fn name(&self) -> &'static str {
        "TensorBoard"
    }

    async fn send(&mut self, lines: &[MetricsLine], _upto: Cursor) -> Result<(), SinkError> {
        let mut bytes = vec![];
        for l in lines {
            bytes.extend(record(&line_event(l, now()).encode_to_vec()));
        }
        let file = self.open()?;
        let done = file.write_all(&bytes).and_then(|()| file.sync_data());
        let path = self.state.file.clone().unwrap_or_default();
        done.map_err(|e| SinkError::Failed(format!("cannot write `{}`: {e}", path.display())))?;
        self.state.length += bytes.len() as u64;
        Ok(())
    }

    fn starts_over(&self) -> bool {
        self.moved
    }

    fn state(&self) -> serde_json::Value {
        serde_json::to_value(&self.state).expect("state serialises")
    }

    fn location(&self) -> String {
        format!("`{}`", self.dir.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_crc_matches_tensorflow() {
        // From TensorFlow's crc32c_test.cc (`Mask`/`Unmask` of the CRC of "foo") and the
        // known CRC32C of "123456789".
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        let crc = crc32c::crc32c(b"foo");
        let masked = masked_crc(b"foo");
        let unmasked = masked.wrapping_sub(0xa282_ead8).rotate_left(15);
        assert_eq!(unmasked, crc);
        assert_ne!(masked, crc);
    }

    #[test]
    fn a_record_frames_its_data() {
        let r = record(b"abc");
        assert_eq!(r.len(), 8 + 4 + 3 + 4);
        assert_eq!(u64::from_le_bytes(r[..8].try_into().unwrap()), 3);
        assert_eq!(&r[12..15], b"abc");
        let mut line = MetricsLine { step: 4, ..MetricsLine::default() };
        line.values.insert("train/loss".into(), 0.5);
        let ev = Event::decode(&line_event(&line, 1.0).encode_to_vec()[..]).unwrap();
        assert_eq!(ev.step, 4);
        let Some(What::Summary(s)) = ev.what else { panic!("a summary") };
        assert_eq!((s.value[0].tag.as_str(), s.value[0].simple_value), ("train/loss", Some(0.5)));
        // A zero is written, not left out as a proto3 default.
        line.values.insert("train/loss".into(), 0.0);
        let ev = Event::decode(&line_event(&line, 1.0).encode_to_vec()[..]).unwrap();
        let Some(What::Summary(s)) = ev.what else { panic!("a summary") };
        assert_eq!(s.value[0].simple_value, Some(0.0));
        assert!(line_event(&line, 1.0).encode_to_vec().len() > 2 + "train/loss".len() + 2 + 4);
    }
}
