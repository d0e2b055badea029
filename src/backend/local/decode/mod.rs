//! The sampler's hand-written decoding path: prefill and decode on quantised weights, with
//! continuous batching.
//!
//! candle's forward (what `backend.sample_weights: f32` still runs, for exact log-probabilities)
//! spends a decoding step in dozens of tensor ops per layer, each allocating its output, masks
//! rebuilt per step, and a KV cache copied whenever a row finishes. Here a step is one pass over
//! the layers with preallocated scratch: per layer, RMSNorm → Q/K/V products → per-head norms and
//! rotary → the new keys and values written into each row's cache slot → attention over the
//! slot → output product → RMSNorm → gate and up products → SwiGLU → down product. The products
//! and row kernels are the `rlx-kernels` crate's (quantised blocks, AVX-512/AVX2/portable).
//!
//! - [`Decoder`] ([`weights`]): a sampler snapshot's weights as the kernels want them.
//! - [`forward`]: one step over a set of rows, each `(slot, position, token)`: a prefill is the
//!   rows of a prompt, a decoding step one row per sequence; rows of any lengths mix.
//! - [`cache`]: keys and values per slot, laid out so that one head's positions are contiguous.
//! - [`batch`]: continuous batching: a row that stops frees its slot for the next sample at once,
//!   and samples of one prompt share its prefill.
//!
//! Every row's arithmetic is independent of the other rows in its step (activations quantised
//! per row, each dot product summed in a fixed order), so a seeded sample's tokens do not depend
//! on what it was batched with.

pub(crate) mod batch;
mod cache;
mod forward;
mod weights;

pub(crate) use weights::Decoder;

/// `v` as `n` zeros, keeping its allocation (scratch reused step after step).
fn resize(v: &mut Vec<f32>, n: usize) {
    v.clear();
    v.resize(n, 0.0);
}

#[cfg(test)]
mod tests;
