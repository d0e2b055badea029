//! Where to look when train reward rises and eval does not: rollouts rewarded without passing
//! their tests (the reward paid for something else: format, partial tests, a Python reward's
//! term), else the training problems whose pass rate rose most (learned, or memorised, without
//! carrying over to the eval problems).

use std::collections::BTreeMap;

use crate::runlog::{RolloutRecord, VerdictStatus};

/// A problem's pass-rate rise: (rise, problem, passes before, passes after).
type Rise<'a> = (f64, &'a str, (usize, usize), (usize, usize));

/// How many leads a firing names.
const MAX: usize = 5;

/// A rollout that earned reward without passing.
#[derive(Debug, Clone)]
struct Unearned {
    step: i64,
    problem: String,
    group: usize,
    sample: usize,
    reward: f64,
    tests: (usize, usize),
}

/// What the leads are drawn from, per step.
#[derive(Debug, Default)]
pub(crate) struct Leads {
    unearned: Vec<Unearned>,
    /// Per step, per problem: (passed, completions).
    passes: BTreeMap<i64, BTreeMap<String, (usize, usize)>>,
}

impl Leads {
    pub(crate) fn add<'r>(&mut self, step: u32, rollouts: impl IntoIterator<Item = &'r RolloutRecord>) {
        let step = i64::from(step);
        let per = self.passes.entry(step).or_default();
        for r in rollouts {
            let e = per.entry(r.completion.problem_id.clone()).or_default();
            e.0 += usize::from(r.completion.status == VerdictStatus::Passed);
            e.1 += 1;
            if r.completion.status != VerdictStatus::Passed && r.completion.status != VerdictStatus::InfraError && r.reward > 0.0 {
                self.unearned.push(Unearned { step, problem: r.completion.problem_id.clone(), group: r.group, sample: r.completion.sample, reward: r.reward, tests: (r.completion.tests_passed, r.completion.tests_total) });
            }
        }
    }

    /// Leads for a rise between the steps before `late` (from `early`) and those from `late`.
    pub(crate) fn list(&self, early: i64, late: i64) -> Vec<String> {
        let mut unearned: Vec<&Unearned> = self.unearned.iter().filter(|u| u.step >= late).collect();
        if !unearned.is_empty() {
            unearned.sort_by(|a, b| b.reward.total_cmp(&a.reward).then(a.step.cmp(&b.step)));
            return unearned
                .iter()
                .take(MAX)
                .map(|u| format!("rollout step {} problem {} group {} sample {}: reward {} with {}/{} tests passed", u.step, u.problem, u.group, u.sample, u.reward, u.tests.0, u.tests.1))
                .collect();
        }
        let before = totals(self.passes.range(early..late));
        let after = totals(self.passes.range(late..));
        let mut rises: Vec<Rise<'_>> = after
            .iter()
            .filter_map(|(p, &a)| {
                let b = *before.get(p)?;
                let rise = a.0 as f64 / a.1 as f64 - b.0 as f64 / b.1 as f64;
                (rise > 0.0).then_some((rise, *p, b, a))
            })
            .collect();
        rises.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(y.1)));
        rises
            .iter()
            .take(MAX)
            .map(|(_, p, b, a)| format!("training problem {p}: passed {}/{} before step {late}, {}/{} from it (`rlx show RUN --problem {p}`)", b.0, b.1, a.0, a.1))
            .collect()
    }
}

/// Passes and completions per problem over some steps.
fn totals<'a>(steps: impl Iterator<Item = (&'a i64, &'a BTreeMap<String, (usize, usize)>)>) -> BTreeMap<&'a str, (usize, usize)> {
    let mut out: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (_, per) in steps {
        for (p, &(c, n)) in per {
            let e = out.entry(p.as_str()).or_default();
            e.0 += c;
            e.1 += n;
        }
    }
    out
}
