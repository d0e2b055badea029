//! [`main`]: parse the command line, set up logging, run the command, map the outcome to an exit
//! code.

use std::process::ExitCode;

use clap::Parser;

use super::args::Cli;
use super::{commands, diagnostics, exit, printer};

/// Parses the command line, runs the command, maps the outcome to an exit code.
/// `dotenv` is what `main` took from `./.env` before any thread started
/// ([`crate::dotenv::load`]): the names set, and lines it could not read.
pub fn main(dotenv: (Vec<String>, Vec<(usize, String)>)) -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.verbose);
    let (set, bad) = dotenv;
    if !set.is_empty() {
        // Names only: the values are secrets.
        tracing::debug!(names = ?set, "read from {}", crate::dotenv::FILE);
    }
    for (line, why) in bad {
        printer::warning(&format!("{}:{line}: {why}; line skipped", crate::dotenv::FILE), &[]);
    }
    match commands::dispatch(cli) {
        Ok(code) => ExitCode::from(code),
        // A closed stdout is the reader's choice (`rlx schema | head -1`), not a failure.
        Err(err) if exit::is_broken_pipe(&err) => ExitCode::from(exit::OK),
        Err(err) => {
            printer::error_with_hints(&err, &diagnostics::hints(&err));
            ExitCode::from(exit::for_error(&err))
        }
    }
}

/// Logs to stderr at `warn` (or per `-v`/`RUST_LOG`), and at `info` to the run's `logs.log` once
/// a run attaches it (see `runlog::logfile`).
fn init_tracing(verbose: u8) {
    use tracing_subscriber::{EnvFilter, Layer, layer::SubscriberExt, util::SubscriberInitExt};
    let default = match verbose {
        0 => "warn",
        1 => "rlx=debug,info",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let console = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_target(false).with_filter(filter);
    let file = tracing_subscriber::fmt::layer()
        .with_writer(crate::runlog::logfile::LogSink)
        .with_ansi(false)
        .with_filter(EnvFilter::new("info"));
    let _ = tracing_subscriber::registry().with(console).with(file).try_init();
}
