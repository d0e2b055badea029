//! The trackers of one run, each mirroring in a task of its own ([`Sinks`]): the trackers a spec
//! configures ([`SinkConfig`]), the task that moves lines from a [`Follower`] to a [`Mirror`]
//! whenever it is poked, what each did at the end ([`Report`]), and `rlx sync`'s whole-run
//! mirror ([`sync`]).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::follow::{Cursor, Follower};
use super::mirror::{End, Mirror, SinkError};
use super::{mlflow, tensorboard, wandb};
use crate::runlog::{MetricsLine, RunDir, files};
use crate::plan::trackers::{MlflowPlan, TensorboardPlan, Trackers, WandbPlan};

/// One tracker and its settings, as the plan (or `rlx sync`) resolved them.
#[derive(Debug, Clone)]
pub(crate) enum SinkConfig {
    /// W&B.
    Wandb(WandbPlan),
    /// TensorBoard.
    Tensorboard(TensorboardPlan),
    /// MLflow.
    Mlflow(MlflowPlan),
}

impl SinkConfig {
    /// The configured trackers.
    pub(crate) fn all(specs: &Trackers) -> Vec<SinkConfig> {
        let mut out = vec![];
        out.extend(specs.wandb.clone().map(SinkConfig::Wandb));
        out.extend(specs.tensorboard.clone().map(SinkConfig::Tensorboard));
        out.extend(specs.mlflow.clone().map(SinkConfig::Mlflow));
        out
    }

    /// The file stem of its state in `sinks/` (and the `rlx sync` subcommand).
    pub(crate) fn key(&self) -> &'static str {
        match self {
            SinkConfig::Wandb(_) => "wandb",
            SinkConfig::Tensorboard(_) => "tensorboard",
            SinkConfig::Mlflow(_) => "mlflow",
        }
    }
}

/// What the trackers need to know about the run.
#[derive(Debug, Clone)]
pub(crate) struct RunInfo {
    /// The run id (`<name>-<hash>`).
    pub run_id: String,
    /// The resolved spec, logged as config (W&B) and params (MLflow).
    pub config: serde_json::Value,
}

/// What one tracker did, at the end.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    /// The tracker (`W&B`).
    pub name: &'static str,
    /// The `rlx sync` subcommand that sends what is missing.
    pub key: &'static str,
    /// Where the lines went.
    pub location: String,
    /// Lines mirrored by this process.
    pub mirrored: usize,
    /// Steps of `metrics.jsonl` it has not mirrored (none when all went).
    pub missing: Vec<i64>,
    /// The last error, if any.
    pub error: Option<String>,
}

impl Report {
    /// A tracker whose task was lost: what it mirrored is unknown here (its cursor in `sinks/`
    /// knows; `rlx sync` sends the rest).
    fn lost(name: &'static str, key: &'static str, error: String) -> Report {
        Report { name, key, location: name.to_string(), mirrored: 0, missing: vec![], error: Some(error) }
    }

    /// A warning when something is missing: which steps, why, and how to send them.
    pub(crate) fn warning(&self, dir: &Path) -> Option<String> {
        if self.missing.is_empty() {
            return self.error.as_ref().map(|e| format!("{}: {e}", self.name));
        }
        let why = self.error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default();
        Some(format!(
            "{}: {} not mirrored to {}{why}; `rlx sync {} {}` sends them",
            self.name,
            steps_text(&self.missing),
            self.location,
            self.key,
            dir.display()
        ))
    }
}

/// `step 3`, `steps -1–5`, `steps 1, 3, 7–9`.
fn steps_text(steps: &[i64]) -> String {
    let mut parts: Vec<String> = vec![];
    let mut i = 0;
    while i < steps.len() {
        let mut j = i;
        while j + 1 < steps.len() && steps[j + 1] == steps[j] + 1 {
            j += 1;
        }
        parts.push(if i == j { steps[i].to_string() } else { format!("{}–{}", steps[i], steps[j]) });
        i = j + 1;
    }
    format!("{} {}", if steps.len() == 1 { "step" } else { "steps" }, parts.join(", "))
}

enum Msg {
    Poke,
    Finish(End),
}

struct Task {
    name: &'static str,
    key: &'static str,
    tx: mpsc::Sender<Msg>,
    started: Option<oneshot::Receiver<()>>,
    join: tokio::task::JoinHandle<Report>,
}

/// The trackers of one run, each mirroring in a task of its own.
pub(crate) struct Sinks {
    tasks: Vec<Task>,
    warnings: Arc<Mutex<Vec<String>>>,
}

/// How long the end of a run waits for its trackers (W&B uploading what is left, MLflow retries).
const FINISH_LIMIT: Duration = Duration::from_secs(300);
/// How long the start of a run waits for trackers to say whether they can work.
const START_LIMIT: Duration = Duration::from_secs(60);

impl Sinks {
    /// Starts the trackers in `configs` for the run in `dir`. Never fails: a tracker that cannot
    /// start becomes a warning ([`Sinks::started`]). Must be called inside a tokio runtime.
    pub(crate) fn start(dir: &RunDir, run: &RunInfo, configs: Vec<SinkConfig>) -> Sinks {
        Self::start_as(dir, run, configs, false)
    }

    /// [`Sinks::start`]; with `lazy`, a tracker that has every line already is not started
    /// (what `rlx sync` wants: no W&B run resumed for nothing).
    fn start_as(dir: &RunDir, run: &RunInfo, configs: Vec<SinkConfig>, lazy: bool) -> Sinks {
        let warnings = Arc::new(Mutex::new(vec![]));
        let mut tasks = vec![];
        for cfg in configs {
            match Self::spawn(dir, run, &cfg, &warnings, lazy) {
                Ok(t) => tasks.push(t),
                Err(e) => warnings.lock().unwrap_or_else(|e| e.into_inner()).push(e),
            }
        }
        Sinks { tasks, warnings }
    }

    /// The planned trackers, started (see [`Sinks::start`]).
    pub(crate) fn for_plan(dir: &RunDir, run: &RunInfo, specs: &Trackers) -> Sinks {
        Self::start(dir, run, SinkConfig::all(specs))
    }

    fn spawn(dir: &RunDir, run: &RunInfo, cfg: &SinkConfig, warnings: &Arc<Mutex<Vec<String>>>, lazy: bool) -> Result<Task, String> {
        let key = cfg.key();
        let sinks_dir = dir.file(files::SINKS);
        std::fs::create_dir_all(&sinks_dir).map_err(|e| format!("{key}: cannot create `{}`: {e}", sinks_dir.display()))?;
        // One process per tracker of a run: `rlx sync` beside a running run must not move the
        // same cursor.
        let lock_path = sinks_dir.join(format!("{key}.lock"));
        let lock = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path).map_err(|e| format!("{key}: cannot open `{}`: {e}", lock_path.display()))?;
        if lock.try_lock().is_err() {
            return Err(format!("{key}: another rlx process is mirroring this run there already (`{}` is locked)", lock_path.display()));
        }
        let state = sinks_dir.join(format!("{key}.json"));
        let follower = Follower::open(&dir.file(files::METRICS), &state).map_err(|e| format!("{key}: {}", crate::causes::causes(&e).join(": ")))?;
        let saved = follower.saved.sink.clone();
        let (tx, rx) = mpsc::channel(4);
        let (started_tx, started) = oneshot::channel();
        let cx = TaskCx { key, rx, started: started_tx, warnings: Arc::clone(warnings), _lock: lock, lazy };
        let (name, join) = match cfg {
            SinkConfig::Tensorboard(t) => {
                let out = &t.directory;
                let m = tensorboard::TensorBoard::new(std::path::absolute(out).unwrap_or_else(|_| out.clone()), &saved);
                (m.name(), tokio::spawn(drive(m, follower, cx)))
            }
            SinkConfig::Mlflow(c) => {
                let Some(uri) = &c.tracking_uri else {
                    return Err("MLflow: no tracking URI (set `log.sinks.mlflow.tracking_uri` or `MLFLOW_TRACKING_URI`); metrics are not mirrored to MLflow".into());
                };
                let m = mlflow::Mlflow::new(uri, &c.experiment, &run.run_id, &run.config, &saved);
                (m.name(), tokio::spawn(drive(m, follower, cx)))
            }
            SinkConfig::Wandb(c) => {
                let run_dir = std::path::absolute(dir.path()).unwrap_or_else(|_| dir.path().to_path_buf());
                let m = wandb::Wandb::new(c, &run.run_id, run_dir, &sinks_dir, &saved);
                (m.name(), tokio::spawn(drive(m, follower, cx)))
            }
        };
        Ok(Task { name, key, tx, started: Some(started), join })
    }

    /// Waits (at most a minute) until every tracker has started or failed to, and returns the
    /// warnings so far: call it once, after the run's own setup, so a missing `wandb` is said at
    /// the start of the run rather than after its first step.
    pub(crate) async fn started(&mut self) -> Vec<String> {
        for t in &mut self.tasks {
            if let Some(rx) = t.started.take() {
                let _ = tokio::time::timeout(START_LIMIT, rx).await;
            }
        }
        self.take_warnings()
    }

    /// Tells every tracker that `metrics.jsonl` has new lines; returns at once with the warnings
    /// gathered since the last call. A tracker still busy with the last poke picks the new
    /// lines up when it is done (pokes coalesce; the engine never waits for a tracker).
    pub(crate) fn poke(&self) -> Vec<String> {
        for t in &self.tasks {
            // Full: a poke is pending already, and it will read to the end of the file.
            let _ = t.tx.try_send(Msg::Poke);
        }
        self.take_warnings()
    }

    fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut *self.warnings.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Mirrors what is left, marks each tracker's run as ended, and reports what each mirrored
    /// and missed. Waits at most five minutes for all of them.
    pub(crate) async fn finish(self, end: End) -> Vec<Report> {
        let mut reports = vec![];
        for t in &self.tasks {
            let _ = t.tx.send(Msg::Finish(end)).await;
        }
        let deadline = tokio::time::Instant::now() + FINISH_LIMIT;
        for t in self.tasks {
            match tokio::time::timeout_at(deadline, t.join).await {
                Ok(Ok(r)) => reports.push(r),
                Ok(Err(e)) => reports.push(Report::lost(t.name, t.key, format!("its task failed: {e}"))),
                Err(_) => reports.push(Report::lost(t.name, t.key, format!("it did not finish within {} s", FINISH_LIMIT.as_secs()))),
            }
        }
        reports
    }
}

/// What a tracker's task needs besides its mirror and follower.
struct TaskCx {
    key: &'static str,
    rx: mpsc::Receiver<Msg>,
    started: oneshot::Sender<()>,
    warnings: Arc<Mutex<Vec<String>>>,
    /// `sinks/<key>.lock`, held as long as the task lives.
    _lock: std::fs::File,
    /// Do not start a tracker that has every line already.
    lazy: bool,
}

/// One tracker's task: start, then on each poke mirror what is pending and save the cursor; on
/// finish, mirror the rest and end the tracker's run. Returns what it did.
async fn drive<M: Mirror>(mut m: M, mut f: Follower, cx: TaskCx) -> Report {
    let TaskCx { key, mut rx, started, warnings, _lock, lazy } = cx;
    let name = m.name();
    let warn = |w: String| warnings.lock().unwrap_or_else(|e| e.into_inner()).push(w);
    let mut mirrored = 0;
    let mut error: Option<String> = None;
    if lazy && !m.starts_over() && f.saved.cursor.offset > 0 && f.pending().is_ok_and(|p| p.is_empty()) {
        let _ = started.send(());
        return Report { name, key, location: m.location(), mirrored, missing: vec![], error };
    }
    let mut usable = match m.start().await {
        Ok(()) => true,
        Err(SinkError::Unavailable(e)) => {
            warn(format!("{name}: {e}; metrics are not mirrored to {name} (the run goes on)"));
            error = Some(e);
            false
        }
        Err(SinkError::Failed(e)) => {
            warn(format!("{name}: {e}; rlx tries again after each step"));
            error = Some(e);
            true
        }
    };
    let _ = started.send(());
    let mut warned = error.is_some();
    // Where the last process left off: a W&B helper of a killed rlx may have saved it while
    // `start` waited for it to finish.
    let reload = |f: &mut Follower| f.reload().err().map(|e| crate::causes::causes(&e).join(": "));
    let save = |f: &mut Follower, m: &M| f.save_sink(m.state()).err().map(|e| crate::causes::causes(&e).join(": "));
    let mut fresh = || {
        if let Some(e) = reload(&mut f) {
            return Some(e);
        }
        if m.starts_over() {
            f.advance(Cursor::default());
        }
        // The tracker's identity is saved before lines go, so a crash cannot lose it.
        save(&mut f, &m)
    };
    if let Some(e) = fresh() {
        warn(format!("{name}: {e}"));
    }
    while let Some(msg) = rx.recv().await {
        if usable {
            match pump(&mut m, &mut f).await {
                Ok(n) => {
                    mirrored += n;
                    error = None;
                }
                Err(SinkError::Unavailable(e)) => {
                    warn(format!("{name}: {e}; metrics are no longer mirrored to {name} (the run goes on)"));
                    error = Some(e);
                    usable = false;
                }
                Err(SinkError::Failed(e)) => {
                    if !warned {
                        warn(format!("{name}: {e}; rlx tries again after each step"));
                        warned = true;
                    }
                    error = Some(e);
                }
            }
        }
        if let Msg::Finish(end) = msg {
            if usable {
                match m.finish(end).await {
                    Ok(()) => {}
                    // The mirroring error, if any, says more than its consequence here.
                    Err(SinkError::Unavailable(e) | SinkError::Failed(e)) => {
                        error.get_or_insert(format!("ending its run: {e}"));
                    }
                }
                if !M::SAVES_CURSOR
                    && let Some(e) = save(&mut f, &m)
                {
                    error = Some(e);
                }
            }
            break;
        }
    }
    // What is durable is what the cursor on disk says.
    if let Some(e) = reload(&mut f) {
        error = Some(e);
    }
    let missing = f.pending().map(|p| p.iter().map(|p| p.line.step).collect()).unwrap_or_default();
    Report { name, key, location: m.location(), mirrored, missing, error }
}

/// Lines per batch: bounds what one failure leaves half-sent, and a backfill's first request.
const BATCH: usize = 64;

/// Mirrors every pending line, a batch at a time, saving the cursor after each.
async fn pump<M: Mirror>(m: &mut M, f: &mut Follower) -> Result<usize, SinkError> {
    let pending = f.pending().map_err(|e| SinkError::Failed(crate::causes::causes(&e).join(": ")))?;
    let mut n = 0;
    for batch in pending.chunks(BATCH) {
        let lines: Vec<MetricsLine> = batch.iter().map(|p| p.line.clone()).collect();
        let cursor = batch.last().expect("chunks are not empty").cursor;
        m.send(&lines, cursor).await?;
        if M::SAVES_CURSOR {
            f.advance(cursor);
        } else {
            f.commit(cursor, m.state()).map_err(|e| SinkError::Failed(crate::causes::causes(&e).join(": ")))?;
        }
        n += batch.len();
    }
    Ok(n)
}

/// Mirrors a whole run directory into one tracker (what `rlx sync` does): starts it, sends every
/// line it has not mirrored, ends its run as `end`, and reports. Warnings met on the way are in
/// the second value.
pub(crate) async fn sync(dir: &RunDir, run: &RunInfo, cfg: SinkConfig, end: End) -> (Option<Report>, Vec<String>) {
    let mut sinks = Sinks::start_as(dir, run, vec![cfg], true);
    let mut warnings = sinks.started().await;
    warnings.extend(sinks.poke());
    let report = sinks.finish(end).await.into_iter().next();
    (report, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_ranges_read_well() {
        assert_eq!(steps_text(&[3]), "step 3");
        assert_eq!(steps_text(&[-1, 0, 1, 2]), "steps -1–2");
        assert_eq!(steps_text(&[1, 3, 7, 8, 9]), "steps 1, 3, 7–9");
    }
}
