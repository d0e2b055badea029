//! `rlx sweep [SPEC] KEY=VALUES... [--dry-run] [--max-parallel N] [--sample N] [--launcher L]`
//! and `rlx sweep status SWEEP_DIR`.
//!
//! Each member runs as its own `rlx run` process: a run owns its process (signals, the tracing
//! log file, memory), so a crash or a Ctrl-C in one member cannot corrupt another's run
//! directory, and `--max-parallel` is a plain bound on child processes. With `--launcher slurm`
//! the processes are Slurm's array tasks instead ([`slurm`]).

mod args;
mod slurm;
mod status;

pub(crate) use args::SweepArgs;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use anyhow::Context;

use super::common::report_plan_error;
use args::{LauncherArg, SweepCommand};
use crate::cli::{exit, printer};
use crate::runlog::sweep::{SampleRecord, SweepDir, SweepRecord};
use crate::runlog::{RunDir, State};
use crate::spec::overrides::{self, SweepArg};
use crate::spec::sample::{self, Ranged};
use crate::spec::schema::Validator;
use crate::plan::Plan;
use crate::plan::sweep::{self, Sweep};
use crate::spec::Diagnostic;
use crate::spec::types::Launcher;
use crate::sweep_sample::{self, Dimension, Sampling};

/// The spec used when `rlx sweep` is given none.
pub(super) const DEFAULT_SPEC: &str = "experiments/default.yaml";

/// The most member processes at once on this machine.
const MAX_LOCAL_PARALLEL: u32 = 64;

/// What a member's run directory says before the sweep starts it.
fn prior_state(plan: &Plan) -> (String, bool) {
    match RunDir::open(&plan.run_dir()).ok().and_then(|d| d.status().ok().flatten()) {
        None => ("new".into(), false),
        Some(s) if s.state == State::Finished => ("finished".into(), true),
        Some(s) => (format!("resume ({}/{} steps, {:?})", s.steps_done, s.max_steps, s.state).to_lowercase(), false),
    }
}

/// One `KEY=...` argument, in command-line order.
enum Item {
    Arg(SweepArg),
    Ranged(Ranged),
}

pub(super) fn sweep(args: SweepArgs) -> anyhow::Result<u8> {
    if let Some(SweepCommand::Status { dir }) = &args.command {
        return status::status(dir);
    }
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
    let (items, mut diags) = parse_items(rest, &validator);
    let sampling = args.sample.map(|n| Sampling { n: n as usize, seed: args.sample_seed });
    // A grid lists the values of ranges; `--sample` draws from lists and ranges alike.
    let mut grid: Vec<SweepArg> = vec![];
    let mut fixed = vec![];
    let mut dims = vec![];
    for item in items {
        match (item, sampling.is_some()) {
            (Item::Arg(SweepArg::Fixed(o)), _) => {
                fixed.push(o.clone());
                grid.push(SweepArg::Fixed(o));
            }
            (Item::Arg(SweepArg::Axis(a)), false) => grid.push(SweepArg::Axis(a)),
            (Item::Arg(SweepArg::Axis(a)), true) => dims.push(Dimension::List(a)),
            (Item::Ranged(r), false) => match r.to_axis() {
                Ok(a) => grid.push(SweepArg::Axis(a)),
                Err(d) => diags.push(d),
            },
            (Item::Ranged(r), true) => dims.push(Dimension::Ranged(r)),
        }
    }
    if sampling.is_some() && dims.is_empty() && diags.is_empty() {
        diags.push(Diagnostic::new("`--sample` needs something to draw from", None).hint("give a range or a list: `lr=loguniform(1e-6,1e-4)`, `seed=range(0,3)`, `group_size=[4,8]`"));
    }
    if !diags.is_empty() {
        printer::diagnostics(&diags, "invalid sweep arguments");
        return Ok(exit::USAGE);
    }
    if sampling.is_none() && !grid.iter().any(|p| matches!(p, SweepArg::Axis(_))) {
        printer::status("note: no axis given (`key=[a,b]` or `key=a,b`); the sweep has one run");
    }
    let expanded = match sampling {
        Some(s) => sweep_sample::expand(&spec_path, fixed, &dims, s, Some(&crate::export::RunCheckpoints)),
        None => sweep::expand(&spec_path, &grid, Some(&crate::export::RunCheckpoints)),
    };
    let sw = match expanded {
        Ok(s) => s,
        Err(e) => return Ok(report_plan_error(&e)),
    };
    let sample = sampling.map(|s| SampleRecord { n: s.n, seed: s.seed });
    let states: Vec<(String, bool)> = sw.members.iter().map(|m| prior_state(&m.plan)).collect();
    print_table(&sw, &states, sample);
    let launch = sw.members.first().map(|m| m.plan.sweep.clone()).unwrap_or_default();
    let launcher = match args.launcher {
        Some(LauncherArg::Local) => Launcher::Local,
        Some(LauncherArg::Slurm) => Launcher::Slurm,
        None => launch.launcher,
    };
    let max_parallel = args.max_parallel.or(launch.max_parallel);
    if launcher == Launcher::Slurm {
        let options = slurm::options(&args, &launch.slurm, max_parallel)?;
        return slurm::launch(&sw, &spec_path, &states, &options, args.dry_run, sample);
    }
    warn_slurm_flags(&args);
    let max_parallel = max_parallel.unwrap_or(1);
    if max_parallel > MAX_LOCAL_PARALLEL {
        printer::error_message(
            &format!("--max-parallel {max_parallel}: at most {MAX_LOCAL_PARALLEL} member processes run at once on this machine"),
            &["with `--launcher slurm` it bounds the job array instead".into()],
        );
        return Ok(exit::USAGE);
    }
    if args.dry_run {
        return Ok(exit::OK);
    }
    execute(&sw, &spec_path, &states, max_parallel as usize, sample)
}

/// The `KEY=VALUES` arguments after the spec, and what is wrong with those that do not parse.
fn parse_items(rest: &[String], validator: &Validator) -> (Vec<Item>, Vec<Diagnostic>) {
    let mut items = vec![];
    let mut diags: Vec<Diagnostic> = vec![];
    for a in rest {
        if !overrides::looks_like_override(a) {
            diags.push(Diagnostic::new(format!("`{a}` is not `KEY=VALUES`; the spec comes first, once"), None));
            continue;
        }
        let parsed = match sample::parse(a) {
            Ok(Some(r)) => Ok(Item::Ranged(r)),
            Ok(None) => overrides::parse_sweep(a, validator).map(Item::Arg),
            Err(d) => Err(d),
        };
        match parsed {
            Ok(i) => items.push(i),
            Err(d) => diags.extend(d),
        }
    }
    (items, diags)
}

/// Slurm's flags on a sweep that runs here: said, not silently dropped.
fn warn_slurm_flags(args: &SweepArgs) {
    let slurm_flags: Vec<&str> = [
        ("--partition", args.partition.is_some()),
        ("--time", args.time.is_some()),
        ("--cpus-per-task", args.cpus_per_task.is_some()),
        ("--mem", args.mem.is_some()),
        ("--gres", args.gres.is_some()),
        ("--sbatch-arg", !args.sbatch_arg.is_empty()),
        ("--setup", args.setup.is_some()),
        ("--stop-before", args.stop_before.is_some()),
    ]
    .into_iter()
    .filter_map(|(flag, set)| set.then_some(flag))
    .collect();
    if !slurm_flags.is_empty() {
        printer::warning(&format!("{} apply to Slurm sweeps only; this sweep runs here", slurm_flags.join(", ")), &["add `--launcher slurm` (or `sweep.launcher: slurm` in the spec)".into()]);
    }
}

fn print_table(sw: &Sweep, states: &[(String, bool)], sample: Option<SampleRecord>) {
    let replicate = sw.axes.iter().any(|a| a.replicate);
    let drawn = sample.map(|s| format!(" drawn with seed {}", s.seed)).unwrap_or_default();
    printer::out(format!(
        "sweep {}: {} run(s){drawn}{} → {}",
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

fn execute(sw: &Sweep, spec_path: &Path, states: &[(String, bool)], max_parallel: usize, sample: Option<SampleRecord>) -> anyhow::Result<u8> {
    let dir = SweepDir::create(sw)?;
    let before: Vec<String> = states.iter().map(|(s, _)| s.clone()).collect();
    let mut record = SweepRecord::new(sw, spec_path, std::env::args().collect(), &before);
    record.sample = sample;
    // A sweep that went to Slurm before keeps its jobs on record; a local one is recorded as ever.
    if let Ok(earlier) = dir.record()
        && !earlier.slurm_jobs.is_empty()
    {
        record.carry_over(&earlier);
    }
    let record = Arc::new(Mutex::new(record));
    dir.write_record(&record.lock().expect("no panics while locked"))?;

    let exe = std::env::current_exe().context("cannot find the rlx executable")?;
    let queue: VecDeque<usize> = (0..sw.members.len()).filter(|&i| !states[i].1).collect();
    let skipped = sw.members.len() - queue.len();
    if skipped > 0 {
        printer::status(format!("{skipped} finished run(s) skipped"));
    }
    let queue = Arc::new(Mutex::new(queue));
    let failures = Arc::new(Mutex::new(0usize));
    let members = Members::default();
    members.pass_signals_on()?;
    std::thread::scope(|scope| {
        for _ in 0..max_parallel.max(1) {
            let (queue, record, failures, exe, dir, members) = (queue.clone(), record.clone(), failures.clone(), exe.clone(), &dir, &members);
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
                    let Some(status) = members.run(&mut cmd, &m.plan.run_id) else { break };
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
    if members.stopping() {
        printer::status(format!("sweep {} interrupted; `rlx sweep` again resumes its runs; record in {}", sw.id, dir.record_path().display()));
        return Ok(exit::INTERRUPTED);
    }
    printer::status(format!(
        "sweep {}: {} run(s), {} failed; record in {}",
        sw.id,
        sw.members.len(),
        failed,
        dir.record_path().display()
    ));
    Ok(if failed == 0 { exit::OK } else { exit::GATE })
}

/// The member processes running now, and whether the sweep is stopping.
///
/// Members run in process groups of their own, so a terminal's Ctrl-C reaches the sweep alone
/// and the sweep passes each member exactly one stop request per signal it gets: SIGINT and
/// SIGTERM alike (a SIGTERM to the sweep used to leave its runs going on their own).
#[derive(Clone, Default)]
struct Members {
    running: Arc<Mutex<Vec<u32>>>,
    stopping: Arc<std::sync::atomic::AtomicBool>,
}

impl Members {
    /// First signal: no new member starts and each running one gets SIGTERM (it checkpoints and
    /// exits 130). Second: each gets another (it quits at once) and so does the sweep.
    fn pass_signals_on(&self) -> anyhow::Result<()> {
        let this = self.clone();
        crate::cli::signals::on_signals(move |n| {
            if n == 0 {
                printer::status("stopping: each run checkpoints and stops (again to quit now)…");
            }
            this.stopping.store(true, std::sync::atomic::Ordering::SeqCst);
            for pid in this.running.lock().expect("members").iter() {
                // SAFETY: kill(2) on a child this sweep started and has not yet waited for.
                unsafe { libc::kill(*pid as libc::pid_t, libc::SIGTERM) };
            }
            if n > 0 {
                crate::cli::signals::quit_now();
            }
        })
    }

    fn stopping(&self) -> bool {
        self.stopping.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Runs one member to its end; `None` when the sweep is stopping and it was not started.
    fn run(&self, cmd: &mut Command, run_id: &str) -> Option<std::io::Result<std::process::ExitStatus>> {
        use std::os::unix::process::CommandExt as _;
        let mut child = {
            // Held while starting, so a signal either comes before (nothing starts) or sees it.
            let mut running = self.running.lock().expect("members");
            if self.stopping() {
                return None;
            }
            printer::status(format!("▶ {run_id}"));
            match cmd.process_group(0).spawn() {
                Ok(child) => {
                    running.push(child.id());
                    child
                }
                Err(e) => return Some(Err(e)),
            }
        };
        let status = child.wait();
        self.running.lock().expect("members").retain(|p| *p != child.id());
        Some(status)
    }
}
