//! A checked spec to a [`Plan`]: the one place where defaults are applied and strings become the
//! sum types the program uses (`model.base` a [`ModelSource`], `model.chat_template` a
//! [`ChatTemplateChoice`], LoRA targets module names, the loss, optimizer and sampling settings
//! the backends' own types).
//!
//! Why two representations (ripgrep's low/high args, uv's `OptionsWire`): the
//! YAML types mirror what users write (for the schema, the diagnostics and the run id), while
//! the program wants values with no string left to interpret and no default left to apply.

use std::time::Duration;

use super::{EvalPlan, GrpoPlan, LogPlan, ModelPlan, Plan, PythonReward, Written};
use crate::backend::BackendChoice;
use crate::backend::local::SampleWeights;
use crate::backend::openai;
use crate::prompt::chat::ChatTemplateChoice;
use crate::seam::{AdamParams, Finetune, LoraConfig, LossFn, ModelSource, SamplingParams, SourceError, Stop};
use crate::spec::defaults;
use crate::spec::types::{self, Backend, Loss, Spec};

/// Resolves a spec that passed [`super::check::check`].
///
/// # Errors
/// A `model.base` or `model.tokenizer` that names no source (the checks report these first, with
/// locations; this is the backstop for specs built in code).
pub(super) fn resolve(written: Written, hash: String) -> Result<Plan, SourceError> {
    let spec = &written.spec;
    let sampling = sampling(&spec.sampling);
    let eval_sampling = SamplingParams {
        temperature: spec.eval.temperature,
        max_tokens: spec.eval.max_tokens.unwrap_or(spec.sampling.max_tokens) as usize,
        ..sampling.clone()
    };
    let greedy = defaults::eval_greedy(spec.eval.greedy, spec.eval.temperature) && spec.eval.temperature > 0.0;
    let eval = EvalPlan { k: spec.eval.k.clone(), samples: defaults::eval_samples(spec.eval.samples, &spec.eval.k), sampling: eval_sampling, greedy };
    let g = &spec.grpo;
    let o = &spec.optimizer;
    let run_id = format!("{}-{hash}", spec.name);
    let trackers = super::trackers::trackers(&spec.log.sinks, &spec.name, &run_id, &spec.log.root.join(&run_id), |k| std::env::var(k).ok());
    let (stages, total_steps) = super::stages::lay_out(spec);
    Ok(Plan {
        name: spec.name.clone(),
        seed: spec.seed,
        run_id,
        hash,
        model: model(&spec.model)?,
        backend: backend(spec),
        data: spec.data.clone(),
        prompt: spec.prompt.clone(),
        sampling,
        grpo: GrpoPlan {
            prompts_per_step: g.prompts_per_step,
            group_size: g.group_size,
            advantage: g.advantage.clone(),
            skip_degenerate: g.skip_degenerate,
            loss: loss_fn(g),
            max_steps_off_policy: g.max_steps_off_policy,
            loss_agg: g.loss_agg,
            agg_constant: match g.loss_agg {
                types::LossAgg::Constant { tokens: Some(c) } => c,
                _ => spec.sampling.max_tokens,
            },
            overlong: g.overlong,
            dynamic_sampling: g.dynamic_sampling,
            kl: g.kl.map(|mut k| {
                k.form.get_or_insert(kl_form(spec));
                k
            }),
            distill: g.distill.clone(),
            learner_temperature: learner_temperature(spec) as f32,
        },
        rollout: spec.rollout.clone(),
        reward: spec.reward.clone(),
        python_reward: python_reward(&spec.reward, spec.sandbox.concurrency),
        sandbox: sandbox(&spec.sandbox),
        adam: AdamParams {
            learning_rate: o.learning_rate,
            beta1: o.beta1,
            beta2: o.beta2,
            eps: o.eps,
            weight_decay: o.weight_decay,
            grad_clip_norm: o.grad_clip_norm,
        },
        schedule: types::Schedule { max_steps: total_steps, ..spec.schedule.clone() },
        eval,
        log: LogPlan { root: spec.log.root.clone(), rollouts: spec.log.rollouts, trackers },
        sweep: spec.sweep.clone(),
        diagnostics: spec.diagnostics.clone(),
        stages,
        written,
    })
}

/// The sandbox with Sandbox Fusion's pool size applied (the local pool's default, the cores, is
/// the machine's and is counted where the pool starts).
fn sandbox(s: &types::Sandbox) -> types::Sandbox {
    let mut s = s.clone();
    if s.kind == types::SandboxKind::Fusion {
        s.concurrency.get_or_insert(defaults::FUSION_CONCURRENCY);
    }
    s
}

fn model(m: &types::Model) -> Result<ModelPlan, SourceError> {
    let finetune = match m.finetune {
        types::Finetune::Full => Finetune::Full,
        types::Finetune::Lora => Finetune::Lora(LoraConfig {
            rank: m.lora.rank as usize,
            alpha: m.lora.alpha,
            targets: m.lora.targets.iter().map(|t| t.module_name().to_string()).collect(),
        }),
    };
    Ok(ModelPlan {
        base: m.base.clone(),
        source: ModelSource::parse(&m.base, m.revision.as_deref())?,
        tokenizer: m.tokenizer.as_deref().map(|t| ModelSource::parse(t, None)).transpose()?,
        chat_template: ChatTemplateChoice::parse(&m.chat_template),
        finetune,
    })
}

/// The backend's name for a `backend.server`.
pub(crate) fn tinker_server(s: types::TinkerServer) -> crate::backend::tinker::Server {
    use crate::backend::tinker::Server;
    match s {
        types::TinkerServer::Tinker => Server::Tinker,
        types::TinkerServer::Rlx => Server::Rlx,
        types::TinkerServer::Skyrl => Server::Skyrl,
        types::TinkerServer::VerlTinker => Server::VerlTinker,
        types::TinkerServer::Tuft => Server::Tuft,
    }
}

/// `grpo.learner_temperature`, defaulting to the sampling temperature (1 when sampling is
/// greedy: a greedy sampler's log-probabilities are not those of any temperature).
pub(crate) fn learner_temperature(spec: &Spec) -> f64 {
    spec.grpo.learner_temperature.unwrap_or(if spec.sampling.temperature > 0.0 { spec.sampling.temperature } else { 1.0 })
}

/// `grpo.kl.form`'s default: k3 as a loss term where the trainer's loss can take one (the
/// embedded trainer), k1 as the advantage penalty. Both are exact in expectation for k1, but
/// the loss form's per-sample gradient r·(k1 + 1)·∇logp carries β·Σ∇logp even at π = π_ref
/// (zero-mean, not zero): on a tiny model it swamped the update so that β = 2 and β = 20 gave the
/// same run and the policy drifted as far as without KL. The advantage form's r·k1·∇logp and
/// k3's loss form r·(k3 + 1 − e^d)·∇logp both vanish at the reference.
pub(crate) fn kl_form(spec: &Spec) -> types::KlForm {
    let Some(kl) = spec.grpo.kl else { return types::KlForm::Advantage };
    match kl.form {
        Some(f) => f,
        None if kl.estimator == types::KlEstimator::K3 && matches!(spec.backend, Backend::Local { .. }) => types::KlForm::Loss,
        None => types::KlForm::Advantage,
    }
}

fn backend(spec: &Spec) -> BackendChoice {
    match &spec.backend {
        Backend::Local { threads, max_tokens_per_microbatch, sample_weights, model_path } => BackendChoice::Local {
            threads: threads.map(|t| t as usize),
            max_tokens_per_microbatch: max_tokens_per_microbatch.unwrap_or(defaults::MAX_TOKENS_PER_MICROBATCH) as usize,
            sample_weights: match sample_weights {
                Some(types::SampleWeights::F32) => SampleWeights::F32,
                Some(types::SampleWeights::Q8_0) => SampleWeights::Q8_0,
                Some(types::SampleWeights::Gguf) | None => SampleWeights::Gguf,
            },
            model_path: model_path.as_ref().map(std::path::PathBuf::from),
        },
        Backend::Tinker { base_url, api_key_env, max_in_flight, model_path, server } => BackendChoice::Tinker {
            base_url: base_url.clone(),
            api_key_env: api_key_env.clone(),
            max_in_flight: max_in_flight.unwrap_or(defaults::TINKER_MAX_IN_FLIGHT) as usize,
            model_path: model_path.clone(),
            server: server.map(tinker_server),
        },
        Backend::Openai { base_url, api_key_env, served_model, api, prompt, concurrency, timeout_s, max_retries } => BackendChoice::Openai {
            base_url: base_url.trim_end_matches('/').to_string(),
            api_key_env: api_key_env.clone(),
            served_model: served_model.clone().unwrap_or_else(|| spec.model.base.clone()),
            api: match api {
                types::OpenaiApi::Completions => openai::Api::Completions,
                types::OpenaiApi::Chat => openai::Api::Chat,
            },
            prompt: match prompt {
                types::PromptEncoding::Tokens => openai::PromptEncoding::Tokens,
                types::PromptEncoding::Text => openai::PromptEncoding::Text,
            },
            concurrency: concurrency.unwrap_or(defaults::OPENAI_CONCURRENCY).max(1) as usize,
            timeout: Duration::from_secs_f64(timeout_s.filter(|t| t.is_finite() && *t > 0.0).unwrap_or(defaults::OPENAI_TIMEOUT_S)),
            max_retries: max_retries.unwrap_or(defaults::OPENAI_MAX_RETRIES),
        },
    }
}

fn sampling(s: &types::Sampling) -> SamplingParams {
    SamplingParams {
        max_tokens: s.max_tokens as usize,
        temperature: s.temperature,
        top_p: s.top_p,
        top_k: (s.top_k > 0).then_some(s.top_k as usize),
        stop: s.stop.iter().cloned().map(Stop::Text).collect(),
        seed: None,
    }
}

/// The loss the trainer computes: `grpo.loss`, or with `grpo.rollout_correction` (over
/// `importance_sampling`, the check's rule) the corrected one. With one optimizer step per
/// batch the learner's "old" log-probabilities are its current ones, so verl's decoupled
/// PPO-with-TIS reduces to REINFORCE weighted by sg(min(r, cap)): Tinker's `cispo` on [0, cap].
pub(crate) fn loss_fn(g: &types::Grpo) -> LossFn {
    use types::CorrectionMode as M;
    if let Some(c) = g.rollout_correction {
        return match c.mode {
            M::TokenTruncate => LossFn::Cispo { clip_low_threshold: 0.0, clip_high_threshold: c.cap },
            M::TokenMask => LossFn::MaskedImportanceSampling { cap: c.cap, sequence: false },
            M::SequenceMask => LossFn::MaskedImportanceSampling { cap: c.cap, sequence: true },
        };
    }
    written_loss(&g.loss)
}

/// `grpo.loss` as written, without `grpo.rollout_correction`.
pub(crate) fn written_loss(loss: &Loss) -> LossFn {
    match *loss {
        Loss::ImportanceSampling => LossFn::ImportanceSampling,
        Loss::Ppo { clip_low_threshold, clip_high_threshold } => LossFn::Ppo { clip_low_threshold, clip_high_threshold },
        Loss::Cispo { clip_low_threshold, clip_high_threshold } => LossFn::Cispo { clip_low_threshold, clip_high_threshold },
        Loss::Dro { beta } => LossFn::Dro { beta },
        Loss::Gspo { clip_low_threshold, clip_high_threshold } => LossFn::Gspo { clip_low_threshold, clip_high_threshold },
    }
}

/// The Python reward with its defaults, when the reward calls one (the checks made `path`
/// absolute and required it).
fn python_reward(r: &types::Reward, sandbox_concurrency: Option<u32>) -> Option<PythonReward> {
    if !crate::rl::reward::uses_python(r) {
        return None;
    }
    let path = std::path::PathBuf::from(r.path.as_deref()?);
    let display = std::env::current_dir()
        .ok()
        .and_then(|cwd| path.strip_prefix(cwd).ok().map(|p| p.display().to_string()))
        .unwrap_or_else(|| path.display().to_string());
    Some(PythonReward {
        display,
        path,
        function: r.function.clone().unwrap_or_else(|| defaults::REWARD_FUNCTION.to_string()),
        call_timeout: Duration::from_secs_f64(r.call_timeout_s.filter(|t| t.is_finite() && *t > 0.0).unwrap_or(defaults::REWARD_CALL_TIMEOUT_S)),
        max_failures: r.max_failures.unwrap_or(defaults::REWARD_MAX_FAILURES),
        workers: sandbox_concurrency.map_or(2, |c| (c as usize).clamp(1, 4)),
    })
}
