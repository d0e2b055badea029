//! What a rollout phase takes besides the sampler ([`Ctx`], [`Phase`], the [`GroupPrompt`]s) and
//! what it gives back: [`Group`]s of [`Trajectory`]s of [`Turn`]s.

use std::sync::Arc;

use crate::data::Problem;
use crate::engine::control::StopSignal;
use crate::engine::env::{Ending, TurnTools};
use crate::engine::event::EventSink;
use crate::engine::grading::Graded;
use crate::engine::prompting::{Prompting, Rendered};
use crate::prompt::Message;
use crate::sandbox::{AnyGrader, GradeOptions};
use crate::seam::{SampledSequence, SamplingParams};

/// One turn: the prompt it saw, what was sampled, its grade, and what the environment did.
#[derive(Debug)]
pub(crate) struct Turn {
    /// The prompt of this turn (the whole conversation so far).
    pub prompt: Rendered,
    /// The sampled completion.
    pub seq: SampledSequence,
    /// Its decoded text.
    pub text: String,
    /// Its grade (for a tool-calling turn that did not end the trajectory, a placeholder).
    pub graded: Graded,
    /// Its tool calls, parse error and mask.
    pub tools: TurnTools,
    /// The messages the environment appended after it (feedback, tool results).
    pub append: Vec<Message>,
}

/// One sample of a group: its turns in order; the last one's grade counts.
#[derive(Debug)]
pub(crate) struct Trajectory {
    /// The turns, at least one.
    pub turns: Vec<Turn>,
    /// Why it ended (`None` only while it runs).
    pub ending: Option<Ending>,
}

impl Trajectory {
    /// The attempt whose grade counts.
    pub(crate) fn last(&self) -> &Turn {
        self.turns.last().expect("a trajectory has at least one turn")
    }
}

/// One problem's group after sampling and grading.
#[derive(Debug)]
pub(crate) struct Group {
    /// The problem.
    pub problem: Arc<Problem>,
    /// One trajectory per sample.
    pub trajectories: Vec<Trajectory>,
}

/// What a rollout phase needs besides the sampler.
pub(crate) struct Ctx<'a> {
    /// Prompt pipeline (for decoding and feedback turns).
    pub prompting: &'a Arc<Prompting>,
    /// The grader.
    pub grader: &'a Arc<AnyGrader>,
    /// Grading options.
    pub opts: &'a GradeOptions,
    /// Infra retries per completion.
    pub retries: u32,
    /// Events.
    pub sink: &'a dyn EventSink,
    /// Stop request.
    pub stop: &'a StopSignal,
}

/// A prompt to sample a group for: the problem, its first-turn prompt, the group's seed.
pub(crate) type GroupPrompt = (Arc<Problem>, Rendered, u64);

/// What a rollout phase samples, besides its prompts: completions per prompt, sampling
/// parameters, attempts, and the name and step its events carry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Phase<'a> {
    /// Completions per prompt (a group's size).
    pub n: usize,
    /// Greedy completions per prompt beside the `n` sampled ones, at the end of each group's
    /// trajectories (eval's second protocol, one attempt): asked in the same call, so that a
    /// local sampler prefills each prompt once for both protocols.
    pub greedy: usize,
    /// Sampling parameters (seeds are per prompt).
    pub params: &'a SamplingParams,
    /// Attempts per trajectory (1: no feedback turns).
    pub max_attempts: u32,
    /// The phase's name in events (`sample`, `eval`).
    pub name: &'static str,
    /// The step it belongs to (−1: the baseline eval).
    pub step: i64,
}
