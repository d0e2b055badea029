//! Keys and values of the sequences being decoded, one slot per sequence.
//!
//! A slot holds `[layer][k|v][kv_head][position][head_dim]`: attention of one head reads its
//! positions as one contiguous run, and a slot is sized for its own prompt plus its new tokens
//! (a batch of short and long prompts does not pay for the longest in every slot). A slot's
//! buffer is reused by the next sequence when large enough.

use crate::backend::local::model::Config;

/// Cache geometry shared by every slot of a model.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub(crate) layers: usize,
    pub(crate) kv_heads: usize,
    pub(crate) head_dim: usize,
}

impl Shape {
    pub(crate) fn of(cfg: &Config) -> Self {
        Self { layers: cfg.num_hidden_layers, kv_heads: cfg.num_key_value_heads, head_dim: cfg.head_dim }
    }
}

/// One sequence's keys and values.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    data: Vec<f32>,
    /// Positions each head has room for.
    cap: usize,
}

impl Slot {
    /// Makes room for `positions` (keeping the buffer when it is large enough; contents are
    /// not kept).
    pub(crate) fn reserve(&mut self, shape: Shape, positions: usize) {
        let need = shape.layers * 2 * shape.kv_heads * positions * shape.head_dim;
        if self.data.len() < need {
            self.data = vec![0.0; need];
        }
        self.cap = positions;
    }

    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    fn offset(&self, shape: Shape, layer: usize, kv: usize, head: usize) -> usize {
        ((layer * 2 + kv) * shape.kv_heads + head) * self.cap * shape.head_dim
    }

    /// The first `len` positions of one head's keys (`kv = 0`) or values (`kv = 1`).
    pub(crate) fn head(&self, shape: Shape, layer: usize, kv: usize, head: usize, len: usize) -> &[f32] {
        let o = self.offset(shape, layer, kv, head);
        &self.data[o..o + len * shape.head_dim]
    }

    /// Writes one position of one head.
    pub(crate) fn put(&mut self, shape: Shape, layer: usize, kv: usize, head: usize, pos: usize, x: &[f32]) {
        let o = self.offset(shape, layer, kv, head) + pos * shape.head_dim;
        self.data[o..o + shape.head_dim].copy_from_slice(x);
    }

    /// Copies the first `len` positions of every head from `src` (a prompt's prefill shared by
    /// its samples).
    pub(crate) fn copy_prefix(&mut self, shape: Shape, src: &Slot, len: usize) {
        for layer in 0..shape.layers {
            for kv in 0..2 {
                for head in 0..shape.kv_heads {
                    let (from, to) = (src.offset(shape, layer, kv, head), self.offset(shape, layer, kv, head));
                    let n = len * shape.head_dim;
                    self.data[to..to + n].copy_from_slice(&src.data[from..from + n]);
                }
            }
        }
    }
}
