//! rlx runs reinforcement-learning post-training experiments for code models from declarative
//! YAML specs.
//!
//! # Layout
//!
//! Data flows one way through the crate (see `docs/architecture.md`):
//!
//! ```text
//! spec ──► plan (resolved spec, run id) ──► engine ──► runlog (runs/<id>/)
//!                                              │
//!                 data ─► prompt ─► sampler ─► sandbox ─► rl (rewards, advantages) ─► trainer
//! ```
//!
//! - [`spec`]: the experiment spec as written: YAML loading with source locations, JSON Schema
//!   validation, `key=value` overrides and aliases, diagnostics. Imports nothing of rlx.
//! - [`plan`]: the spec resolved: semantic checks, every default applied once, run ids, sweeps.
//! - [`seam`]: the data that crosses the `Sampler`/`Trainer` seam (datums, sampling, optimizer).
//! - [`runlog`]: the run directory (`runs/<id>/`) and its files; the only module that knows the
//!   layout.
//! - [`data`]: problems and their tests; adapters for the common code-RL dataset formats.
//! - [`sandbox`]: isolated execution of model code and grading (local, Sandbox Fusion, server).
//! - [`hub`]: the Hugging Face Hub (cache, offline mode, token, client) for datasets and models.
//! - [`backend`]: the `Sampler`/`Trainer` seams and their implementations (`local`: candle).
//! - [`prompt`]: prompt templates, chat templates, tokenizers.
//! - [`rl`]: losses, advantages, rewards, pass@k: the math shared by every backend.
//! - [`engine`]: the step loop that joins the pieces.
//! - [`health`]: run-health signals (`diagnostics:`), checked live by the engine and replayed by
//!   `rlx doctor`.
//! - [`compare`]: `rlx compare`: tables, statistics and charts over run directories.
//! - [`viewer`]: `rlx show`: a run's completions selected by step, problem and verdict.
//! - [`sweep_sample`]: `rlx sweep --sample N`: configurations drawn from ranges, seeded.
//! - [`sweep_slurm`]: `rlx sweep --launcher slurm`: a sweep as a Slurm job array, and its status.
//! - `export`: `rlx export`: checkpoints as Hugging Face directories, PEFT adapters, GGUF.
//! - [`cli`]: the command line; the only module that prints.
//! - [`switches`]: the `RLX_*` environment variables, one row each; those that change results
//!   are recorded in `provenance.json`.
//! - [`alloc`]: the process allocator (large freed blocks reused instead of unmapped).
//! - [`serve`]: `rlx serve`, Tinker's REST protocol over the embedded trainer.
//! - [`tinker`]: Tinker's wire protocol (JSON bodies, protobuf messages, conversions), shared by
//!   the Tinker client backend and `rlx serve`.

pub mod alloc;
pub mod backend;
mod calendar;
pub mod quantile;
pub(crate) mod retry;
pub mod rng;
pub(crate) mod causes;
pub mod cli;
pub(crate) mod compare;
pub mod data;
pub mod engine;
pub mod health;
pub mod plan;
pub(crate) mod export;
pub(crate) mod hub;
pub mod dotenv;
pub(crate) mod http_server;
pub mod prompt;
pub(crate) mod rl;
pub mod runlog;
pub mod sandbox;
pub mod switches;
pub mod seam;
pub(crate) mod serve;
pub mod spec;
pub(crate) mod sweep_sample;
pub(crate) mod sweep_slurm;
pub(crate) mod tinker;
pub(crate) mod viewer;
