//! `sweep:` how `rlx sweep` launches its members.
//!
//! Part of the spec types ([`super`]); the doc comments are the user reference and generate
//! `schemas/experiment.schema.json`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How `rlx sweep` runs its members. Command-line flags of `rlx sweep` override each key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SweepLaunch {
    /// `local`: members run as `rlx run` child processes of `rlx sweep` on this machine;
    /// `slurm`: `rlx sweep` submits one Slurm job array whose tasks each `rlx run` one member,
    /// and returns. Default `local` (`--launcher`).
    #[serde(default)]
    pub launcher: Launcher,
    /// Members running at once: child processes with `local` (default 1), the job array's `%K`
    /// throttle with `slurm` (default: as many as Slurm schedules). `--max-parallel`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_parallel: Option<u32>,
    /// The Slurm job array's settings (with `launcher: slurm`).
    #[serde(default, skip_serializing_if = "SlurmLaunch::is_default")]
    pub slurm: SlurmLaunch,
}

impl SweepLaunch {
    /// Whether nothing is set (then `resolved.json` leaves the section out).
    pub fn is_default(&self) -> bool {
        *self == SweepLaunch::default()
    }
}

/// Where sweep members run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Launcher {
    /// Child processes of `rlx sweep` on this machine.
    #[default]
    Local,
    /// One Slurm job array, one task per member.
    Slurm,
}

/// A sweep's Slurm job array. Each key maps to one `#SBATCH` line of the batch script (or to a
/// line of shell); unset keys leave the cluster's defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SlurmLaunch {
    /// Partition (queue) of every task: `--partition`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// Time limit of each task, in Slurm's syntax (`90`, `4:00:00`, `1-12:00:00`): `--time`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// CPUs of each task: `--cpus-per-task`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub cpus_per_task: Option<u32>,
    /// Memory of each task, in Slurm's syntax (`32G`, `64000M`): `--mem`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem: Option<String>,
    /// Generic resources of each task, GPUs above all (`gpu:1`, `gpu:a100:2`): `--gres`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gres: Option<String>,
    /// More `sbatch` options, one per item, written as `#SBATCH` lines after rlx's own
    /// (`--account=proj`, `--qos=high`, `--constraint=a100`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sbatch_args: Vec<String>,
    /// Shell lines run by each task before `rlx run` (module loads, a virtualenv, exports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<String>,
    /// Seconds before the time limit at which Slurm warns a task (`--signal=B:USR1@S`): the
    /// member then stops at the step boundary, checkpoints, and requeues itself to resume in a
    /// new allocation. Default 300; `0` turns the warning off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_before_s: Option<u32>,
    /// The `rlx` executable the tasks run. Default: the one running `rlx sweep` (compute nodes
    /// usually share its file system); `rlx` finds it on the task's `PATH` after `setup`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rlx: Option<String>,
}

impl SlurmLaunch {
    /// Whether nothing is set.
    pub fn is_default(&self) -> bool {
        *self == SlurmLaunch::default()
    }
}
