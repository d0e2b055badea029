//! A differentiable decoder-only transformer for the Llama (SmolLM2), Qwen2 and Qwen3 families.
//!
//! All three are the same pre-norm block: `x + Attn(RMSNorm(x))`, then `x + MLP(RMSNorm(x))`, with
//! grouped-query attention, rotary position embeddings in the "rotate half" (GPT-NeoX) layout and a
//! SwiGLU MLP (`down(silu(gate(x)) * up(x))`). They differ only in flags, so one file with
//! [`Arch`]-driven flags replaces three near-copies:
//! - Qwen2: biases on the q/k/v projections.
//! - Qwen3: RMSNorm on each head of q and k before rotary (`q_norm`, `k_norm`), explicit `head_dim`.
//! - Llama: optional `attention_bias`; SmolLM2 ties the LM head to the embeddings.
//!
//! Reference: Hugging Face transformers `modeling_llama.py`, `modeling_qwen2.py`,
//! `modeling_qwen3.py`; candle-transformers `models/qwen3.rs` (whose fused CPU kernels we avoid
//! while training, see below).
//!
//! # Why not candle-transformers
//! candle's fused CPU kernels (`rms_norm`, `softmax_last_dim`, `rope`, CPU flash attention) are
//! registered without a backward pass, so gradients silently stop at them (rust-stack.md §3.2).
//! Every block here picks the fused kernel only when nothing upstream needs a gradient
//! ([`Tensor::track_op`] is false, i.e. sampling) and the differentiable composition otherwise.
//!
//! # Parameters
//! Tensor names and shapes are the Hugging Face ones (`model.layers.{i}.self_attn.q_proj.weight`,
//! ...). [`ParamBuilder`] hands each block its tensors: frozen plain tensors, trainable [`Var`]s
//! (full fine-tuning) or frozen bases with LoRA adapters (see [`super::lora`]).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use candle_core::{D, DType, Device, Module, Tensor, Var};

use super::lora::{Lora, LoraConfig};
use super::quant::QMatrix;
use crate::rng::SplitMix64 as Rng;
use crate::backend::error::{Error, Result};

/// The model family, from `config.json`'s `model_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// Llama, SmolLM, Mistral-style dense models.
    Llama,
    /// Qwen2 / Qwen2.5.
    Qwen2,
    /// Qwen3 (dense).
    Qwen3,
}

/// Model hyper-parameters, parsed from a Hugging Face `config.json` (or GGUF metadata).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Config {
    /// Family.
    pub arch: Arch,
    /// Vocabulary size (rows of the embedding).
    pub vocab_size: usize,
    /// Residual width.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Decoder blocks.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention).
    pub num_key_value_heads: usize,
    /// Per-head width.
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// Rotary base.
    pub rope_theta: f64,
    /// Longest supported sequence.
    pub max_position_embeddings: usize,
    /// LM head shares the embedding matrix.
    pub tie_word_embeddings: bool,
    /// Biases on q/k/v projections (Qwen2 always; Llama/Qwen3 when `attention_bias`).
    pub attention_bias: bool,
    /// End-of-sequence token ids (from config or GGUF metadata).
    #[serde(default)]
    pub eos_token_ids: Vec<u32>,
}

impl Config {
    /// Parse a Hugging Face `config.json`.
    ///
    /// # Errors
    /// [`Error::Model`] for an unsupported `model_type` or a missing field.
    pub fn from_hf_json(text: &str, path: &Path) -> Result<Self> {
        let bad = |reason: String| Error::Model { path: path.to_path_buf(), reason };
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        let arch = match v.get("model_type").and_then(|m| m.as_str()) {
            Some("llama") | Some("mistral") => Arch::Llama,
            Some("qwen2") => Arch::Qwen2,
            Some("qwen3") => Arch::Qwen3,
            other => return Err(bad(format!("unsupported `model_type` {other:?} (expected llama, qwen2 or qwen3)"))),
        };
        let num = |k: &str| -> Result<usize> {
            v.get(k).and_then(|x| x.as_u64()).map(|x| x as usize).ok_or_else(|| bad(format!("missing integer field `{k}`")))
        };
        let heads = num("num_attention_heads")?;
        let hidden = num("hidden_size")?;
        let eos_token_ids = match v.get("eos_token_id") {
            Some(serde_json::Value::Number(n)) => n.as_u64().map(|x| vec![x as u32]).unwrap_or_default(),
            Some(serde_json::Value::Array(a)) => a.iter().filter_map(|x| x.as_u64()).map(|x| x as u32).collect(),
            _ => Vec::new(),
        };
        let cfg = Config {
            arch,
            vocab_size: num("vocab_size")?,
            hidden_size: hidden,
            intermediate_size: num("intermediate_size")?,
            num_hidden_layers: num("num_hidden_layers")?,
            num_attention_heads: heads,
            num_key_value_heads: num("num_key_value_heads").unwrap_or(heads),
            head_dim: num("head_dim").unwrap_or(hidden / heads.max(1)),
            rms_norm_eps: v.get("rms_norm_eps").and_then(|x| x.as_f64()).unwrap_or(1e-6),
            rope_theta: v.get("rope_theta").and_then(|x| x.as_f64()).unwrap_or(10_000.0),
            max_position_embeddings: num("max_position_embeddings").unwrap_or(4096),
            tie_word_embeddings: v.get("tie_word_embeddings").and_then(|x| x.as_bool()).unwrap_or(false),
            attention_bias: arch == Arch::Qwen2 || v.get("attention_bias").and_then(|x| x.as_bool()).unwrap_or(false),
            eos_token_ids,
        };
        cfg.validate(path)?;
        Ok(cfg)
    }

    /// The `config.json` Hugging Face tools expect for these hyper-parameters.
    pub fn to_hf_json(&self) -> serde_json::Value {
        let (model_type, arch) = match self.arch {
            Arch::Llama => ("llama", "LlamaForCausalLM"),
            Arch::Qwen2 => ("qwen2", "Qwen2ForCausalLM"),
            Arch::Qwen3 => ("qwen3", "Qwen3ForCausalLM"),
        };
        serde_json::json!({
            "architectures": [arch],
            "model_type": model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_bias": self.attention_bias,
            "hidden_act": "silu",
            "torch_dtype": "float32",
            "eos_token_id": self.eos_token_ids,
        })
    }

    /// Check divisibility and non-zero sizes.
    ///
    /// # Errors
    /// [`Error::Model`] naming the inconsistent field.
    pub fn validate(&self, path: &Path) -> Result<()> {
        let bad = |reason: String| Err(Error::Model { path: path.to_path_buf(), reason });
        if self.vocab_size == 0 || self.hidden_size == 0 || self.num_hidden_layers == 0 || self.num_attention_heads == 0 {
            return bad("sizes must be non-zero".into());
        }
        if self.num_key_value_heads == 0 || !self.num_attention_heads.is_multiple_of(self.num_key_value_heads) {
            return bad(format!(
                "`num_attention_heads` ({}) must be a multiple of `num_key_value_heads` ({})",
                self.num_attention_heads, self.num_key_value_heads
            ));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return bad(format!("`head_dim` must be even and non-zero, found {}", self.head_dim));
        }
        Ok(())
    }
}

/// How parameters are created: frozen (sampling), all trainable, or LoRA adapters on a frozen base.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Tuning {
    /// No trainable parameters.
    Frozen,
    /// Every weight is trainable.
    Full,
    /// Base frozen; low-rank adapters on the target projections are trainable.
    Lora(LoraConfig),
}

/// Hands model blocks their tensors by Hugging Face name, creating [`Var`]s for trainable ones.
///
/// Mirrors candle-nn's `VarBuilder` (`pp` for prefixes) but knows about frozen bases and LoRA.
pub struct ParamBuilder<'a> {
    weights: &'a HashMap<String, Tensor>,
    tuning: &'a Tuning,
    prefix: String,
    state: std::rc::Rc<std::cell::RefCell<BuilderState>>,
    path: &'a Path,
}

struct BuilderState {
    vars: Vec<(String, Var)>,
    rng: Rng,
}

impl<'a> ParamBuilder<'a> {
    /// A builder over `weights` (which may already contain `lora_A`/`lora_B` adapters to reuse).
    /// `path` names the source in errors; `seed` initialises new LoRA adapters.
    pub fn new(weights: &'a HashMap<String, Tensor>, tuning: &'a Tuning, path: &'a Path, seed: u64) -> Self {
        let state = BuilderState { vars: Vec::new(), rng: Rng::new(seed) };
        Self { weights, tuning, prefix: String::new(), state: std::rc::Rc::new(std::cell::RefCell::new(state)), path }
    }

    /// A builder for the sub-module `name`.
    pub fn pp(&self, name: &str) -> Self {
        let prefix = if self.prefix.is_empty() { name.to_string() } else { format!("{}.{name}", self.prefix) };
        Self { weights: self.weights, tuning: self.tuning, prefix, state: self.state.clone(), path: self.path }
    }

    fn full_name(&self, name: &str) -> String {
        if self.prefix.is_empty() { name.to_string() } else { format!("{}.{name}", self.prefix) }
    }

    /// The tensor `name` with the expected `shape`; a `Var` under full fine-tuning.
    ///
    /// # Errors
    /// [`Error::Model`] if it is missing or has another shape.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let full = self.full_name(name);
        let t = self.weights.get(&full).ok_or_else(|| Error::Model { path: self.path.to_path_buf(), reason: format!("missing tensor `{full}`") })?;
        if t.dims() != shape {
            return Err(Error::Model { path: self.path.to_path_buf(), reason: format!("tensor `{full}` has shape {:?}, expected {shape:?}", t.dims()) });
        }
        if *self.tuning == Tuning::Full {
            // Copy: the Var is updated in place by the optimizer, the source map must stay intact.
            let v = Var::from_tensor(&t.copy()?)?;
            self.state.borrow_mut().vars.push((full, v.clone()));
            return Ok(v.as_tensor().clone());
        }
        Ok(t.clone())
    }

    /// Whether tensor `name` exists.
    pub fn contains(&self, name: &str) -> bool {
        self.weights.contains_key(&self.full_name(name))
    }

    /// The LoRA adapter for the projection at this prefix (`module` is its short name, like
    /// `q_proj`): existing adapter tensors are reused (frozen, for sampling); under
    /// [`Tuning::Lora`] targets get new trainable adapters.
    fn lora(&self, module: &str, in_dim: usize, out_dim: usize, dtype: DType) -> Result<Option<Lora>> {
        let (a_name, b_name) = (self.full_name("lora_A.weight"), self.full_name("lora_B.weight"));
        match self.tuning {
            Tuning::Lora(cfg) if cfg.targets.iter().any(|t| t == module) => {
                let mut st = self.state.borrow_mut();
                let lora = match (self.weights.get(&a_name), self.weights.get(&b_name)) {
                    (Some(a), Some(b)) => Lora::trainable_from(a, b, cfg)?,
                    _ => Lora::init(in_dim, out_dim, cfg, dtype, &mut st.rng)?,
                };
                let (a, b) = lora.vars().expect("trainable adapter has vars");
                st.vars.push((a_name, a));
                st.vars.push((b_name, b));
                Ok(Some(lora))
            }
            _ => match (self.weights.get(&a_name), self.weights.get(&b_name)) {
                (Some(a), Some(b)) => {
                    let scale = self.weights.get(&self.full_name("lora_scale")).map(|s| s.to_vec1::<f32>()).transpose()?;
                    let scale = scale.and_then(|s| s.first().copied()).unwrap_or(1.0);
                    Ok(Some(Lora::frozen(a.clone(), b.clone(), f64::from(scale))))
                }
                _ => Ok(None),
            },
        }
    }

    /// The trainable parameters created so far, with their Hugging Face (or PEFT) names.
    pub fn vars(&self) -> Vec<(String, Var)> {
        self.state.borrow().vars.clone()
    }
}

/// A projection `y = x Wᵀ + b`, optionally with a LoRA adapter.
#[derive(Debug, Clone)]
pub struct Linear {
    pub(super) weight: Tensor,
    pub(super) bias: Option<Tensor>,
    pub(super) lora: Option<Lora>,
    /// A quantised copy of `weight` that the sampler's decoder multiplies by (see
    /// [`super::quant`]); candle's forward always uses the f32 weight.
    quantized: Option<Arc<QMatrix>>,
}

impl Linear {
    /// Load `weight` `[out, in]` (and `bias` `[out]` when `bias`); attach a LoRA adapter if the
    /// tuning targets `module`.
    ///
    /// # Errors
    /// Missing or misshapen tensors.
    pub fn new(in_dim: usize, out_dim: usize, bias: bool, module: &str, pb: &ParamBuilder) -> Result<Self> {
        let weight = pb.get("weight", &[out_dim, in_dim])?;
        let bias = if bias { Some(pb.get("bias", &[out_dim])?) } else { None };
        let lora = pb.lora(module, in_dim, out_dim, weight.dtype())?;
        Ok(Self { weight, bias, lora, quantized: None })
    }

    /// A projection from an existing weight (the tied LM head).
    pub fn from_weight(weight: Tensor) -> Self {
        Self { weight, bias: None, lora: None, quantized: None }
    }

    /// Whether inference runs on a quantised copy of the weight.
    pub fn is_quantized(&self) -> bool {
        self.quantized.is_some()
    }

    /// The quantised copy the sampler decodes with, if any.
    pub fn quantized(&self) -> Option<&Arc<QMatrix>> {
        self.quantized.as_ref()
    }

    /// The base weight `[out, in]`.
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// The adapter, if any.
    pub fn lora(&self) -> Option<&Lora> {
        self.lora.as_ref()
    }

    /// The effective weight (base plus scaled adapter product), for export.
    ///
    /// # Errors
    /// Tensor failures.
    pub fn merged_weight(&self) -> Result<Tensor> {
        Ok(match &self.lora {
            Some(l) => (&self.weight + l.delta()?)?,
            None => self.weight.clone(),
        })
    }

    /// The bias, if any.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        // Flatten leading dims: one 2-D GEMM instead of a broadcast batched one.
        let dims = x.dims().to_vec();
        let in_dim = dims[dims.len() - 1];
        let x2 = x.reshape(((), in_dim))?;
        let mut y = super::frozen::frozen_aware_matmul_t(&x2, &self.weight)?;
        if let Some(b) = &self.bias {
            y = y.broadcast_add(b)?;
        }
        if let Some(l) = &self.lora {
            y = (y + l.forward(&x2)?)?;
        }
        let mut out = dims;
        *out.last_mut().expect("non-empty") = y.dim(1)?;
        y.reshape(out)
    }
}

/// RMSNorm with a learned scale.
#[derive(Debug, Clone)]
pub struct RmsNorm {
    weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    /// Load `weight` `[dim]`.
    ///
    /// # Errors
    /// Missing or misshapen tensor.
    pub fn new(dim: usize, eps: f64, pb: &ParamBuilder) -> Result<Self> {
        Ok(Self { weight: pb.get("weight", &[dim])?, eps })
    }

    /// The scale.
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// The epsilon under the square root.
    pub fn eps(&self) -> f64 {
        self.eps
    }
}

impl Module for RmsNorm {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        // The fused kernel has no backward and no f64 path (f64 is for gradient checks).
        if x.track_op() || self.weight.track_op() || x.dtype() == DType::F64 {
            candle_nn::ops::rms_norm_slow(x, &self.weight, self.eps as f32)
        } else {
            candle_nn::ops::rms_norm(&x.contiguous()?, &self.weight, self.eps as f32)
        }
    }
}

/// Rotary embedding tables.
#[derive(Debug, Clone)]
struct Rope {
    /// `[max_pos, head_dim / 2]`.
    cos: Tensor,
    sin: Tensor,
}

impl Rope {
    fn new(cfg: &Config, dtype: DType, dev: &Device) -> Result<Self> {
        let half = cfg.head_dim / 2;
        let inv: Vec<f64> = (0..half).map(|i| 1.0 / cfg.rope_theta.powf(2.0 * i as f64 / cfg.head_dim as f64)).collect();
        let n = cfg.max_position_embeddings;
        let mut cos = Vec::with_capacity(n * half);
        let mut sin = Vec::with_capacity(n * half);
        for p in 0..n {
            for f in &inv {
                // Angles in f64, like the f32 reference after its own rounding: keeps long
                // positions accurate.
                let a = p as f64 * f;
                cos.push(a.cos());
                sin.push(a.sin());
            }
        }
        let cos = Tensor::from_vec(cos, (n, half), dev)?.to_dtype(dtype)?;
        let sin = Tensor::from_vec(sin, (n, half), dev)?.to_dtype(dtype)?;
        Ok(Self { cos, sin })
    }

    /// Rotate `x` `[b, heads, t, head_dim]` for positions `offset..offset + t`.
    fn apply(&self, x: &Tensor, offset: usize) -> candle_core::Result<Tensor> {
        let t = x.dim(2)?;
        let cos = self.cos.narrow(0, offset, t)?;
        let sin = self.sin.narrow(0, offset, t)?;
        if x.track_op() || x.dtype() == DType::F64 {
            candle_nn::rotary_emb::rope_slow(x, &cos, &sin)
        } else {
            candle_nn::rotary_emb::rope(&x.contiguous()?, &cos.contiguous()?, &sin.contiguous()?)
        }
    }
}

/// Per-layer key/value cache for incremental decoding.
///
/// Rows may be left-padded (several prompts of different lengths decoded as one batch):
/// `pads[r]` leading positions of row `r` are padding that no query attends to. RoPE makes the
/// shift harmless: attention scores depend only on position differences.
///
/// Keys and values live in buffers with room for more positions than are filled; a decoding step
/// writes its one new position in place and attends over a narrowed view, which candle's batched
/// GEMM reads through its strides. Appending with `Tensor::cat` instead copied the whole cache of
/// every layer at every token (quadratic in the completion length: 55 MB per token for 8 rows of
/// SmolLM2 at 150 positions).
// Not `Clone`: a clone would share the buffers that `append` writes in place.
#[derive(Debug, Default)]
pub struct KvCache {
    layers: Vec<Option<LayerCache>>,
    /// Left padding per batch row; empty means none.
    pads: Vec<usize>,
}

/// One layer's keys and values `[b, kv_heads, capacity, head_dim]`, the first `len` positions
/// filled. The buffers are never shared with another cache: [`KvCache::select_rows`] and growth
/// build new ones, so writing in place cannot reach a tensor someone else holds.
#[derive(Debug)]
struct LayerCache {
    k: Tensor,
    v: Tensor,
    len: usize,
}

impl LayerCache {
    /// Appends `k`, `v` `[b, kv_heads, t, head_dim]` and returns the filled views.
    fn append(slot: &mut Option<LayerCache>, k: &Tensor, v: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
        let t = k.dim(2)?;
        let (k, v) = (k.contiguous()?, v.contiguous()?);
        let len = slot.as_ref().map_or(0, |c| c.len);
        let cap = slot.as_ref().map_or(0, |c| c.k.dim(2).unwrap_or(0));
        if len + t > cap {
            // Room for the prompt plus 128 positions, then doubling: a handful of growths per
            // completion, each one copy.
            let new_cap = (len + t + 128).max(2 * cap);
            let (b, kvh, _, hd) = k.dims4()?;
            let grow = |old: Option<&Tensor>, new: &Tensor| -> candle_core::Result<Tensor> {
                let buf = Tensor::zeros((b, kvh, new_cap, hd), new.dtype(), new.device())?;
                if let Some(old) = old {
                    buf.slice_set(&old.narrow(2, 0, len)?.contiguous()?, 2, 0)?;
                }
                Ok(buf)
            };
            let (ok, ov) = (slot.as_ref().map(|c| &c.k), slot.as_ref().map(|c| &c.v));
            *slot = Some(LayerCache { k: grow(ok, &k)?, v: grow(ov, &v)?, len });
        }
        let c = slot.as_mut().expect("allocated above");
        c.k.slice_set(&k, 2, len)?;
        c.v.slice_set(&v, 2, len)?;
        c.len = len + t;
        Ok((c.k.narrow(2, 0, c.len)?, c.v.narrow(2, 0, c.len)?))
    }
}

impl KvCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty cache whose batch rows start with `pads[r]` padding positions.
    pub fn with_left_padding(pads: Vec<usize>) -> Self {
        let pads = if pads.iter().all(|&p| p == 0) { Vec::new() } else { pads };
        Self { layers: Vec::new(), pads }
    }

    /// Positions already cached.
    pub fn len(&self) -> usize {
        self.layers.first().and_then(|l| l.as_ref()).map_or(0, |c| c.len)
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A new cache holding the batch rows `rows` of this one, in that order (copied).
    ///
    /// # Errors
    /// Tensor failures.
    pub fn with_rows(&self, rows: &[u32]) -> Result<KvCache> {
        let dev = self.layers.iter().flatten().next().map(|c| c.k.device().clone()).unwrap_or(Device::Cpu);
        let index = Tensor::new(rows, &dev)?;
        let layers = self
            .layers
            .iter()
            .map(|l| l.as_ref().map(|c| Ok::<_, Error>(LayerCache { k: c.k.index_select(&index, 0)?, v: c.v.index_select(&index, 0)?, len: c.len })).transpose())
            .collect::<Result<Vec<_>>>()?;
        let pads = if self.pads.is_empty() { Vec::new() } else { rows.iter().map(|&r| self.pads[r as usize]).collect() };
        Ok(KvCache { layers, pads })
    }

    /// Keep only the batch rows `rows`, in that order (finished sequences drop out of the batch;
    /// a row listed `n` times is repeated, one prefill shared by `n` samples).
    ///
    /// # Errors
    /// Tensor failures.
    pub fn select_rows(&mut self, rows: &[u32]) -> Result<()> {
        // `with_rows` copies into new buffers (same capacity), so no view of the old ones is
        // written through afterwards.
        *self = self.with_rows(rows)?;
        Ok(())
    }
}

/// The additive attention mask for `t` queries at positions `offset..offset+t` over `s` keys:
/// causal, and with left padding also blind to each row's padding. `None` when nothing is masked
/// (one query, no padding).
fn attention_mask(b: usize, t: usize, s: usize, offset: usize, pads: &[usize], dtype: DType, dev: &Device) -> candle_core::Result<Option<Tensor>> {
    if pads.is_empty() {
        return if t > 1 { causal_mask(t, s, offset, dtype, dev).map(Some) } else { Ok(None) };
    }
    let mut mask = Vec::with_capacity(b * t * s);
    for &pad in pads {
        for i in 0..t {
            let q = i + offset;
            // A padding query attends to itself only: a row of all -inf would be NaN after the
            // softmax, and NaN times a zero weight is still NaN in the next product.
            mask.extend((0..s).map(|j| if j <= q && (j >= pad || j == q) { 0.0f32 } else { f32::NEG_INFINITY }));
        }
    }
    Tensor::from_vec(mask, (b, 1, 1, t, s), dev)?.to_dtype(dtype).map(Some)
}

/// Grouped-query self-attention.
#[derive(Debug, Clone)]
pub struct Attention {
    pub(super) q_proj: Linear,
    pub(super) k_proj: Linear,
    pub(super) v_proj: Linear,
    pub(super) o_proj: Linear,
    pub(super) q_norm: Option<RmsNorm>,
    pub(super) k_norm: Option<RmsNorm>,
    pub(super) heads: usize,
    pub(super) kv_heads: usize,
    pub(super) head_dim: usize,
}

impl Attention {
    /// Build from `self_attn.*`.
    ///
    /// # Errors
    /// Missing or misshapen tensors.
    pub fn new(cfg: &Config, pb: &ParamBuilder) -> Result<Self> {
        let (h, kvh, hd, d) = (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.hidden_size);
        let qk_norm = cfg.arch == Arch::Qwen3;
        Ok(Self {
            q_proj: Linear::new(d, h * hd, cfg.attention_bias, "q_proj", &pb.pp("q_proj"))?,
            k_proj: Linear::new(d, kvh * hd, cfg.attention_bias, "k_proj", &pb.pp("k_proj"))?,
            v_proj: Linear::new(d, kvh * hd, cfg.attention_bias, "v_proj", &pb.pp("v_proj"))?,
            o_proj: Linear::new(h * hd, d, false, "o_proj", &pb.pp("o_proj"))?,
            q_norm: if qk_norm { Some(RmsNorm::new(hd, cfg.rms_norm_eps, &pb.pp("q_norm"))?) } else { None },
            k_norm: if qk_norm { Some(RmsNorm::new(hd, cfg.rms_norm_eps, &pb.pp("k_norm"))?) } else { None },
            heads: h,
            kv_heads: kvh,
            head_dim: hd,
        })
    }

    fn forward(&self, x: &Tensor, rope: &Rope, offset: usize, cache: Option<&mut Option<LayerCache>>, mask: Option<&Tensor>) -> candle_core::Result<Tensor> {
        let (b, t, _d) = x.dims3()?;
        let (h, kvh, hd) = (self.heads, self.kv_heads, self.head_dim);
        // [b, t, heads*hd] -> [b, heads, t, hd]
        let q = self.q_proj.forward(x)?.reshape((b, t, h, hd))?;
        let k = self.k_proj.forward(x)?.reshape((b, t, kvh, hd))?;
        let v = self.v_proj.forward(x)?.reshape((b, t, kvh, hd))?.transpose(1, 2)?.contiguous()?;
        let q = match &self.q_norm { Some(n) => n.forward(&q)?, None => q };
        let k = match &self.k_norm { Some(n) => n.forward(&k)?, None => k };
        let q = rope.apply(&q.transpose(1, 2)?.contiguous()?, offset)?;
        let k = rope.apply(&k.transpose(1, 2)?.contiguous()?, offset)?;
        let (k, v) = match cache {
            Some(slot) => LayerCache::append(slot, &k, &v)?,
            None => (k, v),
        };
        let s = k.dim(2)?;
        // Grouped-query attention without copying K/V per query head: fold the `rep` query heads
        // that share a KV head into the row dim. q: [b, kvh, rep*t, hd], k: [b, kvh, s, hd].
        let rep = h / kvh;
        let q = q.reshape((b, kvh, rep * t, hd))?;
        let scale = 1.0 / (hd as f64).sqrt();
        let scores = (q.matmul(&k.t()?)? * scale)?; // [b, kvh, rep*t, s]
        let scores = match mask {
            // [t, s] or [b, 1, 1, t, s]
            Some(mask) => scores.reshape((b, kvh, rep, t, s))?.broadcast_add(mask)?.reshape((b, kvh, rep * t, s))?,
            None => scores,
        };
        let probs = if scores.track_op() || scores.dtype() == DType::F64 {
            candle_nn::ops::softmax(&scores, D::Minus1)?
        } else {
            candle_nn::ops::softmax_last_dim(&scores)?
        };
        let out = probs.matmul(&v)?; // [b, kvh, rep*t, hd]
        // -> [b, h, t, hd] -> [b, t, h*hd]
        let out = out.reshape((b, h, t, hd))?.transpose(1, 2)?.reshape((b, t, h * hd))?;
        self.o_proj.forward(&out)
    }
}

/// Additive causal mask `[t, s]` for queries at positions `offset..offset+t` over `s` keys.
fn causal_mask(t: usize, s: usize, offset: usize, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
    let mask: Vec<f32> = (0..t).flat_map(|i| (0..s).map(move |j| if j <= i + offset { 0.0 } else { f32::NEG_INFINITY })).collect();
    Tensor::from_vec(mask, (t, s), dev)?.to_dtype(dtype)
}

/// SwiGLU MLP.
#[derive(Debug, Clone)]
pub struct Mlp {
    pub(super) gate_proj: Linear,
    pub(super) up_proj: Linear,
    pub(super) down_proj: Linear,
}

impl Mlp {
    /// Build from `mlp.*`.
    ///
    /// # Errors
    /// Missing or misshapen tensors.
    pub fn new(cfg: &Config, pb: &ParamBuilder) -> Result<Self> {
        let (d, i) = (cfg.hidden_size, cfg.intermediate_size);
        Ok(Self {
            gate_proj: Linear::new(d, i, false, "gate_proj", &pb.pp("gate_proj"))?,
            up_proj: Linear::new(d, i, false, "up_proj", &pb.pp("up_proj"))?,
            down_proj: Linear::new(i, d, false, "down_proj", &pb.pp("down_proj"))?,
        })
    }
}

impl Module for Mlp {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let g = self.gate_proj.forward(x)?.silu()?;
        self.down_proj.forward(&(g * self.up_proj.forward(x)?)?)
    }
}

/// One decoder block.
#[derive(Debug, Clone)]
pub struct Layer {
    pub(super) self_attn: Attention,
    pub(super) mlp: Mlp,
    pub(super) input_layernorm: RmsNorm,
    pub(super) post_attention_layernorm: RmsNorm,
}

impl Layer {
    /// Build from `model.layers.{i}.*`.
    ///
    /// # Errors
    /// Missing or misshapen tensors.
    pub fn new(cfg: &Config, pb: &ParamBuilder) -> Result<Self> {
        Ok(Self {
            self_attn: Attention::new(cfg, &pb.pp("self_attn"))?,
            mlp: Mlp::new(cfg, &pb.pp("mlp"))?,
            input_layernorm: RmsNorm::new(cfg.hidden_size, cfg.rms_norm_eps, &pb.pp("input_layernorm"))?,
            post_attention_layernorm: RmsNorm::new(cfg.hidden_size, cfg.rms_norm_eps, &pb.pp("post_attention_layernorm"))?,
        })
    }

    fn forward(&self, x: &Tensor, rope: &Rope, offset: usize, cache: Option<&mut Option<LayerCache>>, mask: Option<&Tensor>) -> candle_core::Result<Tensor> {
        let h = (x + self.self_attn.forward(&self.input_layernorm.forward(x)?, rope, offset, cache, mask)?)?;
        &h + self.mlp.forward(&self.post_attention_layernorm.forward(&h)?)?
    }
}

/// The causal language model: embeddings, blocks, final norm, LM head.
#[derive(Debug, Clone)]
pub struct Model {
    cfg: Config,
    embed_tokens: Tensor,
    layers: Vec<Layer>,
    norm: RmsNorm,
    lm_head: Linear,
    rope: Rope,
}

impl Model {
    /// Build from Hugging Face names (`model.embed_tokens.weight`, ...).
    ///
    /// # Errors
    /// Missing or misshapen tensors.
    pub fn new(cfg: &Config, pb: &ParamBuilder) -> Result<Self> {
        let m = pb.pp("model");
        let embed_tokens = m.get("embed_tokens.weight", &[cfg.vocab_size, cfg.hidden_size])?;
        let layers = (0..cfg.num_hidden_layers).map(|i| Layer::new(cfg, &m.pp(&format!("layers.{i}")))).collect::<Result<Vec<_>>>()?;
        let norm = RmsNorm::new(cfg.hidden_size, cfg.rms_norm_eps, &m.pp("norm"))?;
        // Some tied checkpoints still carry `lm_head.weight`; the config decides.
        let lm_head = if cfg.tie_word_embeddings {
            Linear::from_weight(embed_tokens.clone())
        } else {
            Linear::new(cfg.hidden_size, cfg.vocab_size, false, "lm_head", &pb.pp("lm_head"))?
        };
        let rope = Rope::new(cfg, embed_tokens.dtype(), embed_tokens.device())?;
        Ok(Self { cfg: cfg.clone(), embed_tokens, layers, norm, lm_head, rope })
    }

    /// Hyper-parameters.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The embedding matrix `[vocab, hidden]`.
    pub fn embed_tokens(&self) -> &Tensor {
        &self.embed_tokens
    }

    /// The decoder blocks.
    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }

    /// The norm before the LM head.
    pub fn final_norm(&self) -> &RmsNorm {
        &self.norm
    }

    /// The LM head (the embedding matrix when tied).
    pub fn lm_head(&self) -> &Linear {
        &self.lm_head
    }

    /// Rotary tables `[max_positions, head_dim / 2]`: cosines.
    pub fn rope_cos(&self) -> &Tensor {
        &self.rope.cos
    }

    /// Rotary tables: sines.
    pub fn rope_sin(&self) -> &Tensor {
        &self.rope.sin
    }

    /// Final hidden states `[b, t, hidden]` for `tokens` `[b, t]` (u32) at positions
    /// `offset..offset+t`; with a cache, keys/values are appended to it.
    ///
    /// # Errors
    /// Tensor failures, or positions beyond `max_position_embeddings`.
    pub fn hidden(&self, tokens: &Tensor, offset: usize, mut cache: Option<&mut KvCache>) -> candle_core::Result<Tensor> {
        let (b, t) = tokens.dims2()?;
        if offset + t > self.cfg.max_position_embeddings {
            candle_core::bail!("sequence of {} tokens exceeds the model's context of {}", offset + t, self.cfg.max_position_embeddings);
        }
        let mut x = self.embed_tokens.index_select(&tokens.flatten_all()?, 0)?.reshape((b, t, self.cfg.hidden_size))?;
        if let Some(c) = cache.as_deref_mut() {
            c.layers.resize_with(self.layers.len(), || None);
            if !c.pads.is_empty() && c.pads.len() != b {
                candle_core::bail!("KV cache has {} padded rows, input has {b}", c.pads.len());
            }
        }
        let keys = cache.as_deref().map_or(0, KvCache::len) + t;
        let pads = cache.as_deref().map_or(&[][..], |c| c.pads.as_slice());
        // One mask for every layer.
        let mask = attention_mask(b, t, keys, offset, pads, x.dtype(), x.device())?;
        for (i, layer) in self.layers.iter().enumerate() {
            let slot = cache.as_deref_mut().map(|c| &mut c.layers[i]);
            x = layer.forward(&x, &self.rope, offset, slot, mask.as_ref())?;
        }
        self.norm.forward(&x)
    }

    /// Logits `[b, t, vocab]`.
    ///
    /// # Errors
    /// As [`Model::hidden`].
    pub fn forward(&self, tokens: &Tensor, offset: usize, cache: Option<&mut KvCache>) -> candle_core::Result<Tensor> {
        let h = self.hidden(tokens, offset, cache)?;
        self.lm_head.forward(&h)
    }

    /// Logits of the last position only, `[b, vocab]` (prefill/decoding).
    ///
    /// # Errors
    /// As [`Model::hidden`].
    pub fn forward_last(&self, tokens: &Tensor, offset: usize, cache: Option<&mut KvCache>) -> candle_core::Result<Tensor> {
        let h = self.hidden(tokens, offset, cache)?;
        let t = h.dim(1)?;
        self.lm_head.forward(&h.narrow(1, t - 1, 1)?.squeeze(1)?)
    }

    /// Every projection under its Hugging Face weight name (`lm_head.weight` for the head, even
    /// when it is tied to the embeddings).
    fn linears_mut(&mut self) -> Vec<(String, &mut Linear)> {
        let mut out: Vec<(String, &mut Linear)> = Vec::new();
        for (i, l) in self.layers.iter_mut().enumerate() {
            let p = format!("model.layers.{i}");
            let a = &mut l.self_attn;
            out.push((format!("{p}.self_attn.q_proj.weight"), &mut a.q_proj));
            out.push((format!("{p}.self_attn.k_proj.weight"), &mut a.k_proj));
            out.push((format!("{p}.self_attn.v_proj.weight"), &mut a.v_proj));
            out.push((format!("{p}.self_attn.o_proj.weight"), &mut a.o_proj));
            let m = &mut l.mlp;
            out.push((format!("{p}.mlp.gate_proj.weight"), &mut m.gate_proj));
            out.push((format!("{p}.mlp.up_proj.weight"), &mut m.up_proj));
            out.push((format!("{p}.mlp.down_proj.weight"), &mut m.down_proj));
        }
        out.push(("lm_head.weight".into(), &mut self.lm_head));
        out
    }

    /// Each projection's name and the format of its quantised copy (`None`: f32).
    pub fn projection_formats(&mut self) -> Vec<(String, Option<&'static str>)> {
        self.linears_mut().into_iter().map(|(n, l)| (n, l.quantized.as_ref().map(|q| q.format()))).collect()
    }

    /// How many projections (of 7 per layer plus the LM head) decode with a quantised copy.
    pub fn quantized_projections(&mut self) -> usize {
        self.linears_mut().iter().filter(|(_, l)| l.is_quantized()).count()
    }

    /// Gives each projection a quantised copy of its base weight for inference, from
    /// `quantize(name, weight)` (`None` leaves it in f32). Training is unaffected: anything that
    /// needs a gradient still multiplies by the f32 weight.
    ///
    /// # Errors
    /// Whatever `quantize` returns.
    pub fn quantize_for_inference(&mut self, mut quantize: impl FnMut(&str, &Tensor) -> Result<Option<Arc<QMatrix>>>) -> Result<()> {
        for (name, lin) in self.linears_mut() {
            lin.quantized = quantize(&name, &lin.weight)?;
        }
        Ok(())
    }

    /// Every weight with LoRA adapters merged in, under Hugging Face names (what
    /// `model.safetensors` holds). Tied models export no `lm_head.weight`.
    ///
    /// # Errors
    /// Tensor failures.
    pub fn merged_weights(&self) -> Result<HashMap<String, Tensor>> {
        let mut out = HashMap::new();
        let mut put = |n: String, t: &Tensor| -> Result<()> {
            out.insert(n, t.detach().copy()?);
            Ok(())
        };
        put("model.embed_tokens.weight".into(), &self.embed_tokens)?;
        put("model.norm.weight".into(), self.norm.weight())?;
        if !self.cfg.tie_word_embeddings {
            put("lm_head.weight".into(), &self.lm_head.merged_weight()?)?;
        }
        for (i, l) in self.layers.iter().enumerate() {
            let p = format!("model.layers.{i}");
            let a = &l.self_attn;
            for (n, lin) in [("q_proj", &a.q_proj), ("k_proj", &a.k_proj), ("v_proj", &a.v_proj), ("o_proj", &a.o_proj)] {
                put(format!("{p}.self_attn.{n}.weight"), &lin.merged_weight()?)?;
                if let Some(b) = lin.bias() {
                    put(format!("{p}.self_attn.{n}.bias"), b)?;
                }
            }
            if let (Some(qn), Some(kn)) = (&a.q_norm, &a.k_norm) {
                put(format!("{p}.self_attn.q_norm.weight"), qn.weight())?;
                put(format!("{p}.self_attn.k_norm.weight"), kn.weight())?;
            }
            for (n, lin) in [("gate_proj", &l.mlp.gate_proj), ("up_proj", &l.mlp.up_proj), ("down_proj", &l.mlp.down_proj)] {
                put(format!("{p}.mlp.{n}.weight"), &lin.merged_weight()?)?;
            }
            put(format!("{p}.input_layernorm.weight"), l.input_layernorm.weight())?;
            put(format!("{p}.post_attention_layernorm.weight"), l.post_attention_layernorm.weight())?;
        }
        Ok(out)
    }
}

/// The tiny model shape the trainer's tests use (tests and benchmarks): 2 layers, grouped-query
/// attention (4 heads over 2 KV heads), Llama tied (SmolLM2-style) and Qwen2/Qwen3 untied so that
/// both head paths are covered, Qwen2 with q/k/v biases.
pub fn tiny_config(arch: Arch) -> Config {
    Config {
        arch,
        vocab_size: 40,
        hidden_size: 32,
        intermediate_size: 48,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 8,
        rms_norm_eps: 1e-6,
        rope_theta: 10_000.0,
        max_position_embeddings: 128,
        tie_word_embeddings: arch == Arch::Llama,
        attention_bias: arch == Arch::Qwen2,
        eos_token_ids: vec![1],
    }
}

/// Random weights for `cfg` under Hugging Face names (tests and benchmarks): projections and
/// embeddings `N(0, std²)`, norms `1 + N(0, 0.1²)` so that their scales matter, biases `N(0, std²)`.
///
/// # Errors
/// Tensor failures.
pub fn random_weights(cfg: &Config, std: f64, seed: u64, dtype: DType) -> Result<HashMap<String, Tensor>> {
    let mut rng = Rng::new(seed);
    let dev = Device::Cpu;
    let mut out = HashMap::new();
    let mut normal = |name: String, shape: &[usize], mean: f64, sd: f64, out: &mut HashMap<String, Tensor>| -> Result<()> {
        let n: usize = shape.iter().product();
        let v: Vec<f64> = (0..n).map(|_| mean + sd * rng.normal()).collect();
        out.insert(name, Tensor::from_vec(v, shape, &dev)?.to_dtype(dtype)?);
        Ok(())
    };
    let (d, i, h, kvh, hd, v) = (cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.vocab_size);
    normal("model.embed_tokens.weight".into(), &[v, d], 0.0, std, &mut out)?;
    normal("model.norm.weight".into(), &[d], 1.0, 0.1, &mut out)?;
    if !cfg.tie_word_embeddings {
        normal("lm_head.weight".into(), &[v, d], 0.0, std, &mut out)?;
    }
    for l in 0..cfg.num_hidden_layers {
        let p = format!("model.layers.{l}");
        for (n, o, inn) in [("q_proj", h * hd, d), ("k_proj", kvh * hd, d), ("v_proj", kvh * hd, d), ("o_proj", d, h * hd)] {
            normal(format!("{p}.self_attn.{n}.weight"), &[o, inn], 0.0, std, &mut out)?;
            if cfg.attention_bias && n != "o_proj" {
                normal(format!("{p}.self_attn.{n}.bias"), &[o], 0.0, std, &mut out)?;
            }
        }
        if cfg.arch == Arch::Qwen3 {
            normal(format!("{p}.self_attn.q_norm.weight"), &[hd], 1.0, 0.1, &mut out)?;
            normal(format!("{p}.self_attn.k_norm.weight"), &[hd], 1.0, 0.1, &mut out)?;
        }
        normal(format!("{p}.mlp.gate_proj.weight"), &[i, d], 0.0, std, &mut out)?;
        normal(format!("{p}.mlp.up_proj.weight"), &[i, d], 0.0, std, &mut out)?;
        normal(format!("{p}.mlp.down_proj.weight"), &[d, i], 0.0, std, &mut out)?;
        normal(format!("{p}.input_layernorm.weight"), &[d], 1.0, 0.1, &mut out)?;
        normal(format!("{p}.post_attention_layernorm.weight"), &[d], 1.0, 0.1, &mut out)?;
    }
    Ok(out)
}
