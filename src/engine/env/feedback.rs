//! The feedback environment (`rollout.max_attempts`): an answer is graded on all tests; a
//! failed one, while attempts remain, gets the feedback turn (`prompt.feedback`, which sees the
//! first failing test: [`crate::engine::feedback::describe`]) and another attempt. With one
//! attempt it is the single-turn rollout.

use std::sync::Arc;

use futures_util::future::BoxFuture;

use crate::data::Problem;
use crate::prompt::Message;
use crate::sandbox::{AnyGrader, GradeOptions, VerdictStatus};

use super::contract::{Ending, Env, Reply, Step, TurnTools};
use crate::engine::error::Error;
use crate::engine::grading::grade_group;
use crate::engine::prompting::Prompting;

/// Feedback turns until an attempt passes or `max_attempts` ran out.
pub(crate) struct Feedback {
    pub(crate) prompting: Arc<Prompting>,
    pub(crate) grader: Arc<AnyGrader>,
    pub(crate) opts: GradeOptions,
    pub(crate) retries: u32,
    pub(crate) max_attempts: u32,
}

impl Env for Feedback {
    fn start(&self, problem: &Problem) -> Result<Vec<Message>, Error> {
        self.prompting.first_messages(problem)
    }

    fn step(self: Arc<Self>, problem: Arc<Problem>, steps: Vec<Step>) -> BoxFuture<'static, Result<Vec<Reply>, Error>> {
        Box::pin(async move {
            let texts: Vec<String> = steps.iter().map(|s| s.text.clone()).collect();
            // The whole group graded at once, as the single-turn rollout always was.
            let graded = grade_group(self.grader.clone(), problem.clone(), self.prompting.chat.submitted(&texts), self.opts.clone(), self.retries).await;
            let mut out = Vec::with_capacity(graded.len());
            for (s, graded) in steps.iter().zip(graded) {
                let v = &graded.verdict;
                // An infrastructure failure says nothing about the answer: no further attempt.
                if v.passed || v.status == VerdictStatus::InfraError || s.turn >= self.max_attempts {
                    out.push(Reply { graded, append: vec![], done: Some(Ending::Completed), tools: TurnTools::default() });
                    continue;
                }
                let fb = crate::engine::feedback::describe(&problem, v);
                let message = self.prompting.templates.feedback(&problem, &fb, s.turn + 1, self.max_attempts)?;
                out.push(Reply { graded, append: vec![message], done: None, tools: TurnTools::default() });
            }
            Ok(out)
        })
    }

    fn in_rounds(&self) -> bool {
        true
    }

    fn max_turns(&self) -> u32 {
        self.max_attempts
    }

    fn continuation(&self) -> &'static str {
        "retry"
    }
}
