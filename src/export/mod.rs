//! `rlx export`: a checkpoint out of rlx, as files other tools load.
//!
//! - [`locate`]: `RUN_DIR`, `RUN_DIR@STEP` or a checkpoint directory → the trainer state
//!   directory and the run it belongs to (shared with `rlx eval` on a checkpoint).
//! - [`merge`]: the base model plus the state's parameters → merged f32 weights under Hugging
//!   Face names (LoRA `W + (α/r)·B·A`; a full fine-tune's weights as they are), and the adapter.
//! - [`hf`]: a Hugging Face directory (`config.json`, `model.safetensors`, tokenizer files,
//!   `generation_config.json`, the chat template), what transformers and vLLM load.
//! - [`peft`]: `--adapter-only`: a PEFT LoRA adapter (`adapter_config.json`,
//!   `adapter_model.safetensors`).
//! - [`gguf`]: a GGUF file (f32, f16 or Q8_0) for llama.cpp.
//! - [`card`]: the model card (`README.md`) naming the run, its spec hash and its evaluations,
//!   and `rlx_export.json`, the same facts for programs.
//! - [`staging`]: everything is written into a hidden sibling of the output directory and
//!   renamed into place at the end, so an interrupted export never looks complete.
//!
//! The exporter reads the run directory (through `runlog`) and the model files (through the
//! local backend's loader), and writes files; it never opens a backend or runs a model.

mod card;
mod download;
mod error;
mod gguf;
mod hf;
pub(crate) mod locate;
mod merge;
mod peft;
mod remote;
mod staging;

use std::path::{Path, PathBuf};

pub(crate) use error::Error;
pub(crate) use locate::Checkpoint;
pub(crate) use remote::export as export_remote;

/// What to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// A Hugging Face model directory.
    Hf,
    /// A GGUF file (in the output directory, beside the model card).
    Gguf,
}

/// The number format of the written weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dtype {
    /// 32-bit floats: the merged weights exactly as rlx computes with them.
    F32,
    /// IEEE half precision.
    F16,
    /// bfloat16 (Hugging Face directories only).
    Bf16,
    /// llama.cpp's Q8_0: int8 blocks of 32 with an f16 scale (GGUF only).
    Q8_0,
}

impl Dtype {
    /// The lower-case name used in file names and messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
            Dtype::Q8_0 => "q8_0",
        }
    }
}

/// One export.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    /// `RUN_DIR`, `RUN_DIR@STEP` or a checkpoint directory.
    pub(crate) source: String,
    /// Hugging Face directory or GGUF.
    pub(crate) format: Format,
    /// The output directory: absent or empty.
    pub(crate) out: PathBuf,
    /// Write only the LoRA adapter, in PEFT's format.
    pub(crate) adapter_only: bool,
    /// Weight format; `None`: f32, the merged weights exactly as rlx computes with them.
    pub(crate) dtype: Option<Dtype>,
}

/// What an export wrote.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    /// The checkpoint exported.
    pub(crate) checkpoint: Checkpoint,
    /// The output directory.
    pub(crate) out: PathBuf,
    /// The files in it, by name.
    pub(crate) files: Vec<String>,
}

/// Exports the checkpoint `req.source` names into `req.out`.
///
/// # Errors
/// User errors ([`Error::is_user_error`]): a run without checkpoints, a step that does not
/// exist, a non-empty output directory, a weight format the chosen format cannot hold, an
/// adapter asked of a full fine-tune; otherwise I/O and tensor failures.
pub(crate) fn export(req: &Request) -> Result<Report, Error> {
    let dtype = req.dtype.unwrap_or(Dtype::F32);
    check_dtype(req, dtype)?;
    let checkpoint = locate::locate(&req.source)?;
    if checkpoint.is_remote() {
        return Err(Error::Remote { state: checkpoint.state.display().to_string() });
    }
    let stage = staging::Staging::begin(&req.out)?;
    let merged = merge::load(&checkpoint, req.adapter_only)?;
    let info = card::Info::gather(&checkpoint, &merged.tuning, &merged.base.display().to_string(), req.format, Some(dtype), req.adapter_only);
    write_weights(stage.path(), &merged, req.format, req.adapter_only, dtype, &info)?;
    card::write(stage.path(), &info, Some(&merged.base))?;
    let files = list(stage.path())?;
    let out = stage.commit()?;
    Ok(Report { checkpoint, out, files })
}

/// The checkpoint `arg` names: a `tinker://` path as it is, else what [`locate::locate`] finds
/// (a run directory whose checkpoints are on Tinker gives their `tinker://` paths).
///
/// # Errors
/// As [`locate::locate`]; a `tinker://` string that is not a checkpoint path.
pub(crate) fn locate_any(arg: &str) -> Result<Checkpoint, Error> {
    if arg.starts_with("tinker://") {
        let p = crate::tinker::TinkerPath::parse(arg).map_err(|e| Error::Usage(e.to_string()))?;
        return Ok(Checkpoint { state: PathBuf::from(arg), name: p.name, step: None, run: None });
    }
    locate::locate(arg)
}

/// Writes the PEFT adapter of the LoRA trainer state at `state` into the directory `out` (which
/// appears only once complete), naming `base_name` as its base model: `rlx serve`'s external
/// weights. Returns each file's name and size.
///
/// # Errors
/// A state that is not LoRA or does not fit its base, a non-empty `out`, I/O failures.
pub(crate) fn adapter_files(state: &Path, out: &Path, base_name: &str) -> Result<Vec<(String, u64)>, Error> {
    let ck = Checkpoint { state: state.to_path_buf(), name: String::new(), step: None, run: None };
    let stage = staging::Staging::begin(out)?;
    let merged = merge::load(&ck, true)?;
    peft::write(stage.path(), &merged, base_name)?;
    let mut files = vec![];
    for name in list(stage.path())? {
        let p = stage.path().join(&name);
        let size = std::fs::metadata(&p).map_err(|source| Error::Io { action: "read", path: p.clone(), source })?.len();
        files.push((name, size));
    }
    stage.commit()?;
    Ok(files)
}

/// The weights in the format asked for: a PEFT adapter, a Hugging Face directory, or a GGUF file
/// (named after the run and checkpoint in `info`).
fn write_weights(dir: &Path, merged: &merge::Merged, format: Format, adapter_only: bool, dtype: Dtype, info: &card::Info) -> Result<(), Error> {
    match (format, adapter_only) {
        (Format::Hf, true) => peft::write(dir, merged, &info.base_name),
        (Format::Hf, false) => hf::write(dir, merged, dtype),
        (Format::Gguf, _) => {
            let name = format!("{} {}", info.run_id.as_deref().unwrap_or("rlx"), info.checkpoint);
            gguf::write(&dir.join(gguf::file_name(dtype)), merged, dtype, &name)
        }
    }
}

fn check_dtype(req: &Request, dtype: Dtype) -> Result<(), Error> {
    let ok = match (req.format, req.adapter_only) {
        (Format::Hf, true) => dtype == Dtype::F32,
        (Format::Hf, false) => dtype != Dtype::Q8_0,
        (Format::Gguf, true) => return Err(Error::Usage("`--adapter-only` writes a PEFT adapter, a Hugging Face format: use it with `--format hf`".into())),
        (Format::Gguf, false) => dtype != Dtype::Bf16,
    };
    if ok {
        return Ok(());
    }
    let allowed = match (req.format, req.adapter_only) {
        (Format::Hf, true) => "f32",
        (Format::Hf, false) => "f32, f16 or bf16",
        _ => "f32, f16 or q8_0",
    };
    Err(Error::Usage(format!("`--dtype {}` is not available here: this export writes {allowed}", dtype.name())))
}

/// The names of the files in `dir`, sorted.
fn list(dir: &Path) -> Result<Vec<String>, Error> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|source| Error::Io { action: "list", path: dir.to_path_buf(), source })?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    names.sort();
    Ok(names)
}
