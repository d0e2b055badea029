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
mod error;
mod gguf;
mod hf;
pub(crate) mod locate;
mod merge;
mod peft;
mod staging;

use std::path::{Path, PathBuf};

pub(crate) use error::Error;
pub(crate) use locate::Checkpoint;

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
    let info = card::Info::gather(&checkpoint, &merged, req.format, dtype, req.adapter_only);
    match (req.format, req.adapter_only) {
        (Format::Hf, true) => peft::write(stage.path(), &merged, &info.base_name)?,
        (Format::Hf, false) => hf::write(stage.path(), &merged, dtype)?,
        (Format::Gguf, _) => {
            let name = format!("{} {}", info.run_id.as_deref().unwrap_or("rlx"), checkpoint.name);
            gguf::write(&stage.path().join(gguf::file_name(dtype)), &merged, dtype, &name)?;
        }
    }
    card::write(stage.path(), &info, &merged.base)?;
    let files = list(stage.path())?;
    let out = stage.commit()?;
    Ok(Report { checkpoint, out, files })
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
