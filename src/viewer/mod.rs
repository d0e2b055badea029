//! The rollout viewer behind `rlx show`: which completions of a run directory to show, each with
//! everything the run recorded about it.
//!
//! [`select`] reads `rollouts.jsonl` (training) or `eval_rollouts.jsonl` (evaluations, step −1
//! the baseline) through `runlog`'s typed readers, picks a step (the last by default, every step
//! when only a problem is named), a problem and a verdict, and returns [`Completion`]s: one shape
//! for both files, with the prompt filled in from the group's (or problem's) first completion,
//! which is the only one that carries it on disk. Laying them out, with or without colour, is the
//! command's job (`cli::commands::show`).
//!
//! Runs written before a field existed (per-test verdicts, prompts, infra errors) read with that
//! field empty: the viewer shows what there is rather than refusing old runs.

mod error;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::str::FromStr;

pub(crate) use error::Error;

use crate::runlog::{self, Attempt, EvalSampleRecord, PromptMessage, Protocol, RolloutRecord, RunDir, VerdictStatus, files};

/// A step named on the command line: a number (`-1` is the baseline evaluation), `base` or
/// `last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// This step.
    At(i64),
    /// The last step with completions.
    Last,
}

impl FromStr for Step {
    type Err = String;
    fn from_str(s: &str) -> Result<Step, String> {
        match s.trim() {
            "last" => Ok(Step::Last),
            "base" | "baseline" => Ok(Step::At(-1)),
            t => t.parse().map(Step::At).map_err(|_| format!("`{t}` is not a step (a number, `-1` or `base` for the baseline evaluation, or `last`)")),
        }
    }
}

/// Which completions by their verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Verdict {
    /// All of them.
    #[default]
    Any,
    /// Those that passed every test.
    Passed,
    /// The others: failed tests, no code block, or a sandbox failure.
    Failed,
}

/// What to show.
#[derive(Debug, Clone, Default)]
pub(crate) struct Query {
    /// Evaluation completions instead of training ones.
    pub eval: bool,
    /// The step; `None`: the last one, or every step when a problem is named.
    pub step: Option<Step>,
    /// Only this problem.
    pub problem: Option<String>,
    /// Only passed or only failed completions.
    pub verdict: Verdict,
    /// At most this many completions (0: all).
    pub limit: usize,
}

/// What a training completion adds to an evaluation one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Training {
    /// Index of its group within the step.
    pub group: usize,
    /// Its reward.
    pub reward: f64,
    /// The advantage it was trained with.
    pub advantage: f64,
    /// Whether its group was skipped as degenerate.
    pub skipped: bool,
    /// Attempts made.
    pub attempts: usize,
    /// Every attempt, for multi-attempt rollouts (empty for one); every turn with tool turns.
    pub turns: Vec<Attempt>,
    /// With tool turns: why the trajectory ended.
    pub stop: Option<String>,
}

/// One completion, as recorded: a training rollout or an eval sample.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Completion {
    /// The step (−1: the baseline evaluation).
    pub step: i64,
    /// Its eval source, when recorded.
    pub source: Option<String>,
    /// The eval protocol, when not the main one (`greedy`).
    pub protocol: Option<Protocol>,
    /// The completion as graded.
    pub graded: runlog::Completion,
    /// Reward, advantage and attempts; `None` for an evaluation.
    pub training: Option<Training>,
}

impl Completion {
    fn passed(&self) -> bool {
        self.graded.status == VerdictStatus::Passed
    }

    fn from_rollout(r: RolloutRecord) -> Completion {
        Completion {
            step: i64::from(r.step),
            source: None,
            protocol: None,
            graded: r.completion,
            training: Some(Training { group: r.group, reward: r.reward, advantage: r.advantage, skipped: r.skipped, attempts: r.attempts, turns: r.turns, stop: r.stop }),
        }
    }

    fn from_eval(r: EvalSampleRecord) -> Completion {
        Completion { step: r.step, source: r.source, protocol: r.protocol, graded: r.completion, training: None }
    }

    /// The key of the completions that share one prompt: a training group, or an eval problem.
    fn prompt_key(&self) -> (i64, String) {
        match &self.training {
            Some(t) => (self.step, t.group.to_string()),
            None => (self.step, self.graded.problem_id.clone()),
        }
    }
}

/// The completions a [`Query`] selected.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Selection {
    /// The file read.
    pub file: &'static str,
    /// The steps selected.
    pub steps: Vec<i64>,
    /// The completions shown (at most the query's limit), in file order.
    pub completions: Vec<Completion>,
    /// Completions that matched, before the limit.
    pub matched: usize,
    /// Completions at the selected steps (and problem), before the verdict filter.
    pub considered: usize,
    /// A torn last line that was skipped, if any.
    pub torn_line: Option<usize>,
}

/// Selects the completions of the run in `path` that `q` asks for.
///
/// # Errors
/// [`Error::NotARun`]; [`Error::Read`] for an unreadable or corrupt file (or a newer format);
/// [`Error::Empty`] when the file holds nothing; [`Error::UnknownStep`] and
/// [`Error::UnknownProblem`] (with the steps or problems there are) for a step or problem with no
/// completions.
pub(crate) fn select(path: &Path, q: &Query) -> Result<Selection, Error> {
    if !path.join(files::STATUS).is_file() {
        return Err(Error::NotARun { path: path.to_path_buf() });
    }
    let err = |source| Error::Read { path: path.to_path_buf(), source };
    let dir = RunDir::open(path).map_err(err)?;
    let (file, all, torn_line) = if q.eval {
        let read = dir.eval_rollouts().map_err(err)?;
        (files::EVAL_ROLLOUTS, read.rows.into_iter().map(Completion::from_eval).collect::<Vec<_>>(), read.torn_line)
    } else {
        let read = dir.rollouts().map_err(err)?;
        (files::ROLLOUTS, read.rows.into_iter().map(Completion::from_rollout).collect::<Vec<_>>(), read.torn_line)
    };
    if all.is_empty() {
        return Err(Error::Empty { path: path.to_path_buf(), file, why: empty_reason(&dir, q.eval) });
    }
    let steps = pick_steps(&all, q, file)?;
    let at_steps: Vec<&Completion> = all.iter().filter(|c| steps.contains(&c.step)).collect();
    if let Some(p) = &q.problem
        && !at_steps.iter().any(|c| &c.graded.problem_id == p)
    {
        return Err(unknown_problem(p, &all, &at_steps, q, file));
    }
    let prompts = shared_prompts(&all);
    let considered: Vec<&Completion> = at_steps.into_iter().filter(|c| q.problem.as_ref().is_none_or(|p| &c.graded.problem_id == p)).collect();
    let matching: Vec<&Completion> = considered
        .iter()
        .copied()
        .filter(|c| match q.verdict {
            Verdict::Any => true,
            Verdict::Passed => c.passed(),
            Verdict::Failed => !c.passed(),
        })
        .collect();
    let take = if q.limit == 0 { matching.len() } else { q.limit };
    let completions = matching
        .iter()
        .take(take)
        .map(|&c| {
            let mut c = c.clone();
            if c.graded.prompt.is_empty()
                && let Some(p) = prompts.get(&c.prompt_key())
            {
                c.graded.prompt = (*p).clone();
            }
            c
        })
        .collect();
    Ok(Selection { file, steps, completions, matched: matching.len(), considered: considered.len(), torn_line })
}

/// Why a run has no completions of a kind: what its spec's `log.rollouts` said, or no eval.
fn empty_reason(dir: &RunDir, eval: bool) -> String {
    let resolved: Option<serde_json::Value> = dir.read_json(files::RESOLVED).ok().flatten();
    let rollouts = resolved.as_ref().and_then(|v| v.pointer("/log/rollouts")).and_then(|v| v.as_str().map(str::to_owned));
    if rollouts.as_deref() == Some("none") {
        return ": the run was made with `log.rollouts: none`".into();
    }
    if eval {
        let has_eval = resolved.as_ref().and_then(|v| v.pointer("/data/eval")).and_then(|v| v.as_array()).is_some_and(|a| !a.is_empty());
        return if has_eval { ": no evaluation has finished yet, or the run predates eval_rollouts.jsonl".into() } else { ": the run has no `data.eval`".into() };
    }
    ": no training step has finished yet".into()
}

/// The steps a query selects, checked against those with completions.
fn pick_steps(all: &[Completion], q: &Query, file: &'static str) -> Result<Vec<i64>, Error> {
    let steps: BTreeSet<i64> = all.iter().map(|c| c.step).collect();
    let last = *steps.last().expect("the caller checked for completions");
    match q.step {
        Some(Step::At(s)) if steps.contains(&s) => Ok(vec![s]),
        Some(Step::At(step)) => Err(Error::UnknownStep { step, file, available: abbreviate(steps.iter().map(i64::to_string), 12) }),
        Some(Step::Last) => Ok(vec![last]),
        None if q.problem.is_some() => Ok(steps.into_iter().collect()),
        None => Ok(vec![last]),
    }
}

fn unknown_problem(p: &str, all: &[Completion], at_steps: &[&Completion], q: &Query, file: &'static str) -> Error {
    let here: BTreeSet<&str> = at_steps.iter().map(|c| c.graded.problem_id.as_str()).collect();
    let elsewhere: BTreeSet<i64> = all.iter().filter(|c| c.graded.problem_id == p).map(|c| c.step).collect();
    let at = match (q.step, elsewhere.is_empty()) {
        (None, _) => "at any step".to_string(),
        (Some(_), true) => format!("at step {}", at_steps.first().map_or(0, |c| c.step)),
        (Some(_), false) => format!(
            "at step {} (it has completions at step {})",
            at_steps.first().map_or(0, |c| c.step),
            abbreviate(elsewhere.iter().map(i64::to_string), 8)
        ),
    };
    // A typo is looked up among every problem of the file, not only this step's: the user may
    // have the right id and the wrong step.
    let every: BTreeSet<&str> = all.iter().map(|c| c.graded.problem_id.as_str()).collect();
    let suggestion = if elsewhere.is_empty() { crate::spec::diagnostic::did_you_mean(p, every.iter().copied()).map(str::to_owned) } else { None };
    Error::UnknownProblem { problem: p.to_string(), at, file, count: here.len(), available: abbreviate(here.iter().map(|s| format!("`{s}`")), 8), suggestion }
}

/// The prompt of every group (training) or problem (eval), from the completion that carries it.
fn shared_prompts(all: &[Completion]) -> BTreeMap<(i64, String), &Vec<PromptMessage>> {
    all.iter().filter(|c| !c.graded.prompt.is_empty()).map(|c| (c.prompt_key(), &c.graded.prompt)).collect()
}

/// The first `max` items joined by `, `, then `… (N more)`.
fn abbreviate(items: impl Iterator<Item = String>, max: usize) -> String {
    let items: Vec<String> = items.collect();
    let mut s = items.iter().take(max).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > max {
        s.push_str(&format!(", … ({} more)", items.len() - max));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runlog::StopReason;

    fn c(step: i64, group: usize, sample: usize, problem: &str, status: VerdictStatus) -> Completion {
        Completion {
            step,
            source: None,
            protocol: None,
            graded: runlog::Completion {
                problem_id: problem.into(),
                sample,
                status,
                tests_passed: 0,
                tests_total: 1,
                tests: vec![],
                error: None,
                prompt: if sample == 0 { vec![PromptMessage { role: "user".into(), content: format!("solve {problem}") }] } else { vec![] },
                text: String::new(),
                code: None,
                language: None,
                stop_reason: StopReason::Stop,
                tokens: 1,
            },
            training: Some(Training { group, reward: 0.0, advantage: 0.0, skipped: false, attempts: 1, turns: vec![], stop: None }),
        }
    }

    #[test]
    fn steps_default_to_the_last_or_to_every_step_of_a_problem() {
        let all = [c(0, 0, 0, "p01", VerdictStatus::Passed), c(1, 0, 0, "p02", VerdictStatus::Failed), c(2, 0, 0, "p01", VerdictStatus::Failed)];
        let q = |step, problem: Option<&str>| Query { step, problem: problem.map(str::to_owned), ..Query::default() };
        assert_eq!(pick_steps(&all, &q(None, None), "f").unwrap(), [2]);
        assert_eq!(pick_steps(&all, &q(None, Some("p01")), "f").unwrap(), [0, 1, 2]);
        assert_eq!(pick_steps(&all, &q(Some(Step::Last), Some("p01")), "f").unwrap(), [2]);
        let e = pick_steps(&all, &q(Some(Step::At(7)), None), "rollouts.jsonl").unwrap_err();
        assert_eq!(e.to_string(), "no completions at step 7 in rollouts.jsonl (steps with completions: 0, 1, 2)");
        let refs: Vec<&Completion> = all.iter().filter(|c| c.step == 1).collect();
        let e = unknown_problem("p01", &all, &refs, &q(Some(Step::At(1)), Some("p01")), "rollouts.jsonl");
        assert_eq!(e.to_string(), "no completions of problem `p01` at step 1 (it has completions at step 0, 2) in rollouts.jsonl (1 problem(s) there: `p02`)");
        assert_eq!(e.hint(), None, "the problem exists: the message says where");
        let e = unknown_problem("p1", &all, &refs, &q(None, Some("p1")), "rollouts.jsonl");
        assert_eq!(e.hint().as_deref(), Some("did you mean `p01`?"));
    }

    #[test]
    fn steps_parse() {
        assert_eq!("base".parse::<Step>(), Ok(Step::At(-1)));
        assert_eq!("-1".parse::<Step>(), Ok(Step::At(-1)));
        assert_eq!(" 12 ".parse::<Step>(), Ok(Step::At(12)));
        assert_eq!("last".parse::<Step>(), Ok(Step::Last));
        assert!("first".parse::<Step>().unwrap_err().contains("is not a step"));
    }

    #[test]
    fn a_groups_prompt_is_shared_with_its_other_samples() {
        let all = [c(3, 1, 0, "p01", VerdictStatus::Passed), c(3, 1, 1, "p01", VerdictStatus::Failed), c(3, 2, 1, "p02", VerdictStatus::Failed)];
        let prompts = shared_prompts(&all);
        assert_eq!(prompts[&all[1].prompt_key()][0].content, "solve p01");
        assert!(!prompts.contains_key(&all[2].prompt_key()), "group 2's first sample was not logged");
    }
}
