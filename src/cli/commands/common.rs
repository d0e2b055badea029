//! What several subcommands share: splitting `SPEC KEY=VALUE...` arguments, printing a planning
//! error, the async runtime, a run directory's recorded spec. Kept apart from `dispatch` (the
//! parent) so a subcommand names a sibling, not the module that calls it.

use crate::cli::{exit, printer};
use crate::spec::{self, overrides};

/// Splits positional arguments into spec paths and parsed overrides. Bad overrides are printed
/// and turn into the usage exit code.
pub(super) fn split_args(args: &[String]) -> Result<(Vec<String>, Vec<overrides::Override>), u8> {
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

/// Plans a spec file as every command does: a teacher that names a run's checkpoint
/// (`grpo.distill.teacher.base: runs/<id>@STEP`) found as `rlx export` finds it.
pub(super) fn plan_file(path: &std::path::Path, ovs: &[overrides::Override]) -> Result<crate::plan::Plan, crate::plan::Error> {
    crate::plan::plan_with(path, ovs, Some(&crate::export::RunCheckpoints))
}

/// [`plan_file`] for spec text already in memory.
pub(super) fn plan_text(path: &std::path::Path, text: String, ovs: &[overrides::Override]) -> Result<crate::plan::Plan, crate::plan::Error> {
    crate::plan::plan_text_with(path, text, ovs, Some(&crate::export::RunCheckpoints))
}

/// Prints a planning error: diagnostics for an invalid spec, a plain error otherwise.
pub(super) fn report_plan_error(e: &crate::plan::Error) -> u8 {
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
pub(super) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context as _;
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")
}

/// A run directory's spec as it was planned: the text of its `spec.yaml`, located where it was
/// written (so its relative paths resolve as they did when the run started), and the overrides it
/// was started with. What `rlx run --resume` and `rlx eval RUN_DIR@STEP` plan from.
pub(super) struct RecordedSpec {
    pub(super) path: std::path::PathBuf,
    pub(super) text: String,
    pub(super) overrides: Vec<overrides::Override>,
}

impl RecordedSpec {
    pub(super) fn of(rd: &crate::runlog::RunDir) -> anyhow::Result<Self> {
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
