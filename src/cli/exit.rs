//! Exit codes, documented in `rlx --help`, and which one an error gets.

use std::error::Error as StdError;

/// Success.
pub(crate) const OK: u8 = 0;
/// The run finished but failed a gate set in the spec (or a sweep member failed).
pub(crate) const GATE: u8 = 1;
/// Bad spec or bad arguments: a missing or malformed model, data file or spec.
pub(crate) const USAGE: u8 = 2;
/// Internal or infrastructure error.
pub(crate) const INTERNAL: u8 = 3;
/// Interrupted (SIGINT/SIGTERM).
pub(crate) const INTERRUPTED: u8 = 130;

/// The exit code for an error that ended a command: [`USAGE`] when the user can fix it (a
/// missing model or file, a malformed dataset line or GGUF file, a bad spec or argument),
/// [`INTERNAL`] otherwise, and [`OK`] for a closed stdout (the reader has what it wanted).
///
/// The chain is walked outermost first and the first error of a known type decides: each
/// module's error knows which of its variants are the user's (`is_user_error`), and plain
/// `anyhow` context in between carries no verdict. An error of no known type is internal.
pub(crate) fn for_error(err: &anyhow::Error) -> u8 {
    if is_broken_pipe(err) {
        return OK;
    }
    match err.chain().find_map(user_error) {
        Some(true) => USAGE,
        _ => INTERNAL,
    }
}

/// Whether writing results failed because the reader closed the pipe.
pub(crate) fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || e.downcast_ref::<serde_json::Error>().is_some_and(|j| j.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe))
    })
}

/// `Some(true)` for the user's errors, `Some(false)` for rlx's or a service's, `None` for an
/// error this function does not know (context text, foreign errors).
fn user_error(e: &(dyn StdError + 'static)) -> Option<bool> {
    use crate::{backend, compare, data, engine, prompt, runlog, sandbox};
    if e.is::<super::error::UserError>() || e.is::<crate::plan::Error>() {
        return Some(true);
    }
    if let Some(e) = e.downcast_ref::<data::Error>() {
        return Some(e.is_user_error());
    }
    if let Some(e) = e.downcast_ref::<data::source::Error>() {
        return Some(e.is_user_error());
    }
    if let Some(e) = e.downcast_ref::<data::hf::Error>() {
        return Some(e.is_user_error());
    }
    if let Some(e) = e.downcast_ref::<data::parquet::Error>() {
        return Some(e.is_user_error());
    }
    if let Some(e) = e.downcast_ref::<sandbox::Error>() {
        return Some(e.is_user_error());
    }
    if let Some(e) = e.downcast_ref::<backend::Error>() {
        return Some(e.is_user_error());
    }
    if let Some(e) = e.downcast_ref::<prompt::Error>() {
        return Some(e.is_user_error());
    }
    if let Some(e) = e.downcast_ref::<runlog::Error>() {
        return Some(e.is_user_error());
    }
    if let Some(e) = e.downcast_ref::<engine::Error>() {
        return Some(e.is_user_error());
    }
    if let Some(e) = e.downcast_ref::<compare::Error>() {
        return Some(e.is_user_error());
    }
    if let Some(e) = e.downcast_ref::<crate::viewer::Error>() {
        return Some(e.is_user_error());
    }
    // A file the user named that does not exist, reached through context only.
    if let Some(e) = e.downcast_ref::<std::io::Error>() {
        return Some(e.kind() == std::io::ErrorKind::NotFound);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{INTERNAL, OK, USAGE, for_error};
    use std::path::PathBuf;

    fn io(kind: std::io::ErrorKind) -> std::io::Error {
        std::io::Error::new(kind, "os says no")
    }

    #[test]
    fn exit_codes_follow_the_first_known_cause() {
        let json = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        let data = crate::data::Error::Json { path: "train.jsonl".into(), line: 6, source: json };
        assert_eq!(for_error(&anyhow::Error::new(data).context("cannot load the problems")), USAGE);
        let model = crate::backend::Error::Model { path: PathBuf::from("m.gguf"), reason: "truncated".into() };
        assert_eq!(for_error(&anyhow::Error::new(model)), USAGE);
        let model = crate::backend::Error::Model { path: PathBuf::from("m.gguf"), reason: "truncated".into() };
        assert_eq!(for_error(&anyhow::Error::new(crate::engine::Error::Backend(model)).context("run failed")), USAGE);
        let gone = crate::backend::Error::Gone { what: "local trainer", reason: "it panicked".into() };
        assert_eq!(for_error(&anyhow::Error::new(crate::engine::Error::Backend(gone))), INTERNAL);
        let tensor = crate::backend::Error::from(candle_core::Error::Msg("shape mismatch".into()));
        assert_eq!(for_error(&anyhow::Error::new(tensor)), INTERNAL);
        let strict = crate::sandbox::Error::Incomplete { missing: vec!["no user namespaces".into()] };
        assert_eq!(for_error(&anyhow::Error::new(strict).context("cannot start the sandbox")), USAGE);
        let worker = crate::sandbox::Error::Worker { slot: 0, reason: "died".into(), stderr: String::new() };
        assert_eq!(for_error(&anyhow::Error::new(worker)), INTERNAL);
        // A typed cause decides before the I/O error under it.
        let read = crate::runlog::Error::Io { op: "read", path: "runs/x/status.json".into(), source: io(std::io::ErrorKind::NotFound) };
        assert_eq!(for_error(&anyhow::Error::new(read)), INTERNAL);
        // Only context above an I/O error: a missing file is the user's, other failures are not.
        assert_eq!(for_error(&anyhow::Error::new(io(std::io::ErrorKind::NotFound)).context("cannot read `c.jsonl`")), USAGE);
        assert_eq!(for_error(&anyhow::Error::new(io(std::io::ErrorKind::PermissionDenied)).context("cannot write")), INTERNAL);
        assert_eq!(for_error(&anyhow::anyhow!("something odd")), INTERNAL);
        assert_eq!(for_error(&crate::cli::error::UserError::msg("`--timeout` must be positive")), USAGE);
        assert_eq!(for_error(&anyhow::Error::new(io(std::io::ErrorKind::BrokenPipe)).context("writing verdicts")), OK);
    }
}
