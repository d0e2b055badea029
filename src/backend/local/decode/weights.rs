//! A sampler snapshot's weights in the form the kernels take: each projection's quantised copy
//! (shared with the [`Model`], not copied), biases, LoRA adapters and norms as f32 vectors.

use std::sync::Arc;

use candle_core::{DType, Tensor};
use rlx_kernels::{Acts, QMatrix, rows};

use crate::backend::Result;
use crate::backend::local::model::{Linear, Model, RmsNorm};
use crate::backend::local::Config;

/// A low-rank adapter `(α/r) · x Aᵀ Bᵀ`, kept apart from the base weight: the base stays in its
/// quantised blocks and the adapter in f32, as the trainer computes it.
pub(super) struct Adapter {
    /// `[r, in]`.
    a: Vec<f32>,
    /// `[out, r]`.
    b: Vec<f32>,
    rank: usize,
    scale: f32,
}

/// `y = x Wᵀ (+ b) (+ adapter)`.
pub(super) struct Proj {
    w: Arc<QMatrix>,
    bias: Option<Vec<f32>>,
    lora: Option<Adapter>,
}

impl Proj {
    fn of(lin: &Linear) -> Result<Option<Self>> {
        let Some(w) = lin.quantized() else { return Ok(None) };
        let lora = match lin.lora() {
            Some(l) => Some(Adapter { a: f32s(l.a())?, b: f32s(l.b())?, rank: l.a().dim(0)?, scale: l.scale() as f32 }),
            None => None,
        };
        Ok(Some(Self { w: w.clone(), bias: lin.bias().map(f32s).transpose()?, lora }))
    }

    pub(super) fn n(&self) -> usize {
        self.w.n()
    }

    /// `out` `[m, n]` for the rows `x` `[m, k]` (f32, for the adapter) quantised as `acts`;
    /// `tmp` is scratch for the adapter's `[m, r]`.
    pub(super) fn apply(&self, x: &[f32], acts: &Acts, out: &mut [f32], par: bool, tmp: &mut Vec<f32>) {
        let m = acts.rows();
        self.w.matmul_t(acts, out, par);
        if let Some(b) = &self.bias {
            rows::add_rows(out, b);
        }
        if let Some(l) = &self.lora {
            tmp.clear();
            tmp.resize(m * l.rank, 0.0);
            rows::matmul_t_acc(x, &l.a, self.w.k(), 1.0, tmp);
            rows::matmul_t_acc(tmp, &l.b, l.rank, l.scale, out);
        }
    }
}

/// RMSNorm's scale and epsilon.
pub(super) struct Norm {
    pub(super) w: Vec<f32>,
    pub(super) eps: f32,
}

impl Norm {
    fn of(n: &RmsNorm) -> Result<Self> {
        Ok(Self { w: f32s(n.weight())?, eps: n.eps() as f32 })
    }
}

/// One decoder block.
pub(super) struct Block {
    pub(super) attn_norm: Norm,
    pub(super) q: Proj,
    pub(super) k: Proj,
    pub(super) v: Proj,
    pub(super) o: Proj,
    pub(super) q_norm: Option<Norm>,
    pub(super) k_norm: Option<Norm>,
    pub(super) mlp_norm: Norm,
    pub(super) gate: Proj,
    pub(super) up: Proj,
    pub(super) down: Proj,
}

/// The decoding path's view of a model snapshot.
pub(crate) struct Decoder {
    pub(super) cfg: Config,
    /// `[vocab, hidden]` f32, contiguous (rows are gathered from its storage).
    pub(super) embed: Tensor,
    pub(super) blocks: Vec<Block>,
    pub(super) norm: Norm,
    pub(super) head: Proj,
    /// `[max_positions, head_dim / 2]`.
    pub(super) cos: Vec<f32>,
    pub(super) sin: Vec<f32>,
}

impl Decoder {
    /// The decoder of `model`, or `None` unless every projection and the LM head have a
    /// quantised copy (`sample_weights: f32` decodes with candle's forward) or the model is not
    /// f32.
    ///
    /// # Errors
    /// Tensor failures.
    pub(crate) fn new(model: &Model) -> Result<Option<Self>> {
        if model.embed_tokens().dtype() != DType::F32 {
            return Ok(None);
        }
        let mut blocks = Vec::with_capacity(model.layers().len());
        for l in model.layers() {
            let (a, m) = (&l.self_attn, &l.mlp);
            let projs = [&a.q_proj, &a.k_proj, &a.v_proj, &a.o_proj, &m.gate_proj, &m.up_proj, &m.down_proj].map(Proj::of);
            let [Ok(Some(q)), Ok(Some(k)), Ok(Some(v)), Ok(Some(o)), Ok(Some(gate)), Ok(Some(up)), Ok(Some(down))] = projs else {
                return projs.into_iter().find_map(|p| p.err()).map_or(Ok(None), Err);
            };
            blocks.push(Block {
                attn_norm: Norm::of(&l.input_layernorm)?,
                q,
                k,
                v,
                o,
                q_norm: a.q_norm.as_ref().map(Norm::of).transpose()?,
                k_norm: a.k_norm.as_ref().map(Norm::of).transpose()?,
                mlp_norm: Norm::of(&l.post_attention_layernorm)?,
                gate,
                up,
                down,
            });
        }
        let Some(head) = Proj::of(model.lm_head())? else { return Ok(None) };
        Ok(Some(Self {
            cfg: model.config().clone(),
            embed: model.embed_tokens().detach().contiguous()?,
            blocks,
            norm: Norm::of(model.final_norm())?,
            head,
            cos: f32s(model.rope_cos())?,
            sin: f32s(model.rope_sin())?,
        }))
    }

    /// Hyper-parameters.
    pub(crate) fn config(&self) -> &Config {
        &self.cfg
    }
}

fn f32s(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.detach().to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}
