//! Output policy: what goes to stdout (results) and stderr (problems), and whether it is styled.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::IsTerminal;

use crate::spec::Diagnostic;

/// Whether stderr gets colours: a terminal, and `NO_COLOR` unset.
pub fn styled() -> bool {
    std::env::var_os("NO_COLOR").is_none() && std::io::stderr().is_terminal()
}

/// A result line on stdout.
pub fn out(line: impl AsRef<str>) {
    println!("{}", line.as_ref());
}

/// A status line on stderr.
pub fn status(line: impl AsRef<str>) {
    eprintln!("{}", line.as_ref());
}

/// Every diagnostic, rendered, on stderr, then a summary line.
pub fn diagnostics(diags: &[Diagnostic], what: &str) {
    let styled = styled();
    for d in diags {
        eprintln!("{}\n", super::diagnostics::render(d, styled));
    }
    let n = diags.len();
    eprintln!("error: {what}: {n} problem{} found", if n == 1 { "" } else { "s" });
}

/// An error chain: `error:` then `Caused by:` lines, as uv prints them.
pub fn error(err: &anyhow::Error) {
    eprintln!("error: {err}");
    for cause in err.chain().skip(1) {
        eprintln!("  Caused by: {cause}");
    }
}
