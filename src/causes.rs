//! An error's cause chain as the messages users see: the console's `Caused by:` lines, a failed
//! run's `status.json` reason and its `events.jsonl` record all come from [`causes`], so they can
//! never disagree.

/// The messages of `err` and its sources, outermost first.
///
/// A cause whose message repeats the one before is dropped (`#[error(transparent)]` wrappers
/// and context that restates its source), and candle errors lose the backtrace they carry under
/// `RUST_BACKTRACE`: the user gets facts, not frames.
pub(crate) fn causes(err: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in std::iter::successors(Some(err), |e| e.source()) {
        let msg = match e.downcast_ref::<candle_core::Error>() {
            Some(c) => candle_reason(c),
            None => e.to_string(),
        };
        if out.last() != Some(&msg) {
            out.push(msg);
        }
    }
    out
}

/// A candle error's message without the backtrace candle appends when `RUST_BACKTRACE` is set
/// (`Error::bt`, used by its `bail!`): a truncated GGUF file is the user's problem, told in one
/// line, not thirteen frames of candle internals. Rejected: cutting the text at its first line,
/// which also cuts candle's multi-line context messages.
pub(crate) fn candle_reason(e: &candle_core::Error) -> String {
    match e {
        candle_core::Error::WithBacktrace { inner, .. } => candle_reason(inner),
        candle_core::Error::Context { inner, context } => format!("{context}: {}", candle_reason(inner)),
        candle_core::Error::WithPath { inner, path } => format!("`{}`: {}", path.display(), candle_reason(inner)),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum Outer {
        #[error(transparent)]
        Same(#[from] Inner),
    }
    #[derive(Debug, thiserror::Error)]
    #[error("inner failed")]
    struct Inner(#[source] std::io::Error);

    #[test]
    fn repeats_are_dropped_and_sources_kept() {
        let e = Outer::Same(Inner(std::io::Error::other("disk full")));
        assert_eq!(causes(&e), ["inner failed", "disk full"]);
    }
}
