//! A sampler snapshot's weights in the form the kernels take: each projection's quantised copy
//! (shared with the [`Model`], not copied), biases, LoRA adapters and norms as f32 vectors.

use std::sync::Arc;

use candle_core::{DType, Tensor};
use rlx_kernels::{Acts, QMatrix, Team, rows};

use super::resize;
use crate::backend::error::Result;
use crate::backend::local::model::{Linear, Model, RmsNorm};
use crate::backend::local::model::Config;

/// A low-rank adapter `(α/r) · x Aᵀ Bᵀ`, kept apart from the base weight so that the base stays
/// in its file's blocks. Both factors are in Q8_0 too (B's rank padded with zeros to a block):
/// in f32 they were 20 MB per token on SmolLM2 with rank 16 on every projection (a fifth of
/// what the base streams) and ran on one core; the rounding reaches only the adapter's share.
pub(super) struct Adapter {
    /// `[r, in]`.
    a: QMatrix,
    /// `[out, r rounded up to 32]`.
    b: QMatrix,
    scale: f32,
}

impl Adapter {
    /// The adapter `l`, whose `B` is `b` (read by the caller); `None` where Q8_0 does not apply.
    fn of(l: &crate::backend::local::lora::Lora, b: &[f32]) -> Result<Option<Self>> {
        let (rank, inp) = l.a().dims2()?;
        let out = l.b().dim(0)?;
        let padded = rank.div_ceil(32) * 32;
        let mut bp = vec![0f32; out * padded];
        for (dst, src) in bp.chunks_exact_mut(padded).zip(b.chunks_exact(rank)) {
            dst[..rank].copy_from_slice(src);
        }
        let (Some(a), Some(b)) = (QMatrix::q8_0(&f32s(l.a())?, rank, inp), QMatrix::q8_0(&bp, out, padded)) else { return Ok(None) };
        Ok(Some(Self { a, b, scale: l.scale() as f32 }))
    }
}

/// Scratch of an adapter's product.
#[derive(Default)]
pub(super) struct LoraScratch {
    t: Vec<f32>,
    padded: Vec<f32>,
    acts: Acts,
    delta: Vec<f32>,
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
            Some(l) => {
                let b = f32s(l.b())?;
                // A fresh adapter (B = 0, as PEFT initialises it) adds nothing: the base alone.
                if b.iter().all(|&v| v == 0.0) {
                    None
                } else {
                    match Adapter::of(l, &b)? {
                        Some(a) => Some(a),
                        None => return Ok(None),
                    }
                }
            }
            None => None,
        };
        Ok(Some(Self { w: w.clone(), bias: lin.bias().map(f32s).transpose()?, lora }))
    }

    pub(super) fn n(&self) -> usize {
        self.w.n()
    }

    /// `out` `[m, n]` for the rows quantised as `acts` `[m, k]`.
    pub(super) fn apply(&self, acts: &Acts, out: &mut [f32], team: Option<&Team>, s: &mut LoraScratch) {
        let m = acts.rows();
        self.w.matmul_t(acts, out, team);
        if let Some(b) = &self.bias {
            rows::add_rows(out, b);
        }
        if let Some(l) = &self.lora {
            let (r, rp) = (l.a.n(), l.b.k());
            resize(&mut s.t, m * r);
            l.a.matmul_t(acts, &mut s.t, team);
            resize(&mut s.padded, m * rp);
            for (dst, src) in s.padded.chunks_exact_mut(rp).zip(s.t.chunks_exact(r)) {
                dst[..r].copy_from_slice(src);
            }
            s.acts.quantize(&s.padded, m, rp);
            resize(&mut s.delta, m * l.b.n());
            l.b.matmul_t(&s.acts, &mut s.delta, team);
            rows::axpy(out, &s.delta, l.scale);
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
