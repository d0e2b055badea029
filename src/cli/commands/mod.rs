//! One module per subcommand; each returns the exit code on success.

use super::{Cli, Command};

pub mod grade;
pub mod sandbox;

/// Run the chosen subcommand.
pub fn dispatch(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Schema => Ok(super::exit::OK),
        Command::Grade(args) => grade::run(args),
        Command::Sandbox(cmd) => sandbox::run(cmd),
    }
}

/// Print an error chain the way every command does: `error:` then `Caused by:` lines.
#[allow(clippy::print_stderr)]
pub fn report_error(err: &anyhow::Error) {
    eprintln!("error: {err}");
    for cause in err.chain().skip(1) {
        eprintln!("  Caused by: {cause}");
    }
}
