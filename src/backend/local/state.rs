//! Training state on disk: what `save_state` writes and `load_state` reads.
//!
//! A state directory holds `state.safetensors` (every trainable parameter under its name, and the
//! AdamW moments as `adam_m.<name>` / `adam_v.<name>`, in the training dtype, so values round-trip
//! bit for bit) and `state.json` (format version, optimizer step, model config, tuning, parameter
//! names). Base weights are not copied under LoRA: the state is resumed on the same base model,
//! and `state.json` records the config and tuning so a mismatch is an error, not silent garbage.
//! Files are written to a temporary name and renamed, so a crash never leaves a half state.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Tensor, Var};

use super::model::Config;
use super::optim::AdamW;
use super::options::TrainerOptions;
use crate::backend::error::{Error, Result};

/// Bumped when the layout changes.
const FORMAT_VERSION: u32 = 1;

/// `state.json`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Header {
    /// Layout version.
    pub format_version: u32,
    /// Optimizer steps taken.
    pub step: u64,
    /// Model hyper-parameters.
    pub config: Config,
    /// Tuning mode and LoRA shape.
    pub options: TrainerOptions,
    /// Trainable parameter names, in optimizer order.
    pub params: Vec<String>,
    /// The base model the state was trained from (informational).
    pub base_model: PathBuf,
}

impl Header {
    /// The header for a trainer's current state.
    pub(crate) fn new(config: &Config, options: &TrainerOptions, step: u64, params: &[String], base: &Path) -> Self {
        Self { format_version: FORMAT_VERSION, step, config: config.clone(), options: options.clone(), params: params.to_vec(), base_model: base.to_path_buf() }
    }
}

/// Write `path` through a temporary sibling and a rename.
///
/// # Errors
/// I/O failures from `write` or the rename.
pub(crate) fn write_atomic(path: &Path, write: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let tmp = path.with_extension(format!("{}.tmp", path.extension().and_then(|e| e.to_str()).unwrap_or("")));
    write(&tmp)?;
    std::fs::rename(&tmp, path).map_err(|source| Error::Io { action: "rename into", path: path.to_path_buf(), source })
}

/// Save parameters and optimizer state to the directory `dir`.
///
/// # Errors
/// I/O failures.
pub(crate) fn save(dir: &Path, header: &Header, vars: &[Var], opt: &AdamW) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io { action: "create", path: dir.to_path_buf(), source })?;
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    for (i, name) in header.params.iter().enumerate() {
        tensors.insert(format!("param.{name}"), vars[i].as_tensor().detach());
        tensors.insert(format!("adam_m.{name}"), opt.m[i].clone());
        tensors.insert(format!("adam_v.{name}"), opt.v[i].clone());
    }
    write_atomic(&dir.join("state.safetensors"), |p| Ok(candle_core::safetensors::save(&tensors, p)?))?;
    let json = serde_json::to_vec_pretty(header).expect("header serialises");
    write_atomic(&dir.join("state.json"), |p| std::fs::write(p, &json).map_err(|source| Error::Io { action: "write", path: p.to_path_buf(), source }))
}

/// Load a state saved by [`save`] into `vars` and `opt`; returns the optimizer step.
///
/// # Errors
/// I/O failures, or [`Error::StateMismatch`] when the state belongs to another model or tuning.
pub(crate) fn load(dir: &Path, expected: &Header, vars: &[Var], opt: &mut AdamW) -> Result<u64> {
    let mismatch = |reason: String| Error::StateMismatch { path: dir.to_path_buf(), reason };
    let hp = dir.join("state.json");
    let text = std::fs::read_to_string(&hp).map_err(|source| Error::Io { action: "read", path: hp.clone(), source })?;
    let header: Header = serde_json::from_str(&text).map_err(|e| mismatch(format!("`state.json` is not a trainer state: {e}")))?;
    if header.format_version != FORMAT_VERSION {
        return Err(mismatch(format!("format version {} (expected {FORMAT_VERSION})", header.format_version)));
    }
    if header.config != expected.config {
        return Err(mismatch("it was trained on a model with a different config".into()));
    }
    if header.options.tuning != expected.options.tuning {
        return Err(mismatch(format!("its tuning is {:?}, this trainer's is {:?}", header.options.tuning, expected.options.tuning)));
    }
    if header.params != expected.params {
        return Err(mismatch("its parameter list differs".into()));
    }
    let sp = dir.join("state.safetensors");
    let tensors = candle_core::safetensors::load(&sp, &candle_core::Device::Cpu).map_err(|e| mismatch(format!("`state.safetensors`: {e}")))?;
    let take = |k: String, like: &Tensor| -> Result<Tensor> {
        let t = tensors.get(&k).ok_or_else(|| mismatch(format!("missing tensor `{k}`")))?;
        if t.shape() != like.shape() || t.dtype() != like.dtype() {
            return Err(mismatch(format!("tensor `{k}` has shape {:?} {:?}, expected {:?} {:?}", t.dims(), t.dtype(), like.dims(), like.dtype())));
        }
        Ok(t.clone())
    };
    // Read everything before touching the trainer, so a bad file leaves it unchanged.
    let mut loaded = Vec::with_capacity(vars.len());
    for (i, name) in header.params.iter().enumerate() {
        let p = take(format!("param.{name}"), vars[i].as_tensor())?;
        let m = take(format!("adam_m.{name}"), &opt.m[i])?;
        let v = take(format!("adam_v.{name}"), &opt.v[i])?;
        loaded.push((p, m, v));
    }
    for (i, (p, m, v)) in loaded.into_iter().enumerate() {
        vars[i].set(&p)?;
        opt.m[i] = m;
        opt.v[i] = v;
    }
    Ok(header.step)
}

/// The header (`state.json`) of the state directory `dir`.
///
/// # Errors
/// An unreadable file, or one that is not a trainer state's header.
pub(crate) fn read_header(dir: &Path) -> Result<Header> {
    let path = dir.join("state.json");
    let text = std::fs::read_to_string(&path).map_err(|source| Error::Io { action: "read", path: path.clone(), source })?;
    serde_json::from_str(&text).map_err(|e| Error::StateMismatch { path: dir.to_path_buf(), reason: format!("`state.json` is not an rlx trainer state: {e}") })
}

/// The trained parameters of the state directory `dir` (`param.<name>`), as f32; the Adam
/// moments beside them are not part of the model.
///
/// # Errors
/// A missing or unreadable `state.safetensors`, a parameter `header` names that it lacks.
pub(crate) fn read_params(dir: &Path, header: &Header) -> Result<HashMap<String, Tensor>> {
    let path = tensors_path(dir);
    if !path.is_file() {
        return Err(Error::Io { action: "read", path, source: std::io::Error::from(std::io::ErrorKind::NotFound) });
    }
    let mismatch = |reason: String| Error::StateMismatch { path: path.clone(), reason };
    let mut tensors = candle_core::safetensors::load(&path, &candle_core::Device::Cpu).map_err(|e| mismatch(format!("not a readable safetensors file: {e}")))?;
    let mut out = HashMap::new();
    for name in &header.params {
        let t = tensors.remove(&format!("param.{name}")).ok_or_else(|| mismatch(format!("missing tensor `param.{name}`")))?;
        out.insert(name.clone(), t.to_dtype(candle_core::DType::F32)?);
    }
    Ok(out)
}

/// Where [`save`] puts the tensors of a state directory (for tools that read it).
pub(crate) fn tensors_path(dir: &Path) -> PathBuf {
    dir.join("state.safetensors")
}
