//! `rlx export RUN_DIR[@STEP] --format hf|gguf --out DIR`: a checkpoint as merged weights (a
//! Hugging Face directory or a GGUF file) or, with `--adapter-only`, as a PEFT LoRA adapter.
//! The work is `crate::export`'s; this prints what was written.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::cli::{exit, printer};
use crate::export::{self, Dtype, Format};

/// `rlx export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The checkpoint: a run directory (its last checkpoint), `RUN_DIR@STEP` (`@11`,
    /// `@step-000011`, `@last`), or a checkpoint directory (`runs/<id>/checkpoints/step-000011`).
    #[arg(value_name = "RUN_DIR[@STEP]")]
    pub source: String,
    /// `hf`: a Hugging Face directory (config.json, model.safetensors, tokenizer files, chat
    /// template); `gguf`: a GGUF file for llama.cpp.
    #[arg(long, value_enum, default_value_t = FormatArg::Hf)]
    pub format: FormatArg,
    /// The output directory; it must not exist or be empty. It appears only once complete.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Write the LoRA adapter alone, in PEFT's format (adapter_config.json,
    /// adapter_model.safetensors), instead of merged weights.
    #[arg(long)]
    pub adapter_only: bool,
    /// Weight format: `f32` (default: the weights rlx computes with), `f16`, `bf16` (hf), `q8_0`
    /// (gguf).
    #[arg(long, value_enum)]
    pub dtype: Option<DtypeArg>,
}

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// A Hugging Face model directory.
    Hf,
    /// A GGUF file.
    Gguf,
}

/// `--dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DtypeArg {
    /// 32-bit floats.
    F32,
    /// Half precision.
    F16,
    /// bfloat16.
    Bf16,
    /// llama.cpp's 8-bit blocks.
    #[value(name = "q8_0")]
    Q8_0,
}

pub(crate) fn run(args: ExportArgs) -> anyhow::Result<u8> {
    let req = export::Request {
        source: args.source,
        format: match args.format {
            FormatArg::Hf => Format::Hf,
            FormatArg::Gguf => Format::Gguf,
        },
        out: args.out,
        adapter_only: args.adapter_only,
        dtype: args.dtype.map(|d| match d {
            DtypeArg::F32 => Dtype::F32,
            DtypeArg::F16 => Dtype::F16,
            DtypeArg::Bf16 => Dtype::Bf16,
            DtypeArg::Q8_0 => Dtype::Q8_0,
        }),
    };
    match export::export(&req) {
        Ok(report) => {
            let step = report.checkpoint.step.map(|s| format!(" (step {s})")).unwrap_or_default();
            printer::status(format!("exported {}{step} from `{}`", report.checkpoint.name, report.checkpoint.state.display()));
            printer::out(report.out.display().to_string());
            for f in &report.files {
                printer::status(format!("  {f}"));
            }
            Ok(exit::OK)
        }
        Err(e) => {
            printer::error_chain(&e, &e.hints());
            Ok(if e.is_user_error() { exit::USAGE } else { exit::INTERNAL })
        }
    }
}
