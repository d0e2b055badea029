//! Sampling groups of trajectories and stepping their environment, shared by training steps and
//! evaluation: the one rollout loop over any environment ([`super::env`]).
//!
//! Prompts are sampled in batches (several prompts decode together, see [`Sampler::sample`]),
//! up to [`Sampler::max_in_flight`] calls at once. Each trajectory then goes at its own pace:
//! when its environment step ends (its turn graded, or its tool calls run) it is ready for its
//! next turn at once, and the next free call takes it with the other ready ones ([`scheduler`],
//! [`ready`]), so one trajectory's slow tool call never holds back another's next turn (no
//! head-of-line blocking; the loop it replaced sampled turn 2 of every trajectory only once
//! every turn 1 had been stepped, and the feedback environment keeps those rounds:
//! [`Env::in_rounds`]). A trajectory keeps all its turns. With `rollout.max_attempts` the
//! environment is the feedback one, with `rollout.tools` the tool one. [`clock`] splits the
//! phase's time into sampling, waiting on the environment between turns, and grading.

mod clock;
mod phase;
mod ready;
mod scheduler;

use std::sync::Arc;

use crate::backend::Sampler;
use crate::data::Problem;
use crate::seam::StopReason;

use super::env::Env;
use super::env::feedback::Feedback;
use super::env::tools::ToolEnv;
use super::error::Error;
use super::prompting::Rendered;

pub(crate) use clock::Timing;
pub(crate) use phase::{Ctx, Group, GroupPrompt, Phase, Trajectory, Turn};

/// The environment of a phase: the tool one under `rollout.tools`, else the feedback one with
/// the phase's attempts (one: the single-turn rollout).
fn environment(max_attempts: u32, cx: &Ctx<'_>) -> Arc<dyn Env> {
    match &cx.prompting.tools {
        Some(set) => Arc::new(ToolEnv { prompting: cx.prompting.clone(), set: set.clone(), grader: cx.grader.clone(), opts: cx.opts.clone(), retries: cx.retries }),
        None => Arc::new(Feedback { prompting: cx.prompting.clone(), grader: cx.grader.clone(), opts: cx.opts.clone(), retries: cx.retries, max_attempts }),
    }
}

/// The first prompt of `problem`: its environment's first messages, rendered.
///
/// # Errors
/// Template or tokenizer failures.
pub(crate) fn first_prompt(problem: &Problem, cx: &Ctx<'_>) -> Result<Rendered, Error> {
    cx.prompting.render(environment(1, cx).start(problem)?)
}

/// Samples `n` completions per prompt (seeded per prompt), steps the environment on them, and
/// gives every trajectory it did not end its next turn, until each has ended.
///
/// First turns go in batches of whole groups (up to [`Sampler::batch_rows`] completions), up to
/// [`Sampler::max_in_flight`] calls at once; each trajectory is stepped as soon as its
/// completion arrives and is ready for its next turn as soon as its step ends (see the module
/// docs). Returns the groups in prompt order and the timing; `None` when a stop was requested
/// mid-way (replies still in flight are discarded).
///
/// # Errors
/// Sampler, template or tokenizer failures.
pub(crate) async fn run(sampler: &dyn Sampler, prompts: Vec<GroupPrompt>, ph: &Phase<'_>, cx: &Ctx<'_>) -> Result<(Option<Vec<Group>>, Timing), Error> {
    debug_assert!(ph.greedy == 0 || ph.max_attempts == 1, "greedy answers are single attempts");
    scheduler::run(sampler, environment(ph.max_attempts, cx), prompts, ph, cx).await
}

/// Fraction of sampled turns that hit `max_tokens`.
pub(crate) fn truncation_rate(groups: &[Group]) -> f64 {
    let (mut len, mut all) = (0usize, 0usize);
    for t in groups.iter().flat_map(|g| &g.trajectories) {
        for turn in &t.turns {
            all += 1;
            len += usize::from(turn.seq.stop_reason == StopReason::Length);
        }
    }
    if all == 0 { 0.0 } else { len as f64 / all as f64 }
}


#[cfg(test)]
mod tests {
    //! The loop with a scripted sampler (recording which rows each call held) and a scripted
    //! environment whose "slow" step waits on a gate that only the other trajectories' second
    //! turns open: the round-based loop it replaced never opened it.

    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use futures_util::future::BoxFuture;
    use tokio::sync::Semaphore;

    use super::*;
    use crate::backend::{ChatRequest, Pending};
    use crate::engine::control::StopSignal;
    use crate::engine::env::{Ending, Reply, Step, TurnTools};
    use crate::engine::grading::Graded;
    use crate::engine::problems::derive_seed;
    use crate::engine::prompting::Prompting;
    use crate::engine::prompting::tests::{CHATML, prompting};
    use crate::prompt::Message;
    use crate::sandbox::fusion::{FusionClient, FusionConfig};
    use crate::sandbox::{AnyGrader, GradeOptions, Verdict};
    use crate::seam::{SampleRequest, SampledSequence, SamplingParams};

    /// One row of a call: the problem, the trajectory's first-turn text (its label), the turn,
    /// the seed and whether it was greedy.
    #[derive(Debug, Clone, PartialEq)]
    struct Row {
        problem: String,
        label: String,
        turn: usize,
        seed: u64,
        greedy: bool,
    }

    /// What the sampler does besides answering.
    #[derive(Clone, Copy, PartialEq)]
    enum Twist {
        None,
        /// Requests a stop on the first second-turn call.
        Stop,
        /// Fails (an infrastructure error) every call holding a second turn of `p1`.
        FailP1,
    }

    /// Answers a first turn `slow` (sample 0 of `p0`), `fast<j>` or `greedy`, and a second turn
    /// `answer`; records every call; opens `gate` once it was asked for the second turns of all
    /// three of `p0`'s other trajectories.
    struct Script {
        prompting: Arc<Prompting>,
        calls: Mutex<Vec<Vec<Row>>>,
        gate: Arc<Semaphore>,
        /// Second turns of `p0`'s other trajectories asked for so far.
        others: Mutex<usize>,
        /// Calls made so far.
        made: Arc<AtomicUsize>,
        /// How many calls had been made when the loop got the first failed reply.
        failed_at: Arc<Mutex<Option<usize>>>,
        stop: StopSignal,
        twist: Twist,
        batch_rows: usize,
    }

    impl Script {
        fn seq(&self, text: &str) -> SampledSequence {
            let tokens = self.prompting.tokenizer.encode(&format!("{text}<|im_end|>")).unwrap();
            SampledSequence { logprobs: vec![-0.5; tokens.len()], tokens, stop_reason: crate::seam::StopReason::Stop }
        }
    }

    impl Sampler for Script {
        fn sample(&self, _: Vec<SampleRequest>, _: &SamplingParams) -> Pending<Vec<Vec<SampledSequence>>> {
            unreachable!("the loop asks sample_chat")
        }

        fn sample_chat(&self, requests: Vec<ChatRequest>, _: &SamplingParams) -> Pending<Vec<Vec<SampledSequence>>> {
            let mut rows = vec![];
            let mut out = vec![];
            for r in &requests {
                let problem = r.messages[0].content.clone();
                let turn = 1 + r.messages.iter().filter(|m| m.role == "assistant").count();
                let labels: Vec<String> = if turn == 1 {
                    (0..r.request.num_samples).map(|j| if r.request.greedy { "greedy".into() } else if problem == "p0" && j == 0 { "slow".into() } else { format!("fast{j}") }).collect()
                } else {
                    vec![r.messages[1].content.clone()]
                };
                out.push(labels.iter().map(|l| self.seq(if turn == 1 { l } else { "answer" })).collect());
                for label in labels {
                    rows.push(Row { problem: problem.clone(), label, turn, seed: r.request.seed.unwrap(), greedy: r.request.greedy });
                }
            }
            let mut others = self.others.lock().unwrap();
            *others += rows.iter().filter(|r| r.problem == "p0" && r.turn == 2 && r.label != "slow").count();
            if *others == 3 {
                self.gate.add_permits(1);
            }
            drop(others);
            let second = rows.iter().any(|r| r.turn == 2);
            let fail = self.twist == Twist::FailP1 && rows.iter().any(|r| r.problem == "p1" && r.turn == 2);
            if self.twist == Twist::Stop && second {
                self.stop.request();
            }
            self.calls.lock().unwrap().push(rows);
            self.made.fetch_add(1, Ordering::SeqCst);
            let (made, failed_at) = (self.made.clone(), self.failed_at.clone());
            Box::pin(async move {
                tokio::task::yield_now().await;
                if fail {
                    failed_at.lock().unwrap().get_or_insert(made.load(Ordering::SeqCst));
                    return Err(crate::backend::openai::Error::Malformed { url: "http://sampler".into(), attempts: 1, reason: "scripted".into() }.into());
                }
                Ok(out)
            })
        }

        fn batch_rows(&self) -> usize {
            self.batch_rows
        }
    }

    /// Two turns: the first answered with a tool result, which for `slow` comes only once the
    /// gate opens (`released`), or after 10 s without it (`timed out`); the second ends it.
    struct Gated {
        gate: Arc<Semaphore>,
    }

    impl Env for Gated {
        fn start(&self, problem: &Problem) -> Result<Vec<Message>, Error> {
            Ok(vec![Message::new("user", problem.statement.clone())])
        }

        fn step(self: Arc<Self>, problem: Arc<Problem>, steps: Vec<Step>) -> BoxFuture<'static, Result<Vec<Reply>, Error>> {
            Box::pin(async move {
                let mut out = vec![];
                for s in steps {
                    let graded = Graded { verdict: Verdict::format_error(&problem.id, 0), code: None, latency_ms: 0.0, infra_errors: 0 };
                    if s.turn >= 2 {
                        out.push(Reply { graded, append: vec![], done: Some(Ending::Completed), tools: TurnTools::default() });
                        continue;
                    }
                    let result = if s.text == "slow" {
                        let opened = tokio::time::timeout(Duration::from_secs(10), self.gate.acquire()).await.is_ok();
                        // Time for the other trajectories to finish: the sampler then waits on this step.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        if opened { "released" } else { "timed out" }
                    } else {
                        "ok"
                    };
                    out.push(Reply { graded, append: vec![Message::new("user", result)], done: None, tools: TurnTools::default() });
                }
                Ok(out)
            })
        }

        fn max_turns(&self) -> u32 {
            2
        }

        fn continuation(&self) -> &'static str {
            "turn"
        }
    }

    /// Runs problems `p0`, `p1` (seeds 10, 11), three sampled trajectories and one greedy each,
    /// through the loop with `twist`; the groups, the timing, the calls and how many calls had
    /// been made when the first failed one came back.
    async fn roll(twist: Twist, batch_rows: usize) -> (Option<Vec<Group>>, Timing, Vec<Vec<Row>>, usize) {
        let prompting = Arc::new(prompting(CHATML));
        let gate = Arc::new(Semaphore::new(0));
        let stop = StopSignal::default();
        let sampler = Script { prompting: prompting.clone(), calls: Mutex::default(), gate: gate.clone(), others: Mutex::default(), made: Arc::default(), failed_at: Arc::default(), stop: stop.clone(), twist, batch_rows };
        let grader = Arc::new(AnyGrader::Fusion(Box::new(FusionClient::new(FusionConfig::new("http://127.0.0.1:9")).unwrap())));
        let cx = Ctx { prompting: &prompting, grader: &grader, opts: &GradeOptions::default(), retries: 0, sink: &(), stop: &stop };
        let env: Arc<dyn Env> = Arc::new(Gated { gate });
        let prompts: Vec<GroupPrompt> = (0..2u64)
            .map(|i| {
                let problem = Arc::new(Problem { id: format!("p{i}"), statement: format!("p{i}"), starter_code: None, tests: crate::data::Tests::Stdin { cases: vec![] }, metadata: Default::default() });
                let prompt = cx.prompting.render(env.start(&problem).unwrap()).unwrap();
                (problem, prompt, 10 + i)
            })
            .collect();
        let params = SamplingParams::default();
        let ph = Phase { n: 3, greedy: 1, params: &params, max_attempts: 1, name: "sample", step: 0 };
        let (groups, timing) = tokio::time::timeout(Duration::from_secs(60), scheduler::run(&sampler, env, prompts, &ph, &cx)).await.expect("the loop ends").unwrap();
        let failed_at = sampler.failed_at.lock().unwrap().unwrap_or(0);
        let calls = sampler.calls.into_inner().unwrap();
        (groups, timing, calls, failed_at)
    }

    /// The index of the call that held `problem`'s `label` turn `turn`.
    fn call_of(calls: &[Vec<Row>], problem: &str, label: &str, turn: usize) -> usize {
        calls.iter().position(|c| c.iter().any(|r| r.problem == problem && r.label == label && r.turn == turn)).unwrap_or_else(|| panic!("{problem} {label} turn {turn} never sampled: {calls:?}"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_step_holds_back_no_other_trajectory_and_results_do_not_depend_on_the_calls() {
        let (groups, timing, calls, _) = roll(Twist::None, 32).await;
        let groups = groups.expect("not stopped");
        // The other trajectories' second turns were sampled while the slow step still ran: it
        // was released, not timed out, and its own second turn came in a later call.
        let slow = &groups[0].trajectories[0];
        assert_eq!(slow.turns[0].append[0].content, "released", "the slow step waited for its group's other turns: head-of-line blocking ({calls:?})");
        for label in ["fast1", "fast2", "greedy"] {
            assert!(call_of(&calls, "p0", label, 2) < call_of(&calls, "p0", "slow", 2), "{label}: {calls:?}");
        }
        // One first-turn call for both groups; every trajectory's second turn exactly once, seeded
        // per (group, turn, trajectory), greedy where the trajectory is.
        assert_eq!(calls[0].len(), 8);
        let second: Vec<&Row> = calls.iter().flatten().filter(|r| r.turn == 2).collect();
        assert_eq!(second.len(), 8);
        for (gi, g) in groups.iter().enumerate() {
            assert_eq!(g.problem.id, format!("p{gi}"), "prompt order");
            assert_eq!(g.trajectories.len(), 4);
            for (ti, t) in g.trajectories.iter().enumerate() {
                assert_eq!((t.turns.len(), t.ending), (2, Some(Ending::Completed)));
                let row = second.iter().find(|r| r.problem == g.problem.id && r.label == t.turns[0].text).unwrap();
                assert_eq!((row.seed, row.greedy), (derive_seed(10 + gi as u64, 2, ti as u64), ti == 3), "{row:?}");
                assert_eq!(t.turns[1].text, "answer");
            }
        }
        // The sampler sat idle while the slow step finished: a wait on the environment.
        assert!(timing.tool_wait_s > 0.0 && timing.sample_s > 0.0, "{timing:?}");
        assert_eq!(timing.sampler_dropped, 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stop_requested_mid_way_returns_no_groups() {
        let (groups, _, calls, _) = roll(Twist::Stop, 32).await;
        assert!(groups.is_none(), "stopped on the first second-turn call");
        assert!(calls.iter().flatten().any(|r| r.turn == 2));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_infrastructure_error_on_a_second_turn_call_drops_exactly_its_group() {
        // A call holds one group's rows (the first group's, whatever their number): the test
        // can say which group a failed call held.
        let (groups, timing, calls, failed_at) = roll(Twist::FailP1, 1).await;
        let groups = groups.unwrap();
        assert_eq!(groups.iter().map(|g| g.problem.id.as_str()).collect::<Vec<_>>(), ["p0"]);
        assert!(groups[0].trajectories.iter().all(|t| t.turns.len() == 2 && t.ending == Some(Ending::Completed)));
        assert_eq!(timing.sampler_dropped, 1);
        for c in &calls {
            assert!(c.iter().all(|r| r.problem == c[0].problem), "{calls:?}");
        }
        // Dropped mid-way, p1 takes no further turn: nothing of it is asked for once its first
        // failed call came back (a call already out may still hold some).
        assert!(failed_at > 0 && calls[..failed_at].iter().flatten().any(|r| r.problem == "p1" && r.turn == 2));
        assert!(calls[failed_at..].iter().flatten().all(|r| r.problem != "p1"), "p1 kept going after it was dropped: {calls:?}");
    }
}
