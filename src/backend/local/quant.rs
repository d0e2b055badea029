//! Which weights the sampler multiplies by, and the quantised copies it keeps.
//!
//! The formats and their kernels live in the `rlx-kernels` crate ([`QMatrix`]); this module
//! decides, per projection, which copy a sampler snapshot decodes with:
//! - `f32`: none; candle's forward on the trainer's own weights (log-probabilities exactly the
//!   trainer's).
//! - `q8_0`: rlx's Q8_0 copy of every projection (including the LM head).
//! - `gguf` (the default): the model file's own blocks (Q4_0, Q4_1, Q8_0) for weights that never
//!   change (the base under LoRA), Q8_0 copies for the rest (weights that move, Hugging Face
//!   models, GGUF types rlx does not decode as stored).
//!
//! Why the file's own blocks: SmolLM2's GGUF stores its projections in Q4_1, 0.625 bytes per
//! weight against Q8_0's 1.0625, and decoding one sequence is bound by streaming the weights;
//! they are also exactly the weights the trainer dequantised, where a Q8_0 copy re-rounds them.

use std::collections::HashMap;
use std::sync::Arc;

use candle_core::{DType, Tensor};
pub use rlx_kernels::QMatrix;

use crate::backend::error::Result;

/// Which weights the sampler multiplies by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SampleWeights {
    /// The trainer's own f32 weights: sampler log-probabilities equal the trainer's exactly.
    #[default]
    F32,
    /// Q8_0 copies of the projection weights (including the LM head).
    Q8_0,
    /// The GGUF file's own blocks for frozen weights, Q8_0 copies for the rest.
    Gguf,
}

/// Quantised copies of weights that never change (a LoRA base), made once and shared by every
/// sampler snapshot; seeded with the model file's own blocks under [`SampleWeights::Gguf`].
#[derive(Default)]
pub struct Cache {
    by_name: HashMap<String, Option<Arc<QMatrix>>>,
}

impl Cache {
    /// A cache that answers `native`'s names with the file's own blocks.
    pub fn with_native(native: HashMap<String, Arc<QMatrix>>) -> Self {
        Self { by_name: native.into_iter().map(|(k, v)| (k, Some(v))).collect() }
    }

    /// The quantised copy of the frozen weight `name`, quantising it to Q8_0 on first use.
    ///
    /// # Errors
    /// Tensor failures.
    pub fn get(&mut self, name: &str, w: &Tensor) -> Result<Option<Arc<QMatrix>>> {
        if let Some(q) = self.by_name.get(name) {
            return Ok(q.clone());
        }
        let q = q8_0(w)?;
        self.by_name.insert(name.to_string(), q.clone());
        Ok(q)
    }
}

/// A fresh Q8_0 copy of `w` `[n, k]` (weights that change between snapshots); `None` where
/// Q8_0 does not apply (not 2-D f32, or `k` not a multiple of 32).
///
/// # Errors
/// Tensor failures.
pub fn q8_0(w: &Tensor) -> Result<Option<Arc<QMatrix>>> {
    let &[n, k] = w.dims() else { return Ok(None) };
    if w.dtype() != DType::F32 {
        return Ok(None);
    }
    let v = w.detach().flatten_all()?.to_vec1::<f32>()?;
    Ok(QMatrix::q8_0(&v, n, k).map(Arc::new))
}
