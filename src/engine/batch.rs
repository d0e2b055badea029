//! Groups sampled, graded and scored together: a round of a step, or one streamed group. Both
//! group sources (engine/gather.rs, engine/stream.rs) sample through [`sample`].

use crate::backend::Sampler;

use super::error::Error;
use super::pyreward::Scores;
use super::rollout::{self, Ctx, Group, Timing};
use super::scoring::StepConfig;

/// Groups sampled, graded and scored together (one round, or one streamed group).
#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// The groups that came back, in draw order.
    pub groups: Vec<Group>,
    /// Time spent sampling and grading them; groups the sampler dropped.
    pub timing: Timing,
    /// The Python reward's values for `groups` (empty without one).
    pub scores: Scores,
}

/// Samples, grades and scores the groups of the problem slots `slots` (slot, sampling seed) on
/// `sampler`, for step (or, streamed, policy version) `step`: the one way either source
/// samples. `None` when a stop was requested mid-way.
///
/// # Errors
/// Sampler, template or tokenizer failures; the Python reward failing too often.
pub(crate) async fn sample(sampler: &dyn Sampler, slots: &[(u64, u64)], step: u32, cfg: &StepConfig<'_>, cx: &Ctx<'_>) -> Result<Option<Batch>, Error> {
    let plan = cfg.plan;
    let n_problems = cfg.train.len() as u64;
    let mut prompts = Vec::with_capacity(slots.len());
    for &(slot, seed) in slots {
        if cx.stop.requested() {
            return Ok(None);
        }
        let problem = cfg.train[(slot % n_problems) as usize].clone();
        let rendered = rollout::first_prompt(&problem, cx)?;
        prompts.push((problem, rendered, seed));
    }
    let phase = rollout::Phase { n: plan.grpo.group_size as usize, greedy: 0, params: cfg.sampling, max_attempts: plan.rollout.max_attempts, name: "sample", step: i64::from(step) };
    let (groups, timing) = rollout::run(sampler, prompts, &phase, cx).await?;
    let Some(groups) = groups else { return Ok(None) };
    // Called here, once per group: the step's rule needs the rewards to know whether it is full.
    let scores = match cfg.python {
        Some(python) => python.score(step, &groups, cx.sink).await?,
        None => Scores::default(),
    };
    Ok(Some(Batch { groups, timing, scores }))
}
