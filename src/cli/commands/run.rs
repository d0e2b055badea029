//! `rlx run SPEC [KEY=VALUE...] [--dry-run]` and `rlx run --resume RUN_DIR`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;

use super::common::{report_plan_error, split_args};
use crate::cli::progress::Console;
use crate::cli::{exit, printer};
use crate::engine;
use crate::runlog::RunDir;
use crate::spec;

pub(super) fn run(args: RunArgs) -> anyhow::Result<u8> {
    let (specs, mut ovs) = match split_args(&args.args) {
        Ok(x) => x,
        Err(code) => return Ok(code),
    };
    if args.dry_run {
        // An override, so the dry run is its own run (its own id and directory, never the
        // training run's) and `resolved.json` and `provenance.json` record it.
        ovs.push(spec::overrides::parse("schedule.dry_run=true").map_err(|d| anyhow::anyhow!("{}", spec::Diagnostics(d)))?);
    }
    let mut resume_id = None;
    let (spec_path, text, ovs) = match (&args.resume, specs.as_slice()) {
        (Some(dir), []) => {
            let rd = RunDir::open(dir).with_context(|| format!("cannot resume `{}`", dir.display()))?;
            let recorded = super::common::RecordedSpec::of(&rd).with_context(|| format!("cannot resume `{}`", dir.display()))?;
            resume_id = rd.status()?.map(|s| s.run_id);
            let mut all = recorded.overrides;
            all.extend(ovs);
            (recorded.path, Some(recorded.text), all)
        }
        (None, [one]) => (Path::new(one).to_path_buf(), None, ovs),
        (None, []) => {
            printer::error_message("no spec file given", &["`rlx run experiments/quickstart.yaml`".into()]);
            return Ok(exit::USAGE);
        }
        _ => {
            printer::error_message("`rlx run` takes one spec (use `rlx sweep` for several runs), or `--resume RUN_DIR` alone", &[]);
            return Ok(exit::USAGE);
        }
    };
    let planned = match text {
        Some(t) => super::common::plan_text(&spec_path, t, &ovs),
        None => super::common::plan_file(&spec_path, &ovs),
    };
    let plan = match planned {
        Ok(p) => p,
        Err(e) => return Ok(report_plan_error(&e)),
    };
    if let Some(id) = resume_id
        && id != plan.run_id
    {
        printer::error_message(
            &format!("cannot resume `{id}`: its inputs changed since it started (the spec now resolves to `{}`)", plan.run_id),
            &["a changed template, dataset path or override makes a different experiment; run it as a new one".into()],
        );
        return Ok(exit::USAGE);
    }
    let outcome = execute(&plan)?;
    match outcome {
        Ok(engine::RunOutcome::Finished { steps }) => {
            let what = if plan.schedule.dry_run { " (dry run: nothing trained)" } else { "" };
            printer::status(format!("finished {} ({steps} steps){what} → {}", plan.run_id, plan.run_dir().display()));
            Ok(exit::OK)
        }
        Ok(engine::RunOutcome::Interrupted { steps }) => {
            printer::status(format!("interrupted after {steps} steps; `rlx run --resume {}` continues", plan.run_dir().display()));
            Ok(exit::INTERRUPTED)
        }
        // `cli::main` renders the cause chain and picks the exit code (2 for the user's errors).
        Err(e) => Err(anyhow::Error::new(e).context(format!("run `{}` failed", plan.run_id))),
    }
}

/// Fails (exit code 2, naming the compiler) when the embedded sandbox is to grade a language
/// whose compiler this machine lacks: otherwise every rollout would be an infrastructure error
/// (or, worse, read as a failure of the model).
fn require_toolchains(plan: &crate::plan::Plan) -> anyhow::Result<()> {
    if plan.sandbox.kind != crate::spec::types::SandboxKind::Local {
        return Ok(());
    }
    let languages = plan.data.train.iter().chain(&plan.data.eval).filter_map(|s| s.language);
    crate::sandbox::lang::check_toolchains(languages.clone()).map_err(|e| anyhow::Error::new(e).context("cannot grade the spec's languages"))?;
    // The precompiled <bits/stdc++.h> builds while the model loads and samples.
    crate::sandbox::lang::warm_toolchains(languages);
    Ok(())
}

/// Runs a plan on a fresh runtime with the console's progress and the signal policy of `rlx
/// run`: the first SIGINT/SIGTERM stops after the current step, the second exits at once.
///
/// # Errors
/// The runtime cannot start (the engine's own errors are the inner result).
pub(super) fn execute(plan: &crate::plan::Plan) -> anyhow::Result<Result<engine::RunOutcome, engine::Error>> {
    require_toolchains(plan)?;
    let rt = super::common::runtime()?;
    let stop = engine::StopSignal::default();
    let console = Console::new();
    // First SIGINT/SIGTERM: finish or abandon the step, checkpoint, exit 130.
    // Second: exit at once (the last checkpoint still resumes).
    let signals = stop.clone();
    crate::cli::signals::on_stop(move || {
        printer::status("stopping after the current step (again to quit now)…");
        signals.request();
    })?;
    Ok(rt.block_on(async {
        engine::run(plan, engine::PolicySource::Open, &stop, &console).await
    }))
}

/// `rlx run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The spec file, then `key=value` overrides.
    #[arg(value_name = "SPEC [KEY=VALUE]...", required_unless_present = "resume")]
    pub args: Vec<String>,
    /// Continue the run in this directory from its last checkpoint.
    #[arg(long, value_name = "RUN_DIR")]
    pub resume: Option<PathBuf>,
    /// Sample, grade, score and compute advantages for every step, but train nothing and save
    /// no checkpoint (`schedule.dry_run=true`; works on sampling-only backends).
    #[arg(long)]
    pub dry_run: bool,
}
