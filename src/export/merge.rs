//! A checkpoint's weights as one model: the base model (the file the state records it was
//! trained from) plus the state's trainable parameters.
//!
//! - LoRA: each adapted projection becomes `W + (α/r)·B·A`. The product is taken in f64 and the
//!   sum rounded to f32 once: rounding `B·A` to f32 before adding it to `W` would add a second
//!   rounding error the forward pass (which adds `x·Aᵀ·Bᵀ` to `x·Wᵀ` in f32) never had.
//! - Full fine-tuning: the state holds every weight; they replace the base's as they are.
//!
//! The base's config must equal the one the state records: a state put onto another model would
//! export silently wrong weights.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};

use super::error::Error;
use super::locate::Checkpoint;
use crate::seam::LoraConfig;
use crate::backend::local::model::{Config, Tuning};
use crate::backend::local::state::{self, Header};
use crate::prompt::model_files::{self, PromptFiles};

/// The merged model and what the writers need besides its weights.
pub(crate) struct Merged {
    /// Hyper-parameters (the base's, equal to the state's).
    pub(crate) config: Config,
    /// f32 weights under Hugging Face names, LoRA merged in (empty for adapter-only exports).
    pub(crate) weights: HashMap<String, Tensor>,
    /// The trained adapter, under LoRA.
    pub(crate) adapter: Option<Adapter>,
    /// How it was tuned (LoRA shape, or a full fine-tune).
    pub(crate) tuning: Tuning,
    /// The base model's file or directory.
    pub(crate) base: PathBuf,
    /// The base's tokenizer, chat template and special tokens.
    pub(crate) prompt: PromptFiles,
}

/// A LoRA adapter as trained.
pub(crate) struct Adapter {
    /// Rank, α and target modules.
    pub(crate) lora: LoraConfig,
    /// `(name, tensor)` with rlx's (PEFT's, without the `base_model.model.` prefix) names:
    /// `model.layers.0.self_attn.q_proj.lora_A.weight`, f32, sorted by name.
    pub(crate) tensors: Vec<(String, Tensor)>,
}

const LORA_A: &str = ".lora_A.weight";
const LORA_B: &str = ".lora_B.weight";

/// Reads the checkpoint's state and its base model and merges them (`adapter_only`: the adapter
/// only, the base's weights are not merged).
///
/// # Errors
/// An unreadable state or base, a base whose config differs from the state's, a full fine-tune
/// asked for its adapter.
pub(crate) fn load(ck: &Checkpoint, adapter_only: bool) -> Result<Merged, Error> {
    let header = read_header(&ck.state)?;
    let params = read_params(&ck.state, &header)?;
    if adapter_only && !matches!(header.options.tuning, Tuning::Lora(_)) {
        return Err(Error::Usage(format!("checkpoint `{}` is a full fine-tune: it has no adapter; export its weights without `--adapter-only`", ck.state.display())));
    }
    let base = header.base_model.clone();
    if !base.exists() {
        return Err(Error::Model(crate::backend::Error::Model { path: base, reason: "the base model this checkpoint was trained from is gone (it is not in the checkpoint: only the trained parameters are)".into() }));
    }
    let loaded = crate::backend::local::load(&base)?;
    if loaded.config != header.config {
        let reason = "the base model's config differs from the one recorded in `state.json`".to_string();
        return Err(Error::Model(crate::backend::Error::StateMismatch { path: ck.state.clone(), reason }));
    }
    let prompt = model_files::read(&base).map_err(|e| crate::backend::Error::Model { path: base.clone(), reason: e.to_string() })?;
    let mut weights = loaded.weights;
    let adapter = match &header.options.tuning {
        Tuning::Lora(lora) => {
            let adapter = adapter(lora, params)?;
            if !adapter_only {
                merge_lora(&mut weights, &adapter, &ck.state)?;
            }
            Some(adapter)
        }
        Tuning::Full => {
            replace(&mut weights, params, &ck.state)?;
            None
        }
        Tuning::Frozen => return Err(Error::Model(crate::backend::Error::StateMismatch { path: ck.state.clone(), reason: "its tuning is `frozen`: it trained nothing".into() })),
    };
    if adapter_only {
        weights.clear();
    }
    if header.config.tie_word_embeddings {
        // Some tied checkpoints still carry the head; the config decides, as when loading.
        weights.remove("lm_head.weight");
    }
    Ok(Merged { config: loaded.config, weights, adapter, tuning: header.options.tuning, base, prompt })
}

/// A PEFT LoRA adapter directory (`adapter_config.json`, `adapter_model.safetensors`; what
/// Tinker's external weights of a LoRA model are) merged into the base model at `base`.
///
/// # Errors
/// An unreadable or unsupported adapter (rsLoRA, DoRA, a module the base lacks or of another
/// shape), an unreadable base.
pub(crate) fn from_peft(base: &Path, dir: &Path) -> Result<Merged, Error> {
    let lora = peft_config(dir)?;
    let path = dir.join("adapter_model.safetensors");
    let tensors = candle_core::safetensors::load(&path, &Device::Cpu).map_err(|e| Error::Usage(format!("`{}` is not a readable safetensors file: {e}", path.display())))?;
    let mut params = HashMap::new();
    for (name, t) in tensors {
        // PEFT's names: `base_model.model.` + the module path (no adapter name in saved files).
        let name = name.strip_prefix("base_model.model.").map(str::to_string).unwrap_or(name);
        params.insert(name, t.to_dtype(DType::F32)?);
    }
    let adapter = adapter(&lora, params)?;
    let loaded = crate::backend::local::load(base)?;
    let prompt = model_files::read(base).map_err(|e| crate::backend::Error::Model { path: base.to_path_buf(), reason: e.to_string() })?;
    let mut weights = loaded.weights;
    merge_lora(&mut weights, &adapter, dir)?;
    if loaded.config.tie_word_embeddings {
        weights.remove("lm_head.weight");
    }
    Ok(Merged { config: loaded.config, weights, adapter: Some(adapter), tuning: Tuning::Lora(lora), base: base.to_path_buf(), prompt })
}

/// A full model directory (`config.json` and safetensors) as it is, for writers that take a
/// [`Merged`] (the GGUF of a downloaded full fine-tune).
///
/// # Errors
/// An unreadable model.
pub(crate) fn whole(dir: &Path) -> Result<Merged, Error> {
    let loaded = crate::backend::local::load(dir)?;
    let prompt = model_files::read(dir).map_err(|e| crate::backend::Error::Model { path: dir.to_path_buf(), reason: e.to_string() })?;
    let mut weights = loaded.weights;
    if loaded.config.tie_word_embeddings {
        weights.remove("lm_head.weight");
    }
    Ok(Merged { config: loaded.config, weights, adapter: None, tuning: Tuning::Full, base: dir.to_path_buf(), prompt })
}

/// The LoRA shape an `adapter_config.json` describes.
///
/// # Errors
/// A missing or unreadable file, no rank or α, rsLoRA or DoRA (whose updates are not
/// `(α/r)·B·A`).
pub(crate) fn peft_config(dir: &Path) -> Result<LoraConfig, Error> {
    let path = dir.join("adapter_config.json");
    let text = std::fs::read_to_string(&path).map_err(|source| Error::Io { action: "read", path: path.clone(), source })?;
    let bad = |what: &str| Error::Usage(format!("`{}` is not a PEFT LoRA config: {what}", path.display()));
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(&e.to_string()))?;
    if v["use_rslora"] == true || v["use_dora"] == true {
        return Err(bad("rsLoRA and DoRA adapters are not merged by rlx (their update is not `(α/r)·B·A`)"));
    }
    let rank = v["r"].as_u64().filter(|r| *r > 0).ok_or_else(|| bad("no positive `r`"))?;
    let alpha = v["lora_alpha"].as_f64().ok_or_else(|| bad("no `lora_alpha`"))?;
    let targets = match &v["target_modules"] {
        serde_json::Value::String(s) => vec![s.clone()],
        serde_json::Value::Array(a) => a.iter().filter_map(|t| t.as_str().map(str::to_string)).collect(),
        _ => vec![],
    };
    Ok(LoraConfig { rank: rank as usize, alpha, targets })
}

/// `state.json`.
fn read_header(dir: &Path) -> Result<Header, Error> {
    state::read_header(dir).map_err(io_as_export)
}

/// The trained parameters (`param.<name>` in `state.safetensors`), as f32.
fn read_params(dir: &Path, header: &Header) -> Result<HashMap<String, Tensor>, Error> {
    state::read_params(dir, header).map_err(io_as_export)
}

/// A state file that cannot be read is the export's I/O error (a user error when it is missing),
/// anything else the model's.
fn io_as_export(e: crate::backend::Error) -> Error {
    match e {
        crate::backend::Error::Io { action, path, source } => Error::Io { action, path, source },
        other => Error::Model(other),
    }
}

/// The adapter's tensors, checked to come in `lora_A`/`lora_B` pairs.
fn adapter(lora: &LoraConfig, params: HashMap<String, Tensor>) -> Result<Adapter, Error> {
    let mut tensors: Vec<(String, Tensor)> = params.into_iter().collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, _) in &tensors {
        let pair = if let Some(p) = name.strip_suffix(LORA_A) { format!("{p}{LORA_B}") } else if let Some(p) = name.strip_suffix(LORA_B) { format!("{p}{LORA_A}") } else {
            return Err(Error::Usage(format!("LoRA state has a parameter `{name}` that is not an adapter")));
        };
        if !tensors.iter().any(|(n, _)| *n == pair) {
            return Err(Error::Usage(format!("LoRA state has `{name}` without `{pair}`")));
        }
    }
    Ok(Adapter { lora: lora.clone(), tensors })
}

/// `W ← W + (α/r)·B·A` for every adapter pair.
fn merge_lora(weights: &mut HashMap<String, Tensor>, adapter: &Adapter, state: &Path) -> Result<(), Error> {
    let scale = adapter.lora.scale();
    let get = |name: &str| adapter.tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t);
    for (name, a) in &adapter.tensors {
        let Some(prefix) = name.strip_suffix(LORA_A) else { continue };
        let b = get(&format!("{prefix}{LORA_B}")).expect("pairs checked by `adapter`");
        let wname = format!("{prefix}.weight");
        let w = weights.get(&wname).ok_or_else(|| Error::Model(crate::backend::Error::StateMismatch { path: state.to_path_buf(), reason: format!("the adapter `{prefix}` has no base weight `{wname}`") }))?;
        let delta = (b.to_dtype(DType::F64)?.matmul(&a.to_dtype(DType::F64)?)? * scale)?;
        if delta.dims() != w.dims() {
            return Err(Error::Model(crate::backend::Error::StateMismatch { path: state.to_path_buf(), reason: format!("the adapter `{prefix}` is {:?}, its base weight {:?}", delta.dims(), w.dims()) }));
        }
        let merged = (w.to_dtype(DType::F64)? + delta)?.to_dtype(DType::F32)?;
        weights.insert(wname, merged);
    }
    Ok(())
}

/// A full fine-tune's weights replace the base's.
fn replace(weights: &mut HashMap<String, Tensor>, params: HashMap<String, Tensor>, state: &Path) -> Result<(), Error> {
    for (name, t) in params {
        match weights.get(&name) {
            Some(w) if w.dims() == t.dims() => {
                weights.insert(name, t);
            }
            Some(w) => return Err(Error::Model(crate::backend::Error::StateMismatch { path: state.to_path_buf(), reason: format!("`{name}` is {:?}, the base's {:?}", t.dims(), w.dims()) })),
            None => return Err(Error::Model(crate::backend::Error::StateMismatch { path: state.to_path_buf(), reason: format!("the base model has no `{name}`") })),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_adds_the_scaled_product_in_one_rounding() {
        let dev = Device::Cpu;
        let w = Tensor::new(&[[1f32, 2.0], [3.0, 4.0]], &dev).unwrap();
        let a = Tensor::new(&[[0.5f32, -1.0]], &dev).unwrap(); // r = 1, in = 2
        let b = Tensor::new(&[[2f32], [0.25]], &dev).unwrap(); // out = 2
        let lora = LoraConfig { rank: 1, alpha: 2.0, targets: vec!["q_proj".into()] };
        let params: HashMap<String, Tensor> = [("x.q_proj.lora_A.weight".to_string(), a), ("x.q_proj.lora_B.weight".to_string(), b)].into_iter().collect();
        let adapter = adapter(&lora, params).unwrap();
        let mut weights: HashMap<String, Tensor> = [("x.q_proj.weight".to_string(), w)].into_iter().collect();
        merge_lora(&mut weights, &adapter, Path::new("s")).unwrap();
        // W + 2·B·A = [[1+2·1, 2−2·2], [3+2·0.125, 4−2·0.25]]
        assert_eq!(weights["x.q_proj.weight"].to_vec2::<f32>().unwrap(), vec![vec![3.0, -2.0], vec![3.25, 3.5]]);
    }

    #[test]
    fn an_unpaired_adapter_is_refused() {
        let lora = LoraConfig::all_linear(1);
        let params: HashMap<String, Tensor> = [("x.q_proj.lora_A.weight".to_string(), Tensor::zeros((1, 2), DType::F32, &Device::Cpu).unwrap())].into_iter().collect();
        let err = adapter(&lora, params).err().unwrap();
        assert!(err.to_string().contains("without `x.q_proj.lora_B.weight`"), "{err}");
    }
}
