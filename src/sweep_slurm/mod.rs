//! `rlx sweep --launcher slurm`: a sweep's members as one Slurm job array.
//!
//! rlx grows no scheduler of its own: `rlx sweep` writes a batch script whose array task `i`
//! runs `rlx run` for member `i` (the same spec and overrides, so the same run id, as a local
//! sweep), submits it with `sbatch`, records the job in `sweep.json`, and returns. A finished
//! member is left out of the array; an unfinished one resumes from its checkpoint, as `rlx run`
//! does, whether Slurm requeued its task or the user re-launched the sweep.
//!
//! - [`script`]: the batch script (its `#SBATCH` lines, the member table, signal handling).
//! - [`scheduler`]: the calls to `sbatch`, `squeue` and `sacct`, and what their output means.
//! - [`status`]: each member's state from its run directory and from the scheduler.

pub(crate) mod scheduler;
pub(crate) mod script;
pub(crate) mod status;

/// The default of `sweep.slurm.stop_before_s`: seconds of warning before the time limit.
pub(crate) const DEFAULT_STOP_BEFORE_S: u32 = 300;

/// A sweep's Slurm settings, the spec's `sweep.slurm` with `rlx sweep`'s flags applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Options {
    /// `--partition`.
    pub partition: Option<String>,
    /// `--time`.
    pub time: Option<String>,
    /// `--cpus-per-task`.
    pub cpus_per_task: Option<u32>,
    /// `--mem`.
    pub mem: Option<String>,
    /// `--gres`.
    pub gres: Option<String>,
    /// More `#SBATCH` options, verbatim.
    pub sbatch_args: Vec<String>,
    /// Shell lines before `rlx run`.
    pub setup: Option<String>,
    /// Seconds of warning before the time limit (`--signal=B:USR1@S`); 0 for none.
    pub stop_before_s: u32,
    /// The array's `%K`: tasks running at once.
    pub max_parallel: Option<u32>,
    /// The `rlx` executable on the compute nodes.
    pub rlx: String,
}
