//! The command line: the only module that prints, owns the tracing subscriber, or knows about
//! exit codes. This file is its face (declarations and re-exports); the parts:
//!
//! - `args`: the grammar, [`Cli`] and its [`Command`]s (doc comments are the `--help` text);
//! - `commands/`: one module per subcommand, each with its own clap arguments, and `dispatch`;
//! - `entry`: [`main`]: parse, log, dispatch, exit code;
//! - `exit`: the exit codes and which one an error gets; `error`: [`UserError`];
//! - the output policy: `printer`, `diagnostics`, `progress`.
//!
//! Why the parts and not this file hold the code: a subcommand names the exit codes, the printer
//! and its own arguments, and `main` names every subcommand; with both here, every command and
//! this file formed one import cycle (tests/cli/architecture.rs).

mod args;
pub(crate) mod commands;
pub(crate) mod diagnostics;
mod entry;
mod error;
pub(crate) mod exit;
pub(crate) mod printer;
pub(crate) mod progress;
pub(crate) mod signals;

pub use args::{Cli, Command};
pub use entry::main;
pub use error::UserError;
