//! The plan: a spec resolved into the one set of values the engine, the backends and the commands
//! read. Every default is applied here, once (named in [`crate::spec::defaults`]); nothing after the plan reads the
//! spec as written except provenance and the run id ([`Written`]).
//!
//! This file is the module's face: declarations and re-exports only, so that no part names a
//! parent that names it back.
//!
//! - [`types`]: [`Plan`], its section plans, [`Written`], [`Error`].
//! - [`pipeline`]: [`plan`] and [`plan_text`], the stages in order: semantic checks ([`check`]:
//!   files, templates, cross-field rules), [`resolve`], [`hash`], and [`record::reopened`].
//! - [`record`]: `resolved.json`, written from the plan, and the reader of older versions.
//! - [`trackers`]: `log.sinks` resolved, for a plan and for `rlx sync`.
//! - [`sweep`]: grids of plans; [`explain`]: what a plan will cost (`rlx validate --explain`).

pub(crate) mod check;
mod distill;
pub(crate) mod explain;
pub(crate) mod hash;
mod pipeline;
pub mod record;
mod resolve;
pub mod stages;
pub(crate) mod sweep;
pub mod trackers;
mod types;

pub use distill::{Checkpoints, FoundCheckpoint, NotFound};
pub use hash::sha256_hex;
pub use pipeline::{plan, plan_text, plan_text_with, plan_with, tree};
pub use stages::{StageKind, StagePlan};
pub use types::{EvalPlan, Error, GrpoPlan, LogPlan, ModelPlan, Plan, PythonReward, Template, Written};
