//! Output policy: what goes to stdout (results) and stderr (problems), whether it is styled, and
//! the one shape of every problem rlx reports.
//!
//! Messages follow uv: a `error:` (or `warning:`) line, then one `  Caused by:` line per cause,
//! then `help:` lines (the same label the spec diagnostics of [`super::diagnostics`] use):
//!
//! ```text
//! error: cannot load problems from `problems.jsonl`
//!   Caused by: `problems.jsonl` line 6: invalid JSON
//!   Caused by: expected value at line 1 column 1
//! help: every line of a JSONL file is one JSON object
//! ```
//!
//! Every command prints problems through [`error`], [`error_with_hints`], [`error_message`] or
//! [`warning`]; nothing else in the crate writes `error:` by hand.
//!
//! Stdout: a closed pipe (`rlx schema | head -1`) ends rlx quietly with success, as ripgrep
//! does: the reader has what it wanted. `println!` would panic instead.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::{IsTerminal, Write as _};

use crate::spec::Diagnostic;

/// Whether stderr gets colours: a terminal, and `NO_COLOR` unset.
pub(crate) fn styled() -> bool {
    std::env::var_os("NO_COLOR").is_none() && std::io::stderr().is_terminal()
}

/// Whether stdout gets colours: a terminal, and `NO_COLOR` unset (`rlx show` piped into a file
/// or `less` stays plain).
pub(crate) fn stdout_styled() -> bool {
    std::env::var_os("NO_COLOR").is_none() && std::io::stdout().is_terminal()
}

/// A result line on stdout. On a closed pipe the process exits with success.
pub(crate) fn out(line: impl AsRef<str>) {
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = writeln!(stdout, "{}", line.as_ref()).and_then(|()| stdout.flush()) {
        stdout_failed(&e);
    }
}

/// What to do when writing results to stdout failed: a broken pipe means the reader is done
/// (exit 0, silently); anything else is reported and exits 3.
pub(crate) fn stdout_failed(e: &std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(i32::from(super::exit::OK));
    }
    error_message(&format!("cannot write to stdout: {e}"), &[]);
    std::process::exit(i32::from(super::exit::INTERNAL));
}

/// A status line on stderr. Errors writing to stderr are ignored: there is nowhere left to
/// report them.
pub(crate) fn status(line: impl AsRef<str>) {
    let _ = writeln!(std::io::stderr().lock(), "{}", line.as_ref());
}

/// Every diagnostic, rendered, on stderr, then a summary line.
pub(crate) fn diagnostics(diags: &[Diagnostic], what: &str) {
    let styled = styled();
    let mut err = std::io::stderr().lock();
    for d in diags {
        let _ = writeln!(err, "{}\n", super::diagnostics::render(d, styled));
    }
    let n = diags.len();
    let _ = writeln!(err, "{}", render(Level::Error, &format!("{what}: {n} problem{} found", if n == 1 { "" } else { "s" }), &[], &[], styled));
}

/// An error, its cause chain, then a `help:` line per hint.
pub(crate) fn error_with_hints(err: &anyhow::Error, hints: &[String]) {
    error_chain(err.as_ref(), hints);
}

/// A library error (not wrapped in `anyhow`), its cause chain (`source()`), then a `help:` line
/// per hint.
pub(crate) fn error_chain(err: &(dyn std::error::Error + 'static), hints: &[String]) {
    let causes = crate::causes::causes(err);
    let (first, rest) = causes.split_first().map_or(("", &[][..]), |(f, r)| (f.as_str(), r));
    status(render(Level::Error, first, rest, hints, styled()));
}

/// An error without a cause chain: `error:` then a `help:` line per hint.
pub(crate) fn error_message(message: &str, hints: &[String]) {
    status(render(Level::Error, message, &[], hints, styled()));
}

/// A warning: something the user should know that does not stop the command.
pub(crate) fn warning(message: &str, hints: &[String]) {
    status(render(Level::Warning, message, &[], hints, styled()));
}

/// The label of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Error,
    Warning,
}

/// Renders a message: the labelled first line, `  Caused by:` lines, `help:` lines. Multi-line
/// texts are indented under their label so the structure stays visible.
fn render(level: Level, message: &str, causes: &[String], hints: &[String], styled: bool) -> String {
    // The colours of annotate-snippets' renderer, so spec diagnostics and these look alike.
    let paint = |code: &str, label: &str| if styled { format!("\x1b[{code}m{label}\x1b[0m") } else { label.to_owned() };
    let (code, label) = match level {
        Level::Error => ("1;31", "error"),
        Level::Warning => ("1;33", "warning"),
    };
    let mut out = format!("{}: {}", paint(code, label), indent(message, label.len() + 2));
    for c in causes {
        out.push_str(&format!("\n  {} {}", paint("1", "Caused by:"), indent(c, 13)));
    }
    for h in hints {
        out.push_str(&format!("\n{}: {}", paint("1;36", "help"), indent(h, 6)));
    }
    out
}

/// Indents the continuation lines of `text` by `width` spaces.
fn indent(text: &str, width: usize) -> String {
    text.trim_end().replace('\n', &format!("\n{}", " ".repeat(width)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_then_hints() {
        let inner = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory (os error 2)");
        let err = anyhow::Error::new(inner).context("cannot read `train.jsonl`").context("cannot load problems");
        let c = crate::causes::causes(err.as_ref());
        let out = render(Level::Error, &c[0], &c[1..], &["check the path".into()], false);
        assert_eq!(
            out,
            "error: cannot load problems\n  Caused by: cannot read `train.jsonl`\n  Caused by: No such file or directory (os error 2)\nhelp: check the path"
        );
        assert_eq!(render(Level::Warning, "a\nb", &[], &[], false), "warning: a\n         b");
    }

    #[test]
    fn repeated_messages_are_dropped() {
        #[derive(Debug, thiserror::Error)]
        #[error(transparent)]
        struct Transparent(std::io::Error);
        let err = anyhow::Error::new(Transparent(std::io::Error::other("disk full"))).context("disk full");
        assert_eq!(crate::causes::causes(err.as_ref()), ["disk full"]);
    }

    #[test]
    fn candle_backtraces_are_not_shown() {
        // Built directly, so the test does not depend on RUST_BACKTRACE.
        let e = candle_core::Error::WithBacktrace {
            inner: Box::new(candle_core::Error::Msg("gguf: string length 7 exceeds remaining file bytes 3".into())),
            backtrace: Box::new(std::backtrace::Backtrace::force_capture()),
        };
        let err = anyhow::Error::new(e).context("cannot load the model");
        assert_eq!(crate::causes::causes(err.as_ref()), ["cannot load the model", "gguf: string length 7 exceeds remaining file bytes 3"]);
    }
}
