//! The command line: clap types, one module per subcommand under `commands/`, and the output
//! policy (`printer`, `diagnostics`). The only module that prints or knows about exit codes.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub mod commands;

/// Exit codes, documented in `rlx --help`.
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// The run finished but failed a gate set in the spec.
    pub const GATE: u8 = 1;
    /// Bad spec or bad arguments.
    pub const USAGE: u8 = 2;
    /// Internal or infrastructure error.
    pub const INTERNAL: u8 = 3;
    /// Interrupted (SIGINT/SIGTERM).
    pub const INTERRUPTED: u8 = 130;
}

/// rlx: reinforcement-learning post-training experiments for code models, from YAML specs.
#[derive(Debug, Parser)]
#[command(name = "rlx", version, about, after_help = "Exit codes: 0 success, 1 a gate in the spec failed, 2 bad spec or arguments, 3 internal error, 130 interrupted.")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the JSON Schema of experiment specs.
    Schema,
    /// Grade completions against a problem file in the sandbox; one JSON line per completion.
    Grade(commands::grade::GradeArgs),
    /// The code sandbox: run a Sandbox-Fusion-compatible server.
    #[command(subcommand)]
    Sandbox(commands::sandbox::SandboxCommand),
}

/// Parse the command line, run the command, map the outcome to an exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match commands::dispatch(cli) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            commands::report_error(&err);
            ExitCode::from(exit::INTERNAL)
        }
    }
}
