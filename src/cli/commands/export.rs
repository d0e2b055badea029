//! `rlx export RUN_DIR[@STEP] --format hf|gguf --out DIR`: a checkpoint as merged weights (a
//! Hugging Face directory or a GGUF file) or, with `--adapter-only`, as a PEFT LoRA adapter.
//! A Tinker checkpoint (`tinker://…`, or a run directory of a run on Tinker) is downloaded
//! first, with `TINKER_API_KEY` and `TINKER_BASE_URL` (or the run's `backend.base_url` and
//! `backend.api_key_env`). The work is `crate::export`'s; this prints what was written.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::backend::tinker;
use crate::cli::{exit, printer};
use crate::export::{self, Dtype, Format};

/// `rlx export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The checkpoint: a run directory (its last checkpoint), `RUN_DIR@STEP` (`@11`,
    /// `@step-000011`, `@last`), a checkpoint directory (`runs/<id>/checkpoints/step-000011`), or
    /// a Tinker checkpoint (`tinker://RUN/weights/NAME`, `tinker://RUN/external_weights/NAME`),
    /// downloaded with `TINKER_API_KEY` from `TINKER_BASE_URL`.
    #[arg(value_name = "RUN_DIR[@STEP]|TINKER_PATH")]
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
    /// Tinker checkpoints: the base model a downloaded LoRA adapter is merged into (a path or a
    /// Hugging Face id) [default: the run's `model.base`, else the adapter's
    /// `base_model_name_or_path`].
    #[arg(long, value_name = "MODEL")]
    pub base: Option<String>,
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
    let result = match export::locate_any(&req.source) {
        Ok(ck) if ck.is_remote() => {
            if args.base.is_some() && req.adapter_only {
                printer::error_message("`--base` names the model a downloaded adapter is merged into; `--adapter-only` merges nothing", &[]);
                return Ok(exit::USAGE);
            }
            match tinker_client(&ck) {
                Ok(client) => super::common::runtime()?.block_on(export::export_remote(&req, ck, client, args.base)),
                Err(e) => Err(export::Error::Tinker(e)),
            }
        }
        Ok(_) if args.base.is_some() => {
            printer::error_message("`--base` applies to Tinker checkpoints only: a local checkpoint records its base model", &[]);
            return Ok(exit::USAGE);
        }
        // A local checkpoint, or an argument that names none (reported by the export).
        _ => export::export(&req),
    };
    match result {
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

/// The Tinker client for a checkpoint: the service and key its run used (`backend.base_url`,
/// `backend.api_key_env` in `resolved.json`) when it is inside one, else `TINKER_BASE_URL` and
/// `TINKER_API_KEY`.
fn tinker_client(ck: &export::Checkpoint) -> Result<tinker::http::Client, tinker::Error> {
    let resolved: Option<serde_json::Value> = ck.run.as_ref().and_then(|r| r.read_json(crate::runlog::files::RESOLVED).ok().flatten());
    let backend = resolved.as_ref().map(|r| &r["backend"]);
    let base_url = backend.and_then(|b| b["base_url"].as_str());
    let key_env = backend.and_then(|b| b["api_key_env"].as_str()).unwrap_or("TINKER_API_KEY");
    let (url, key) = tinker::Options::credentials(base_url, key_env)?;
    tinker::http::Client::new(&url, &key, tinker::RetryPolicy::default())
}
