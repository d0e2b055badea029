//! `stages:` an ordered list of training stages (supervised fine-tuning, on-policy distillation,
//! then GRPO) sharing one model, one run directory and one step counter.
//!
//! Part of the spec types ([`super`]); the doc comments are the user reference and generate
//! `schemas/experiment.schema.json`. A spec without `stages` is one GRPO stage (the rest of the
//! spec), exactly as before: the field is left out of the serialized spec when empty, so run ids
//! do not change.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::data::Source;
use super::grpo::Teacher;

/// One stage of a staged run, tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Stage {
    /// Supervised fine-tuning: cross-entropy on prompt → completion rows (weighted
    /// negative log-likelihood of the assistant's tokens).
    Sft(Sft),
    /// On-policy distillation: GRPO's sampling, grading and update (the spec's `grpo`,
    /// `sampling`, `reward`), each sampled token's advantage the teacher's per-token negative
    /// reverse KL (`grpo.distill`'s term; the task reward off by default), for `max_steps` steps
    /// at its own learning rate, on its own problems or the spec's.
    Distill(DistillStage),
    /// GRPO on the spec's `data`, `grpo`, `reward`, `sampling` and `optimizer`, for
    /// `schedule.max_steps` steps, evaluated and checkpointed as `schedule` says. It must be the
    /// last stage; without it the run is supervised stages only.
    Grpo(GrpoStage),
}

/// An on-policy distillation stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DistillStage {
    /// The stage's name in metrics and logs. Default `distill`; names must differ between stages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The teacher, as `grpo.distill.teacher` (a model, or a checkpoint of an rlx run). Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub teacher: Option<Teacher>,
    /// The coefficient of the per-token reverse-KL advantage. Default `1`.
    #[serde(default = "one_f64")]
    #[schemars(range(min = 0.0))]
    pub coef: f64,
    /// Keep the task reward's group advantage (the teacher's term is added to it). Default
    /// `false`: the teacher's term alone (rewards are still graded and reported).
    #[serde(default)]
    pub task_reward: bool,
    /// The stage's steps.
    #[schemars(range(min = 1))]
    pub max_steps: u32,
    /// The learning rate. Default: `optimizer.learning_rate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learning_rate: Option<f64>,
    /// Training problems, sources as `data.train` takes them (relative to the spec). Default:
    /// `data.train`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train: Option<Vec<Source>>,
    /// Evaluate (pass@k on the spec's eval problems) every this many of the stage's steps; `0`
    /// only at the stage's end. Default `0`.
    #[serde(default)]
    pub eval_every: u32,
}

/// A GRPO stage: the spec's own RL settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrpoStage {
    /// The stage's name in metrics and logs. Default `grpo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A supervised fine-tuning stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Sft {
    /// The stage's name in metrics and logs. Default `sft`; names must differ between stages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A JSONL file of training rows, each either a chat transcript (`messages`: a list of
    /// `{role, content}`) or an MBPP-format problem whose `code` field is the reference answer
    /// (rendered through `prompt` as the user turn, the code in a ```python fence as the
    /// assistant's). Relative to the spec's directory.
    pub train: PathBuf,
    /// Held-out rows in the same form: their mean negative log-likelihood per trained token is
    /// reported as `eval/nll` at each of the stage's evaluations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval: Option<PathBuf>,
    /// Which tokens of a transcript are trained (weight 1; every other token is context,
    /// weight 0). Default `last_assistant`.
    #[serde(default)]
    pub train_on: TrainOn,
    /// Passes over `train`. Default `1`.
    #[serde(default = "one")]
    #[schemars(range(min = 1))]
    pub epochs: u32,
    /// Rows per optimizer step. Default `8`.
    #[serde(default = "eight")]
    #[schemars(range(min = 1))]
    pub batch_size: u32,
    /// Stop after this many steps even if epochs remain. Default: every batch of every epoch
    /// (`epochs` × ⌈rows / `batch_size`⌉).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
    /// Peak learning rate. Default: `optimizer.learning_rate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learning_rate: Option<f64>,
    /// Steps of linear warmup from 0 to the peak rate. Default `0`.
    #[serde(default)]
    pub warmup_steps: u32,
    /// The rate after warmup. Default `linear` (to 0 at the stage's last step).
    #[serde(default)]
    pub lr_decay: LrDecay,
    /// Evaluate (`eval/nll` on `eval`, pass@k on the spec's eval problems) every this many of the
    /// stage's steps; `0` only at the stage's end. Default `0`.
    #[serde(default)]
    pub eval_every: u32,
}

/// Which assistant turns of a transcript are trained.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TrainOn {
    /// The last assistant message only (earlier turns are context).
    #[default]
    LastAssistant,
    /// Every assistant message.
    AllAssistant,
}

/// The learning rate after warmup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LrDecay {
    /// Linearly to 0 at the stage's last step (tinker-cookbook's supervised default).
    #[default]
    Linear,
    /// The peak rate throughout.
    Constant,
}

fn one() -> u32 {
    1
}
fn one_f64() -> f64 {
    1.0
}
fn eight() -> u32 {
    8
}

impl Stage {
    /// The stage's kind as written.
    pub fn kind(&self) -> &'static str {
        match self {
            Stage::Sft(_) => "sft",
            Stage::Distill(_) => "distill",
            Stage::Grpo(_) => "grpo",
        }
    }

    /// The stage's name: as written, else its kind.
    pub fn name(&self) -> &str {
        let written = match self {
            Stage::Sft(s) => s.name.as_deref(),
            Stage::Distill(d) => d.name.as_deref(),
            Stage::Grpo(g) => g.name.as_deref(),
        };
        written.unwrap_or(self.kind())
    }
}

impl Sft {
    /// The learning rate at step `i` of a stage of `steps` steps whose peak is `peak`: linear
    /// warmup over `warmup_steps` (step 0 gets peak/warmup, not 0: a step at rate 0 trains
    /// nothing), then constant or linear decay to 0 at the end.
    pub fn lr_at(&self, i: u32, steps: u32, peak: f64) -> f64 {
        let w = self.warmup_steps;
        if i < w {
            return peak * f64::from(i + 1) / f64::from(w);
        }
        match self.lr_decay {
            LrDecay::Constant => peak,
            LrDecay::Linear => {
                let span = steps.saturating_sub(w).max(1);
                peak * f64::from(steps.saturating_sub(i)) / f64::from(span)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sft(warmup: u32, decay: LrDecay) -> Sft {
        serde_json::from_value(serde_json::json!({"train": "x.jsonl", "warmup_steps": warmup, "lr_decay": decay})).unwrap()
    }

    #[test]
    fn the_schedule_warms_up_then_decays_linearly_to_the_last_step() {
        let s = sft(2, LrDecay::Linear);
        let lrs: Vec<f64> = (0..6).map(|i| s.lr_at(i, 6, 1.0)).collect();
        assert_eq!(lrs, vec![0.5, 1.0, 1.0, 0.75, 0.5, 0.25]);
        let c = sft(0, LrDecay::Constant);
        assert!((0..4).all(|i| c.lr_at(i, 4, 0.1) == 0.1));
    }

    #[test]
    fn defaults_and_names() {
        let st: Stage = serde_json::from_value(serde_json::json!({"kind": "sft", "train": "a.jsonl"})).unwrap();
        let Stage::Sft(s) = &st else { panic!() };
        assert_eq!((s.epochs, s.batch_size, s.train_on, s.lr_decay), (1, 8, TrainOn::LastAssistant, LrDecay::Linear));
        assert_eq!(st.name(), "sft");
        let g: Stage = serde_json::from_value(serde_json::json!({"kind": "grpo", "name": "rl"})).unwrap();
        assert_eq!(g.name(), "rl");
    }
}
