//! Trajectories ready for their next turn, and how the rollout loop packs them into sampler
//! calls: [`ReadyQueue::take_call`].
//!
//! A trajectory joins the queue as soon as its environment step ends, whatever the others are
//! doing. A call takes the queue's groups in the order their first row arrived, each group's
//! ready rows together, while it holds fewer than the sampler's `batch_rows` (so the last group
//! may take it past): the rule by which rlx always packed next turns, which keeps a failed call
//! to as few groups as the rows allow (a remote sampler asks for one group's rows per call, so
//! that a failure loses one group) and, sorted in trajectory order ([`ReadyQueue::sort`]), gives
//! the calls rlx made for them before.

use std::collections::VecDeque;

use crate::engine::prompting::Rendered;

/// One trajectory's next turn.
#[derive(Debug)]
pub(crate) struct Ready {
    /// Its group (the prompt's index in the phase).
    pub gi: usize,
    /// Its index in the group.
    pub ti: usize,
    /// The turn's number, from 2.
    pub turn: u32,
    /// The turn's prompt.
    pub prompt: Rendered,
}

/// Next turns waiting for a sampler call, in the order they became ready.
#[derive(Debug, Default)]
pub(crate) struct ReadyQueue {
    rows: VecDeque<Ready>,
}

impl ReadyQueue {
    /// Queues a next turn.
    pub(crate) fn push(&mut self, r: Ready) {
        self.rows.push_back(r);
    }

    /// Whether nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Forgets the turns of group `gi` (dropped).
    pub(crate) fn drop_group(&mut self, gi: usize) {
        self.rows.retain(|r| r.gi != gi);
    }

    /// Puts the queue in trajectory order: by group, then trajectory.
    pub(crate) fn sort(&mut self) {
        self.rows.make_contiguous().sort_by_key(|r| (r.gi, r.ti));
    }

    /// The rows of the next call: whole groups' ready rows, first come first, while the call
    /// holds fewer than `max_rows`; each group's rows in trajectory order.
    pub(crate) fn take_call(&mut self, max_rows: usize) -> Vec<Ready> {
        let mut groups: Vec<(usize, usize)> = vec![];
        for r in &self.rows {
            match groups.iter_mut().find(|(g, _)| *g == r.gi) {
                Some((_, n)) => *n += 1,
                None => groups.push((r.gi, 1)),
            }
        }
        let mut taken: Vec<usize> = vec![];
        let mut rows = 0;
        for (gi, n) in groups {
            if !taken.is_empty() && rows >= max_rows {
                break;
            }
            taken.push(gi);
            rows += n;
        }
        let (mut call, rest): (Vec<Ready>, Vec<Ready>) = self.rows.drain(..).partition(|r| taken.contains(&r.gi));
        self.rows = rest.into();
        call.sort_by_key(|r| (taken.iter().position(|&g| g == r.gi), r.ti));
        call
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(gi: usize, ti: usize) -> Ready {
        Ready { gi, ti, turn: 2, prompt: Rendered { messages: vec![], tokens: vec![] } }
    }

    fn ids(rows: &[Ready]) -> Vec<(usize, usize)> {
        rows.iter().map(|r| (r.gi, r.ti)).collect()
    }

    #[test]
    fn a_call_takes_whole_groups_first_come_first_while_it_has_room() {
        let mut q = ReadyQueue::default();
        for (gi, ti) in [(3, 1), (0, 0), (3, 0), (1, 0), (1, 1), (1, 2), (0, 1), (2, 0)] {
            q.push(row(gi, ti));
        }
        // Group 3 came first; with 2 rows there is room, so group 0 joins; then the call is
        // full.
        assert_eq!(ids(&q.take_call(3)), [(3, 0), (3, 1), (0, 0), (0, 1)]);
        // A group is never split: group 1 goes whole past the limit.
        assert_eq!(ids(&q.take_call(2)), [(1, 0), (1, 1), (1, 2)]);
        assert_eq!(ids(&q.take_call(32)), [(2, 0)]);
        assert!(q.is_empty());
        q.push(row(5, 0));
        q.push(row(6, 1));
        q.push(row(4, 0));
        q.push(row(6, 0));
        q.drop_group(5);
        // In trajectory order, as rounds are sampled.
        q.sort();
        assert_eq!(ids(&q.take_call(1)), [(4, 0)]);
        assert_eq!(ids(&q.take_call(1)), [(6, 0), (6, 1)]);
    }
}
