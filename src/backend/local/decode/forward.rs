//! One step of the decoding path over a set of rows.
//!
//! A row is a token at a position of a slot. A prompt's prefill is its tokens as rows of one
//! slot; a decoding step is one row per sequence; both mix freely. Within a layer every row's
//! keys and values are written into its slot before any row attends, and a row attends to its
//! slot's positions up to its own: causal attention within a prefill falls out of that.

use std::cell::RefCell;

use rlx_kernels::{Acts, Team, rows};

use super::cache::{Shape, Slot};
use super::resize;
use super::weights::{Block, Decoder, LoraScratch, Norm};
use crate::backend::error::{Error, Result};

/// A token at a position of a cache slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row {
    pub(crate) slot: usize,
    pub(crate) pos: usize,
    pub(crate) token: u32,
}

/// Buffers a step reuses (one per decoding group).
#[derive(Default)]
pub(crate) struct Scratch {
    x: Vec<f32>,
    h: Vec<f32>,
    acts: Acts,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    attn: Vec<f32>,
    y: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    lora: LoraScratch,
    /// Logits of the rows asked for, `[wanted, vocab]`.
    pub(crate) logits: Vec<f32>,
}

impl Decoder {
    /// Runs `rows` through the model, appending their keys and values to their slots, and
    /// leaves in `s.logits` the logits of the rows `want` (indices into `rows`, in that order).
    /// With a `team` (when this group has the cores to itself), each product and the attention
    /// split over its threads.
    ///
    /// # Errors
    /// A token outside the vocabulary, a position beyond a slot's room, an embedding whose
    /// storage is not f32 on the CPU.
    pub(crate) fn forward(&self, slots: &mut [Slot], rows: &[Row], want: &[usize], s: &mut Scratch, team: Option<&Team>) -> Result<()> {
        let cfg = &self.cfg;
        for r in rows {
            if r.token as usize >= cfg.vocab_size || r.pos >= slots[r.slot].cap() {
                return Err(Error::InvalidArgument { what: "decode", reason: format!("token {} at position {} of a slot with room for {}", r.token, r.pos, slots[r.slot].cap()) });
            }
        }
        self.embed_rows(rows, &mut s.x)?;
        let d = cfg.hidden_size;
        for (layer, b) in self.blocks.iter().enumerate() {
            self.attention(layer, b, slots, rows, s, team);
            self.mlp(b, rows.len(), s, team);
        }
        if want.is_empty() {
            // A prefill kept for its keys and values only (a call's common stem).
            s.logits.clear();
            return Ok(());
        }
        resize(&mut s.h, want.len() * d);
        for (i, &r) in want.iter().enumerate() {
            norm_row(&s.x[r * d..(r + 1) * d], &self.norm, &mut s.h[i * d..(i + 1) * d]);
        }
        s.acts.quantize(&s.h, want.len(), d);
        resize(&mut s.logits, want.len() * self.head.n());
        self.head.apply(&s.acts, &mut s.logits, team, &mut s.lora);
        Ok(())
    }

    fn embed_rows(&self, rows: &[Row], x: &mut Vec<f32>) -> Result<()> {
        let d = self.cfg.hidden_size;
        let (storage, layout) = self.embed.storage_and_layout();
        let candle_core::Storage::Cpu(cpu) = &*storage else {
            return Err(Error::InvalidArgument { what: "decode", reason: "the embedding is not on the CPU".into() });
        };
        let table = &cpu.as_slice::<f32>()?[layout.start_offset()..];
        resize(x, rows.len() * d);
        for (dst, r) in x.chunks_exact_mut(d).zip(rows) {
            let t = r.token as usize;
            dst.copy_from_slice(&table[t * d..(t + 1) * d]);
        }
        Ok(())
    }

    /// `x += o(attend(rope(q), cache ∪ rope(k), cache ∪ v))` over RMSNorm(x).
    fn attention(&self, layer: usize, b: &Block, slots: &mut [Slot], rows: &[Row], s: &mut Scratch, team: Option<&Team>) {
        let cfg = &self.cfg;
        let (m, d, hd) = (rows.len(), cfg.hidden_size, cfg.head_dim);
        let (heads, kvh) = (cfg.num_attention_heads, cfg.num_key_value_heads);
        resize(&mut s.h, m * d);
        for (x, h) in s.x.chunks_exact(d).zip(s.h.chunks_exact_mut(d)) {
            norm_row(x, &b.attn_norm, h);
        }
        s.acts.quantize(&s.h, m, d);
        resize(&mut s.q, m * heads * hd);
        resize(&mut s.k, m * kvh * hd);
        resize(&mut s.v, m * kvh * hd);
        b.q.apply(&s.acts, &mut s.q, team, &mut s.lora);
        b.k.apply(&s.acts, &mut s.k, team, &mut s.lora);
        b.v.apply(&s.acts, &mut s.v, team, &mut s.lora);
        let shape = Shape::of(cfg);
        let half = hd / 2;
        let mut tmp = vec![0f32; hd];
        for (i, r) in rows.iter().enumerate() {
            let (cos, sin) = (&self.cos[r.pos * half..(r.pos + 1) * half], &self.sin[r.pos * half..(r.pos + 1) * half]);
            for head in s.q[i * heads * hd..(i + 1) * heads * hd].chunks_exact_mut(hd) {
                if let Some(n) = &b.q_norm {
                    tmp.copy_from_slice(head);
                    norm_row(&tmp, n, head);
                }
                rows::rope(head, cos, sin);
            }
            for (g, head) in s.k[i * kvh * hd..(i + 1) * kvh * hd].chunks_exact_mut(hd).enumerate() {
                if let Some(n) = &b.k_norm {
                    tmp.copy_from_slice(head);
                    norm_row(&tmp, n, head);
                }
                rows::rope(head, cos, sin);
                slots[r.slot].put(shape, layer, 0, g, r.pos, head);
                slots[r.slot].put(shape, layer, 1, g, r.pos, &s.v[(i * kvh + g) * hd..(i * kvh + g + 1) * hd]);
            }
        }
        resize(&mut s.attn, m * heads * hd);
        let scale = 1.0 / (hd as f32).sqrt();
        let rep = heads / kvh;
        let slots = &*slots;
        let q = &s.q;
        // Head `c % heads` of row `c / heads`, with this thread's scores buffer.
        let attend = |c: usize, o: &mut [f32]| {
            let (i, h) = (c / heads, c % heads);
            let r = rows[i];
            let (keys, values) = (slots[r.slot].head(shape, layer, 0, h / rep, r.pos + 1), slots[r.slot].head(shape, layer, 1, h / rep, r.pos + 1));
            SCORES.with_borrow_mut(|scores| {
                scores.resize(r.pos + 1, 0.0);
                rows::attend(&q[c * hd..(c + 1) * hd], keys, values, scale, scores, o);
            });
        };
        // Split by (row, head): a prefill's hundreds of rows, or one row's heads.
        match team {
            Some(team) if m * heads > 1 => team.chunks_mut(&mut s.attn, hd, 4 * team.threads(), &attend),
            _ => s.attn.chunks_exact_mut(hd).enumerate().for_each(|(c, o)| attend(c, o)),
        }
        s.acts.quantize(&s.attn, m, heads * hd);
        resize(&mut s.y, m * d);
        b.o.apply(&s.acts, &mut s.y, team, &mut s.lora);
        rows::add(&mut s.x, &s.y);
    }

    /// `x += down(silu(gate(h)) · up(h))` over `h` = RMSNorm(x).
    fn mlp(&self, b: &Block, m: usize, s: &mut Scratch, team: Option<&Team>) {
        let (d, inter) = (self.cfg.hidden_size, self.cfg.intermediate_size);
        for (x, h) in s.x.chunks_exact(d).zip(s.h.chunks_exact_mut(d)) {
            norm_row(x, &b.mlp_norm, h);
        }
        s.acts.quantize(&s.h, m, d);
        resize(&mut s.gate, m * inter);
        resize(&mut s.up, m * inter);
        b.gate.apply(&s.acts, &mut s.gate, team, &mut s.lora);
        b.up.apply(&s.acts, &mut s.up, team, &mut s.lora);
        rows::silu_mul(&mut s.gate, &s.up);
        s.acts.quantize(&s.gate, m, inter);
        b.down.apply(&s.acts, &mut s.y, team, &mut s.lora);
        rows::add(&mut s.x, &s.y);
    }
}

thread_local! {
    /// Each thread's attention scores, reused across heads and steps.
    static SCORES: RefCell<Vec<f32>> = RefCell::default();
}

fn norm_row(x: &[f32], n: &Norm, out: &mut [f32]) {
    rows::rms_norm(x, &n.w, n.eps, out);
}
