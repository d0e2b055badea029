//! One module per subcommand; each returns the exit code it chose, or an error that `cli::main`
//! prints (`printer::error`) and maps to an exit code (`exit::for_error`: 2 when the error is
//! the user's to fix, 3 otherwise).

mod common;
pub(crate) mod doctor;
mod eval_checkpoint;
pub(crate) mod render;
pub(crate) mod run;
mod schema;
pub(crate) mod sweep;
pub(crate) mod validate;

pub(crate) mod compare;
pub(crate) mod eval;
pub(crate) mod export;
pub(crate) mod grade;
pub(crate) mod sandbox;
pub(crate) mod serve;
pub(crate) mod show;
pub(crate) mod sync;

use super::args::{Cli, Command};

/// Runs the chosen subcommand.
pub(crate) fn dispatch(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Validate(args) => validate::validate(args),
        Command::Schema => schema::schema(),
        Command::Render(args) => render::render(args),
        Command::Run(args) => run::run(args),
        Command::Sweep(args) => sweep::sweep(args),
        Command::Grade(args) => grade::run(args),
        Command::Sandbox(cmd) => sandbox::run(cmd),
        Command::Serve(args) => serve::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Show(args) => show::run(args),
        Command::Eval(args) => eval::run(args),
        Command::Export(args) => export::run(args),
        Command::Doctor(args) => doctor::run(args),
        Command::Sync(cmd) => sync::run(cmd),
    }
}
