//! `logs.log`: the human log of a run, fed by `tracing`.
//!
//! The subscriber is built once per process, before the run directory is known, so its file
//! layer writes through [`LogSink`], which discards lines until a run attaches its log file.
//! One process runs one experiment (sweeps start a process per run), so one slot suffices.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use tracing_subscriber::fmt::MakeWriter;

static FILE: OnceLock<Mutex<Option<File>>> = OnceLock::new();

fn slot() -> &'static Mutex<Option<File>> {
    FILE.get_or_init(|| Mutex::new(None))
}

/// Sends subsequent log lines to `path` (appending).
///
/// # Errors
/// When the file cannot be opened.
pub fn attach(path: &Path) -> io::Result<()> {
    let f = OpenOptions::new().create(true).append(true).open(path)?;
    *slot().lock().unwrap_or_else(|e| e.into_inner()) = Some(f);
    Ok(())
}

/// Stops writing to the attached file, flushing it.
pub fn detach() {
    if let Some(mut f) = slot().lock().unwrap_or_else(|e| e.into_inner()).take() {
        let _ = f.flush();
    }
}

/// A `tracing` writer that goes to the attached run log, or nowhere.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogSink;

impl Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match slot().lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            Some(f) => f.write(buf),
            None => Ok(buf.len()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match slot().lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

impl<'a> MakeWriter<'a> for LogSink {
    type Writer = LogSink;
    fn make_writer(&'a self) -> Self::Writer {
        LogSink
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn tracing_events_reach_the_attached_file() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("logs.log");
        let layer = tracing_subscriber::fmt::layer().with_writer(LogSink).with_ansi(false);
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("before attach");
            attach(&path).unwrap();
            tracing::info!(step = 3, "step finished");
            detach();
            tracing::info!("after detach");
        });
        let log = std::fs::read_to_string(&path).unwrap();
        assert!(log.contains("step finished") && log.contains("step=3"), "{log}");
        assert!(!log.contains("before attach") && !log.contains("after detach"), "{log}");
    }
}
