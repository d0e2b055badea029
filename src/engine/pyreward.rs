//! The run's Python reward: the user's function (`crate::sandbox::reward`) over a step's groups
//! after grading. [`PythonRewards::score`] gives [`Scores`], which reach the reward strategies as
//! [`crate::rl::reward::Grading::custom`]; a failed call is counted and its group dropped, never
//! scored, and past `reward.max_failures` the run stops with the traceback. [`sample_call`] is
//! `rlx validate`'s one call on a sample.
//!
//! Its own file rather than part of `grading`: it reads the rollout's groups, and `rollout`
//! already names `grading`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::data::Problem;
use crate::plan::Plan;
use crate::retry;
use crate::rl::reward::Custom;
use crate::runlog::metrics;
use crate::sandbox::local::{LocalConfig, LocalSandbox};
use crate::sandbox::reward::{Call, CallResult, Failure, RewardFn};
use crate::sandbox::{AnyGrader, VerdictStatus};

use super::grading::{Graded, Sandboxes};
use super::rollout::Group;
use super::error::Error;
use super::event::{Event, EventSink};

/// A run's Python reward: the user's function, the local sandbox it runs in, and the failed
/// calls counted so far.
///
/// It always runs in the local sandbox, isolated like submissions: the run's own pool with
/// `sandbox.kind: local`, and a small pool of its own with `sandbox.kind: fusion` (a Sandbox
/// Fusion server runs only what rlx sends it as a submission, and the user's reward is rlx's
/// input, not the model's).
pub(crate) struct PythonRewards {
    func: Arc<RewardFn>,
    /// Components `reward.terms` weighs by name: a call that does not return each of them
    /// failed (the user's function did not do what the spec says), never a sandbox error.
    required: Vec<String>,
    sandbox: LocalSandbox,
    max_failures: u32,
    retries: u32,
    failures: AtomicU32,
}

/// What the Python reward gave for the groups of one step.
#[derive(Debug, Default)]
pub(crate) struct Scores {
    /// Per group, per trajectory: the function's value or [`Custom::Failed`]; empty for a group
    /// not scored (no Python reward, or a sandbox failure: the group is then dropped as an
    /// infrastructure error).
    groups: Vec<Vec<Custom>>,
    /// Per group: a call failed (the group is dropped, counted as the reward's).
    failed: Vec<bool>,
    /// Failed calls in the step.
    failures: u32,
}

impl Scores {
    /// What trajectory `k` of group `g` got, if the function ran for it.
    pub(crate) fn custom(&self, g: usize, k: usize) -> Option<&Custom> {
        self.groups.get(g)?.get(k)
    }

    /// Whether a call of group `g` failed.
    pub(crate) fn failed(&self, g: usize) -> bool {
        self.failed.get(g).copied().unwrap_or(false)
    }

    /// Appends the scores of the groups that follow (a dynamic-sampling refill round: see
    /// engine/fill.rs), so that group indices keep counting across rounds.
    pub(crate) fn append(&mut self, later: Scores) {
        self.groups.extend(later.groups);
        self.failed.extend(later.failed);
        self.failures += later.failures;
    }

    /// `reward/<name>` (each component's mean over the calls that returned it),
    /// `train/reward_failures` and `train/groups_reward_dropped`; nothing without a Python
    /// reward.
    pub(crate) fn metrics(&self) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        if self.groups.is_empty() {
            return m;
        }
        let mut sums: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
        for c in self.groups.iter().flatten() {
            if let Custom::Components(parts) = c {
                for (name, v) in parts {
                    let e = sums.entry(name).or_default();
                    e.0 += v;
                    e.1 += 1;
                }
            }
        }
        for (name, (sum, n)) in sums {
            m.insert(metrics::reward::component(name), sum / n as f64);
        }
        m.insert(metrics::train::REWARD_FAILURES.into(), f64::from(self.failures));
        m.insert(metrics::train::GROUPS_REWARD_DROPPED.into(), self.failed.iter().filter(|f| **f).count() as f64);
        m
    }
}

/// What the reward function sees as `problem`: what prompt templates see, plus `source`.
pub(crate) fn problem_json(p: &Problem) -> Value {
    let mut v = crate::prompt::problem_context(p);
    // Where the problem comes from: the row's own `source` (TACO's `codeforces`, ...) when it
    // has one, else the dataset format it was read as.
    let source = p.metadata.get("source").filter(|s| s.is_string()).or_else(|| p.metadata.get("format")).cloned().unwrap_or(Value::Null);
    v["source"] = source;
    v
}

/// The arguments of one call: the completion, its code and its verdict.
pub(crate) fn call_of(text: &str, graded: &Graded) -> Call {
    Call { completion: text.to_owned(), code: graded.code.clone(), verdict: serde_json::to_value(&graded.verdict).unwrap_or(Value::Null) }
}

impl PythonRewards {
    /// The plan's Python reward, ready to call; `None` when the reward calls none. With
    /// `sandbox.kind: local` it runs in `grader`'s pool; otherwise a local pool is started for
    /// it (warnings about missing isolation go to `sink`). Returns the protection of a pool
    /// started here, for `provenance.json`.
    ///
    /// # Errors
    /// [`Error::Sandbox`]: the reward's files cannot be read, or a local sandbox cannot start.
    pub(crate) async fn start(plan: &Plan, grader: &AnyGrader, sink: &dyn EventSink) -> Result<Option<(PythonRewards, Option<Value>)>, Error> {
        let Some(py) = &plan.python_reward else { return Ok(None) };
        let func = RewardFn::load(&py.path, &py.display, &py.function, py.call_timeout, u64::from(plan.sandbox.memory_mb)).map_err(Error::Sandbox)?;
        let (sandbox, protection) = match grader {
            AnyGrader::Local(sb) => (sb.clone(), None),
            AnyGrader::Fusion(_) | AnyGrader::Remote(_) => {
                let started = crate::sandbox::start::start_local(LocalConfig { workers: py.workers, strict: plan.sandbox.strict, ..LocalConfig::default() }).await.map_err(Error::Sandbox)?;
                for w in started.warnings {
                    tracing::warn!("python reward sandbox: {w}");
                    sink.event(Event::Warning(format!("the Python reward's local sandbox: {w} (set `sandbox.strict: true` to refuse to run instead)")));
                }
                (started.grader, Some(started.protection))
            }
        };
        let required = plan.reward.terms.iter().filter(|t| t.kind == crate::spec::types::RewardTermKind::Python).filter_map(|t| t.component.clone()).collect();
        let rewards = PythonRewards { func: Arc::new(func), required, sandbox, max_failures: py.max_failures, retries: plan.rollout.infra_retries, failures: AtomicU32::new(0) };
        Ok(Some((rewards, protection)))
    }

    /// Scores every group of step `step` (one sandbox run per group, all at once; the pool
    /// bounds how many run together). A group with a sandbox infrastructure error in its
    /// grades is not scored (it is dropped anyway). Each failed call is counted and reported to
    /// `sink`.
    ///
    /// # Errors
    /// [`Error::RewardFailures`] once more calls have failed over the run than
    /// `reward.max_failures` allows.
    pub(crate) async fn score(&self, step: u32, groups: &[Group], sink: &dyn EventSink) -> Result<Scores, Error> {
        let mut handles = Vec::with_capacity(groups.len());
        for g in groups {
            let infra = g.trajectories.iter().any(|t| t.last().graded.verdict.status == VerdictStatus::InfraError);
            if infra {
                handles.push(None);
                continue;
            }
            let calls: Vec<Call> = g.trajectories.iter().map(|t| call_of(&t.last().text, &t.last().graded)).collect();
            let (func, sandbox, problem, retries) = (self.func.clone(), self.sandbox.clone(), problem_json(&g.problem), self.retries);
            handles.push(Some(tokio::spawn(async move { call_with_retries(&func, &sandbox, &problem, &calls, retries).await })));
        }
        let mut scores = Scores::default();
        let mut last: Option<(String, Failure)> = None;
        for (g, handle) in groups.iter().zip(handles) {
            let results = match handle {
                Some(h) => h.await?,
                None => None,
            };
            let Some(results) = results else {
                scores.groups.push(vec![]);
                scores.failed.push(false);
                continue;
            };
            let mut failed = false;
            let customs = results
                .into_iter()
                .enumerate()
                .map(|(k, r)| match r.and_then(|c| self.complete(c)) {
                    Ok(c) => c,
                    Err(f) => {
                        failed = true;
                        scores.failures += 1;
                        let msg = format!("step {step}: the Python reward {f} (problem `{}`, completion {k}); its group is dropped, not scored", g.problem.id);
                        // The traceback goes to logs.log; the console gets the one line.
                        tracing::info!("warning: {msg}\n{}", f.traceback);
                        sink.event(Event::Warning(msg));
                        last = Some((g.problem.id.clone(), f));
                        Custom::Failed
                    }
                })
                .collect();
            scores.groups.push(customs);
            scores.failed.push(failed);
        }
        let count = self.failures.fetch_add(scores.failures, Ordering::SeqCst) + scores.failures;
        if let Some((problem, failure)) = last
            && count > self.max_failures
        {
            return Err(Error::RewardFailures {
                file: self.func.display().to_owned(),
                function: self.func.function().to_owned(),
                count,
                max: self.max_failures,
                problem,
                failure: Box::new(failure),
            });
        }
        Ok(scores)
    }
}

impl PythonRewards {
    /// `c` if it has every component the spec's terms weigh, else the failure that says which
    /// one it lacks.
    fn complete(&self, c: Custom) -> Result<Custom, Failure> {
        let Some(missing) = self.required.iter().find(|name| c.component(name).is_none()) else { return Ok(c) };
        let got = match &c {
            Custom::Components(m) => format!("the components {}", m.keys().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")),
            _ => "a number".to_owned(),
        };
        Err(Failure {
            kind: crate::sandbox::reward::FailureKind::Returned,
            message: format!("{}() returned {got}, without `{missing}`, which `reward.terms` weighs", self.func.function()),
            location: None,
            traceback: String::new(),
        })
    }
}

/// One group's call, run again while the sandbox fails (up to `retries` times); `None` when
/// it still fails: an infrastructure error, never the user's nor the model's.
async fn call_with_retries(func: &RewardFn, sandbox: &LocalSandbox, problem: &Value, calls: &[Call], retries: u32) -> Option<Vec<CallResult>> {
    let policy = retry::Policy::counted(retries, Duration::from_millis(200), Duration::from_secs(5));
    let done = retry::run(&policy, "python reward", |i| async move {
        match func.call(sandbox, problem, calls).await {
            Ok(r) => retry::Attempt::Done(r),
            Err(e) => {
                tracing::warn!(attempt = i + 1, "the Python reward's sandbox failed: {e}");
                retry::Attempt::Retry(e, None)
            }
        }
    })
    .await;
    done.ok()
}

/// What calling the Python reward once on a sample found (`rlx validate`).
#[derive(Debug)]
pub(crate) struct SampleCall {
    /// The reward file as the user names it.
    pub(crate) file: String,
    /// The function.
    pub(crate) function: String,
    /// The problem it was called on (the first training problem).
    pub(crate) problem: String,
    /// What the call gave.
    pub(crate) result: CallResult,
    /// Components that `weighted` terms name but the call did not return.
    pub(crate) missing_components: Vec<String>,
    /// Isolation layers missing in the local sandbox it ran in.
    pub(crate) warnings: Vec<String>,
}

/// The trivial completion of the sample call: a code block that does nothing.
pub(crate) const SAMPLE_COMPLETION: &str = "```python\npass\n```";

/// Calls the plan's Python reward once, as a run would: on the first training problem, with
/// [`SAMPLE_COMPLETION`] graded in the local sandbox. `None` when the reward calls no Python.
///
/// # Errors
/// The problems cannot be loaded or there are none; the local sandbox cannot start or fails.
pub(crate) async fn sample_call(plan: &Plan) -> Result<Option<SampleCall>, Error> {
    let Some(py) = &plan.python_reward else { return Ok(None) };
    let func = RewardFn::load(&py.path, &py.display, &py.function, py.call_timeout, u64::from(plan.sandbox.memory_mb)).map_err(Error::Sandbox)?;
    let (data, seed) = (plan.data.clone(), plan.seed);
    let dataset = tokio::task::spawn_blocking(move || crate::data::load_data(&data, seed, &crate::data::source::Options::from_env())).await?.map_err(Error::Data)?;
    let problem = dataset.train.problems.into_iter().next().or_else(|| dataset.eval.problems.into_iter().next()).ok_or(Error::NoProblems)?;
    let started = crate::sandbox::start::start_local(LocalConfig { workers: 1, strict: plan.sandbox.strict, ..LocalConfig::default() }).await.map_err(Error::Sandbox)?;
    let sandbox = started.grader;
    let graded = crate::sandbox::grade_loop::grade_one(&sandbox, &problem, crate::sandbox::Submission::Completion(SAMPLE_COMPLETION.into()), &Sandboxes::options(plan), 0).await;
    let mut results = func.call(&sandbox, &problem_json(&problem), &[call_of(SAMPLE_COMPLETION, &graded)]).await.map_err(Error::Sandbox)?;
    let result = results.pop().unwrap_or_else(|| Err(Failure { kind: crate::sandbox::reward::FailureKind::Crashed, message: "no result".into(), location: None, traceback: String::new() }));
    let missing_components = match &result {
        Ok(custom) => plan.reward.terms.iter().filter_map(|t| t.component.clone()).filter(|c| custom.component(c).is_none()).collect(),
        Err(_) => vec![],
    };
    Ok(Some(SampleCall { file: py.display.clone(), function: py.function.clone(), problem: problem.id, result, missing_components, warnings: started.warnings }))
}
