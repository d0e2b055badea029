//! The tool environment (`rollout.tools`): a turn that calls a tool gets the tool's result and
//! another turn; a turn without a call is the final answer, graded on all tests; the limits of
//! `rollout.limits` end a trajectory otherwise, each with its stop reason.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use crate::data::Problem;
use crate::prompt::Message;
use crate::sandbox::grade_loop::grade_one;
use crate::sandbox::{AnyGrader, GradeOptions, Submission};
use crate::spec::types::{OnLimit, Tool};

use super::calls::{self, Parsed};
use super::run_tool::{Ran, Runner};
use super::shell;
use super::contract::{CallRecord, Ending, Env, Reply, Step, TurnTools, no_answer};
use super::toolset::ToolSet;
use crate::engine::error::Error;
use crate::engine::grading::Graded;
use crate::engine::prompting::Prompting;

/// Tool turns over the run's sandbox.
pub(crate) struct ToolEnv {
    pub(crate) prompting: Arc<Prompting>,
    pub(crate) set: Arc<ToolSet>,
    pub(crate) grader: Arc<AnyGrader>,
    /// Options of the final answer's grading.
    pub(crate) opts: GradeOptions,
    pub(crate) retries: u32,
}

impl ToolEnv {
    fn tool_opts(&self) -> GradeOptions {
        let mut o = self.opts.clone();
        o.limits.timeout = Duration::from_secs_f64(self.set.limits.tool_timeout_s);
        o
    }

    async fn grade(&self, problem: &Problem, text: &str) -> Graded {
        let submitted = self.prompting.chat.submitted(std::slice::from_ref(&text.to_owned())).pop().unwrap_or_default();
        grade_one(self.grader.as_ref(), problem, Submission::Completion(submitted), &self.opts, self.retries).await
    }

    /// One turn; a trajectory that ends on it closes its sandbox now (rather than when its
    /// records are dropped).
    async fn step_one(&self, problem: &Problem, s: Step) -> Reply {
        let had = s.shell.clone();
        let reply = self.turn(problem, s).await;
        if reply.done.is_some()
            && let Some(shell) = reply.tools.shell.as_ref().or(had.as_ref())
        {
            shell.close().await;
        }
        reply
    }

    async fn turn(&self, problem: &Problem, s: Step) -> Reply {
        let t = Instant::now();
        let l = &self.set.limits;
        let ended = |done: Ending, tools: TurnTools| Reply { graded: no_answer(problem), append: vec![], done: Some(done), tools };
        if s.truncated {
            return ended(Ending::MaxTokens, TurnTools::default());
        }
        let (mut append, mut tools) = (vec![], TurnTools::default());
        match calls::parse(&s.text, &self.set.tools) {
            Parsed::Answer => return Reply { graded: self.grade(problem, &s.text).await, append, done: Some(Ending::Completed), tools },
            Parsed::Malformed(why) => {
                tools.masked = l.parse_error.mask_turn;
                append.push(self.set.result(&format!("error: {why}. Call a tool as <tool_call>{{\"name\": ..., \"arguments\": {{...}}}}</tool_call>, or answer without one.")));
                tools.parse_error = Some(why);
                if s.parse_errors_in_row + 1 >= l.parse_error.max_consecutive {
                    return ended(Ending::ParseError, tools);
                }
            }
            Parsed::Calls(cs) => {
                let unrun = |cs: Vec<calls::Call>| TurnTools { calls: cs.into_iter().map(|call| CallRecord { call, output: None, error: false }).collect(), ..TurnTools::default() };
                if s.turn >= l.max_turns {
                    // No turn is left to read the results: the calls are not run (whatever
                    // their number).
                    return ended(Ending::MaxTurns, unrun(cs));
                }
                if s.tool_calls as usize + cs.len() > l.max_tool_calls as usize {
                    return ended(Ending::MaxToolCalls, unrun(cs));
                }
                let opts = self.tool_opts();
                let runner = Runner { grader: self.grader.as_ref(), opts: &opts, retries: self.retries, public_tests: l.public_tests as usize };
                for call in cs {
                    let ran = if call.tool == Tool::Bash {
                        shell::call(&self.grader, (s.shell.as_ref(), &mut tools.shell), call.code(), problem, opts.limits.timeout, self.retries).await
                    } else {
                        runner.run(&call, problem).await
                    };
                    match ran {
                        Ran::Output { text, error } => {
                            append.push(self.set.result(&text));
                            tools.calls.push(CallRecord { call, output: Some(text), error });
                        }
                        Ran::Infra(graded) => return Reply { graded, append: vec![], done: Some(Ending::Completed), tools },
                    }
                }
            }
        }
        let done = if s.turn >= l.max_turns {
            Some(Ending::MaxTurns)
        } else if s.elapsed_s + t.elapsed().as_secs_f64() > l.timeout_s {
            Some(Ending::Timeout)
        } else {
            None
        };
        if done.is_some() {
            append.clear();
        }
        Reply { graded: no_answer(problem), append, done, tools }
    }
}

impl Env for ToolEnv {
    fn start(&self, problem: &Problem) -> Result<Vec<Message>, Error> {
        self.prompting.first_messages(problem)
    }

    fn step(self: Arc<Self>, problem: Arc<Problem>, steps: Vec<Step>) -> BoxFuture<'static, Result<Vec<Reply>, Error>> {
        Box::pin(async move {
            // A group's trajectories step together; each one's tool calls run in order.
            let replies = futures_util::future::join_all(steps.into_iter().map(|s| self.step_one(&problem, s))).await;
            Ok(replies)
        })
    }

    fn on_limit(self: Arc<Self>, problem: Arc<Problem>, text: String) -> Option<BoxFuture<'static, Graded>> {
        if self.set.limits.on_limit != OnLimit::Grade {
            return None;
        }
        Some(Box::pin(async move {
            // The last candidate: the code of its `check_solution` call, or the text's code block.
            if let Parsed::Calls(cs) = calls::parse(&text, &self.set.tools)
                && let Some(c) = cs.iter().rev().find(|c| c.tool == Tool::CheckSolution)
            {
                return grade_one(self.grader.as_ref(), &problem, Submission::Code(c.code().to_owned()), &self.opts, self.retries).await;
            }
            self.grade(&problem, &text).await
        }))
    }

    fn max_prompt_tokens(&self) -> Option<usize> {
        Some(self.set.limits.max_trajectory_tokens as usize)
    }

    fn max_turns(&self) -> u32 {
        self.set.limits.max_turns
    }

    fn continuation(&self) -> &'static str {
        "turn"
    }
}
