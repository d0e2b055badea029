//! On-policy distillation (`grpo.distill`): the teacher scores every sampled token of a step's
//! datums and each sampled token's advantage gains `-coef · (log p_student − log p_teacher)`
//! (the per-token negative reverse KL, discount 0: each token answers for itself, as
//! tinker-cookbook's `train_on_policy`), trained by the step's loss.
//!
//! `log p_student` is the sampler's log-probability of the token (the policy the sample came
//! from, which the importance-sampling loss divides by), `log p_teacher` the teacher's at
//! temperature 1. The term is the advantage form of `grpo.kl` with the teacher as the reference
//! and k1 as the estimator ([`shaping::apply_kl`]); rejected: a loss term, which would need a
//! second differentiated model, where the advantage form needs only the teacher's forward pass.
//! The teacher is scored by the embedded trainer, or on `backend.kind: tinker` by the service
//! ([`TeacherSource`]).

use std::path::PathBuf;

use crate::backend::Trainer;
use crate::plan::{Plan, StageKind, StagePlan};
use crate::rl::shaping::{self, KlPenalty};
use crate::seam::ModelSource;
use crate::spec::types::KlEstimator;

use super::error::Error;

/// One datum's targets: the sampler's log-probabilities (one per target), the teacher's, which
/// positions are sampled tokens, and the advantages (changed in place).
pub(crate) struct Row<'a> {
    pub(crate) logprobs: &'a [f32],
    pub(crate) teacher: &'a [f32],
    pub(crate) sampled: &'a [bool],
    pub(crate) advantages: &'a mut [f32],
}

/// Adds the teacher's term to every row's sampled advantages; returns the mean log-ratio over
/// the sampled tokens (`train/teacher_kl`).
///
/// # Errors
/// [`Error::Backend`] when a row of the teacher's does not have one entry per target.
pub(crate) fn add_teacher_term(rows: &mut [Row<'_>], coef: f64) -> Result<f64, Error> {
    let mut sum = 0.0;
    let mut count = 0usize;
    let penalty = KlPenalty { estimator: KlEstimator::K1, coef, centre: 0.0, discount: 0.0 };
    for row in rows.iter_mut() {
        let p = row.teacher;
        shaping::apply_kl(row.advantages, row.logprobs, p, row.sampled, penalty)
            .map_err(|e| crate::backend::Error::InvalidArgument { what: "teacher logprobs", reason: e.to_string() })?;
        for t in (0..row.sampled.len()).filter(|&t| row.sampled[t]) {
            sum += f64::from(row.logprobs[t]) - f64::from(p[t]);
            count += 1;
        }
    }
    Ok(if count == 0 { 0.0 } else { sum / count as f64 })
}

/// Where the trainer finds the teacher: a model it loads, or one a Tinker-API service serves.
pub(crate) enum TeacherSource {
    /// Loaded by the embedded trainer.
    Local(ModelSource),
    /// Scored by the service (`backend.kind: tinker`).
    Tinker(crate::backend::tinker::Teacher),
}

/// The teacher's log-probabilities of `data`'s targets, on the trainer: `teacher` is what the
/// plan resolved `grpo.distill.teacher` to ([`crate::plan::GrpoPlan::teacher`]).
///
/// # Errors
/// A teacher the trainer cannot find, load or score.
pub(crate) async fn teacher_logprobs(trainer: &dyn Trainer, teacher: TeacherSource, data: Vec<crate::seam::Datum>) -> Result<Vec<Vec<f32>>, Error> {
    Ok(match teacher {
        TeacherSource::Local(source) => trainer.teacher_logprobs(source, data).await?,
        TeacherSource::Tinker(teacher) => trainer.tinker_teacher_logprobs(teacher, data).await?,
    })
}

/// What the trainer scores as the teacher of `grpo.distill`. On the Tinker backend: the
/// `tinker://` path a checkpoint reference resolved to, else `teacher.base` (a `tinker://` path,
/// else a base model the service serves). Locally: the state a checkpoint reference resolved to,
/// else `teacher.base` as a model source. `None` without distillation.
pub(crate) fn teacher_source(plan: &Plan) -> Option<TeacherSource> {
    let t = &plan.grpo.distill.as_ref()?.teacher;
    if matches!(plan.backend, crate::backend::BackendChoice::Tinker { .. }) {
        use crate::backend::tinker::{Teacher, TeacherModel};
        let written = t.resolved.as_ref().map_or(&t.base, |r| &r.state);
        let model = if written.starts_with("tinker://") { TeacherModel::Path(written.clone()) } else { TeacherModel::Base(written.clone()) };
        return Some(TeacherSource::Tinker(Teacher { model, base_url: t.base_url.clone() }));
    }
    Some(TeacherSource::Local(match &t.resolved {
        Some(r) => ModelSource::Path(PathBuf::from(&r.state)),
        // Validation refused a string that names no source; one that slipped past (a plan made
        // without it) is a path the trainer then fails to find, not distillation silently off.
        None => ModelSource::parse(&t.base, None).unwrap_or_else(|_| ModelSource::Path(PathBuf::from(&t.base))),
    }))
}

/// The plan a `distill` stage runs: the run's, with `grpo.distill` the stage's, its learning
/// rate, its problems, its evaluation cadence, and `schedule.max_steps` the stage's last step + 1
/// (the step loop runs up to it; evaluations and checkpoints fall due at it). `None` for another
/// kind of stage. Rejected: a step loop of the stage's own, which would have repeated GRPO's
/// sampling, pipelining, checkpoints and resume.
pub(crate) fn stage_plan(plan: &Plan, stage: &StagePlan) -> Option<Plan> {
    let StageKind::Distill { distill, learning_rate, train, eval_every } = &stage.kind else { return None };
    let mut p = plan.clone();
    p.grpo.distill = Some(distill.clone());
    p.adam.learning_rate = *learning_rate;
    if let Some(train) = train {
        p.data.train = train.clone();
    }
    p.schedule.eval_every = *eval_every;
    p.schedule.max_steps = stage.first_step + stage.steps;
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_term_is_minus_coef_times_the_log_ratio_on_sampled_tokens_only() {
        let q = [-1.0f32, -0.5, -2.0];
        let p = [-3.0f32, -0.25, -2.0];
        let sampled = [false, true, true];
        let mut adv = [0.5f32, 0.5, 0.5];
        let mut rows = [Row { logprobs: &q, teacher: &p, sampled: &sampled, advantages: &mut adv }];
        let mean = add_teacher_term(&mut rows, 2.0).unwrap();
        // Token 1: 0.5 − 2·(−0.5 + 0.25); token 2: the teacher agrees, nothing added; token 0 is
        // context and keeps its value.
        assert_eq!(adv, [0.5, 1.0, 0.5]);
        assert!((mean - (-0.25 + 0.0) / 2.0).abs() < 1e-12, "{mean}");
    }

    #[test]
    fn a_teacher_equal_to_the_student_adds_nothing() {
        let q = [-1.0f32, -0.5];
        let mut adv = [0.0f32; 2];
        let mut rows = [Row { logprobs: &q, teacher: &q, sampled: &[true, true], advantages: &mut adv }];
        assert_eq!(add_teacher_term(&mut rows, 1.0).unwrap(), 0.0);
        assert_eq!(adv, [0.0, 0.0]);
    }

    #[test]
    fn a_teacher_row_of_the_wrong_length_is_an_error() {
        let q = [-1.0f32, -0.5];
        let mut adv = [0.0f32; 2];
        let mut rows = [Row { logprobs: &q, teacher: &[-1.0], sampled: &[true, true], advantages: &mut adv }];
        assert!(add_teacher_term(&mut rows, 1.0).is_err());
    }
}
