//! `rlx sync {wandb|tensorboard|mlflow} RUN_DIR...`: mirrors finished (or stopped) runs into a
//! tracker after the fact, from where that tracker's cursor in `sinks/` stands: a run made
//! before a tracker was configured gets all of its steps, a run whose tracker was down gets the
//! steps it missed, and a run already mirrored gets nothing twice.
//!
//! Settings come from the run's own `log.sinks` entry when it has one, then the flags.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::cli::error::UserError;
use crate::cli::{exit, printer};
use crate::plan::trackers::trackers;
use crate::runlog::sinks::{self, End, RunInfo, SinkConfig};
use crate::runlog::{RunDir, State, files};
use crate::spec::types::{MlflowSink, Sinks, TensorboardSink, WandbMode, WandbSink};

/// Which tracker, and its settings.
#[derive(Debug, Subcommand)]
pub enum SyncCommand {
    /// Weights & Biases, through `python3` with the `wandb` package (`WANDB_API_KEY` as usual).
    Wandb(WandbArgs),
    /// TensorBoard event files.
    Tensorboard(TensorboardArgs),
    /// An MLflow tracking server.
    Mlflow(MlflowArgs),
}

/// `rlx sync wandb`.
#[derive(Debug, Args)]
pub struct WandbArgs {
    /// Run directories.
    #[arg(required = true, value_name = "RUN_DIR")]
    pub dirs: Vec<PathBuf>,
    /// W&B project (default: the run's `log.sinks.wandb.project`, else the spec's `name`).
    #[arg(long)]
    pub project: Option<String>,
    /// W&B entity.
    #[arg(long)]
    pub entity: Option<String>,
    /// `online` or `offline` (default: the run's setting, else `online`).
    #[arg(long, value_parser = ["online", "offline"])]
    pub mode: Option<String>,
    /// Python interpreter with the `wandb` package (default `python3`).
    #[arg(long)]
    pub python: Option<PathBuf>,
}

/// `rlx sync tensorboard`.
#[derive(Debug, Args)]
pub struct TensorboardArgs {
    /// Run directories.
    #[arg(required = true, value_name = "RUN_DIR")]
    pub dirs: Vec<PathBuf>,
    /// Directory for event files; each run writes into `<DIR>/<run-id>/` (default: the run's
    /// setting, else the run directory itself).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// `rlx sync mlflow`.
#[derive(Debug, Args)]
pub struct MlflowArgs {
    /// Run directories.
    #[arg(required = true, value_name = "RUN_DIR")]
    pub dirs: Vec<PathBuf>,
    /// Tracking server URL (default: the run's setting, else `MLFLOW_TRACKING_URI`).
    #[arg(long, value_name = "URL")]
    pub tracking_uri: Option<String>,
    /// Experiment name (default: the run's setting, else the spec's `name`).
    #[arg(long)]
    pub experiment: Option<String>,
}

/// What a run directory says about itself.
struct Run {
    dir: RunDir,
    info: RunInfo,
    /// The spec's `name` (the default W&B project and MLflow experiment).
    name: String,
    sinks: Sinks,
    end: End,
}

fn open(path: &Path) -> anyhow::Result<Run> {
    let dir = RunDir::open(path).with_context(|| format!("cannot sync `{}`", path.display()))?;
    let status = dir.status()?.context("no status.json")?;
    // A run in progress mirrors itself through its own `log.sinks`; ending its tracker's run here
    // would mark it finished while it still trains.
    if status.state == State::Running && dir.lock().is_err() {
        return Err(UserError::msg(format!("`{}` is still running; sync it once it has stopped", path.display())));
    }
    let written: serde_json::Value = dir.read_json(files::RESOLVED)?.unwrap_or_default();
    let config = crate::plan::record::upgrade(written.clone()).unwrap_or(written);
    let name = config["name"].as_str().unwrap_or(&status.run_id).to_string();
    // Another rlx version's spec may not read as this one's; its trackers then are the flags'.
    let sinks: Sinks = serde_json::from_value(config["log"]["sinks"].clone()).unwrap_or_default();
    let end = match status.state {
        State::Finished => End::Finished,
        State::Interrupted => End::Interrupted,
        State::Failed | State::Running => End::Failed,
    };
    Ok(Run { dir, info: RunInfo { run_id: status.run_id, config }, name, sinks, end })
}

/// The tracker's settings for one run: the run's own `log.sinks` entry, then the flags, then
/// the defaults a plan applies ([`crate::plan::trackers`]).
fn config_for(cmd: &SyncCommand, run: &Run) -> SinkConfig {
    let s = &run.sinks;
    // `sinks` names exactly the subcommand's tracker, so `all` gives exactly one.
    let only = |sinks: Sinks| {
        let t = trackers(&sinks, &run.name, &run.info.run_id, run.dir.path(), |k| std::env::var(k).ok());
        SinkConfig::all(&t).pop().expect("the subcommand's tracker is set")
    };
    match cmd {
        SyncCommand::Wandb(a) => {
            let mut c: WandbSink = s.wandb.clone().unwrap_or_default();
            c.project = a.project.clone().or(c.project);
            c.entity = a.entity.clone().or(c.entity);
            c.python = a.python.clone().or(c.python);
            if let Some(m) = &a.mode {
                c.mode = if m == "offline" { WandbMode::Offline } else { WandbMode::Online };
            }
            only(Sinks { wandb: Some(c), ..Sinks::default() })
        }
        SyncCommand::Tensorboard(a) => {
            let mut c: TensorboardSink = s.tensorboard.clone().unwrap_or_default();
            c.directory = a.dir.clone().or(c.directory);
            only(Sinks { tensorboard: Some(c), ..Sinks::default() })
        }
        SyncCommand::Mlflow(a) => {
            let mut c: MlflowSink = s.mlflow.clone().unwrap_or_default();
            c.tracking_uri = a.tracking_uri.clone().or(c.tracking_uri);
            c.experiment = a.experiment.clone().or(c.experiment);
            only(Sinks { mlflow: Some(c), ..Sinks::default() })
        }
    }
}

/// Runs `rlx sync`.
pub(crate) fn run(cmd: SyncCommand) -> anyhow::Result<u8> {
    let dirs = match &cmd {
        SyncCommand::Wandb(a) => &a.dirs,
        SyncCommand::Tensorboard(a) => &a.dirs,
        SyncCommand::Mlflow(a) => &a.dirs,
    };
    if let SyncCommand::Mlflow(a) = &cmd
        && let Some(uri) = &a.tracking_uri
        && !(uri.starts_with("http://") || uri.starts_with("https://"))
    {
        return Err(UserError::msg(format!("`--tracking-uri` must be an http(s) URL, found `{uri}`")));
    }
    let rt = super::common::runtime()?;
    let mut incomplete = 0;
    for path in dirs {
        let run = open(path)?;
        let cfg = config_for(&cmd, &run);
        let (report, warnings) = rt.block_on(sinks::sync(&run.dir, &run.info, cfg, run.end));
        // The report repeats a tracker's last error; say it once.
        let last = report.as_ref().and_then(|r| r.error.clone());
        for w in warnings.iter().filter(|w| last.as_ref().is_none_or(|e| !w.contains(e.as_str()))) {
            printer::warning(w, &[]);
        }
        match report {
            Some(r) => match r.warning(run.dir.path()) {
                Some(w) => {
                    incomplete += 1;
                    printer::warning(&w, &[]);
                }
                None => printer::status(format!("{}: {} took {} new line{} ({})", run.info.run_id, r.name, r.mirrored, if r.mirrored == 1 { "" } else { "s" }, r.location)),
            },
            None => incomplete += 1,
        }
    }
    Ok(if incomplete == 0 { exit::OK } else { exit::INTERNAL })
}
