//! The teacher of `grpo.distill` read from disk: a model (a directory or a `.gguf` file, what
//! [`super::load`] reads), or a checkpoint of an rlx run (a trainer state directory, with
//! `state.json`) put onto the base model it was trained from.
//!
//! A checkpoint's weights are the base's with the state's trained parameters: under full
//! fine-tuning they replace the base's tensors; under LoRA the adapter tensors join the base's
//! with their scale, and the frozen model applies them as the policy's sampler does
//! (`x·Wᵀ + (α/r)·x·Aᵀ·Bᵀ`, the same arithmetic as the trainer that wrote the checkpoint).
//! Rejected: exporting the checkpoint to a model directory first (`rlx export`), which writes a
//! copy of the whole model to load it back.

use std::path::Path;

use candle_core::{Device, Tensor};

use super::load::Loaded;
use super::model::Tuning;
use super::state;
use crate::backend::error::{Error, Result};

/// The teacher at `path`: a model as [`super::load`] reads it, or a trainer state directory
/// merged onto its base model.
///
/// # Errors
/// An unreadable model or state, a base model that is gone or whose config differs from the one
/// the state records, a state that trained nothing.
pub(crate) fn load(path: &Path) -> Result<Loaded> {
    if !path.join("state.json").is_file() {
        return super::load(path);
    }
    let header = state::read_header(path)?;
    let mismatch = |reason: String| Error::StateMismatch { path: path.to_path_buf(), reason };
    if !header.base_model.exists() {
        return Err(mismatch(format!("the base model it was trained from, `{}`, is gone (a checkpoint holds only the trained parameters)", header.base_model.display())));
    }
    let mut loaded = super::load(&header.base_model)?;
    if loaded.config != header.config {
        return Err(mismatch("its base model's config differs from the one recorded in `state.json`".into()));
    }
    let params = state::read_params(path, &header)?;
    match &header.options.tuning {
        Tuning::Full => {
            for (name, t) in params {
                let known = loaded.weights.contains_key(&name) || (name == "lm_head.weight" && loaded.config.tie_word_embeddings);
                if !known {
                    return Err(mismatch(format!("parameter `{name}` is not a weight of its base model")));
                }
                loaded.weights.insert(name, t);
            }
        }
        Tuning::Lora(lora) => {
            let scale = Tensor::new(&[lora.scale() as f32], &Device::Cpu)?;
            for (name, t) in params {
                if let Some(prefix) = name.strip_suffix(".lora_A.weight") {
                    loaded.weights.insert(format!("{prefix}.lora_scale"), scale.clone());
                }
                loaded.weights.insert(name, t);
            }
        }
        Tuning::Frozen => return Err(mismatch("its tuning is `frozen`: it trained nothing".into())),
    }
    // Quantised blocks are the base's, not the checkpoint's; the teacher is scored in f32.
    loaded.blocks.clear();
    loaded.source = path.to_path_buf();
    Ok(loaded)
}
