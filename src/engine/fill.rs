//! When a step has its groups: the one place that decides it.
//!
//! A step wants `prompts_per_step` groups. Without dynamic sampling the first round's groups are
//! the step's, whatever they are. With DAPO's dynamic sampling (`grpo.dynamic_sampling`, arXiv
//! 2503.14476 §3.2) a group whose completions all scored the same carries no gradient, so it is
//! set aside and another round draws as many new problems as the step still lacks informative
//! groups, up to `max_extra_rounds` rounds after the first; after the last the step trains on
//! what it has. Rounds draw exactly the shortfall (not DAPO's whole oversampled batches), so a
//! step never has more informative groups than it asked for and no sampled group is thrown away
//! unseen.
//!
//! [`Fill`] only counts and decides; the caller samples (engine/step.rs `rollouts`). Problems
//! are drawn in order from the data cursor and every drawn problem counts, so the checkpoint's
//! cursor after a step is where the next step starts, and a resumed run draws the same problems
//! with the same seeds (slot j of a step, in draw order, seeds its group as slot j always has).
//! A streaming scheduler can feed groups in as they finish and ask [`Fill::wants`] the same way.

use super::pyreward::Scores;
use super::rollout::{Group, Timing};

/// A step's groups as they are collected.
#[derive(Debug)]
pub(crate) struct Fill {
    /// Informative groups the step wants.
    target: usize,
    /// Rounds allowed after the first.
    max_extra_rounds: u32,
    /// Every group sampled, informative or not, in draw order.
    pub(crate) groups: Vec<Group>,
    /// Of those, the informative ones.
    informative: usize,
    /// Problems drawn so far (the data cursor advances by this).
    pub(crate) drawn: u64,
    /// Sampling rounds so far.
    pub(crate) rounds: u32,
    /// Time spent sampling and grading, summed over rounds; groups the sampler dropped.
    pub(crate) timing: Timing,
    /// The Python reward's values for `groups`, in the same order (empty without one).
    pub(crate) scores: Scores,
}

impl Fill {
    /// An empty step wanting `target` informative groups, with `max_extra_rounds` refills
    /// (0: the first round is the step, as without dynamic sampling).
    pub(crate) fn new(target: usize, max_extra_rounds: u32) -> Self {
        Fill { target, max_extra_rounds, groups: vec![], informative: 0, drawn: 0, rounds: 0, timing: Timing::default(), scores: Scores::default() }
    }

    /// A streamed step's groups (engine/stream.rs): `informative` of them carry a signal,
    /// `drawn` problems were consumed for them (stale and dropped groups included), one round.
    pub(crate) fn streamed(target: usize, groups: Vec<Group>, informative: usize, drawn: u64, timing: Timing, scores: Scores) -> Self {
        Fill { target, max_extra_rounds: 0, groups, informative, drawn, rounds: 1, timing, scores }
    }

    /// Adds one round: `drawn` problems were drawn and gave `groups` (fewer when the sampler
    /// dropped some); `informative` says which of them (by index in the round) carry a learning
    /// signal.
    pub(crate) fn add(&mut self, groups: Vec<Group>, timing: Timing, drawn: u64, informative: impl Fn(usize, &Group) -> bool) {
        self.informative += groups.iter().enumerate().filter(|(i, g)| informative(*i, g)).count();
        self.groups.extend(groups);
        self.drawn += drawn;
        self.rounds += 1;
        self.timing.sample_s += timing.sample_s;
        self.timing.grade_s += timing.grade_s;
        self.timing.sampler_dropped += timing.sampler_dropped;
    }

    /// How many problems the next round should draw; `None` when the step is full or out of
    /// rounds (or before the first round, which the caller draws itself).
    pub(crate) fn wants(&self) -> Option<usize> {
        let missing = self.target.saturating_sub(self.informative);
        (self.rounds >= 1 && missing > 0 && self.rounds <= self.max_extra_rounds).then_some(missing)
    }

    /// Groups sampled but not informative: set aside (left out of the update).
    pub(crate) fn discarded(&self) -> usize {
        self.groups.len() - self.informative
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(n: usize) -> Vec<Group> {
        let p = std::sync::Arc::new(crate::data::Problem {
            id: "p".into(),
            statement: String::new(),
            starter_code: None,
            tests: crate::data::Tests::Stdin { cases: vec![] },
            metadata: Default::default(),
        });
        (0..n).map(|_| Group { problem: p.clone(), trajectories: vec![] }).collect()
    }

    #[test]
    fn refills_the_shortfall_until_full() {
        let mut f = Fill::new(4, 3);
        assert_eq!(f.wants(), None, "the first round is the caller's");
        // Round 1: 4 drawn, 1 informative (the first) -> 3 more.
        let first = std::cell::Cell::new(true);
        f.add(groups(4), Timing::default(), 4, |_, _| first.replace(false));
        assert_eq!(f.wants(), Some(3));
        // Round 2: 3 drawn, 2 groups back (the sampler dropped one), both informative -> 1 more.
        f.add(groups(2), Timing { sample_s: 1.0, grade_s: 0.5, sampler_dropped: 1 }, 3, |_, _| true);
        assert_eq!(f.wants(), Some(1));
        f.add(groups(1), Timing::default(), 1, |_, _| true);
        assert_eq!(f.wants(), None, "full");
        assert_eq!((f.drawn, f.rounds, f.discarded(), f.groups.len()), (8, 3, 3, 7));
        assert_eq!(f.timing.sampler_dropped, 1);
    }

    #[test]
    fn stops_at_the_cap() {
        let mut f = Fill::new(2, 2);
        for round in 0..3 {
            f.add(groups(2), Timing::default(), 2, |_, _| false);
            assert_eq!(f.wants().is_some(), round < 2, "round {round}");
        }
        assert_eq!((f.drawn, f.rounds, f.discarded()), (6, 3, 6));
    }

    #[test]
    fn without_dynamic_sampling_one_round_is_the_step() {
        let mut f = Fill::new(2, 0);
        f.add(groups(2), Timing::default(), 2, |_, _| false);
        assert_eq!(f.wants(), None);
    }
}
