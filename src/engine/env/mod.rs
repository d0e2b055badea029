//! Environments: what a rollout talks to between the model's turns (issue 52).
//!
//! One contract, the shape tinker-cookbook's `Env`, skyrl-gym and verifiers share: [`Env::start`]
//! turns a problem into the first messages; [`Env::step`] takes one assistant turn and returns
//! the messages to append, the grade that counts if the turn is the last, whether (and why) the
//! trajectory is done, and what the turn did (tool calls); [`Env::cleanup`] runs after a
//! trajectory ended. The rollout loop ([`super::rollout`]) is the one loop over any environment:
//! it samples, steps, renders the next prompt token for token, and keeps every turn.
//!
//! Two environments: [`feedback::Feedback`] (`rollout.max_attempts`: a failed answer gets the
//! feedback turn) and [`tools::ToolEnv`] (`rollout.tools`: tool calls answered by the sandbox).
//! An environment holds no per-trajectory state: what it needs of the past (turns, tool calls,
//! malformed turns in a row, time, the `bash` tool's sandbox) comes in [`Step`], derived from
//! the trajectory the loop keeps, so the loop may step a trajectory alone or with its group, and
//! a resumed step replays the same way.

mod contract;
pub(crate) mod calls;
pub(crate) mod feedback;
pub(crate) mod run_tool;
pub(crate) mod shell;
pub(crate) mod tools;
pub(crate) mod toolset;

pub(crate) use contract::{Ending, Env, Reply, Step, TurnTools};
