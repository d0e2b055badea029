//! Experiment trackers (`log.sinks`): W&B, TensorBoard and MLflow, each a mirror of
//! `metrics.jsonl`, which stays the record.
//!
//! Each tracker is a [`Follower`](follow::Follower) (the lines it has not mirrored yet, from a
//! cursor saved in `sinks/<tracker>.json`) and a `Mirror` (how lines reach the tracker). A
//! background task per tracker moves lines from one to the other whenever it is poked, and saves
//! the cursor after each batch the tracker took. The engine pokes [`Sinks`] after each metrics line it writes
//! (data flows one way: the engine never hears back, except warnings it passes on), and
//! `rlx sync` runs the same task to the end of the file for a run that had no tracker configured.
//!
//! Failure never stops a run: a tracker that cannot start (no Python, no `wandb`), a helper that
//! dies, a server that is down all become a warning, and at the end each tracker says which steps
//! it did not mirror and how to send them (`rlx sync <tracker> RUN_DIR`).
//!
//! This file only declares and re-exports (its parts name each other, never it):
//!
//! - `mirror`: the `Mirror` trait, `SinkError`, [`End`].
//! - `tasks`: [`Sinks`], one task per tracker; [`SinkConfig`], `Report`, [`sync`].
//! - [`follow`]: the cursor over `metrics.jsonl`.
//! - [`tensorboard`]: event files written by rlx (prost + crc32c).
//! - [`mlflow`]: the MLflow REST API (reqwest).
//! - [`wandb`]: the official W&B SDK through a helper script run with `python3`.

pub(crate) mod follow;
mod mirror;
pub(crate) mod mlflow;
mod tasks;
pub(crate) mod tensorboard;
pub(crate) mod wandb;

pub(crate) use mirror::End;
pub(crate) use tasks::{RunInfo, SinkConfig, Sinks, sync};
