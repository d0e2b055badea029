//! The environment contract (see [`super`]): the trait, what a step takes and returns, and the
//! stop reasons.

use std::sync::Arc;

use futures_util::future::BoxFuture;

use crate::data::Problem;
use crate::prompt::Message;

use super::calls::Call;
use super::shell::Shell;
use crate::engine::error::Error;
use crate::engine::grading::Graded;

/// Why a trajectory ended: exactly one per trajectory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Ending {
    /// A final answer (or, with feedback turns, a passing or last attempt).
    Completed,
    /// `limits.max_turns` turns without a final answer.
    MaxTurns,
    /// A turn cut off by its token limit.
    MaxTokens,
    /// A call past `limits.max_tool_calls`.
    MaxToolCalls,
    /// The next prompt would be longer than `limits.max_trajectory_tokens`.
    ContextOverflow,
    /// `limits.parse_error.max_consecutive` malformed tool calls in a row.
    ParseError,
    /// `limits.timeout_s` passed.
    Timeout,
}

impl Ending {
    /// Every stop reason, in the order metrics list them.
    pub(crate) const ALL: [Ending; 7] = [Ending::Completed, Ending::MaxTurns, Ending::MaxTokens, Ending::MaxToolCalls, Ending::ContextOverflow, Ending::ParseError, Ending::Timeout];

    /// Its name in records and metrics.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Ending::Completed => "completed",
            Ending::MaxTurns => "max_turns",
            Ending::MaxTokens => "max_tokens",
            Ending::MaxToolCalls => "max_tool_calls",
            Ending::ContextOverflow => "context_overflow",
            Ending::ParseError => "parse_error",
            Ending::Timeout => "timeout",
        }
    }
}

/// One assistant turn, with what an environment needs of the trajectory before it.
#[derive(Debug, Clone)]
pub(crate) struct Step {
    /// The turn's decoded text.
    pub text: String,
    /// Its number, from 1.
    pub turn: u32,
    /// Whether sampling cut it off at its token limit.
    pub truncated: bool,
    /// Tool calls the trajectory made before this turn.
    pub tool_calls: u32,
    /// Malformed turns right before this one.
    pub parse_errors_in_row: u32,
    /// Seconds since the trajectory's first turn was asked for.
    pub elapsed_s: f64,
    /// The trajectory's own sandbox, if an earlier turn opened one ([`TurnTools::shell`]).
    pub shell: Option<Shell>,
}

/// What a tool call did, as the turn records it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CallRecord {
    /// The call as parsed.
    pub call: Call,
    /// What the model was shown (clipped); `None` when the call was not run (a limit).
    pub output: Option<String>,
    /// Whether the tool failed (timed out, crashed, rejected its input).
    pub error: bool,
}

/// What a turn did besides its text: its tool calls and whether it was malformed.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TurnTools {
    /// Tool calls in the order made.
    pub calls: Vec<CallRecord>,
    /// The reason the turn's tool call was malformed.
    pub parse_error: Option<String>,
    /// Whether the turn is context in training (a malformed turn under `mask_turn`).
    pub masked: bool,
    /// The sandbox this turn opened for the trajectory (its first `bash` call), kept with the
    /// trajectory so that its later steps get it back ([`Step::shell`]).
    pub shell: Option<Shell>,
}

/// An environment's answer to one turn.
#[derive(Debug)]
pub(crate) struct Reply {
    /// The grade that counts if the trajectory ends here (for a turn that called a tool and goes
    /// on: a placeholder without code, never counted as a graded answer).
    pub graded: Graded,
    /// Messages to append after the assistant turn before the next one (empty when done).
    pub append: Vec<Message>,
    /// `Some` when the trajectory is done, with why.
    pub done: Option<Ending>,
    /// What the turn did.
    pub tools: TurnTools,
}

/// An environment (see the module docs).
pub(crate) trait Env: Send + Sync {
    /// The first messages of `problem`.
    ///
    /// # Errors
    /// Template failures.
    fn start(&self, problem: &Problem) -> Result<Vec<Message>, Error>;

    /// One turn of some of a group's trajectories (all of `problem`), answered in order.
    /// Infrastructure failures come back as `infra_error` grades (the group is then dropped),
    /// never as errors of the model.
    fn step(self: Arc<Self>, problem: Arc<Problem>, steps: Vec<Step>) -> BoxFuture<'static, Result<Vec<Reply>, Error>>;

    /// Whether the environment's turns go in rounds, as rlx sampled every multi-turn rollout
    /// before tool turns: a group's first turns step together (one grading batch), and next turns
    /// are sampled only once every trajectory of the phase has been stepped, all at once. The
    /// feedback environment does, so that `max_attempts` runs stay byte-identical to before: the
    /// local sampler's log-probabilities differ in their last bits with the rows a call holds.
    /// The default: each trajectory steps on its own and is ready for its next turn as soon as
    /// its step ends, whatever its group's other tool calls are doing.
    fn in_rounds(&self) -> bool {
        false
    }

    /// The grade of a trajectory that ended on a limit, from its last turn's text; `None` keeps
    /// the turn's own grade.
    fn on_limit(self: Arc<Self>, _problem: Arc<Problem>, _text: String) -> Option<BoxFuture<'static, Graded>> {
        None
    }

    /// The longest prompt a next turn may have (`None`: no limit).
    fn max_prompt_tokens(&self) -> Option<usize> {
        None
    }

    /// The most turns a trajectory may have.
    fn max_turns(&self) -> u32;

    /// The event phase of turns after the first.
    fn continuation(&self) -> &'static str;

    /// Runs after a phase's trajectories ended. The built-in environments hold nothing per
    /// trajectory: the `bash` tool's sandbox travels with its trajectory ([`TurnTools::shell`]),
    /// closed when its step ends the trajectory, else stopped when the trajectory is dropped.
    fn cleanup(&self) {}
}

/// A grade that stands for "no final answer": no code, so it is not counted as a graded answer,
/// and a format error, so it never passes.
pub(crate) fn no_answer(problem: &Problem) -> Graded {
    let verdict = crate::sandbox::Verdict::format_error(&problem.id, problem.tests.len()).in_language(problem.language());
    Graded { verdict, code: None, latency_ms: 0.0, infra_errors: 0 }
}
