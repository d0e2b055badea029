//! The training pass: a hand-written f32 forward and backward of [`Model`] over a padded batch,
//! with gradients accumulated straight into per-parameter buffers.
//!
//! Why not candle's autograd, which the f64 gradient checks still use: on SmolLM2 (4 × 128
//! tokens, 2 cores) a LoRA step spent half its time outside the GEMMs — each composed op
//! (RMSNorm, RoPE, softmax, SwiGLU) allocating a tensor per node, `zeros_like` + `add` per
//! gradient, transposes materialised before GEMMs, page faults of freed buffers — and a full
//! fine-tune's backward took 5.3× its forward. Here each layer is a fixed sequence of GEMMs (the
//! `gemm` crate candle itself uses, reading transposed operands through strides) and fused
//! row-wise kernels ([`kernels`]), and it keeps only what its backward needs:
//!
//! | saved per layer | why |
//! |---|---|
//! | `x`, `rstd₁`, `xn₁ = RMSNorm(x)` | norm backward; input of q/k/v (their weight and LoRA gradients) |
//! | `q`, `k` (rotated), `v`, `o`, log-sum-exps | attention backward rebuilds the probabilities (flash-attention style) instead of storing `heads × t²` |
//! | `h`, `rstd₂`, `hn₂` | second norm; input of gate/up |
//! | `gate`, `up` | SwiGLU backward; `silu(gate)·up`, the input of down, is recomputed |
//! | `x Aᵀ` per adapter | LoRA's `B` gradient |
//!
//! That is about 7,000 floats per token per SmolLM2 layer against ~7 MB per token through the
//! autograd graph. Gradients land in buffers that persist across micro-batches (GEMMs accumulate
//! into them); nothing is allocated per gradient node. The computation is the candle model's —
//! same formulas, same parameter tensors (read in place) — and the tests check values and
//! gradients against it (and so, transitively, against finite differences and the numpy
//! reference).
//!
//! A batch may be packed ([`Packing`]): several sequences sharing a prompt in one row, the
//! prompt once. Tokens then carry their own RoPE positions and segment ids, and attention (and
//! its backward, which rebuilds the probabilities) masks keys outside the shared prefix and the
//! query's own segment; everything else is per token and unchanged.

pub(crate) mod kernels;

use std::collections::HashMap;

use candle_core::{CpuStorage, Storage, Tensor, TensorId};

use self::kernels::{AttnShape, How, Mat, Out, gemm};
use super::model::{Layer, Linear, Model, RmsNorm};

/// Gradient buffers of the trainable tensors, by tensor id; a tensor absent here is frozen.
#[derive(Debug, Default)]
pub(crate) struct Grads {
    map: HashMap<TensorId, Vec<f32>>,
}

impl Grads {
    /// Zeroed buffers for `params`.
    pub(crate) fn zeros<'a>(params: impl IntoIterator<Item = &'a Tensor>) -> Self {
        Self { map: params.into_iter().map(|t| (t.id(), vec![0f32; t.elem_count()])).collect() }
    }

    /// The buffer of `t`, if it is trainable.
    fn get(&mut self, t: &Tensor) -> Option<&mut [f32]> {
        self.map.get_mut(&t.id()).map(Vec::as_mut_slice)
    }

    /// Takes the buffer of `t` out (`None` if `t` is not trainable).
    pub(crate) fn take(&mut self, t: &Tensor) -> Option<Vec<f32>> {
        self.map.remove(&t.id())
    }
}

/// `acc += v`, element-wise.
fn add(acc: &mut [f32], v: &[f32]) {
    for (a, x) in acc.iter_mut().zip(v) {
        *a += x;
    }
}

/// The backward of an [`RmsNorm`] at input `x` (row `rstd`s saved by the forward): adds `dL/dx`
/// to `dx` and, when its weight is trainable, `dL/dw` to the weight's gradient.
fn norm_backward(norm: &RmsNorm, dy: &[f32], x: &[f32], rstd: &[f32], dx: &mut [f32], grads: &mut Grads) -> candle_core::Result<()> {
    let w = view(norm.weight())?;
    let gw = grads.get(norm.weight());
    if let (Some(dw), Some(gw)) = (kernels::rms_norm_backward(dy, x, rstd, w.s(), dx, gw.is_some()), gw) {
        add(gw, &dw);
    }
    Ok(())
}

/// A read view of a contiguous f32 tensor's data, held for the length of a pass.
struct View<G> {
    guard: G,
    start: usize,
    len: usize,
}

impl<G: std::ops::Deref<Target = Storage>> View<G> {
    fn s(&self) -> &[f32] {
        match &*self.guard {
            Storage::Cpu(CpuStorage::F32(v)) => &v[self.start..self.start + self.len],
            _ => unreachable!("checked in view()"),
        }
    }
}

fn view(t: &Tensor) -> candle_core::Result<View<impl std::ops::Deref<Target = Storage> + '_>> {
    let (guard, layout) = t.storage_and_layout();
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("training pass: parameter of shape {:?} is not contiguous", t.dims());
    };
    if !matches!(&*guard, Storage::Cpu(CpuStorage::F32(_))) {
        candle_core::bail!("training pass: parameters must be f32 on the CPU, found {:?}", t.dtype());
    }
    Ok(View { guard, start, len: end - start })
}

/// Token ids of a right-padded batch of `b` rows of `t` positions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Batch<'a> {
    /// `[b · t]` inputs.
    pub tokens: &'a [u32],
    /// `[b · t]` targets.
    pub targets: &'a [u32],
    /// Rows.
    pub b: usize,
    /// Positions per row.
    pub t: usize,
    /// The softmax temperature the log-probabilities are taken at: the LM head's logits are
    /// divided by it (1 is the model's own distribution). A policy sampled at T is scored at T,
    /// as verl and TRL do: scored at 1, the importance ratio against a tempered sampler measures
    /// the temperature, not the update.
    pub temperature: f32,
    /// A packed batch (sequences sharing a prompt in one row, see the trainer): each token's
    /// position `[b · t]` and segment `[b · t]` (0: the shared prefix, which every token of the
    /// row sees; `k > 0`: one sequence, whose tokens see the prefix and their own segment only).
    /// `None`: plain rows, token `i` at position `i`, causal attention.
    pub packing: Option<Packing<'a>>,
}

/// Per-token positions and segments of a packed [`Batch`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Packing<'a> {
    pub positions: &'a [u32],
    pub segments: &'a [u32],
}

/// A projection's saved input-side state: the adapter's `x Aᵀ`.
type LoraAct = Option<Vec<f32>>;

/// What one layer's backward needs (see the module table).
struct LayerTape {
    x: Vec<f32>,
    rstd1: Vec<f32>,
    xn1: Vec<f32>,
    lora_qkv: [LoraAct; 3],
    /// Qwen3: q and k before their per-head norms.
    qk_pre: Option<QkPre>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    o: Vec<f32>,
    lse: Vec<f32>,
    lora_o: LoraAct,
    h: Vec<f32>,
    rstd2: Vec<f32>,
    hn2: Vec<f32>,
    lora_gate_up: [LoraAct; 2],
    gate: Vec<f32>,
    up: Vec<f32>,
    lora_down: LoraAct,
}

/// Qwen3's q and k before their per-head norms, with each norm's `rstd`.
struct QkPre {
    q: Vec<f32>,
    rstd_q: Vec<f32>,
    k: Vec<f32>,
    rstd_k: Vec<f32>,
}

/// Everything [`backward`] needs from [`forward`].
pub(crate) struct Tape {
    layers: Vec<LayerTape>,
    /// Input of the final norm, its `rstd`, its output.
    x_last: Vec<f32>,
    rstd_last: Vec<f32>,
    xf: Vec<f32>,
    lora_head: LoraAct,
    logits: Vec<f32>,
    lse: Vec<f32>,
}

/// `y = x Wᵀ + b + s · (x Aᵀ) Bᵀ` for `x` `[n, in]`; returns `y` and the adapter's `x Aᵀ`.
fn proj_forward(lin: &Linear, x: &[f32], n: usize) -> candle_core::Result<(Vec<f32>, LoraAct)> {
    let (out, inn) = lin.weight.dims2()?;
    let w = view(&lin.weight)?;
    let mut y = vec![0f32; n * out];
    gemm(n, out, inn, Out { buf: &mut y, ld: out }, Mat::rows(x, inn), Mat::t(w.s(), inn), How { accumulate: false, scale: 1.0, parallel: true });
    if let Some(b) = &lin.bias {
        let b = view(b)?;
        for row in y.chunks_exact_mut(out) {
            for (y, b) in row.iter_mut().zip(b.s()) {
                *y += b;
            }
        }
    }
    let xa = match &lin.lora {
        Some(l) => {
            let (a, bm) = (view(l.a())?, view(l.b())?);
            let r = l.a().dim(0)?;
            let mut xa = vec![0f32; n * r];
            gemm(n, r, inn, Out { buf: &mut xa, ld: r }, Mat::rows(x, inn), Mat::t(a.s(), inn), How { accumulate: false, scale: 1.0, parallel: true });
            gemm(n, out, r, Out { buf: &mut y, ld: out }, Mat::rows(&xa, r), Mat::t(bm.s(), r), How { accumulate: true, scale: l.scale() as f32, parallel: true });
            Some(xa)
        }
        None => None,
    };
    Ok((y, xa))
}

/// The backward of [`proj_forward`]: `dx = dy W (+ adapter path)`, written over `dx` or added to
/// it (`accumulate`), and the gradients of whichever of `W`, `b`, `A`, `B` are trainable.
fn proj_backward(lin: &Linear, x: &[f32], xa: Option<&[f32]>, dy: &[f32], dx: &mut [f32], accumulate: bool, grads: &mut Grads) -> candle_core::Result<()> {
    let (out, inn) = lin.weight.dims2()?;
    // Rows: `dy` is `n × out`.
    let n = dy.len() / out;
    debug_assert_eq!(n * out, dy.len(), "proj_backward: dy is not rows of {out}");
    let w = view(&lin.weight)?;
    if let Some(gw) = grads.get(&lin.weight) {
        gemm(out, inn, n, Out { buf: gw, ld: inn }, Mat::t(dy, out), Mat::rows(x, inn), How { accumulate: true, scale: 1.0, parallel: true });
    }
    if let Some(gb) = lin.bias.as_ref().and_then(|b| grads.get(b)) {
        add(gb, &kernels::column_sums(dy, out));
    }
    gemm(n, inn, out, Out { buf: dx, ld: inn }, Mat::rows(dy, out), Mat::rows(w.s(), inn), How { accumulate, scale: 1.0, parallel: true });
    if let Some(l) = &lin.lora {
        let Some(xa) = xa else { candle_core::bail!("training pass: adapter activations missing") };
        let (a, bm) = (view(l.a())?, view(l.b())?);
        let r = l.a().dim(0)?;
        let s = l.scale() as f32;
        if let Some(gb) = grads.get(l.b()) {
            gemm(out, r, n, Out { buf: gb, ld: r }, Mat::t(dy, out), Mat::rows(xa, r), How { accumulate: true, scale: s, parallel: true });
        }
        let mut dxa = vec![0f32; n * r];
        gemm(n, r, out, Out { buf: &mut dxa, ld: r }, Mat::rows(dy, out), Mat::rows(bm.s(), r), How { accumulate: false, scale: s, parallel: true });
        if let Some(ga) = grads.get(l.a()) {
            gemm(r, inn, n, Out { buf: ga, ld: inn }, Mat::t(&dxa, r), Mat::rows(x, inn), How { accumulate: true, scale: 1.0, parallel: true });
        }
        gemm(n, inn, r, Out { buf: dx, ld: inn }, Mat::rows(&dxa, r), Mat::rows(a.s(), inn), How { accumulate: true, scale: 1.0, parallel: true });
    }
    Ok(())
}

struct Ctx<'a> {
    b: usize,
    t: usize,
    cos: &'a [f32],
    sin: &'a [f32],
    packing: Option<Packing<'a>>,
}

impl Ctx<'_> {
    fn n(&self) -> usize {
        self.b * self.t
    }

    fn positions(&self) -> Option<&[u32]> {
        self.packing.map(|p| p.positions)
    }

    fn segments(&self) -> Option<&[u32]> {
        self.packing.map(|p| p.segments)
    }
}

fn layer_forward(layer: &Layer, x: Vec<f32>, c: &Ctx, keep: bool) -> candle_core::Result<(Vec<f32>, Option<LayerTape>)> {
    let n = c.n();
    let a = &layer.self_attn;
    let (heads, kvh, hd) = (a.heads, a.kv_heads, a.head_dim);
    let w_in = view(layer.input_layernorm.weight())?;
    let (xn1, rstd1) = kernels::rms_norm(&x, w_in.s(), layer.input_layernorm.eps() as f32);
    let (mut q, lq) = proj_forward(&a.q_proj, &xn1, n)?;
    let (mut k, lk) = proj_forward(&a.k_proj, &xn1, n)?;
    let (v, lv) = proj_forward(&a.v_proj, &xn1, n)?;
    let qk_pre = match (&a.q_norm, &a.k_norm) {
        (Some(qn), Some(kn)) => {
            let (wq, wk) = (view(qn.weight())?, view(kn.weight())?);
            let (q2, rq) = kernels::rms_norm(&q, wq.s(), qn.eps() as f32);
            let (k2, rk) = kernels::rms_norm(&k, wk.s(), kn.eps() as f32);
            let pre = QkPre { q: std::mem::replace(&mut q, q2), rstd_q: rq, k: std::mem::replace(&mut k, k2), rstd_k: rk };
            keep.then_some(pre)
        }
        _ => None,
    };
    kernels::rope(&mut q, c.t, heads, hd, (c.cos, c.sin), c.positions(), false);
    kernels::rope(&mut k, c.t, kvh, hd, (c.cos, c.sin), c.positions(), false);
    let shape = AttnShape { b: c.b, t: c.t, heads, kv_heads: kvh, hd };
    let (o, lse) = kernels::attention(&q, &k, &v, shape, c.segments());
    let (y, lo) = proj_forward(&a.o_proj, &o, n)?;
    let mut h = y;
    for (h, x) in h.iter_mut().zip(&x) {
        *h += x;
    }
    let w_post = view(layer.post_attention_layernorm.weight())?;
    let (hn2, rstd2) = kernels::rms_norm(&h, w_post.s(), layer.post_attention_layernorm.eps() as f32);
    let m = &layer.mlp;
    let (gate, lg) = proj_forward(&m.gate_proj, &hn2, n)?;
    let (up, lu) = proj_forward(&m.up_proj, &hn2, n)?;
    let act = kernels::swiglu(&gate, &up);
    let (mut out, ld) = proj_forward(&m.down_proj, &act, n)?;
    for (o, h) in out.iter_mut().zip(&h) {
        *o += h;
    }
    let tape = keep.then_some(LayerTape {
        x,
        rstd1,
        xn1,
        lora_qkv: [lq, lk, lv],
        qk_pre,
        q,
        k,
        v,
        o,
        lse,
        lora_o: lo,
        h,
        rstd2,
        hn2,
        lora_gate_up: [lg, lu],
        gate,
        up,
        lora_down: ld,
    });
    Ok((out, tape))
}

/// Returns `dL/dx` of the layer's input given `dL/d(output)`.
fn layer_backward(layer: &Layer, tape: LayerTape, dout: Vec<f32>, c: &Ctx, grads: &mut Grads) -> candle_core::Result<Vec<f32>> {
    let n = c.n();
    let a = &layer.self_attn;
    let (heads, kvh, hd) = (a.heads, a.kv_heads, a.head_dim);
    let LayerTape { x, rstd1, xn1, lora_qkv, qk_pre, q, k, v, o, lse, lora_o, h, rstd2, hn2, lora_gate_up, mut gate, mut up, lora_down } = tape;
    let m = &layer.mlp;
    let d = h.len() / n;
    let inter = gate.len() / n;

    // MLP: out = h + down(silu(gate) · up).
    let act = kernels::swiglu(&gate, &up);
    let mut dact = vec![0f32; n * inter];
    proj_backward(&m.down_proj, &act, lora_down.as_deref(), &dout, &mut dact, false, grads)?;
    drop(act);
    kernels::swiglu_backward(&dact, &mut gate, &mut up);
    drop(dact);
    let mut dhn2 = vec![0f32; n * d];
    let [lg, lu] = lora_gate_up;
    proj_backward(&m.gate_proj, &hn2, lg.as_deref(), &gate, &mut dhn2, false, grads)?;
    proj_backward(&m.up_proj, &hn2, lu.as_deref(), &up, &mut dhn2, true, grads)?;
    drop((gate, up, hn2));
    let mut dh = dout;
    norm_backward(&layer.post_attention_layernorm, &dhn2, &h, &rstd2, &mut dh, grads)?;
    drop((dhn2, h));

    // Attention: h = x + o_proj(attn(rope(q), rope(k), v)).
    let mut dobuf = vec![0f32; o.len()];
    proj_backward(&a.o_proj, &o, lora_o.as_deref(), &dh, &mut dobuf, false, grads)?;
    let shape = AttnShape { b: c.b, t: c.t, heads, kv_heads: kvh, hd };
    let (mut dq, mut dk, dv) = kernels::attention_backward(&dobuf, [&q, &k, &v, &o, &lse], shape, c.segments());
    drop((dobuf, q, k, o, lse));
    kernels::rope(&mut dq, c.t, heads, hd, (c.cos, c.sin), c.positions(), true);
    kernels::rope(&mut dk, c.t, kvh, hd, (c.cos, c.sin), c.positions(), true);
    if let (Some(QkPre { q: q_pre, rstd_q, k: k_pre, rstd_k }), Some(qn), Some(kn)) = (qk_pre, &a.q_norm, &a.k_norm) {
        for (dx, pre, r, norm) in [(&mut dq, q_pre, rstd_q, qn), (&mut dk, k_pre, rstd_k, kn)] {
            let mut dpre = vec![0f32; pre.len()];
            norm_backward(norm, dx, &pre, &r, &mut dpre, grads)?;
            *dx = dpre;
        }
    }
    let mut dxn1 = vec![0f32; n * d];
    let [lq, lk, lv] = lora_qkv;
    proj_backward(&a.q_proj, &xn1, lq.as_deref(), &dq, &mut dxn1, false, grads)?;
    proj_backward(&a.k_proj, &xn1, lk.as_deref(), &dk, &mut dxn1, true, grads)?;
    proj_backward(&a.v_proj, &xn1, lv.as_deref(), &dv, &mut dxn1, true, grads)?;
    drop((dq, dk, dv, xn1));
    norm_backward(&layer.input_layernorm, &dxn1, &x, &rstd1, &mut dh, grads)?;
    Ok(dh)
}

/// Log-probabilities `[b · t]` of the batch's targets; with `keep`, the tape for [`backward`].
///
/// # Errors
/// Parameters that are not contiguous f32 CPU tensors, or shape mismatches.
pub(crate) fn forward(model: &Model, batch: Batch, keep: bool) -> candle_core::Result<(Vec<f32>, Option<Tape>)> {
    let cfg = model.config();
    let (n, d, vocab) = (batch.b * batch.t, cfg.hidden_size, cfg.vocab_size);
    if batch.tokens.len() != n || batch.targets.len() != n {
        candle_core::bail!("training pass: {} tokens and {} targets for a {}x{} batch", batch.tokens.len(), batch.targets.len(), batch.b, batch.t);
    }
    // A packed row may be longer than the context; its positions may not.
    let span = match batch.packing {
        None => batch.t,
        Some(p) => {
            if p.positions.len() != n || p.segments.len() != n {
                candle_core::bail!("training pass: {} positions and {} segments for a {}x{} batch", p.positions.len(), p.segments.len(), batch.b, batch.t);
            }
            p.positions.iter().max().map_or(0, |&m| m as usize + 1)
        }
    };
    if span > cfg.max_position_embeddings {
        candle_core::bail!("sequence of {span} tokens exceeds the model's context of {}", cfg.max_position_embeddings);
    }
    let (cos, sin) = (view(model.rope_cos())?, view(model.rope_sin())?);
    let c = Ctx { b: batch.b, t: batch.t, cos: cos.s(), sin: sin.s(), packing: batch.packing };
    let emb = view(model.embed_tokens())?;
    let mut x = vec![0f32; n * d];
    for (row, &tok) in x.chunks_exact_mut(d).zip(batch.tokens) {
        row.copy_from_slice(&emb.s()[tok as usize * d..(tok as usize + 1) * d]);
    }
    drop(emb);
    let mut layers = Vec::new();
    for layer in model.layers() {
        let (next, tape) = layer_forward(layer, x, &c, keep)?;
        x = next;
        layers.extend(tape);
    }
    let norm = model.final_norm();
    let w = view(norm.weight())?;
    let (xf, rstd_last) = kernels::rms_norm(&x, w.s(), norm.eps() as f32);
    let (mut logits, lora_head) = proj_forward(model.lm_head(), &xf, n)?;
    if batch.temperature != 1.0 {
        let inv = batch.temperature.recip();
        logits.iter_mut().for_each(|x| *x *= inv);
    }
    let (lse, logp) = kernels::target_logprobs(&logits, vocab, batch.targets);
    let tape = keep.then_some(Tape { layers, x_last: x, rstd_last, xf, lora_head, logits, lse });
    Ok((logp, tape))
}

/// Accumulates into `grads` the gradient of a loss whose derivative with respect to the
/// forward's log-probabilities is `dlogp` `[b · t]`.
///
/// # Errors
/// As [`forward`].
pub(crate) fn backward(model: &Model, batch: Batch, tape: Tape, dlogp: &[f32], grads: &mut Grads) -> candle_core::Result<()> {
    let cfg = model.config();
    let (n, vocab) = (batch.b * batch.t, cfg.vocab_size);
    let (cos, sin) = (view(model.rope_cos())?, view(model.rope_sin())?);
    let c = Ctx { b: batch.b, t: batch.t, cos: cos.s(), sin: sin.s(), packing: batch.packing };
    let Tape { mut layers, x_last, rstd_last, xf, lora_head, mut logits, lse } = tape;
    // The tape holds the tempered logits z/T; d(z/T)/dz = 1/T, folded into dL/dlogp (the
    // softmax backward is linear in it).
    let tempered;
    let dlogp = if batch.temperature == 1.0 {
        dlogp
    } else {
        let inv = batch.temperature.recip();
        tempered = dlogp.iter().map(|g| g * inv).collect::<Vec<f32>>();
        &tempered[..]
    };
    kernels::target_logprobs_backward(&mut logits, vocab, batch.targets, &lse, dlogp);
    // Positions the loss ignores (prompt tokens, padding: zero weight or advantage) have a zero
    // row; the head's backward GEMMs, the largest of the pass (2·hidden·vocab per row each), run
    // on the others only, moved to the front of the buffers.
    let live: Vec<usize> = (0..n).filter(|&i| dlogp[i] != 0.0).collect();
    let d = cfg.hidden_size;
    let mut dxf = vec![0f32; xf.len()];
    if live.len() == n {
        proj_backward(model.lm_head(), &xf, lora_head.as_deref(), &logits, &mut dxf, false, grads)?;
    } else if !live.is_empty() {
        for (j, &i) in live.iter().enumerate() {
            logits.copy_within(i * vocab..(i + 1) * vocab, j * vocab);
        }
        let rows = |x: &[f32], w: usize| -> Vec<f32> { live.iter().flat_map(|&i| x[i * w..(i + 1) * w].iter().copied()).collect() };
        let xf_live = rows(&xf, d);
        let xa_live = lora_head.as_deref().map(|xa| rows(xa, xa.len() / n));
        let mut dxf_live = vec![0f32; live.len() * d];
        proj_backward(model.lm_head(), &xf_live, xa_live.as_deref(), &logits[..live.len() * vocab], &mut dxf_live, false, grads)?;
        for (j, &i) in live.iter().enumerate() {
            dxf[i * d..(i + 1) * d].copy_from_slice(&dxf_live[j * d..(j + 1) * d]);
        }
    }
    drop((logits, xf));
    let mut dx = vec![0f32; x_last.len()];
    norm_backward(model.final_norm(), &dxf, &x_last, &rstd_last, &mut dx, grads)?;
    for layer in model.layers().iter().rev() {
        let tape = layers.pop().expect("one tape per layer");
        dx = layer_backward(layer, tape, dx, &c, grads)?;
    }
    if let Some(ge) = grads.get(model.embed_tokens()) {
        // Sequential: a token repeated in the batch adds its rows in a fixed order.
        for (row, &tok) in dx.chunks_exact(d).zip(batch.tokens) {
            for (g, v) in ge[tok as usize * d..(tok as usize + 1) * d].iter_mut().zip(row) {
                *g += v;
            }
        }
    }
    Ok(())
}
