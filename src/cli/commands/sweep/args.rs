//! `rlx sweep`'s arguments (clap; doc comments are the `--help` text), apart from the command
//! so that the Slurm launcher (`slurm`) reads them without naming its parent.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// `rlx sweep`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SweepArgs {
    /// `rlx sweep status SWEEP_DIR`.
    #[command(subcommand)]
    pub command: Option<SweepCommand>,
    /// An optional spec file (default `experiments/default.yaml`), then axes (`key=[a,b]`,
    /// `key=a,b`, `key=range(0,3)`, `key=choice(a,b)`), ranges for `--sample`
    /// (`key=loguniform(1e-6,1e-4)`, `key=uniform(a,b)`) and fixed overrides (`key=value`).
    #[arg(value_name = "[SPEC] KEY=VALUES")]
    pub args: Vec<String>,
    /// Print the runs (id, status and the keys that differ) without running them; with
    /// `--launcher slurm`, also the batch script, without submitting it.
    #[arg(long)]
    pub dry_run: bool,
    /// Runs at once: child processes here (default 1, at most 64), or the Slurm job array's `%K`
    /// (default: as many as Slurm schedules). `sweep.max_parallel` in the spec.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub max_parallel: Option<u32>,
    /// Where members run: `local` (child processes, the default) or `slurm` (one job array,
    /// submitted with sbatch). `sweep.launcher` in the spec.
    #[arg(long, value_enum, value_name = "LAUNCHER")]
    pub launcher: Option<LauncherArg>,
    /// Random search: draw N configurations from the ranges and lists instead of the grid.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub sample: Option<u32>,
    /// The seed of `--sample`'s draws: the same seed and arguments give the same runs.
    #[arg(long, value_name = "S", default_value_t = 0, requires = "sample")]
    pub sample_seed: u64,
    /// Slurm: partition of the tasks (`sbatch --partition`; `sweep.slurm.partition`).
    #[arg(long, value_name = "NAME", help_heading = "Slurm (--launcher slurm)")]
    pub partition: Option<String>,
    /// Slurm: time limit of each task (`sbatch --time`, e.g. `4:00:00`; `sweep.slurm.time`).
    #[arg(long, value_name = "TIME", help_heading = "Slurm (--launcher slurm)")]
    pub time: Option<String>,
    /// Slurm: CPUs of each task (`sbatch --cpus-per-task`; `sweep.slurm.cpus_per_task`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), help_heading = "Slurm (--launcher slurm)")]
    pub cpus_per_task: Option<u32>,
    /// Slurm: memory of each task (`sbatch --mem`, e.g. `32G`; `sweep.slurm.mem`).
    #[arg(long, value_name = "SIZE", help_heading = "Slurm (--launcher slurm)")]
    pub mem: Option<String>,
    /// Slurm: generic resources of each task, GPUs (`sbatch --gres`, e.g. `gpu:1`; `sweep.slurm.gres`).
    #[arg(long, value_name = "GRES", help_heading = "Slurm (--launcher slurm)")]
    pub gres: Option<String>,
    /// Slurm: one more sbatch option, repeatable (`--sbatch-arg=--account=proj`); after the
    /// spec's `sweep.slurm.sbatch_args`.
    #[arg(long, value_name = "OPTION", allow_hyphen_values = true, help_heading = "Slurm (--launcher slurm)")]
    pub sbatch_arg: Vec<String>,
    /// Slurm: shell lines each task runs before `rlx run` (module loads, a virtualenv);
    /// replaces `sweep.slurm.setup`.
    #[arg(long, value_name = "SHELL", help_heading = "Slurm (--launcher slurm)")]
    pub setup: Option<String>,
    /// Slurm: seconds before the time limit at which a task stops at the step boundary and
    /// requeues itself (`sbatch --signal=B:USR1@S`; default 300, 0 for none; `sweep.slurm.stop_before_s`).
    #[arg(long, value_name = "SECONDS", help_heading = "Slurm (--launcher slurm)")]
    pub stop_before: Option<u32>,
}

/// Where `rlx sweep` runs members.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LauncherArg {
    /// Child processes on this machine.
    Local,
    /// One Slurm job array.
    Slurm,
}

/// `rlx sweep` subcommands.
#[derive(Debug, Subcommand)]
pub enum SweepCommand {
    /// Each member's state: its run directory's (steps done) and, for a Slurm sweep, its
    /// task's in `squeue`/`sacct` where they answer.
    Status {
        /// The sweep directory (`sweeps/<sweep-id>`).
        #[arg(value_name = "SWEEP_DIR")]
        dir: PathBuf,
    },
}
