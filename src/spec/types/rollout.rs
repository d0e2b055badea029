//! `rollout:` multi-turn rollouts: error feedback (`max_attempts`) or tool turns (`tools`,
//! `limits`).
//!
//! Part of the spec types ([`super`]); the doc comments are the user reference and generate
//! `schemas/experiment.schema.json`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Multi-turn rollouts: error feedback, or tool turns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Rollout {
    /// Attempts per completion. With more than one, a failing attempt gets the feedback turn
    /// (`prompt.feedback`) and tries again; the last attempt's reward counts. Default `1`.
    #[serde(default = "default_attempts")]
    #[schemars(range(min = 1, max = 8))]
    pub max_attempts: u32,
    /// Retries of a completion whose grading hit an infrastructure error before its group is
    /// dropped (never scored as a failure). Default `2`.
    #[serde(default = "default_infra_retries")]
    pub infra_retries: u32,
    /// Tools the model may call (tool turns): a turn that calls one gets the tools' results and
    /// another turn; a turn without a call is the final answer, graded on all tests. Empty (the
    /// default): single-turn rollouts (or `max_attempts` feedback turns).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool>,
    /// Limits of a tool-using trajectory and what ends it (with `tools` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ToolLimits>,
}

/// A tool the model may call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Tool {
    /// `check_solution(code)`: runs the candidate against the problem's public tests (the first
    /// `limits.public_tests`) in the sandbox; returns the verdict and the first failing test,
    /// clipped. The final answer is still graded on all tests.
    CheckSolution,
    /// `python(code)`: runs a Python snippet in the sandbox; returns its stdout and stderr,
    /// clipped.
    Python,
    /// `bash(command)`: runs a shell command in the trajectory's own sandbox, a container kept
    /// for the trajectory's later calls (files persist; each command starts in `/`); returns
    /// the exit code, stdout and stderr, clipped. Needs `sandbox.kind: cwsandbox`.
    Bash,
}

impl Tool {
    /// The name the model calls it by.
    pub fn name(self) -> &'static str {
        match self {
            Tool::CheckSolution => "check_solution",
            Tool::Python => "python",
            Tool::Bash => "bash",
        }
    }

    /// The one argument it takes: the code to run, or (`bash`) the command.
    pub fn argument(self) -> &'static str {
        match self {
            Tool::CheckSolution | Tool::Python => "code",
            Tool::Bash => "command",
        }
    }
}

/// Limits of a tool-using trajectory. Each ends the trajectory with its own stop reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolLimits {
    /// Assistant turns per trajectory (stop reason `max_turns`). Default `2` (the cookbook's
    /// code recipe: one `check_solution` call, then the answer).
    #[serde(default = "default_max_turns")]
    #[schemars(range(min = 1, max = 64))]
    pub max_turns: u32,
    /// Tool calls per trajectory; the call past it is not run (stop reason `max_tool_calls`).
    /// Default `8`.
    #[serde(default = "default_max_tool_calls")]
    pub max_tool_calls: u32,
    /// Sampled tokens per turn (at most `sampling.max_tokens`); a turn cut off by it ends the
    /// trajectory (stop reason `max_tokens`). Default: `sampling.max_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens_per_turn: Option<u32>,
    /// Tokens of the whole conversation (prompt, answers, tool results); a next prompt longer
    /// than this ends the trajectory (stop reason `context_overflow`). Default `32768`.
    #[serde(default = "default_max_trajectory_tokens")]
    pub max_trajectory_tokens: u32,
    /// Seconds per trajectory, checked after each turn (stop reason `timeout`). Default `600`.
    #[serde(default = "default_timeout_s")]
    pub timeout_s: f64,
    /// Seconds per tool call (a `bash` command's too); a call that runs longer is killed and the
    /// model sees a tool error. Default `10`.
    #[serde(default = "default_tool_timeout_s")]
    pub tool_timeout_s: f64,
    /// Tests `check_solution` runs: the first this many of a problem's tests (LiveCodeBench lists
    /// its public cases first). Default `1`.
    #[serde(default = "default_public_tests")]
    pub public_tests: u32,
    /// What a malformed tool call does.
    #[serde(default)]
    pub parse_error: ParseErrorPolicy,
    /// The reward of a trajectory that ended on a limit (not `completed`): `zero`, or `grade`
    /// (its last turn graded like a final answer). Default `zero`.
    #[serde(default)]
    pub on_limit: OnLimit,
}

/// What a malformed tool call (a `<tool_call>` that is not JSON, names no known tool, or lacks
/// its arguments) does. The model is told what was wrong and gets another turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ParseErrorPolicy {
    /// Taken off the trajectory's reward per malformed call. Default `0`.
    #[serde(default)]
    pub penalty: f64,
    /// Leave the malformed turn's tokens out of the loss (context, mask 0). Default `false`.
    #[serde(default)]
    pub mask_turn: bool,
    /// Malformed turns in a row that end the trajectory (stop reason `parse_error`). Default `1`.
    #[serde(default = "default_max_consecutive")]
    #[schemars(range(min = 1))]
    pub max_consecutive: u32,
}

impl Default for ParseErrorPolicy {
    fn default() -> Self {
        ParseErrorPolicy { penalty: 0.0, mask_turn: false, max_consecutive: default_max_consecutive() }
    }
}

/// The reward of a trajectory that ended on a limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnLimit {
    /// Reward 0.
    #[default]
    Zero,
    /// Graded like a final answer.
    Grade,
}

impl Default for ToolLimits {
    fn default() -> Self {
        ToolLimits {
            max_turns: default_max_turns(),
            max_tool_calls: default_max_tool_calls(),
            max_tokens_per_turn: None,
            max_trajectory_tokens: default_max_trajectory_tokens(),
            timeout_s: default_timeout_s(),
            tool_timeout_s: default_tool_timeout_s(),
            public_tests: default_public_tests(),
            parse_error: ParseErrorPolicy::default(),
            on_limit: OnLimit::Zero,
        }
    }
}

fn default_attempts() -> u32 {
    1
}
fn default_infra_retries() -> u32 {
    2
}
fn default_max_turns() -> u32 {
    2
}
fn default_max_tool_calls() -> u32 {
    8
}
fn default_max_trajectory_tokens() -> u32 {
    32768
}
fn default_timeout_s() -> f64 {
    600.0
}
fn default_tool_timeout_s() -> f64 {
    10.0
}
fn default_public_tests() -> u32 {
    1
}
fn default_max_consecutive() -> u32 {
    1
}

impl Default for Rollout {
    fn default() -> Self {
        Rollout { max_attempts: 1, infra_retries: default_infra_retries(), tools: vec![], limits: None }
    }
}
