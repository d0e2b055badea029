//! A tracker's side of mirroring, the contract [`tensorboard`](super::tensorboard),
//! [`mlflow`](super::mlflow) and [`wandb`](super::wandb) implement: [`Mirror`], its
//! [`SinkError`], and how the run [`End`]ed.

use std::future::Future;

use super::follow::Cursor;
use crate::runlog::MetricsLine;

/// Why a tracker did not take lines.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum SinkError {
    /// It cannot work in this process (no Python, no `wandb`, the helper died): no more tries.
    #[error("{0}")]
    Unavailable(String),
    /// This try failed (a server down, a write error); the next poke tries again.
    #[error("{0}")]
    Failed(String),
}

/// How the run ended, for the tracker's run status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// Every step ran.
    Finished,
    /// Stopped on request; resumable.
    Interrupted,
    /// An error ended it (or it crashed, for `rlx sync`).
    Failed,
}

/// A tracker's side of mirroring: set up, take lines, finish. Implemented by [`tensorboard`],
/// [`mlflow`] and [`wandb`]; the follower and the task around it are shared.
pub(crate) trait Mirror: Send + 'static {
    /// Whether the tracker saves the cursor itself, once what it took is durable, instead of the
    /// task saving it after each batch. W&B's service buffers its writes, so a helper killed
    /// after logging loses rows it had taken: its helper saves the cursor after `run.finish()`.
    const SAVES_CURSOR: bool = false;
    /// The tracker's name in messages (`W&B`).
    fn name(&self) -> &'static str;
    /// Sets up (starts the helper, creates the run). An [`SinkError::Unavailable`] ends the
    /// tracker for this process; a [`SinkError::Failed`] is warned about and retried by `send`.
    fn start(&mut self) -> impl Future<Output = Result<(), SinkError>> + Send {
        async { Ok(()) }
    }
    /// Mirrors `lines` (in step order, none mirrored before); `upto` is the cursor just past the
    /// last. On error none counts as mirrored.
    fn send(&mut self, lines: &[MetricsLine], upto: Cursor) -> impl Future<Output = Result<(), SinkError>> + Send;
    /// Marks the tracker's run as ended.
    fn finish(&mut self, end: End) -> impl Future<Output = Result<(), SinkError>> + Send {
        let _ = end;
        async { Ok(()) }
    }
    /// Whether the saved cursor belongs to another destination (another MLflow server or
    /// experiment, TensorBoard directory, W&B project): then every line goes again.
    fn starts_over(&self) -> bool {
        false
    }
    /// What to save with the cursor (the tracker's run id, its file).
    fn state(&self) -> serde_json::Value;
    /// Where the lines go, for messages.
    fn location(&self) -> String;
}
