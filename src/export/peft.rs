//! `--adapter-only`: a PEFT LoRA adapter, `adapter_config.json` and `adapter_model.safetensors`.
//!
//! rlx's adapters already follow PEFT (`lora_A` `[r, in]`, `lora_B` `[out, r]`, the update
//! scaled by `lora_alpha / r`), so the tensors are written as they are, under the names
//! `PeftModel.save_pretrained` uses (`base_model.model.` + the module path, no adapter name).
//! `base_model_name_or_path` is the spec's `model.base` when the run directory is known, else
//! the base model's path; a GGUF base must be converted to a Hugging Face model for PEFT to
//! load it (the adapter's names and shapes are the same).

use std::collections::HashMap;
use std::path::Path;

use serde_json::json;

use super::error::Error;
use super::hf::{write_json, write_safetensors};
use super::merge::Merged;

/// Writes the adapter of `m` into `dir`; `base_name` goes into `base_model_name_or_path`.
///
/// # Errors
/// I/O failures.
pub(crate) fn write(dir: &Path, m: &Merged, base_name: &str) -> Result<(), Error> {
    let adapter = m.adapter.as_ref().expect("merge::load refuses adapter-only exports of full fine-tunes");
    let lora = &adapter.lora;
    let mut targets = lora.targets.clone();
    targets.sort();
    // PEFT stores `lora_alpha` as a number and scales by `lora_alpha / r`; an integral α is
    // written as an integer, as PEFT itself writes it.
    let alpha = if lora.alpha.fract() == 0.0 && lora.alpha.abs() < 1e15 { json!(lora.alpha as i64) } else { json!(lora.alpha) };
    let cfg = json!({
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_name,
        "r": lora.rank,
        "lora_alpha": alpha,
        "target_modules": targets,
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": false,
        "inference_mode": true,
        "init_lora_weights": true,
        "use_rslora": false,
        "use_dora": false,
        "modules_to_save": null,
        "layers_to_transform": null,
        "layers_pattern": null,
        "rank_pattern": {},
        "alpha_pattern": {},
        "revision": null,
    });
    write_json(&dir.join("adapter_config.json"), &cfg)?;
    let tensors: HashMap<String, candle_core::Tensor> = adapter.tensors.iter().map(|(n, t)| (format!("base_model.model.{n}"), t.clone())).collect();
    write_safetensors(&dir.join("adapter_model.safetensors"), &tensors)
}
