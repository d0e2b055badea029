//! `rlx export`: a checkpoint out of rlx, as files other tools load.
//!
//! - `types`: the [`Request`] (checkpoint, [`Format`], [`Dtype`]) and the `Report`; `local`:
//!   [`export`] and [`adapter_files`], the steps in order (this file only declares and
//!   re-exports, so the parts name each other, never their parent); `remote`: the same for a
//!   checkpoint on Tinker, downloaded first.
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
mod local;
pub(crate) mod locate;
mod merge;
mod peft;
mod remote;
mod staging;
mod types;

pub(crate) use error::Error;
pub(crate) use local::{adapter_files, export};
pub(crate) use locate::{Checkpoint, RunCheckpoints, locate_any};
pub(crate) use remote::export as export_remote;
pub(crate) use types::{Dtype, Format, Request};
