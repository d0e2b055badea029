//! `rlx sweep [SPEC] KEY=VALUES... [--dry-run] [--max-parallel N]`.
//!
//! Each member runs as its own `rlx run` process: a run owns its process (signals, the tracing
//! log file, memory), so a crash or a Ctrl-C in one member cannot corrupt another's run
//! directory, and `--max-parallel` is a plain bound on child processes.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use anyhow::Context;

use super::report_plan_error;
use crate::cli::{SweepArgs, exit, printer};
use crate::runlog::sweep::{SweepDir, SweepRecord};
use crate::runlog::{RunDir, State};
use crate::spec::overrides::{self, SweepArg};
use crate::spec::schema::Validator;
use crate::plan::sweep::{self, Sweep};
use crate::plan::Plan;
use crate::spec::Diagnostic;

/// The spec used when `rlx sweep` is given none.
pub const DEFAULT_SPEC: &str = "experiments/default.yaml";

/// What a member's run directory says before the sweep starts it.
fn prior_state(plan: &Plan) -> (String, bool) {
    match RunDir::open(&plan.run_dir()).ok().and_then(|d| d.status().ok().flatten()) {
        None => ("new".into(), false),
        Some(s) if s.state == State::Finished => ("finished".into(), true),
        Some(s) => (format!("resume ({}/{} steps, {:?})", s.steps_done, s.max_steps, s.state).to_lowercase(), false),
    }
}

pub fn sweep(args: SweepArgs) -> anyhow::Result<u8> {
    let validator = Validator::new();
    let mut rest = args.args.as_slice();
    let spec_path = match rest.first() {
        Some(first) if !overrides::looks_like_override(first) => {
            rest = &rest[1..];
            PathBuf::from(first)
        }
        _ => PathBuf::from(DEFAULT_SPEC),
    };
    if !spec_path.exists() {
        printer::error_message(&format!("spec `{}` does not exist", spec_path.display()), &["run from the repository root, or name a spec: `rlx sweep SPEC lr=[1e-5,4e-5]`".into()]);
        return Ok(exit::USAGE);
    }
    let mut parsed = vec![];
    let mut diags: Vec<Diagnostic> = vec![];
    for a in rest {
        if !overrides::looks_like_override(a) {
            diags.push(Diagnostic::new(format!("`{a}` is not `KEY=VALUES`; the spec comes first, once"), None));
            continue;
        }
        match overrides::parse_sweep(a, &validator) {
            Ok(p) => parsed.push(p),
            Err(d) => diags.extend(d),
        }
    }
    if !diags.is_empty() {
        printer::diagnostics(&diags, "invalid sweep arguments");
        return Ok(exit::USAGE);
    }
    if !parsed.iter().any(|p| matches!(p, SweepArg::Axis(_))) {
        printer::status("note: no axis given (`key=[a,b]` or `key=a,b`); the sweep has one run");
    }
    let sw = match sweep::expand(&spec_path, &parsed) {
        Ok(s) => s,
        Err(e) => return Ok(report_plan_error(&e)),
    };
    let states: Vec<(String, bool)> = sw.members.iter().map(|m| prior_state(&m.plan)).collect();
    print_table(&sw, &states);
    if args.dry_run {
        return Ok(exit::OK);
    }
    execute(&sw, &spec_path, &states, args.max_parallel as usize)
}

fn print_table(sw: &Sweep, states: &[(String, bool)]) {
    let replicate = sw.axes.iter().any(|a| a.replicate);
    printer::out(format!(
        "sweep {}: {} run(s){} → {}",
        sw.id,
        sw.members.len(),
        if replicate { " (seed is a replicate axis)" } else { "" },
        SweepDir::path_for(sw).display()
    ));
    let width = sw.members.iter().map(|m| m.plan.run_id.len()).max().unwrap_or(0);
    for (m, (state, _)) in sw.members.iter().zip(states) {
        let keys = m.assignment.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ");
        printer::out(format!("  {:width$}  {:<10}  {keys}", m.plan.run_id, state, width = width));
    }
}

fn execute(sw: &Sweep, spec_path: &Path, states: &[(String, bool)], max_parallel: usize) -> anyhow::Result<u8> {
    let dir = SweepDir::create(sw)?;
    let before: Vec<String> = states.iter().map(|(s, _)| s.clone()).collect();
    let record = Arc::new(Mutex::new(SweepRecord::new(sw, spec_path, std::env::args().collect(), &before)));
    dir.write_record(&record.lock().expect("no panics while locked"))?;

    let exe = std::env::current_exe().context("cannot find the rlx executable")?;
    let queue: VecDeque<usize> = (0..sw.members.len()).filter(|&i| !states[i].1).collect();
    let skipped = sw.members.len() - queue.len();
    if skipped > 0 {
        printer::status(format!("{skipped} finished run(s) skipped"));
    }
    let queue = Arc::new(Mutex::new(queue));
    let failures = Arc::new(Mutex::new(0usize));
    std::thread::scope(|scope| {
        for _ in 0..max_parallel.max(1) {
            let (queue, record, failures, exe, dir) = (queue.clone(), record.clone(), failures.clone(), exe.clone(), &dir);
            scope.spawn(move || {
                loop {
                    let Some(i) = queue.lock().expect("queue").pop_front() else { break };
                    let m = &sw.members[i];
                    let mut cmd = Command::new(&exe);
                    cmd.arg("run").arg(spec_path).args(m.overrides.iter().map(|o| o.canonical())).stdin(Stdio::null());
                    if max_parallel > 1 {
                        // Interleaved output of parallel runs is unreadable: each gets a file.
                        let out = std::fs::File::create(dir.member_output(&m.plan.run_id));
                        if let Ok(f) = out {
                            let err = f.try_clone();
                            cmd.stdout(f);
                            if let Ok(e) = err {
                                cmd.stderr(e);
                            }
                        }
                    }
                    printer::status(format!("▶ {}", m.plan.run_id));
                    let status = cmd.status();
                    let (state, code) = match &status {
                        Ok(s) if s.success() => ("finished".to_string(), s.code()),
                        Ok(s) => (format!("failed (exit {})", s.code().map_or("signal".into(), |c| c.to_string())), s.code()),
                        Err(e) => (format!("failed to start: {e}"), None),
                    };
                    if !matches!(status, Ok(s) if s.success()) {
                        *failures.lock().expect("failures") += 1;
                    }
                    printer::status(format!("■ {}  {state}", m.plan.run_id));
                    let mut r = record.lock().expect("record");
                    r.set_member(i, state, code);
                    if let Err(e) = dir.write_record(&r) {
                        tracing::error!("cannot update sweep.json: {e}");
                    }
                }
            });
        }
    });
    let failed = *failures.lock().expect("failures");
    printer::status(format!(
        "sweep {}: {} run(s), {} failed; record in {}",
        sw.id,
        sw.members.len(),
        failed,
        dir.record_path().display()
    ));
    Ok(if failed == 0 { exit::OK } else { exit::GATE })
}
