//! The engine: a run of GRPO steps (design §1) over any backend's policy. Select problems,
//! render, sample groups, grade, reward, advantages, skip degenerate groups, build datums,
//! train, log; evaluation at step −1, every `eval_every` steps and at the end; checkpoints every
//! `save_every` steps and at the end; resume from the last checkpoint; graceful stop.
//!
//! The engine works on a [`crate::backend::Policy`] (any backend's `Sampler`/`Trainer`) and
//! never names a backend: [`run`] opens the spec's through [`crate::backend::open`], or takes one
//! it is given ([`PolicySource::Given`]); how groups are gathered follows from the plan and a
//! capability of the trainer ([`crate::backend::Trainer::runs_elsewhere`]).
//!
//! This file is the engine's face: the error, the entry point and its types. The parts, from
//! the top:
//!
//! - [`run`] (run.rs): the run directory, the setup (setup.rs), the driver.
//! - driver.rs: the one step loop; gather.rs: where a step's groups come from, rounds on this
//!   machine or the stream (stream.rs) k steps deep on a trainer that runs elsewhere;
//!   batch.rs: the one way groups are sampled; fill.rs: the one rule for when a step has its
//!   groups; scoring.rs: a group's rewards and
//!   advantages, once; step.rs: the update; eval.rs: pass@k.
//! - rollout.rs: the one rollout loop: sample groups and step their environment (grading
//!   overlaps the next batches' sampling), turn after turn until each trajectory ended; env/:
//!   the environment contract (contract.rs) and its two environments, feedback turns
//!   (feedback.rs) and tool turns (tools.rs: calls.rs parses them, run_tool.rs runs them in the
//!   sandbox, toolset.rs puts them in the chat template); grading.rs: the sandbox; pyreward.rs:
//!   the Python reward; prompting.rs: problem → prompt tokens; feedback.rs: what a feedback turn
//!   says of a failed test; problems.rs: slots, cursor and seeds.
//! - record.rs: what the run log records of all that.
//!
//! Resumption rule: a run restarts after its last checkpoint; whatever a crashed attempt wrote
//! for later steps (metrics, rollouts, eval results) is dropped first, so every step appears
//! exactly once. Sampling seeds derive from (seed, step, problem slot), so a resumed step samples
//! what it would have sampled.

mod batch;
mod control;
mod distill;
mod driver;
mod error;
pub(crate) mod env;
pub(crate) mod eval;
mod event;
pub(crate) mod feedback;
mod fill;
mod gather;
pub(crate) mod grading;
pub mod problems;
pub(crate) mod prompting;
pub(crate) mod pyreward;
mod record;
pub(crate) mod rollout;
mod run;
mod scoring;
mod setup;
mod sft;
mod stages;
mod step;
mod stream;

pub use control::{PolicySource, RunOutcome, StopSignal};
pub use error::Error;
pub use event::{Event, EventSink};
pub use run::run;
