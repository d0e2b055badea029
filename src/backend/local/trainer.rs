//! The local [`Trainer`]: forward/backward over padded datum batches, gradient accumulation,
//! AdamW, state save/load and merged export.
//!
//! Datums are right-padded into `[batch, seq]` micro-batches (padding is masked out and, being
//! after every real token, invisible to a causal model). Micro-batches are capped at
//! [`TrainerOptions::max_tokens_per_microbatch`] padded tokens to bound activation memory; since
//! every loss is a token-level sum, summing micro-batch gradients gives exactly the full-batch
//! gradient. On the hand-written pass, datums sharing a prompt (a GRPO group) are packed into
//! one row with the prompt once ([`super::pack`]): same results up to summation order, ~3× fewer
//! positions on the quickstart.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::{DType, Device, Tensor, Var};

use super::load::Loaded;
use super::model::{Config, Model, ParamBuilder, Tuning};
use super::optim::AdamW;
use super::pack::{self, Chunk, Row, Sharing};
use super::quant::{self, SampleWeights};
use super::sampler::LocalSampler;
use super::state;
use super::train_pass;
use crate::backend::error::{Error, Result};
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
    /// The teacher of `grpo.distill` and where it was loaded from, built on first use.
    teacher: Option<(PathBuf, Model)>,
    /// Whether the hand-written pass packs datums that share a prompt ([`super::pack`]).
    pack_prompts: bool,
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
        Ok(Self { config, options, base, model, names, vars, grads: None, opt, tokenizer: tokenizer.map(Arc::new), source, quantized_base: quant::Cache::default(), reference: None, teacher: None, pack_prompts: packing_from_env() })
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

    /// Turns prompt packing ([`super::pack`]) on or off for later calls (on unless
    /// `RLX_TRAIN_PACK=off`): the same results up to float summation order, for benchmarks and
    /// tests that compare the two layouts.
    pub fn set_prompt_packing(&mut self, on: bool) {
        self.pack_prompts = on;
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
        self.score(&self.model, data)
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
        // Scored as the policy is (`score`), packed through the training pass, rather than by
        // candle's model over unpacked rows, which scored each group's prompt once per
        // completion: 2.6x slower on the quickstart's shape (`cargo bench --bench trainer --
        // --phases reference_candle,reference`).
        let model = self.reference.as_ref().expect("built above");
        Ok(self.score(model, data)?.into_iter().map(|o| o.logprobs).collect())
    }

    /// Log-probabilities of each datum's targets under the teacher at `path` (`grpo.distill`: a
    /// model directory, a `.gguf` file, or a checkpoint's trainer state directory, see
    /// [`super::teacher`]), at the temperature the student is scored at (the learner temperature,
    /// by default the sampling temperature), loaded frozen on first use and kept (one teacher per
    /// run). Packed through the training pass as the KL reference is. At one temperature the
    /// term's fixed point is the student's logits equal to the teacher's; rejected: the teacher
    /// at 1 against a student sampled at 0.7, whose fixed point is a student 0.7× as sharp as
    /// its teacher (the quickstart's distilled student matched its teacher greedily and stayed
    /// 17 points below it sampled, docs/learning.md).
    ///
    /// # Errors
    /// Invalid datums, a teacher that cannot be loaded, tensor failures.
    pub fn teacher_logprobs(&mut self, path: &Path, data: &[Datum]) -> Result<Vec<Vec<f32>>> {
        if self.teacher.as_ref().is_none_or(|(p, _)| p != path) {
            let loaded = super::teacher::load(path)?;
            // Validation compares the tokenizers when both are directories here; a student from
            // elsewhere (`pypi:`, the Hub) is compared now, before the teacher scores anything.
            if let (Some(student), Some(teacher)) = (&self.tokenizer, &loaded.tokenizer)
                && student.get_vocab(true) != teacher.get_vocab(true)
            {
                let reason = format!("teacher `{}` has another tokenizer than the student (their vocabularies differ)", path.display());
                return Err(Error::InvalidArgument { what: "grpo.distill.teacher", reason });
            }
            let model = Model::new(&loaded.config, &ParamBuilder::new(&loaded.weights, &Tuning::Frozen, path, 0))?;
            self.teacher = Some((path.to_path_buf(), model));
        }
        let (_, model) = self.teacher.as_ref().expect("built above");
        Ok(self.score(model, data)?.into_iter().map(|o| o.logprobs).collect())
    }

    /// Log-probabilities of each datum's targets under `model` (the policy, the KL reference or
    /// the teacher) at the learner temperature, without a gradient: through [`train_pass`] with
    /// any common prefix packed once, or candle's model over plain rows (f64,
    /// `RLX_TRAIN_PASS=autograd`).
    fn score(&self, model: &Model, data: &[Datum]) -> Result<Vec<DatumOutput>> {
        let temperature = self.options.temperature;
        let dtype = model.embed_tokens().dtype();
        let hand_written = self.hand_written_pass() && dtype == DType::F32;
        let sharing = (hand_written && self.pack_prompts).then_some(Sharing::Any);
        let mut outputs = Vec::with_capacity(data.len());
        for chunk in self.microbatches(data, &LossFn::CrossEntropy, sharing)? {
            let batch = Batch::new(&chunk, dtype, None)?;
            let logp = if hand_written {
                train_pass::forward(model, batch.pass(temperature), false)?.0
            } else {
                let (tokens, targets) = batch.tensors()?;
                self.target_logprobs(model, &tokens, &targets, temperature)?.detach().flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?
            };
            outputs.extend(batch.outputs(&logp));
        }
        Ok(outputs)
    }

    /// Whether forward/backward run through [`train_pass`] (f32, unless `RLX_TRAIN_PASS=autograd`)
    /// rather than candle's autograd (f64 gradient checks, and a reference to compare against).
    fn hand_written_pass(&self) -> bool {
        self.vars[0].dtype() == DType::F32 && !matches!(crate::switches::TRAIN_PASS.var().as_deref(), Some("autograd"))
    }

    /// Validated `data` in micro-batches, packed as `sharing` allows (`None`: plain rows).
    fn microbatches<'a>(&self, data: &'a [Datum], loss: &LossFn, sharing: Option<Sharing<'_>>) -> Result<Vec<Chunk<'a>>> {
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
        Ok(pack::plan(data, self.options.max_tokens_per_microbatch, sharing))
    }

    /// `log softmax(logits / T)[target]` under `model`, `[b, t]`.
    fn target_logprobs(&self, model: &Model, tokens: &Tensor, targets: &Tensor, temperature: f32) -> candle_core::Result<Tensor> {
        let (b, t) = tokens.dims2()?;
        let logits = model.forward(tokens, 0, None)?; // [b, t, vocab]
        // The model's own vocabulary (a teacher's may be padded differently from the policy's).
        let vocab = logits.dim(2)?;
        let logits = tempered(logits.reshape((b * t, vocab))?, temperature)?;
        let targets = targets.flatten_all()?.to_vec1::<u32>()?;
        super::target_logprob::target_logprobs(&logits, &targets)?.reshape((b, t))
    }
}

/// Prompt packing unless `RLX_TRAIN_PACK` is `off` (or `0`, `false`).
fn packing_from_env() -> bool {
    !matches!(crate::switches::TRAIN_PACK.var().as_deref(), Some("off" | "0" | "false"))
}

/// `logits / temperature` (the distribution the policy samples at that temperature).
fn tempered(logits: Tensor, temperature: f32) -> candle_core::Result<Tensor> {
    if temperature == 1.0 { Ok(logits) } else { logits / f64::from(temperature) }
}

/// Datums laid out in rows (see [`pack`]) and padded into tensors.
struct Batch<'a> {
    data: &'a [Datum],
    b: usize,
    t: usize,
    tokens: Vec<u32>,
    targets: Vec<u32>,
    /// Packed rows' per-token positions and segments (`train_pass::Packing`); empty when every
    /// row is a plain datum.
    positions: Vec<u32>,
    segments: Vec<u32>,
    /// Per datum: its row, its shared positions, the column of its own first position.
    place: Vec<(usize, usize, usize)>,
    inputs: TokenInputs,
}

impl<'a> Batch<'a> {
    /// `kl`: the KL loss term (indexed by `chunk.first` and on).
    fn new(chunk: &Chunk<'a>, dtype: DType, kl: Option<&KlLoss>) -> Result<Self> {
        let data = chunk.data;
        let b = chunk.rows.len();
        let (mut lens, mut next) = (Vec::with_capacity(b), 0);
        for &row in &chunk.rows {
            let ds = &data[next..next + row.count];
            lens.push(pack::row_len(ds, row));
            next += row.count;
        }
        let t = lens.iter().copied().max().unwrap_or(0);
        let packed = chunk.rows.iter().any(|r| r.shared > 0);
        let z = |on: bool| if on { vec![0f32; b * t] } else { Vec::new() };
        let mut tokens = vec![0u32; b * t];
        let mut targets = vec![0u32; b * t];
        let (mut w, mut q, mut a, mut valid) = (z(true), z(true), z(true), z(true));
        let (mut reference, mut coef) = (z(kl.is_some()), z(kl.is_some()));
        // Padding sees the prefix and other padding only; no loss reads it.
        let (mut positions, mut segments) = if packed { (vec![0u32; b * t], vec![u32::MAX; b * t]) } else { (Vec::new(), Vec::new()) };
        let mut place = Vec::with_capacity(data.len());
        let mut next = 0;
        for (r, &Row { count, shared }) in chunk.rows.iter().enumerate() {
            let base = r * t;
            // The shared positions carry no loss (valid 0): `pack` shares only inert ones.
            let head = &data[next];
            tokens[base..base + shared].copy_from_slice(&head.model_input[..shared]);
            targets[base..base + shared].copy_from_slice(&head.loss_fn_inputs.target_tokens[..shared]);
            if packed {
                segments[base..base + shared].fill(0);
                positions[base..base + shared].iter_mut().zip(0u32..).for_each(|(p, j)| *p = j);
            }
            let mut col = shared;
            for (k, d) in data[next..next + count].iter().enumerate() {
                let (n, index) = (d.model_input.len(), chunk.first + next + k);
                let dst = base + col..base + col + n - shared;
                tokens[dst.clone()].copy_from_slice(&d.model_input[shared..]);
                let inp = &d.loss_fn_inputs;
                targets[dst.clone()].copy_from_slice(&inp.target_tokens[shared..]);
                match &inp.weights {
                    Some(x) => w[dst.clone()].copy_from_slice(&x[shared..]),
                    None => w[dst.clone()].fill(1.0),
                }
                if let Some(x) = &inp.logprobs {
                    q[dst.clone()].copy_from_slice(&x[shared..]);
                }
                if let Some(x) = &inp.advantages {
                    a[dst.clone()].copy_from_slice(&x[shared..]);
                }
                valid[dst.clone()].fill(1.0);
                if let Some(kl) = kl {
                    let (rf, c) = (&kl.reference[index], &kl.coef[index]);
                    if rf.len() != n || c.len() != n {
                        return Err(Error::InvalidDatum { index, reason: format!("KL term of {} reference and {} coefficient entries for {n} targets", rf.len(), c.len()) });
                    }
                    reference[dst.clone()].copy_from_slice(&rf[shared..]);
                    coef[dst.clone()].copy_from_slice(&c[shared..]);
                }
                if packed {
                    segments[dst.clone()].fill(k as u32 + 1);
                    positions[dst.clone()].iter_mut().zip(shared as u32..).for_each(|(p, j)| *p = j);
                }
                place.push((r, shared, col));
                col += n - shared;
            }
            next += count;
        }
        let dev = Device::Cpu;
        let f = |v: Vec<f32>| -> candle_core::Result<Tensor> { Tensor::from_vec(v, (b, t), &dev)?.to_dtype(dtype) };
        let kl = match kl {
            None => None,
            Some(kl) => Some(KlTensors { reference: f(reference)?, coef: f(coef)?, kind: kl.estimator }),
        };
        Ok(Self {
            data,
            b,
            t,
            tokens,
            targets,
            positions,
            segments,
            place,
            inputs: TokenInputs { weights: f(w)?, logprobs: f(q)?, advantages: f(a)?, valid: f(valid)?, kl },
        })
    }

    fn pass(&self, temperature: f32) -> train_pass::Batch<'_> {
        let packing = (!self.segments.is_empty()).then_some(train_pass::Packing { positions: &self.positions, segments: &self.segments });
        train_pass::Batch { tokens: &self.tokens, targets: &self.targets, b: self.b, t: self.t, temperature, packing }
    }

    /// Tokens and targets as `[b, t]` tensors, for candle's autograd path (plain rows only).
    fn tensors(&self) -> candle_core::Result<(Tensor, Tensor)> {
        debug_assert!(self.segments.is_empty(), "candle's model runs plain rows only");
        let dev = Device::Cpu;
        Ok((Tensor::from_slice(&self.tokens, (self.b, self.t), &dev)?, Tensor::from_slice(&self.targets, (self.b, self.t), &dev)?))
    }

    /// Each datum's log-probabilities out of the batch's `[b · t]`.
    fn outputs(&self, logp: &[f32]) -> Vec<DatumOutput> {
        self.data
            .iter()
            .zip(&self.place)
            .map(|(d, &(r, shared, col))| {
                let at = |j: usize| r * self.t + if j < shared { j } else { col + j - shared };
                DatumOutput { logprobs: (0..d.model_input.len()).map(|j| logp[at(j)]).collect() }
            })
            .collect()
    }
}

impl LocalTrainer {
    /// The summed gradient of `loss` over `chunks` through [`train_pass`]; adds each chunk's loss
    /// to `total` and its log-probabilities to `outputs`.
    fn gradients_hand_written(&self, chunks: &[Chunk<'_>], loss: &LossFn, kl: Option<&KlLoss>, total: &mut f64, outputs: &mut Vec<DatumOutput>) -> Result<Vec<Option<Tensor>>> {
        let mut grads = train_pass::Grads::zeros(self.vars.iter().map(|v| v.as_tensor()));
        for chunk in chunks {
            let batch = Batch::new(chunk, DType::F32, kl)?;
            let (logp, tape) = train_pass::forward(&self.model, batch.pass(self.options.temperature), true)?;
            // The loss itself is a handful of element-wise ops on `[b, t]`: candle's autograd
            // differentiates it (one definition for both paths, rl/loss.rs), the pass the rest.
            outputs.extend(batch.outputs(&logp));
            let logp = Var::from_tensor(&Tensor::from_vec(logp, (batch.b, batch.t), &Device::Cpu)?)?;
            let l = loss::loss_tensor(loss, logp.as_tensor(), &batch.inputs)?;
            *total += l.to_dtype(DType::F64)?.to_vec0::<f64>()?;
            let dlogp = match l.backward()?.get(logp.as_tensor()) {
                Some(g) => g.flatten_all()?.to_vec1::<f32>()?,
                None => vec![0.0; batch.b * batch.t],
            };
            train_pass::backward(&self.model, batch.pass(self.options.temperature), tape.expect("forward kept its tape"), &dlogp, &mut grads)?;
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
    fn gradients_autograd(&self, chunks: &[Chunk<'_>], loss: &LossFn, kl: Option<&KlLoss>, total: &mut f64, outputs: &mut Vec<DatumOutput>) -> Result<Vec<Option<Tensor>>> {
        let mut acc: Vec<Option<Tensor>> = vec![None; self.vars.len()];
        for chunk in chunks {
            let batch = Batch::new(chunk, self.vars[0].dtype(), kl)?;
            let (tokens, targets) = batch.tensors()?;
            let logp = self.target_logprobs(&self.model, &tokens, &targets, self.options.temperature)?;
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
            outputs.extend(batch.outputs(&logp.detach().flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?));
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
        // What sampling and evaluating freed goes back before the step's largest tensors exist:
        // once a step, at its first call (a Tinker client may accumulate several).
        if self.grads.is_none() {
            crate::alloc::release();
        }
        let hand_written = self.hand_written_pass();
        let sharing = if hand_written && self.pack_prompts { Sharing::for_loss(loss, kl) } else { None };
        let chunks = self.microbatches(data, loss, sharing)?;
        let mut total = 0.0f64;
        let mut outputs = Vec::with_capacity(data.len());
        // Accumulate into fresh buffers and commit only on success ("nothing is accumulated on
        // error").
        let acc = if hand_written {
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
