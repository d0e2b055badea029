//! `log.sinks` resolved: each tracker's settings with its defaults applied (the W&B project is
//! the spec's `name`, its run name the run id, the MLflow experiment the spec's `name`, its
//! server `MLFLOW_TRACKING_URI`, TensorBoard's directory the run directory).
//!
//! One function makes them for both callers: the plan of `rlx run`, and `rlx sync`, which has a
//! run directory and its `resolved.json` but no spec to plan. (Rejected: leaving each default to
//! the tracker that uses it, where `rlx sync` and `rlx run` each reached it by their own path and
//! the plan could not say what a run would log to.)

use std::path::{Path, PathBuf};

use crate::spec::types::{Sinks, WandbMode};

/// The trackers a run mirrors its metrics into, each fully set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trackers {
    /// W&B, when on.
    pub wandb: Option<WandbPlan>,
    /// TensorBoard, when on.
    pub tensorboard: Option<TensorboardPlan>,
    /// MLflow, when on.
    pub mlflow: Option<MlflowPlan>,
}

/// W&B's settings (`wandb.init` arguments).
#[derive(Debug, Clone, PartialEq)]
pub struct WandbPlan {
    /// The project.
    pub project: String,
    /// The entity; `None` is the API key's default entity (W&B's choice, not ours).
    pub entity: Option<String>,
    /// The W&B run's display name.
    pub name: String,
    /// Its tags.
    pub tags: Vec<String>,
    /// Online or offline.
    pub mode: WandbMode,
    /// The interpreter with the `wandb` package.
    pub python: PathBuf,
}

/// TensorBoard's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorboardPlan {
    /// Where the event files go (the run's own directory under a shared one).
    pub directory: PathBuf,
}

/// MLflow's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct MlflowPlan {
    /// The tracking server; `None` when neither the spec nor `MLFLOW_TRACKING_URI` names one
    /// (the run goes on without MLflow and says so).
    pub tracking_uri: Option<String>,
    /// The experiment.
    pub experiment: String,
}

/// The trackers of `sinks` for run `run_id` (spec `name`) whose directory is `run_dir`; `var`
/// reads the environment (a parameter so tests need not set process-wide variables).
pub fn trackers(sinks: &Sinks, name: &str, run_id: &str, run_dir: &Path, var: impl Fn(&str) -> Option<String>) -> Trackers {
    Trackers {
        wandb: sinks.wandb.as_ref().map(|w| WandbPlan {
            project: w.project.clone().unwrap_or_else(|| name.to_string()),
            entity: w.entity.clone(),
            name: w.name.clone().unwrap_or_else(|| run_id.to_string()),
            tags: w.tags.clone(),
            mode: w.mode,
            python: w.python.clone().unwrap_or_else(|| "python3".into()),
        }),
        tensorboard: sinks.tensorboard.as_ref().map(|t| TensorboardPlan {
            directory: match &t.directory {
                Some(d) => d.join(run_id),
                None => run_dir.to_path_buf(),
            },
        }),
        mlflow: sinks.mlflow.as_ref().map(|m| MlflowPlan {
            tracking_uri: m.tracking_uri.clone().or_else(|| var("MLFLOW_TRACKING_URI").filter(|u| !u.is_empty())),
            experiment: m.experiment.clone().unwrap_or_else(|| name.to_string()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::types::{MlflowSink, TensorboardSink, WandbSink};

    fn all_defaults() -> Sinks {
        Sinks { wandb: Some(WandbSink::default()), tensorboard: Some(TensorboardSink::default()), mlflow: Some(MlflowSink::default()) }
    }

    #[test]
    fn each_default_is_the_documented_one() {
        let env = |k: &str| (k == "MLFLOW_TRACKING_URI").then(|| "http://127.0.0.1:5000".to_string());
        let t = trackers(&all_defaults(), "qs", "qs-0123456789", Path::new("runs/qs-0123456789"), env);
        let w = t.wandb.expect("on");
        assert_eq!((w.project.as_str(), w.name.as_str(), w.python.as_path()), ("qs", "qs-0123456789", Path::new("python3")));
        assert_eq!(t.tensorboard.expect("on").directory, Path::new("runs/qs-0123456789"));
        let m = t.mlflow.expect("on");
        assert_eq!((m.tracking_uri.as_deref(), m.experiment.as_str()), (Some("http://127.0.0.1:5000"), "qs"));
    }

    #[test]
    fn what_the_spec_sets_wins_and_an_empty_environment_variable_is_no_server() {
        let sinks = Sinks {
            wandb: Some(WandbSink { project: Some("p".into()), name: Some("n".into()), ..WandbSink::default() }),
            tensorboard: Some(TensorboardSink { directory: Some("tb".into()) }),
            mlflow: Some(MlflowSink { tracking_uri: None, experiment: Some("e".into()) }),
        };
        let t = trackers(&sinks, "qs", "qs-1", Path::new("runs/qs-1"), |_| Some(String::new()));
        let w = t.wandb.expect("on");
        assert_eq!((w.project.as_str(), w.name.as_str()), ("p", "n"));
        assert_eq!(t.tensorboard.expect("on").directory, Path::new("tb/qs-1"));
        assert_eq!(t.mlflow.expect("on"), MlflowPlan { tracking_uri: None, experiment: "e".into() });
        assert_eq!(trackers(&Sinks::default(), "qs", "qs-1", Path::new("r"), |_| None), Trackers::default());
    }
}
