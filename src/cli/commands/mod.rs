//! One module per subcommand; each returns the exit code it chose, or an error that `cli::main`
//! prints (`printer::error`) and maps to an exit code (`exit::for_error`: 2 when the error is
//! the user's to fix, 3 otherwise).

pub(crate) mod doctor;
mod eval_checkpoint;
mod render;
mod run;
mod schema;
mod sweep;
mod validate;

pub(crate) mod compare;
pub(crate) mod eval;
pub(crate) mod export;
pub(crate) mod grade;
pub(crate) mod sandbox;
pub(crate) mod serve;
pub(crate) mod show;
pub(crate) mod sync;

use super::{Cli, Command, exit, printer};
use crate::spec::{self, overrides};

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

/// Splits positional arguments into spec paths and parsed overrides. Bad overrides are printed
/// and turn into the usage exit code.
fn split_args(args: &[String]) -> Result<(Vec<String>, Vec<overrides::Override>), u8> {
    let mut specs = vec![];
    let mut ovs = vec![];
    let mut diags = vec![];
    for a in args {
        if overrides::looks_like_override(a) {
            match overrides::parse(a) {
                Ok(o) => ovs.push(o),
                Err(d) => diags.extend(d),
            }
        } else if ovs.is_empty() {
            specs.push(a.clone());
        } else {
            diags.push(spec::Diagnostic::new(format!("`{a}` is not `KEY=VALUE`; spec files come before overrides"), None));
        }
    }
    if diags.is_empty() {
        Ok((specs, ovs))
    } else {
        printer::diagnostics(&diags, "invalid arguments");
        Err(exit::USAGE)
    }
}

/// Prints a planning error: diagnostics for an invalid spec, a plain error otherwise.
fn report_plan_error(e: &crate::plan::Error) -> u8 {
    match e {
        crate::plan::Error::Invalid { diagnostics, path } => {
            printer::diagnostics(&diagnostics.0, &format!("invalid spec `{}`", path.display()));
        }
        crate::plan::Error::Read { .. } => printer::error_chain(e, &[]),
    }
    exit::USAGE
}

/// The async runtime a command runs on: one builder for every command, so they all get the same
/// scheduler and drivers (timers, sockets, child processes).
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context as _;
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")
}

/// A run directory's spec as it was planned: the text of its `spec.yaml`, located where it was
/// written (so its relative paths resolve as they did when the run started), and the overrides it
/// was started with. What `rlx run --resume` and `rlx eval RUN_DIR@STEP` plan from.
struct RecordedSpec {
    path: std::path::PathBuf,
    text: String,
    overrides: Vec<overrides::Override>,
}

impl RecordedSpec {
    fn of(rd: &crate::runlog::RunDir) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        let prov = rd.provenance()?;
        let mut all = vec![];
        for o in &prov.overrides {
            all.push(overrides::parse(o).map_err(|d| anyhow::anyhow!("recorded override `{o}` is invalid: {}", spec::Diagnostics(d)))?);
        }
        let spec_file = rd.file(crate::runlog::files::SPEC);
        let text = crate::spec::source::read_spec(&spec_file).context("cannot read the run's spec.yaml")?;
        let path = Some(prov.spec_path.as_str()).filter(|p| !p.is_empty()).map(std::path::PathBuf::from).unwrap_or(spec_file);
        Ok(RecordedSpec { path, text, overrides: all })
    }
}
