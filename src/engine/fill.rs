//! When a step has its groups: the one rule, for both group sources (rounds and the stream).
//!
//! A step wants `prompts_per_step` groups that count.
//!
//! - Without dynamic sampling every group that came back counts.
//! - With DAPO's dynamic sampling (`grpo.dynamic_sampling`, arXiv 2503.14476 §3.2) only
//!   informative groups count: by default those whose completions neither all pass nor all fail
//!   (DAPO's accuracy filter; `metric: reward`: rewards not all equal). The others are set aside
//!   (kept in the step's records, left out of the update). A step sets aside at most
//!   `max_extra_rounds` × `prompts_per_step` groups, as many as that many whole extra rounds
//!   would draw (DAPO's `max_num_gen_batches`, counted in groups so that it means the same
//!   whether groups come in rounds or one by one); once that budget is spent the step takes
//!   whatever comes until it has `prompts_per_step` groups.
//! - A group the sampler dropped after infrastructure errors is taken like any other (without
//!   dynamic sampling the step trains on fewer groups; with it the group counts as set aside), so
//!   a server that keeps failing on some problems cannot make a step draw without end. A group
//!   that came back too stale to train on (the stream) is the stream's own doing: it does not
//!   count, and the stream draws another problem in its place.
//!
//! [`Fill::wants`] says how many more groups a step needs; the rounds source draws exactly that
//! many at a time (so a step never has more informative groups than it asked for and no sampled
//! group is thrown away unseen), the stream keeps that many in flight. Problems are drawn in
//! order from the data cursor and every drawn problem is consumed, so the checkpoint's cursor
//! after a step is where the next step starts, and a resumed run draws the same problems with
//! the same seeds.
//!
//! Each group is scored once, when it is added ([`super::scoring::score`]); the update trains
//! on those numbers.

use super::batch::Batch;
use super::pyreward::Scores;
use super::rollout::{Group, Timing};
use super::scoring::{self, GroupScore, StepConfig};

/// A step's groups as they are collected.
#[derive(Debug)]
pub(crate) struct Fill {
    /// Groups that count, wanted.
    target: usize,
    /// Groups that may be set aside (dynamic sampling); `None` without dynamic sampling.
    budget: Option<usize>,
    /// Every group taken, informative or not, in the order taken.
    pub(crate) groups: Vec<Group>,
    /// Each group's rewards and advantages.
    pub(crate) scored: Vec<GroupScore>,
    /// The Python reward's values for `groups`, in the same order (empty without one).
    pub(crate) scores: Scores,
    /// Per group: optimizer steps between the weights that sampled it and those it trains.
    pub(crate) staleness: Vec<u32>,
    /// Of `groups`, the informative ones.
    informative: usize,
    /// Problem slots consumed, in draw order (the data cursor moves past them).
    pub(crate) consumed: Vec<u64>,
    /// Sampling rounds (1 for a streamed step).
    pub(crate) rounds: u32,
    /// Time spent sampling and grading, summed; groups the sampler dropped.
    pub(crate) timing: Timing,
    /// Groups that came back too stale and were set aside uncounted.
    pub(crate) stale: usize,
}

impl Fill {
    /// An empty step for `cfg`'s batch shape and dynamic sampling.
    pub(crate) fn new(cfg: &StepConfig<'_>) -> Self {
        let g = &cfg.plan.grpo;
        let target = g.prompts_per_step as usize;
        Fill {
            target,
            budget: g.dynamic_sampling.map(|d| d.max_extra_rounds as usize * target),
            groups: vec![],
            scored: vec![],
            scores: Scores::default(),
            staleness: vec![],
            informative: 0,
            consumed: vec![],
            rounds: 0,
            timing: Timing::default(),
            stale: 0,
        }
    }

    /// Takes `batch`, drawn for the problem slots `slots` (more than its groups when the sampler
    /// dropped some), sampled `staleness` steps behind the weights it will train; scores each
    /// group.
    pub(crate) fn add(&mut self, batch: Batch, slots: &[u64], staleness: u32, cfg: &StepConfig<'_>) {
        self.consumed.extend_from_slice(slots);
        self.add_timing(batch.timing);
        for (gi, g) in batch.groups.iter().enumerate() {
            let s = scoring::score(g, gi, &batch.scores, cfg);
            self.informative += usize::from(s.informative);
            self.scored.push(s);
            self.staleness.push(staleness);
        }
        self.groups.extend(batch.groups);
        self.scores.append(batch.scores);
    }

    /// Consumes problem `slot` without a group: it came back `stale`, or not at all.
    pub(crate) fn lose(&mut self, slot: u64, timing: Timing, stale: bool) {
        self.consumed.push(slot);
        self.add_timing(timing);
        self.stale += usize::from(stale);
    }

    fn add_timing(&mut self, t: Timing) {
        self.timing.add(t);
    }

    /// Groups taken: back from the sampler, or dropped by it.
    fn taken(&self) -> usize {
        self.groups.len() + self.timing.sampler_dropped
    }

    /// Groups that count toward the step (the module's rule).
    pub(crate) fn counted(&self) -> usize {
        match self.budget {
            None => self.taken(),
            Some(_) => self.informative,
        }
    }

    /// How many more groups the step needs now (0: it is full and trains).
    pub(crate) fn wants(&self) -> usize {
        let counted = self.counted();
        if counted >= self.target {
            return 0;
        }
        match self.budget {
            Some(budget) if self.taken() - self.informative >= budget => self.target.saturating_sub(self.taken()),
            _ => self.target - counted,
        }
    }

    /// Groups taken but not informative: set aside (left out of the update).
    pub(crate) fn discarded(&self) -> usize {
        self.groups.len() - self.informative
    }

    /// Problems consumed by the step.
    pub(crate) fn drawn(&self) -> u64 {
        self.consumed.len() as u64
    }

    /// The most steps any of its groups trails the weights it trains.
    pub(crate) fn off_policy(&self) -> u32 {
        self.staleness.iter().copied().max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::grading::Graded;
    use crate::engine::prompting::Rendered;
    use crate::engine::rollout::{Trajectory, Turn};
    use crate::sandbox::Verdict;
    use crate::seam::{SampledSequence, StopReason};

    /// A group of two completions that pass or fail as `passed` says (equal: no signal).
    fn group(passed: [bool; 2]) -> Group {
        let p = std::sync::Arc::new(crate::data::Problem {
            id: "p".into(),
            statement: String::new(),
            starter_code: None,
            tests: crate::data::Tests::Stdin { cases: vec![] },
            metadata: Default::default(),
        });
        let trajectory = |ok: bool| {
            let mut verdict = Verdict::format_error("p", 1);
            if ok {
                verdict.status = crate::sandbox::VerdictStatus::Passed;
                verdict.passed = true;
                (verdict.tests_passed, verdict.tests_total) = (1, 1);
            }
            Trajectory {
                turns: vec![Turn {
                    prompt: Rendered { messages: vec![], tokens: vec![1] },
                    seq: SampledSequence { tokens: vec![2], logprobs: vec![-0.1], stop_reason: StopReason::Stop },
                    text: String::new(),
                    graded: Graded { verdict, code: Some(String::new()), latency_ms: 0.0, infra_errors: 0 },
                    tools: Default::default(),
                    append: vec![],
                }],
                ending: None,
            }
        };
        Group { problem: p, trajectories: passed.iter().map(|&ok| trajectory(ok)).collect() }
    }

    /// Runs `f` with a step config for `grpo` (a spec fragment).
    fn with_cfg(grpo: &str, f: impl FnOnce(&StepConfig<'_>)) {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("train.jsonl");
        std::fs::write(&data, "{\"task_id\": 1, \"text\": \"t\", \"code\": \"\", \"test_list\": [\"assert True\"]}\n").unwrap();
        std::fs::write(dir.path().join("u.j2"), "{{ problem.statement }}").unwrap();
        std::fs::create_dir(dir.path().join("m")).unwrap();
        let spec = format!("name: f\nmodel: {{base: ./m}}\nbackend: {{kind: local}}\ndata: {{train: [{{path: train.jsonl, format: mbpp}}]}}\nprompt: {{user: u.j2}}\nreward: {{format_coef: 0}}\ngrpo: {grpo}\n");
        std::fs::write(dir.path().join("s.yaml"), spec).unwrap();
        let plan = crate::plan::plan(&dir.path().join("s.yaml"), &[]).unwrap();
        let advantage = crate::rl::advantage::strategy(&plan.grpo.advantage);
        let reward = crate::rl::reward::strategy(&plan.reward);
        let cfg = StepConfig { plan: &plan, train: &[], advantage: advantage.as_ref(), reward: reward.as_ref(), python: None, sampling: &plan.sampling };
        f(&cfg);
    }

    fn batch(groups: Vec<Group>) -> Batch {
        Batch { groups, ..Batch::default() }
    }

    #[test]
    fn refills_the_shortfall_until_full() {
        with_cfg("{prompts_per_step: 4, group_size: 2, dynamic_sampling: {max_extra_rounds: 3}}", |cfg| {
            let mut f = Fill::new(cfg);
            assert_eq!(f.wants(), 4);
            // 4 drawn, 1 informative -> 3 more.
            f.add(batch(vec![group([true, false]), group([true, true]), group([false, false]), group([false, false])]), &[0, 1, 2, 3], 0, cfg);
            assert_eq!(f.wants(), 3);
            assert!(f.scored[0].informative && !f.scored[1].informative);
            // 3 drawn, the sampler dropped one, both back informative -> 1 more.
            f.add(batch(vec![group([false, true]), group([true, false])]), &[4, 5, 6], 0, cfg);
            assert_eq!(f.wants(), 1);
            f.add(batch(vec![group([false, true])]), &[7], 0, cfg);
            assert_eq!(f.wants(), 0, "full");
            assert_eq!((f.drawn(), f.discarded(), f.groups.len()), (8, 3, 7));
        });
    }

    #[test]
    fn a_spent_budget_takes_whatever_comes() {
        // Budget: 1 extra round of 2 = 2 groups set aside.
        with_cfg("{prompts_per_step: 2, group_size: 2, dynamic_sampling: {max_extra_rounds: 1}}", |cfg| {
            let mut f = Fill::new(cfg);
            f.add(batch(vec![group([true, true])]), &[0], 0, cfg);
            assert_eq!(f.wants(), 2, "one set aside, budget left");
            f.add(batch(vec![group([false, false])]), &[1], 0, cfg);
            assert_eq!(f.wants(), 0, "two set aside: the budget is spent and the step has 2 groups");
            assert_eq!(f.counted(), 0);
        });
    }

    #[test]
    fn without_dynamic_sampling_every_group_counts_dropped_ones_too_and_stale_ones_are_replaced() {
        with_cfg("{prompts_per_step: 3, group_size: 2}", |cfg| {
            let mut f = Fill::new(cfg);
            f.lose(0, Timing { sampler_dropped: 1, ..Timing::default() }, false);
            assert_eq!(f.wants(), 2, "a group the sampler dropped is taken");
            f.lose(1, Timing::default(), true);
            assert_eq!(f.wants(), 2, "a stale group is not");
            f.add(batch(vec![group([true, true]), group([false, false])]), &[2, 3], 1, cfg);
            assert_eq!(f.wants(), 0);
            assert_eq!((f.drawn(), f.off_policy(), f.timing.sampler_dropped, f.stale), (4, 1, 1, 1));
        });
    }

    #[test]
    fn dropped_groups_spend_the_set_aside_budget() {
        with_cfg("{prompts_per_step: 2, group_size: 2, dynamic_sampling: {max_extra_rounds: 1}}", |cfg| {
            let mut f = Fill::new(cfg);
            f.add(Batch { timing: Timing { sampler_dropped: 2, ..Timing::default() }, ..Batch::default() }, &[0, 1], 0, cfg);
            assert_eq!(f.wants(), 0, "a server failing every group cannot make the step draw forever");
        });
    }
}
