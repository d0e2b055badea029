//! `backend:` where sampling and training happen (embedded, Tinker, OpenAI-compatible).
//!
//! Part of the spec types ([`super`]); the doc comments are the user reference and generate
//! `schemas/experiment.schema.json`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
