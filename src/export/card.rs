//! The model card (`README.md`, Hugging Face's front matter then prose) and `rlx_export.json`
//! (the same facts for programs): which run and checkpoint the weights are, the spec hash, the
//! base model, the tuning, and the run's evaluations up to that checkpoint, with their protocol.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{Value, json};

use super::error::Error;
use super::locate::Checkpoint;
use super::types::{Dtype, Format};
use crate::backend::local::model::Tuning;
use crate::runlog::files;

/// What the card says.
#[derive(Debug, Clone)]
pub(crate) struct Info {
    /// The run id, when the checkpoint is inside a run directory.
    pub(crate) run_id: Option<String>,
    /// The resolved spec's hash.
    pub(crate) spec_hash: Option<String>,
    /// `model.base` as the spec wrote it, else the base's path.
    pub(crate) base_name: String,
    /// `step-000011`.
    pub(crate) checkpoint: String,
    /// Last training step included.
    pub(crate) step: Option<u32>,
    /// `LoRA r=8 α=16 on q_proj, ...` or `full fine-tune`.
    pub(crate) tuning: String,
    /// `hf`, `hf-adapter` or `gguf`, and the weight format.
    pub(crate) format: String,
    /// The weight format (`None`: the files as a service wrote them, downloaded unchanged).
    pub(crate) dtype: Option<Dtype>,
    /// The Tinker checkpoint the weights were downloaded from.
    pub(crate) tinker_path: Option<String>,
    /// `(step, [(metric, value)])` of each evaluation up to the checkpoint (step −1: baseline).
    pub(crate) evals: Vec<(i64, Vec<(String, f64)>)>,
    /// `eval.k`, `eval.samples`, `eval.temperature`, `eval.max_tokens` of the run.
    pub(crate) protocol: Option<Value>,
}

impl Info {
    /// Collects what the run directory and the checkpoint say; `base` is the base model's path
    /// (its name when the run directory does not give one).
    pub(crate) fn gather(ck: &Checkpoint, tuning: &Tuning, base: &str, format: Format, dtype: Option<Dtype>, adapter_only: bool) -> Info {
        let provenance = ck.run.as_ref().and_then(|r| r.provenance().ok());
        let resolved: Option<Value> = ck.run.as_ref().and_then(|r| r.read_json(files::RESOLVED).ok().flatten());
        let evals = ck.run.as_ref().and_then(|r| r.metrics().ok()).map(|read| {
            read.rows
                .into_iter()
                .filter(|l| ck.step.is_none_or(|s| l.step <= i64::from(s)))
                .map(|l| (l.step, l.values.into_iter().filter(|(k, _)| k.starts_with("eval/")).collect::<Vec<_>>()))
                .filter(|(_, v)| !v.is_empty())
                .collect()
        });
        let tuning = match tuning {
            Tuning::Lora(l) => format!("LoRA r={} α={} on {}", l.rank, l.alpha, l.targets.join(", ")),
            Tuning::Full => "full fine-tune".into(),
            Tuning::Frozen => "frozen".into(),
        };
        let format = match (format, adapter_only) {
            (Format::Hf, true) => "peft-lora",
            (Format::Hf, false) => "hf",
            (Format::Gguf, _) => "gguf",
        };
        Info {
            run_id: provenance.as_ref().map(|p| p.run_id.clone()),
            spec_hash: provenance.as_ref().map(|p| p.spec_hash.clone()),
            base_name: provenance.as_ref().map_or_else(|| base.to_string(), |p| p.model.base.clone()),
            checkpoint: ck.name.clone(),
            step: ck.step,
            tuning,
            format: format.into(),
            dtype,
            tinker_path: ck.is_remote().then(|| ck.state.display().to_string()),
            evals: evals.unwrap_or_default(),
            protocol: resolved.and_then(|r| r.get("eval").cloned()),
        }
    }

    fn dtype_name(&self) -> &'static str {
        self.dtype.map_or("as downloaded", Dtype::name)
    }

    fn json(&self, base_path: Option<&Path>) -> Value {
        let evals: Vec<Value> = self.evals.iter().map(|(s, v)| {
            let mut o = serde_json::Map::new();
            o.insert("step".into(), json!(s));
            for (k, x) in v {
                o.insert(k.clone(), json!(x));
            }
            Value::Object(o)
        }).collect();
        json!({
            "rlx_version": env!("CARGO_PKG_VERSION"),
            "run_id": self.run_id,
            "spec_hash": self.spec_hash,
            "checkpoint": self.checkpoint,
            "tinker_path": self.tinker_path,
            "step": self.step,
            "base_model": self.base_name,
            "base_model_path": base_path,
            "tuning": self.tuning,
            "format": self.format,
            "dtype": self.dtype_name(),
            "eval_protocol": self.protocol,
            "evals": evals,
        })
    }
}

/// Writes `README.md` and `rlx_export.json` into `dir` (`base_path`: the local base model's
/// files, when the export read them).
///
/// # Errors
/// I/O failures.
pub(crate) fn write(dir: &Path, info: &Info, base_path: Option<&Path>) -> Result<(), Error> {
    super::hf::write_json(&dir.join("rlx_export.json"), &info.json(base_path))?;
    let p = dir.join("README.md");
    std::fs::write(&p, markdown(info)).map_err(|source| Error::Io { action: "write", path: p, source })
}

fn markdown(info: &Info) -> String {
    let mut s = String::new();
    let library = if info.format == "peft-lora" { "peft" } else if info.format == "gguf" { "gguf" } else { "transformers" };
    let _ = writeln!(s, "---\nbase_model: {}\nlibrary_name: {library}\ntags: [rlx, grpo, reinforcement-learning, code]\n---\n", yaml_string(&info.base_name));
    let title = info.run_id.clone().unwrap_or_else(|| "rlx checkpoint".into());
    let _ = writeln!(s, "# {title} · {}\n", info.checkpoint);
    match &info.tinker_path {
        Some(p) => {
            let _ = writeln!(s, "Weights trained on Tinker, downloaded from `{p}` through Tinker's REST API and exported by `rlx export`.\n");
        }
        None => {
            let _ = writeln!(s, "Weights trained with rlx (reinforcement learning on code problems) and exported by `rlx export`.\n");
        }
    }
    let _ = writeln!(s, "| | |\n|---|---|");
    let rows = [
        ("run", info.run_id.clone().map(|r| format!("`{r}`"))),
        ("spec hash", info.spec_hash.clone().map(|h| format!("`{h}`"))),
        ("checkpoint", Some(format!("`{}`", info.checkpoint))),
        ("Tinker checkpoint", info.tinker_path.clone().map(|p| format!("`{p}`"))),
        ("last training step", info.step.map(|s| s.to_string())),
        ("base model", Some(format!("`{}`", info.base_name))),
        ("tuning", Some(info.tuning.clone())),
        ("format", Some(format!("{} ({})", info.format, info.dtype_name()))),
        ("rlx", Some(env!("CARGO_PKG_VERSION").to_string())),
    ];
    for (k, v) in rows {
        if let Some(v) = v {
            let _ = writeln!(s, "| {k} | {v} |");
        }
    }
    s.push('\n');
    eval_section(&mut s, info);
    s
}

fn eval_section(s: &mut String, info: &Info) {
    let _ = writeln!(s, "## Evaluation\n");
    if info.evals.is_empty() {
        let _ = writeln!(s, "The run recorded no evaluation up to this checkpoint.");
        return;
    }
    if let Some(p) = &info.protocol {
        let _ = writeln!(s, "The run's protocol (`eval` of its spec): `{p}`. Step −1 is the base model.\n");
    }
    let mut keys: Vec<&String> = info.evals.iter().flat_map(|(_, v)| v.iter().map(|(k, _)| k)).collect();
    keys.sort();
    keys.dedup();
    let _ = writeln!(s, "| step | {} |", keys.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(" | "));
    let _ = writeln!(s, "|---|{}", "---|".repeat(keys.len()));
    for (step, values) in &info.evals {
        let cells: Vec<String> = keys.iter().map(|k| values.iter().find(|(n, _)| n == *k).map_or_else(|| "—".into(), |(_, v)| format!("{v:.4}"))).collect();
        let _ = writeln!(s, "| {step} | {} |", cells.join(" | "));
    }
}

/// A YAML double-quoted string.
fn yaml_string(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialise")
}
