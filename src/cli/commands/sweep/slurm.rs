//! `rlx sweep --launcher slurm`: writes the batch script into the sweep directory, submits it
//! with `sbatch`, records the job, and returns (the tasks run without `rlx sweep`).

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Context;

use super::args::SweepArgs;
use crate::cli::error::UserError;
use crate::cli::{exit, printer};
use crate::runlog::sweep::{SampleRecord, SlurmJobRecord, SweepDir, SweepRecord};
use crate::plan::sweep::Sweep;
use crate::spec::types::SlurmLaunch;
use crate::sweep_slurm::script::{self, Script, Task};
use crate::sweep_slurm::{DEFAULT_STOP_BEFORE_S, Options, scheduler};

/// The spec's `sweep.slurm` with the command line's flags applied.
///
/// # Errors
/// When the running executable's path cannot be found (for the tasks' `rlx`).
pub(super) fn options(args: &SweepArgs, spec: &SlurmLaunch, max_parallel: Option<u32>) -> anyhow::Result<Options> {
    let rlx = match &spec.rlx {
        Some(r) => r.clone(),
        None => {
            let exe = std::env::current_exe().context("cannot find the rlx executable for the batch script")?;
            std::path::absolute(&exe).unwrap_or(exe).display().to_string()
        }
    };
    let mut sbatch_args = spec.sbatch_args.clone();
    sbatch_args.extend(args.sbatch_arg.iter().cloned());
    Ok(Options {
        partition: args.partition.clone().or_else(|| spec.partition.clone()),
        time: args.time.clone().or_else(|| spec.time.clone()),
        cpus_per_task: args.cpus_per_task.or(spec.cpus_per_task),
        mem: args.mem.clone().or_else(|| spec.mem.clone()),
        gres: args.gres.clone().or_else(|| spec.gres.clone()),
        sbatch_args,
        setup: args.setup.clone().or_else(|| spec.setup.clone()),
        stop_before_s: args.stop_before.or(spec.stop_before_s).unwrap_or(DEFAULT_STOP_BEFORE_S),
        max_parallel,
        rlx,
    })
}

/// Submits the unfinished members that no earlier job of the sweep is still running or holding
/// in the queue; with `dry_run`, prints the batch script instead.
///
/// # Errors
/// I/O errors writing the sweep directory; a user error when `sbatch` is missing or refuses.
pub(super) fn launch(sw: &Sweep, spec_path: &Path, states: &[(String, bool)], options: &Options, dry_run: bool, sample: Option<SampleRecord>) -> anyhow::Result<u8> {
    let sweep_path = SweepDir::path_for(sw);
    let sweep_abs = std::path::absolute(&sweep_path).context("cannot resolve the sweep directory")?;
    let workdir = std::env::current_dir().context("cannot read the current directory")?;
    let spec_abs = std::path::absolute(spec_path).context("cannot resolve the spec path")?;
    let earlier = SweepDir::open(&sweep_path).ok().and_then(|d| d.record().ok());

    // A member whose task of an earlier submission is still pending or running is not
    // submitted twice (its run directory's lock would refuse the second anyway).
    let active: BTreeSet<String> = match earlier.as_ref().filter(|r| !r.slurm_jobs.is_empty()) {
        Some(r) => {
            let jobs: Vec<String> = r.slurm_jobs.iter().map(|j| j.job_id.clone()).collect();
            match scheduler::queue(&jobs) {
                Ok(q) => q.into_iter().filter(|(_, t)| t.state != "COMPLETED").map(|(id, _)| id).collect(),
                Err(e) => {
                    printer::warning(&format!("cannot tell which earlier tasks are still queued: {e}"), &[]);
                    BTreeSet::new()
                }
            }
        }
        None => BTreeSet::new(),
    };
    let still_active = |i: usize| {
        earlier.as_ref().and_then(|r| r.members.iter().find(|m| m.run_id == sw.members[i].plan.run_id)).and_then(|m| m.slurm.as_ref()).is_some_and(|t| active.contains(&t.task_id()))
    };
    let mut tasks = vec![];
    let (mut finished, mut queued) = (0, vec![]);
    for (i, m) in sw.members.iter().enumerate() {
        if states[i].1 {
            finished += 1;
        } else if still_active(i) {
            queued.push(m.plan.run_id.clone());
        } else {
            let mut args = vec!["run".to_string(), spec_abs.display().to_string()];
            args.extend(m.overrides.iter().map(|o| o.canonical()));
            tasks.push(Task { index: i, run_id: m.plan.run_id.clone(), args });
        }
    }
    if finished > 0 {
        printer::status(format!("{finished} finished run(s) skipped"));
    }
    if !queued.is_empty() {
        printer::status(format!("{} run(s) still queued or running in an earlier job, not submitted again: {}", queued.len(), queued.join(", ")));
    }
    if tasks.is_empty() {
        printer::status(format!("sweep {}: nothing to submit", sw.id));
        return Ok(exit::OK);
    }
    let text = script::render(&Script { sweep_id: &sw.id, sweep_dir: &sweep_abs, workdir: &workdir, tasks: &tasks, options });
    if dry_run {
        printer::out("");
        printer::out(text.trim_end());
        return Ok(exit::OK);
    }

    let dir = SweepDir::create(sw)?;
    let k = earlier.as_ref().map_or(0, |r| r.slurm_jobs.len()) + 1;
    let script_path = sweep_abs.join(format!("slurm-{k}.sh"));
    std::fs::write(&script_path, &text).with_context(|| format!("cannot write the batch script `{}`", script_path.display()))?;
    let job_id = match scheduler::submit(&script_path) {
        Ok(id) => id,
        Err(e) if e.is_user_error() => {
            return Err(UserError::with_source(format!("cannot submit sweep {} to Slurm (batch script: {})", sw.id, script_path.display()), e));
        }
        Err(e) => return Err(anyhow::Error::new(e).context(format!("cannot submit sweep {} to Slurm", sw.id))),
    };
    let before: Vec<String> = states.iter().map(|(s, _)| s.clone()).collect();
    let mut record = SweepRecord::new(sw, spec_path, std::env::args().collect(), &before);
    record.sample = sample;
    if let Some(e) = &earlier {
        record.carry_over(e);
    }
    let indices: Vec<usize> = tasks.iter().map(|t| t.index).collect();
    let array = script::array_spec(&indices, options.max_parallel);
    record.add_slurm_job(SlurmJobRecord { job_id: job_id.clone(), array: array.clone(), script: script_path.clone(), submitted_at: crate::runlog::now() }, &indices);
    dir.write_record(&record)?;
    printer::status(format!(
        "sweep {}: submitted Slurm job {job_id} (array {array}, {} task(s)); output in {}/slurm-{job_id}_<index>.out",
        sw.id,
        tasks.len(),
        sweep_path.display()
    ));
    printer::status(format!("follow it with `rlx sweep status {}`", sweep_path.display()));
    Ok(exit::OK)
}
