//! Weights & Biases through the official Python SDK: rlx runs `wandb_helper.py` (shipped inside
//! the binary) with the user's `python3` and sends it metrics lines over a pipe; the helper calls
//! `wandb.init(id=..., resume="allow")`, `run.log(row, step=...)` and `run.finish()`.
//!
//! Why a helper: W&B has no Rust SDK; its wire protocol and offline `.wandb` files are internal
//! and have changed incompatibly (see the reference notes); `wandb sync
//! --sync-tensorboard` is gone since 0.31. The SDK is the one stable surface.
//!
//! The W&B run id is chosen by rlx and saved in `sinks/wandb.json`, so a resumed rlx run (or
//! `rlx sync wandb`) continues the same W&B run. The helper, not rlx, saves the cursor, after
//! `run.finish()`: W&B's service buffers its writes (a killed helper's offline file held none of
//! the rows it had taken, measured with wandb 0.31.0), so only a finished W&B run is durable.
//! A helper left finishing by a killed rlx holds `sinks/wandb.helper.lock`; the next helper
//! starts when it is gone, from the cursor it saved. The helper runs in its own
//! process group (a Ctrl-C at the terminal is rlx's to handle; rlx then tells the helper to
//! finish) and writes what W&B prints to `sinks/wandb.log`.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::follow::Cursor;
use super::mirror::{End, Mirror, SinkError};
use crate::runlog::MetricsLine;
use crate::plan::trackers::WandbPlan;
use crate::spec::types::WandbMode;

/// The helper's source.
const HELPER: &str = include_str!("wandb_helper.py");

/// How long `import wandb` may take.
const IMPORT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `wandb.init` may take: W&B's own `init_timeout` is 90 s.
const INIT_TIMEOUT: Duration = Duration::from_secs(120);
/// How long logging a batch may take.
const LOG_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `run.finish()` may take (online, it uploads what is left).
const FINISH_TIMEOUT: Duration = Duration::from_secs(180);
/// How long to wait for the helper of a killed rlx to finish its W&B run.
const HELPER_WAIT: Duration = Duration::from_secs(240);

/// What `sinks/wandb.json` keeps besides the cursor.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct State {
    /// The W&B run id.
    id: String,
    /// The project and entity it lives in (another one starts a new W&B run).
    #[serde(default)]
    project: String,
    #[serde(default)]
    entity: Option<String>,
}

/// Mirrors a run into W&B through the helper.
pub(crate) struct Wandb {
    python: PathBuf,
    settings: Value,
    log_file: PathBuf,
    state_file: PathBuf,
    lock_file: PathBuf,
    state: State,
    helper: Option<Helper>,
    ready: bool,
    /// The saved state was for another project.
    moved: bool,
}

struct Helper {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Wandb {
    /// A mirror with the planned settings for rlx run `run_id` in `run_dir`, keeping its files in
    /// `sinks_dir`; `saved` is the tracker's saved state.
    pub(crate) fn new(cfg: &WandbPlan, run_id: &str, run_dir: PathBuf, sinks_dir: &std::path::Path, saved: &Value) -> Wandb {
        let (log_file, state_file, lock_file) = (sinks_dir.join("wandb.log"), sinks_dir.join("wandb.json"), sinks_dir.join("wandb.helper.lock"));
        let mut state: State = serde_json::from_value(saved.clone()).unwrap_or_default();
        let project = cfg.project.clone();
        let moved = !state.id.is_empty() && (state.project != project || state.entity != cfg.entity);
        if moved || state.id.is_empty() {
            state = State { id: new_id(run_id), project: project.clone(), entity: cfg.entity.clone() };
        }
        let settings = json!({
            "run_dir": run_dir,
            "run_id": run_id,
            "id": state.id,
            "project": project,
            "entity": cfg.entity,
            "name": cfg.name,
            "tags": cfg.tags,
            "mode": match cfg.mode { WandbMode::Online => "online", WandbMode::Offline => "offline" },
            "state_file": state_file,
            "lock_file": lock_file,
        });
        Wandb { python: cfg.python.clone(), settings, log_file, state_file, lock_file, state, helper: None, ready: false, moved }
    }

    /// The next event from the helper, within `limit`.
    async fn next(&mut self, limit: Duration, waiting_for: &str) -> Result<Value, SinkError> {
        let Some(h) = self.helper.as_mut() else { return Err(SinkError::Unavailable("the helper is not running".into())) };
        let line = match tokio::time::timeout(limit, h.stdout.next_line()).await {
            Ok(Ok(Some(line))) => line,
            Ok(Ok(None) | Err(_)) => return Err(self.died(waiting_for).await),
            Err(_) => {
                self.kill().await;
                return Err(SinkError::Unavailable(format!("the W&B helper gave no answer within {} s while {waiting_for}; {}", limit.as_secs(), self.see_log())));
            }
        };
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|_| json!({"event": "error", "message": format!("unexpected output `{line}`")}));
        if v["event"] == "error" {
            let msg = v["message"].as_str().unwrap_or_default().to_string();
            self.kill().await;
            return Err(SinkError::Unavailable(match v["stage"].as_str() {
                Some("import") => format!("`{}` cannot import `wandb` ({msg}); install it with `{} -m pip install wandb`, or set `log.sinks.wandb.python`", self.python.display(), self.python.display()),
                Some("init") => format!("`wandb.init` failed: {msg}; {}", self.see_log()),
                _ => format!("the W&B helper failed: {msg}; {}", self.see_log()),
            }));
        }
        Ok(v)
    }

    /// The error for a helper that went away, with its exit status.
    async fn died(&mut self, waiting_for: &str) -> SinkError {
        let status = match self.helper.as_mut() {
            Some(h) => tokio::time::timeout(Duration::from_secs(5), h.child.wait()).await.ok().and_then(Result::ok),
            None => None,
        };
        self.kill().await;
        let how = status.map_or_else(|| "exited".to_string(), |s| format!("exited ({s})"));
        SinkError::Unavailable(format!("the W&B helper {how} while {waiting_for}; {}", self.see_log()))
    }

    async fn kill(&mut self) {
        if let Some(mut h) = self.helper.take() {
            let _ = h.child.start_kill();
            let _ = h.child.wait().await;
        }
    }

    fn see_log(&self) -> String {
        format!("see `{}`", self.log_file.display())
    }

    /// Waits for the helper's `ready` (the W&B run started).
    async fn ensure_ready(&mut self) -> Result<(), SinkError> {
        if self.ready {
            return Ok(());
        }
        self.next(INIT_TIMEOUT, "starting the W&B run").await?;
        self.ready = true;
        Ok(())
    }

    async fn write(&mut self, msg: &Value) -> Result<(), SinkError> {
        let Some(h) = self.helper.as_mut() else { return Err(SinkError::Unavailable("the helper is not running".into())) };
        let mut line = serde_json::to_vec(msg).expect("messages serialise");
        line.push(b'\n');
        let sent = async {
            h.stdin.write_all(&line).await?;
            h.stdin.flush().await
        };
        if sent.await.is_err() {
            return Err(self.died("receiving metrics").await);
        }
        Ok(())
    }
}

/// A fresh W&B run id: 8 characters of `[a-z0-9]` as W&B's own `generate_id`, from the rlx run
/// id and the clock (a re-created rlx run must not collide with the W&B run of a deleted one).
fn new_id(run_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let h = Sha256::digest(format!("{run_id}:{nanos}:{}", std::process::id()).as_bytes());
    let alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789";
    h.iter().take(8).map(|b| char::from(alphabet[usize::from(*b) % alphabet.len()])).collect()
}

impl Mirror for Wandb {
    const SAVES_CURSOR: bool = true;

    fn name(&self) -> &'static str {
        "W&B"
    }

    async fn start(&mut self) -> Result<(), SinkError> {
        // Wait for a helper still finishing the W&B run of a killed rlx, then take the id it
        // saved (it may have been the first to choose one).
        let lock = std::fs::OpenOptions::new().create(true).append(true).open(&self.lock_file).map_err(|e| SinkError::Unavailable(format!("cannot open `{}`: {e}", self.lock_file.display())))?;
        let deadline = tokio::time::Instant::now() + HELPER_WAIT;
        while lock.try_lock().is_err() {
            if tokio::time::Instant::now() > deadline {
                return Err(SinkError::Unavailable(format!("an earlier W&B helper still holds `{}` after {} s", self.lock_file.display(), HELPER_WAIT.as_secs())));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        drop(lock);
        if let Ok(Some(saved)) = crate::runlog::json::read::<Value>(&self.state_file)
            && let Some(id) = saved["sink"]["id"].as_str().filter(|id| !id.is_empty())
            && !self.moved
        {
            self.state.id = id.to_string();
            self.settings["id"] = Value::from(id);
        }
        if let Some(dir) = self.log_file.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log_file).map_err(|e| SinkError::Unavailable(format!("cannot open `{}`: {e}", self.log_file.display())))?;
        let mut cmd = Command::new(&self.python);
        cmd.arg("-c").arg(HELPER).arg(self.settings.to_string()).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::from(log)).process_group(0);
        let mut child = cmd.spawn().map_err(|e| {
            let why = if e.kind() == std::io::ErrorKind::NotFound { "not found".to_string() } else { e.to_string() };
            SinkError::Unavailable(format!("cannot run `{}` ({why}); W&B needs Python 3 with `pip install wandb`, or set `log.sinks.wandb.python`", self.python.display()))
        })?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped")).lines();
        self.helper = Some(Helper { child, stdin, stdout });
        self.next(IMPORT_TIMEOUT, "importing `wandb`").await.map(drop)
    }

    async fn send(&mut self, lines: &[MetricsLine], upto: Cursor) -> Result<(), SinkError> {
        self.ensure_ready().await?;
        self.write(&json!({"log": lines, "cursor": upto})).await?;
        let v = self.next(LOG_TIMEOUT, "logging metrics").await?;
        match v["event"].as_str() {
            Some("logged") => Ok(()),
            _ => Err(SinkError::Unavailable(format!("the W&B helper answered `{v}` to a batch of metrics"))),
        }
    }

    async fn finish(&mut self, end: End) -> Result<(), SinkError> {
        self.ensure_ready().await?;
        let (code, what) = match end {
            End::Finished => (0, "finished"),
            End::Interrupted => (130, "interrupted"),
            End::Failed => (1, "failed"),
        };
        self.write(&json!({"finish": {"exit_code": code, "summary": {"rlx/end": what}}})).await?;
        self.next(FINISH_TIMEOUT, "finishing the W&B run").await?;
        if let Some(mut h) = self.helper.take() {
            drop(h.stdin);
            if tokio::time::timeout(Duration::from_secs(30), h.child.wait()).await.is_err() {
                let _ = h.child.start_kill();
                let _ = h.child.wait().await;
            }
        }
        Ok(())
    }

    fn starts_over(&self) -> bool {
        self.moved
    }

    fn state(&self) -> Value {
        serde_json::to_value(&self.state).expect("state serialises")
    }

    fn location(&self) -> String {
        format!("W&B run `{}` of project `{}`", self.state.id, self.settings["project"].as_str().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_look_like_wandb_ids() {
        let a = super::new_id("tiny-abc");
        assert_eq!(a.len(), 8);
        assert!(a.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()), "{a}");
    }
}
