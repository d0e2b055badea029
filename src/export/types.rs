//! What an export is asked for ([`Request`]: the checkpoint, [`Format`], [`Dtype`]) and what it
//! wrote ([`Report`]).

use std::path::PathBuf;

use super::locate::Checkpoint;

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
