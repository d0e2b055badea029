//! The local [`Trainer`]: forward/backward over padded datum batches, gradient accumulation,
//! AdamW, state save/load and merged export.
//!
//! Datums are right-padded into `[batch, seq]` micro-batches (padding is masked out and, being
//! after every real token, invisible to a causal model). Micro-batches are capped at
//! [`TrainerOptions::max_tokens_per_microbatch`] padded tokens to bound activation memory; since
//! every loss is a token-level sum, summing micro-batch gradients gives exactly the full-batch
//! gradient.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::{DType, Device, Tensor, Var};

use super::load::Loaded;
use super::model::{Config, Model, ParamBuilder, Tuning};
use super::optim::AdamW;
use super::quant::{self, SampleWeights};
use super::sampler::LocalSampler;
use super::state;
use super::train_pass;
use crate::backend::{Error, Result};
use crate::seam::{AdamParams, Datum, DatumOutput, ForwardBackwardOutput, KlLoss, LossFn, OptimStepOutput};
use super::loss_tensor::{self as loss, KlTensors, TokenInputs};

pub use super::options::TrainerOptions;

/// Trains a [`Model`] in-process on the CPU.
pub struct LocalTrainer {
    config: Config,
    options: TrainerOptions,
    /// Base weights, frozen under LoRA; empty under full fine-tuning (everything is a Var).
    base: Arc<HashMap<String, Tensor>>,
    model: Model,
    names: Vec<String>,
    vars: Vec<Var>,
    /// Accumulated gradients since the last optimizer step (same order as `vars`).
    grads: Option<Vec<Tensor>>,
    opt: AdamW,
    tokenizer: Option<Arc<tokenizers::Tokenizer>>,
    source: PathBuf,
    /// Quantised copies of the frozen base weights (the GGUF's own blocks or Q8_0), shared by
    /// every sampler snapshot.
    quantized_base: quant::Cache,
    /// The reference policy of `grpo.kl`, built on first use (see [`LocalTrainer::reference_logprobs`]).
    reference: Option<Model>,
}

impl std::fmt::Debug for LocalTrainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalTrainer").field("config", &self.config).field("options", &self.options).field("params", &self.names.len()).finish()
    }
}

impl LocalTrainer {
    /// A trainer over a loaded model.
    ///
    /// # Errors
    /// Missing or misshapen tensors, or a configuration with no trainable parameter.
    pub fn new(loaded: Loaded, options: TrainerOptions) -> Result<Self> {
        let Loaded { config, weights, tokenizer, source, blocks } = loaded;
        let native = options.sample_weights == SampleWeights::Gguf && matches!(options.tuning, Tuning::Lora(_));
        let mut trainer = Self::from_weights(config, weights, tokenizer, options, source)?;
        if native {
            // The base never changes under LoRA: decode it in the file's own blocks.
            trainer.quantized_base = quant::Cache::with_native(blocks);
        }
        Ok(trainer)
    }

    /// A trainer over explicit weights (tests build random ones with
    /// [`super::model::random_weights`]).
    ///
    /// # Errors
    /// As [`LocalTrainer::new`].
    pub fn from_weights(
        config: Config,
        weights: HashMap<String, Tensor>,
        tokenizer: Option<tokenizers::Tokenizer>,
        options: TrainerOptions,
        source: PathBuf,
    ) -> Result<Self> {
        if options.tuning == Tuning::Frozen {
            return Err(Error::InvalidArgument { what: "tuning", reason: "a trainer needs `full` or `lora`".into() });
        }
        if let Tuning::Lora(l) = &options.tuning
            && (l.rank == 0 || l.targets.is_empty()) {
                return Err(Error::InvalidArgument { what: "lora", reason: "rank must be >= 1 and targets non-empty".into() });
            }
        let base = Arc::new(weights);
        let pb = ParamBuilder::new(&base, &options.tuning, &source, options.seed);
        let model = Model::new(&config, &pb)?;
        let (names, vars): (Vec<String>, Vec<Var>) = pb.vars().into_iter().unzip();
        if vars.is_empty() {
            return Err(Error::InvalidArgument { what: "tuning", reason: "no parameter matched the LoRA targets".into() });
        }
        let opt = AdamW::new(&vars)?;
        // Under full fine-tuning every weight now lives in a Var copy; keeping the loaded
        // tensors too would double the model's memory for nothing.
        drop(pb);
        let base = if options.tuning == Tuning::Full { Arc::new(HashMap::new()) } else { base };
        Ok(Self { config, options, base, model, names, vars, grads: None, opt, tokenizer: tokenizer.map(Arc::new), source, quantized_base: quant::Cache::default(), reference: None })
    }

    /// The model being trained.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Trainable parameters, by name (Hugging Face names; PEFT `lora_A`/`lora_B` for adapters).
    pub fn params(&self) -> impl Iterator<Item = (&str, &Var)> {
        self.names.iter().map(String::as_str).zip(&self.vars)
    }

    /// The accumulated gradient of each parameter (after `forward_backward`, before `optim_step`).
    pub fn grads(&self) -> Option<impl Iterator<Item = (&str, &Tensor)>> {
        self.grads.as_ref().map(|g| self.names.iter().map(String::as_str).zip(g))
    }

    /// Options in force.
    pub fn options(&self) -> &TrainerOptions {
        &self.options
    }

    /// Optimizer steps taken.
    pub fn step(&self) -> u64 {
        self.opt.step_count()
    }

    /// The tokenizer, if the model came with one.
    pub fn tokenizer(&self) -> Option<&tokenizers::Tokenizer> {
        self.tokenizer.as_deref()
    }

    /// Write the current weights, LoRA merged in, as a Hugging Face directory (`config.json`,
    /// `model.safetensors`, and `tokenizer.json` when known).
    ///
    /// # Errors
    /// I/O failures.
    pub fn export_merged(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io { action: "create", path: dir.to_path_buf(), source })?;
        let weights = self.model.merged_weights()?;
        state::write_atomic(&dir.join("model.safetensors"), |p| Ok(candle_core::safetensors::save(&weights, p)?))?;
        let cfg = serde_json::to_vec_pretty(&self.config.to_hf_json()).expect("JSON value serialises");
        state::write_atomic(&dir.join("config.json"), |p| std::fs::write(p, &cfg).map_err(|source| Error::Io { action: "write", path: p.to_path_buf(), source }))?;
        if let Some(tok) = &self.tokenizer {
            let p = dir.join("tokenizer.json");
            tok.save(&p, false).map_err(|e| Error::Tokenizer(format!("cannot write `{}`: {e}", p.display())))?;
        }
        Ok(())
    }

    /// Scores later calls at `temperature` (see [`TrainerOptions::temperature`]).
    ///
    /// # Errors
    /// A temperature that is not positive and finite.
    pub fn set_temperature(&mut self, temperature: f32) -> Result<()> {
        if !(temperature.is_finite() && temperature > 0.0) {
            return Err(Error::InvalidArgument { what: "temperature", reason: format!("must be a positive number, found {temperature}") });
        }
        self.options.temperature = temperature;
        Ok(())
    }

    /// Learner log-probabilities of `target_tokens` for each datum, without a gradient.
    ///
    /// # Errors
    /// Invalid datums, tensor failures.
    pub fn forward(&self, data: &[Datum]) -> Result<Vec<DatumOutput>> {
        let mut outputs = Vec::with_capacity(data.len());
        for chunk in self.microbatches(data, &LossFn::CrossEntropy)? {
            let batch = Batch::new(chunk, self.vars[0].dtype(), None)?;
            let logp = if self.hand_written_pass() {
                let (logp, _) = train_pass::forward(&self.model, batch.pass(self.options.temperature), false)?;
                Tensor::from_vec(logp, (batch.b, batch.t), &Device::Cpu)?
            } else {
                let (tokens, targets) = batch.tensors()?;
                self.target_logprobs(&tokens, &targets)?.detach()
            };
            outputs.extend(batch.outputs(&logp)?);
        }
        Ok(outputs)
    }

    /// Log-probabilities of each datum's targets under the reference policy (the KL penalty's
    /// π_ref): the base model with the adapters off under LoRA (the frozen base tensors the
    /// trainer already holds, shared), or under full fine-tuning a frozen copy of the base
    /// weights, loaded again from the model's source on first use (the trainer keeps no copy
    /// otherwise: it would double the memory of every full fine-tune).
    ///
    /// # Errors
    /// Invalid datums, a model source that cannot be loaded again, tensor failures.
    pub fn reference_logprobs(&mut self, data: &[Datum]) -> Result<Vec<Vec<f32>>> {
        if self.reference.is_none() {
            let frozen = Tuning::Frozen;
            let model = match &self.options.tuning {
                Tuning::Full => {
                    let loaded = super::load(&self.source)?;
                    Model::new(&loaded.config, &ParamBuilder::new(&loaded.weights, &frozen, &self.source, 0))?
                }
                _ => Model::new(&self.config, &ParamBuilder::new(&self.base, &frozen, &self.source, 0))?,
            };
            self.reference = Some(model);
        }
        let model = self.reference.as_ref().expect("built above");
        let mut out = Vec::with_capacity(data.len());
        for chunk in self.microbatches(data, &LossFn::CrossEntropy)? {
            let batch = Batch::new(chunk, DType::F32, None)?;
            let (tokens, targets) = batch.tensors()?;
            let (b, t) = tokens.dims2()?;
            let logits = model.forward(&tokens, 0, None)?.to_dtype(DType::F32)?.reshape((b * t, self.config.vocab_size))?;
            let logits = tempered(logits, self.options.temperature)?;
            let logp = super::target_logprob::target_logprobs(&logits, &targets.flatten_all()?.to_vec1::<u32>()?)?.reshape((b, t))?;
            out.extend(batch.outputs(&logp)?.into_iter().map(|o| o.logprobs));
        }
        Ok(out)
    }

    /// Whether forward/backward run through [`train_pass`] (f32, unless `RLX_TRAIN_PASS=autograd`)
    /// rather than candle's autograd (f64 gradient checks, and a reference to compare against).
    fn hand_written_pass(&self) -> bool {
        self.vars[0].dtype() == DType::F32 && !matches!(std::env::var("RLX_TRAIN_PASS").as_deref(), Ok("autograd"))
    }

    fn microbatches<'a>(&self, data: &'a [Datum], loss: &LossFn) -> Result<Vec<&'a [Datum]>> {
        if data.is_empty() {
            return Err(Error::InvalidArgument { what: "data", reason: "no datums".into() });
        }
        for (i, d) in data.iter().enumerate() {
            d.validate(i, loss)?;
            let v = self.config.vocab_size as u32;
            if let Some(t) = d.model_input.iter().chain(&d.loss_fn_inputs.target_tokens).find(|&&t| t >= v) {
                return Err(Error::InvalidDatum { index: i, reason: format!("token {t} is outside the vocabulary of {v}") });
            }
            if d.model_input.len() > self.config.max_position_embeddings {
                return Err(Error::InvalidDatum {
                    index: i,
                    reason: format!("{} tokens exceed the model's context of {}", d.model_input.len(), self.config.max_position_embeddings),
                });
            }
        }
        let cap = self.options.max_tokens_per_microbatch.max(1);
        let mut out = Vec::new();
        let (mut start, mut longest) = (0usize, 0usize);
        for (i, d) in data.iter().enumerate() {
            let l = longest.max(d.model_input.len());
            if i > start && l * (i - start + 1) > cap {
                out.push(&data[start..i]);
                start = i;
                longest = d.model_input.len();
            } else {
                longest = l;
            }
        }
        out.push(&data[start..]);
        Ok(out)
    }

    /// `log softmax(logits)[target]`, `[b, t]`.
    fn target_logprobs(&self, tokens: &Tensor, targets: &Tensor) -> candle_core::Result<Tensor> {
        let (b, t) = tokens.dims2()?;
        let logits = self.model.forward(tokens, 0, None)?; // [b, t, vocab]
        let logits = tempered(logits.reshape((b * t, self.config.vocab_size))?, self.options.temperature)?;
        let targets = targets.flatten_all()?.to_vec1::<u32>()?;
        super::target_logprob::target_logprobs(&logits, &targets)?.reshape((b, t))
    }
}

/// The index of each chunk's first datum among all of them.
fn offsets(chunks: &[&[Datum]]) -> Vec<usize> {
    chunks.iter().scan(0, |n, c| {
        let first = *n;
        *n += c.len();
        Some(first)
    }).collect()
}

/// `logits / temperature` (the distribution the policy samples at that temperature).
fn tempered(logits: Tensor, temperature: f32) -> candle_core::Result<Tensor> {
    if temperature == 1.0 { Ok(logits) } else { logits / f64::from(temperature) }
}

/// Datums padded into tensors.
struct Batch<'a> {
    data: &'a [Datum],
    b: usize,
    t: usize,
    tokens: Vec<u32>,
    targets: Vec<u32>,
    inputs: TokenInputs,
}

impl<'a> Batch<'a> {
    /// `kl`: the KL loss term and the index of `data[0]` among its datums.
    fn new(data: &'a [Datum], dtype: DType, kl: Option<(&KlLoss, usize)>) -> Result<Self> {
        let b = data.len();
        let t = data.iter().map(|d| d.model_input.len()).max().unwrap_or(0);
        let mut tokens = vec![0u32; b * t];
        let mut targets = vec![0u32; b * t];
        let (mut w, mut q, mut a, mut valid) = (vec![0f32; b * t], vec![0f32; b * t], vec![0f32; b * t], vec![0f32; b * t]);
        for (i, d) in data.iter().enumerate() {
            let n = d.model_input.len();
            let row = i * t;
            tokens[row..row + n].copy_from_slice(&d.model_input);
            targets[row..row + n].copy_from_slice(&d.loss_fn_inputs.target_tokens);
            let inp = &d.loss_fn_inputs;
            match &inp.weights {
                Some(x) => w[row..row + n].copy_from_slice(x),
                None => w[row..row + n].fill(1.0),
            }
            if let Some(x) = &inp.logprobs {
                q[row..row + n].copy_from_slice(x);
            }
            if let Some(x) = &inp.advantages {
                a[row..row + n].copy_from_slice(x);
            }
            valid[row..row + n].fill(1.0);
        }
        let dev = Device::Cpu;
        let f = |v: Vec<f32>| -> candle_core::Result<Tensor> { Tensor::from_vec(v, (b, t), &dev)?.to_dtype(dtype) };
        let kl = match kl {
            None => None,
            Some((kl, first)) => {
                let (mut reference, mut coef) = (vec![0f32; b * t], vec![0f32; b * t]);
                for (i, d) in data.iter().enumerate() {
                    let (n, row) = (d.model_input.len(), i * t);
                    let (r, c) = (&kl.reference[first + i], &kl.coef[first + i]);
                    if r.len() != n || c.len() != n {
                        return Err(Error::InvalidDatum { index: first + i, reason: format!("KL term of {} reference and {} coefficient entries for {n} targets", r.len(), c.len()) });
                    }
                    reference[row..row + n].copy_from_slice(r);
                    coef[row..row + n].copy_from_slice(c);
                }
                Some(KlTensors { reference: f(reference)?, coef: f(coef)?, kind: kl.estimator })
            }
        };
        Ok(Self {
            data,
            b,
            t,
            tokens,
            targets,
            inputs: TokenInputs { weights: f(w)?, logprobs: f(q)?, advantages: f(a)?, valid: f(valid)?, kl },
        })
    }

    fn pass(&self, temperature: f32) -> train_pass::Batch<'_> {
        train_pass::Batch { tokens: &self.tokens, targets: &self.targets, b: self.b, t: self.t, temperature }
    }

    /// Tokens and targets as `[b, t]` tensors, for candle's autograd path.
    fn tensors(&self) -> candle_core::Result<(Tensor, Tensor)> {
        let dev = Device::Cpu;
        Ok((Tensor::from_slice(&self.tokens, (self.b, self.t), &dev)?, Tensor::from_slice(&self.targets, (self.b, self.t), &dev)?))
    }

    fn outputs(&self, logp: &Tensor) -> Result<Vec<DatumOutput>> {
        let rows = logp.to_dtype(DType::F32)?.to_vec2::<f32>()?;
        Ok(self.data.iter().zip(rows).map(|(d, r)| DatumOutput { logprobs: r[..d.model_input.len()].to_vec() }).collect())
    }
}

impl LocalTrainer {
    /// The summed gradient of `loss` over `chunks` through [`train_pass`]; adds each chunk's loss
    /// to `total` and its log-probabilities to `outputs`.
    fn gradients_hand_written(&self, chunks: &[&[Datum]], loss: &LossFn, kl: Option<&KlLoss>, total: &mut f64, outputs: &mut Vec<DatumOutput>) -> Result<Vec<Option<Tensor>>> {
        let mut grads = train_pass::Grads::zeros(self.vars.iter().map(|v| v.as_tensor()));
        for (chunk, first) in chunks.iter().zip(offsets(chunks)) {
            let batch = Batch::new(chunk, DType::F32, kl.map(|k| (k, first)))?;
            let (logp, tape) = train_pass::forward(&self.model, batch.pass(self.options.temperature), true)?;
            // The loss itself is a handful of element-wise ops on `[b, t]`: candle's autograd
            // differentiates it (one definition for both paths, rl/loss.rs), the pass the rest.
            let logp = Var::from_tensor(&Tensor::from_vec(logp, (batch.b, batch.t), &Device::Cpu)?)?;
            let l = loss::loss_tensor(loss, logp.as_tensor(), &batch.inputs)?;
            *total += l.to_dtype(DType::F64)?.to_vec0::<f64>()?;
            let dlogp = match l.backward()?.get(logp.as_tensor()) {
                Some(g) => g.flatten_all()?.to_vec1::<f32>()?,
                None => vec![0.0; batch.b * batch.t],
            };
            train_pass::backward(&self.model, batch.pass(self.options.temperature), tape.expect("forward kept its tape"), &dlogp, &mut grads)?;
            outputs.extend(batch.outputs(logp.as_tensor())?);
        }
        self.vars
            .iter()
            .map(|v| {
                let g = grads.take(v.as_tensor()).expect("a buffer per var");
                Ok(Some(Tensor::from_vec(g, v.shape(), &Device::Cpu)?))
            })
            .collect()
    }

    /// As [`Self::gradients_hand_written`], through candle's autograd.
    fn gradients_autograd(&self, chunks: &[&[Datum]], loss: &LossFn, kl: Option<&KlLoss>, total: &mut f64, outputs: &mut Vec<DatumOutput>) -> Result<Vec<Option<Tensor>>> {
        let mut acc: Vec<Option<Tensor>> = vec![None; self.vars.len()];
        for (chunk, first) in chunks.iter().zip(offsets(chunks)) {
            let batch = Batch::new(chunk, self.vars[0].dtype(), kl.map(|k| (k, first)))?;
            let (tokens, targets) = batch.tensors()?;
            let logp = self.target_logprobs(&tokens, &targets)?;
            let l = loss::loss_tensor(loss, &logp, &batch.inputs)?;
            *total += l.to_dtype(DType::F64)?.to_vec0::<f64>()?;
            let grads = l.backward()?;
            for (slot, var) in acc.iter_mut().zip(&self.vars) {
                if let Some(g) = grads.get(var.as_tensor()) {
                    *slot = Some(match slot.take() {
                        Some(prev) => (prev + g)?,
                        None => g.clone(),
                    });
                }
            }
            outputs.extend(batch.outputs(&logp.detach())?);
        }
        Ok(acc)
    }

    /// Computes the loss over `data` and adds its gradient to the accumulated gradient.
    ///
    /// # Errors
    /// An invalid datum, or a tensor failure. Nothing is accumulated on error.
    pub fn forward_backward(&mut self, data: &[Datum], loss: &LossFn) -> Result<ForwardBackwardOutput> {
        self.forward_backward_with(data, loss, None)
    }

    /// As [`Self::forward_backward`], with a KL-to-reference term added to the loss.
    ///
    /// # Errors
    /// As `forward_backward`, or a KL term without one row per datum and one entry per target.
    pub fn forward_backward_with(&mut self, data: &[Datum], loss: &LossFn, kl: Option<&KlLoss>) -> Result<ForwardBackwardOutput> {
        loss.validate().map_err(|e| Error::InvalidArgument { what: "loss_fn", reason: e.to_string() })?;
        if let Some(kl) = kl.filter(|k| k.reference.len() != data.len() || k.coef.len() != data.len()) {
            return Err(Error::InvalidArgument { what: "kl", reason: format!("{} reference and {} coefficient rows for {} datums", kl.reference.len(), kl.coef.len(), data.len()) });
        }
        let chunks = self.microbatches(data, loss)?;
        let mut total = 0.0f64;
        let mut outputs = Vec::with_capacity(data.len());
        // Accumulate into fresh buffers and commit only on success ("nothing is accumulated on
        // error").
        let acc = if self.hand_written_pass() {
            self.gradients_hand_written(&chunks, loss, kl, &mut total, &mut outputs)?
        } else {
            self.gradients_autograd(&chunks, loss, kl, &mut total, &mut outputs)?
        };
        if !total.is_finite() {
            return Err(Error::InvalidArgument { what: "data", reason: format!("the loss is {total}; no gradient accumulated") });
        }
        let acc = acc.into_iter().zip(&self.vars).map(|(g, v)| g.map_or_else(|| v.zeros_like(), Ok)).collect::<candle_core::Result<Vec<_>>>()?;
        self.grads = Some(match self.grads.take() {
            Some(prev) => prev.iter().zip(&acc).map(|(a, b)| a + b).collect::<candle_core::Result<Vec<_>>>()?,
            None => acc,
        });
        // Absent inputs as the loss reads them: q and A zero, weights one.
        let longest = data.iter().map(|d| d.model_input.len()).max().unwrap_or(0);
        let (zeros, ones) = (vec![0f32; longest], vec![1f32; longest]);
        let rows = data.iter().zip(&outputs).map(|(d, o)| {
            let (i, n) = (&d.loss_fn_inputs, d.model_input.len());
            [&o.logprobs[..], i.logprobs.as_deref().unwrap_or(&zeros[..n]), i.advantages.as_deref().unwrap_or(&zeros[..n]), i.weights.as_deref().unwrap_or(&ones[..n])]
        });
        let stats = crate::rl::loss::datum_stats(loss, rows);
        Ok(ForwardBackwardOutput { loss: total, outputs, stats })
    }

    /// Applies the accumulated gradient with AdamW and resets it.
    ///
    /// # Errors
    /// Invalid hyper-parameters, or no accumulated gradient.
    pub fn optim_step(&mut self, adam: &AdamParams) -> Result<OptimStepOutput> {
        AdamW::check(adam)?;
        let grads = self.grads.take().ok_or_else(|| Error::InvalidArgument {
            what: "optim_step",
            reason: "no gradient accumulated; call forward_backward first".into(),
        })?;
        let r = match self.opt.step(&self.vars, &grads, adam) {
            Ok(r) => r,
            Err(e) => {
                self.grads = Some(grads);
                return Err(e);
            }
        };
        let mut metrics = BTreeMap::new();
        metrics.insert("optim/grad_norm".to_string(), r.grad_norm);
        metrics.insert("optim/clipped".to_string(), if r.clipped { 1.0 } else { 0.0 });
        metrics.insert("optim/lr".to_string(), adam.learning_rate);
        Ok(OptimStepOutput { grad_norm: Some(r.grad_norm), clipped: r.clipped, step: self.opt.step_count(), metrics })
    }

    /// Saves weights and optimizer state into the directory `path`, to resume bit for bit.
    ///
    /// # Errors
    /// I/O failures.
    pub fn save_state(&mut self, path: &Path) -> Result<()> {
        state::save(path, &state::Header::new(&self.config, &self.options, self.opt.step, &self.names, &self.source), &self.vars, &self.opt)
    }

    /// Restores what [`LocalTrainer::save_state`] wrote.
    ///
    /// # Errors
    /// I/O failures, or a state of a different model or adapter layout.
    pub fn load_state(&mut self, path: &Path) -> Result<()> {
        let header = state::Header::new(&self.config, &self.options, 0, &self.names, &self.source);
        let step = state::load(path, &header, &self.vars, &mut self.opt)?;
        self.opt.step = step;
        self.grads = None;
        Ok(())
    }

    /// A sampler on a snapshot of the current weights (later steps do not change it).
    ///
    /// # Errors
    /// Tensor failures.
    pub fn sampler(&mut self) -> Result<LocalSampler> {
        // Snapshot: copy the trainable tensors so later optimizer steps (which update the Vars in
        // place) do not reach samplers already handed out.
        let mut weights: HashMap<String, Tensor> = HashMap::with_capacity(self.base.len() + self.names.len());
        for (k, v) in self.base.iter() {
            weights.insert(k.clone(), v.clone());
        }
        for (name, var) in self.names.iter().zip(&self.vars) {
            weights.insert(name.clone(), var.as_tensor().detach().copy()?);
        }
        if let Tuning::Lora(cfg) = &self.options.tuning {
            for name in &self.names {
                if let Some(prefix) = name.strip_suffix(".lora_A.weight") {
                    weights.insert(format!("{prefix}.lora_scale"), Tensor::new(&[cfg.scale() as f32], &Device::Cpu)?);
                }
            }
        }
        let pb = ParamBuilder::new(&weights, &Tuning::Frozen, &self.source, 0);
        let mut model = Model::new(&self.config, &pb)?;
        if self.options.sample_weights != SampleWeights::F32 {
            // Under LoRA the base never changes: quantise it once (or take the file's blocks).
            // Under full fine-tuning every weight (the tied head included) moves each step, so
            // each snapshot quantises its own Q8_0 copy.
            let frozen_base = matches!(self.options.tuning, Tuning::Lora(_));
            let cache = &mut self.quantized_base;
            model.quantize_for_inference(|name, w| if frozen_base { cache.get(name, w) } else { quant::q8_0(w) })?;
        }
        Ok(LocalSampler::new(Arc::new(model), self.tokenizer.clone()))
    }
}
