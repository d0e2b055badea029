//! `log:` the run directory, trackers, and which completions are written.
//!
//! Part of the spec types ([`super`]); the doc comments are the user reference and generate
//! `schemas/experiment.schema.json`.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where the run directory goes and what is logged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Log {
    /// Directory holding run directories, relative to the current directory. Default `runs`.
    #[serde(default = "default_root")]
    pub root: PathBuf,
    /// Which completions go to `rollouts.jsonl`: `all`, `sample` (the first group of each step)
    /// or `none`. Default `all`.
    #[serde(default)]
    pub rollouts: RolloutLog,
    /// Experiment trackers that mirror `metrics.jsonl` while the run goes (W&B, TensorBoard,
    /// MLflow). Default: none. `metrics.jsonl` stays the record; `rlx sync` fills a tracker
    /// afterwards. Not part of the run id (all of `log` is left out of it): where metrics are
    /// copied to does not change the experiment, so adding a tracker to a spec resumes its runs.
    #[serde(default, skip_serializing_if = "Sinks::is_empty")]
    pub sinks: Sinks,
}

/// The trackers a run mirrors its metrics into; each is off unless present
/// (`tensorboard: {}` turns TensorBoard on with its defaults).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Sinks {
    /// Weights & Biases, through the official `wandb` Python package (run with `python3`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wandb: Option<WandbSink>,
    /// TensorBoard event files, written by rlx itself (no Python needed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensorboard: Option<TensorboardSink>,
    /// An MLflow tracking server, through its REST API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlflow: Option<MlflowSink>,
}

impl Sinks {
    /// Whether no tracker is configured.
    pub fn is_empty(&self) -> bool {
        self.wandb.is_none() && self.tensorboard.is_none() && self.mlflow.is_none()
    }
}

/// Weights & Biases settings (`wandb.init` arguments).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WandbSink {
    /// W&B project. Default: the spec's `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// W&B entity (user or team). Default: the API key's default entity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entity: Option<String>,
    /// Display name of the W&B run. Default: the run id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Tags of the W&B run (at most 64 characters each). Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// `online` (stream to the W&B server) or `offline` (write `wandb/offline-run-*` in the run
    /// directory for a later `wandb sync`). Default `online`.
    #[serde(default)]
    pub mode: WandbMode,
    /// The Python interpreter that has the `wandb` package. Default `python3` (from `PATH`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<PathBuf>,
}

/// Where W&B sends a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WandbMode {
    /// To the W&B server as the run goes.
    #[default]
    Online,
    /// To files in the run directory (`wandb sync` uploads them later).
    Offline,
}

/// TensorBoard settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TensorboardSink {
    /// Directory for event files, relative to the current directory; a run writes into
    /// `<directory>/<run-id>/`. Default: the run directory itself, so that
    /// `tensorboard --logdir runs` shows every run under its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<PathBuf>,
}

/// MLflow settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MlflowSink {
    /// The tracking server, an http(s) URL such as `http://127.0.0.1:5000`. Default: the
    /// `MLFLOW_TRACKING_URI` environment variable. `MLFLOW_TRACKING_TOKEN` (or
    /// `MLFLOW_TRACKING_USERNAME` and `MLFLOW_TRACKING_PASSWORD`) authenticate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracking_uri: Option<String>,
    /// MLflow experiment (created if missing). Default: the spec's `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experiment: Option<String>,
}

fn default_root() -> PathBuf {
    "runs".into()
}

impl Default for Log {
    fn default() -> Self {
        Log { root: default_root(), rollouts: RolloutLog::default(), sinks: Sinks::default() }
    }
}


/// Which completions are written to `rollouts.jsonl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RolloutLog {
    /// Every completion.
    #[default]
    All,
    /// The first group of each step.
    Sample,
    /// None.
    None,
}
