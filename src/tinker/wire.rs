//! The JSON bodies of Tinker's REST protocol, as SDK 0.38.0 sends and expects them
//! (SDK 0.38.0and §12), for both sides: rlx's client serializes the requests and
//! parses the responses; `rlx serve` does the reverse.
//!
//! Serialization follows the SDK's pydantic rule (`exclude_none=True`): an absent optional field
//! is omitted, a field equal to its default is written, and each request carries its literal
//! `"type"` (a [`literal`] type that rejects any other value). Field order is the SDK's
//! declaration order, so rlx's requests read like the SDK's in the server's request record.
//! Deserialization ignores unknown fields (the server adds fields; the SDK's request models are
//! strict only on its own side), and a missing `"type"` is accepted.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Defines unit structs that serialize as one fixed string and accept only that string.
macro_rules! literal {
    ($($(#[$m:meta])* $name:ident = $lit:literal;)*) => {$(
        $(#[$m])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub(crate) struct $name;

        impl $name {
            /// The literal.
            #[allow(dead_code, reason = "read for some literals only; the macro defines it for all")]
            pub(crate) const VALUE: &'static str = $lit;
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str($lit)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                if s == $lit {
                    Ok($name)
                } else {
                    Err(serde::de::Error::custom(format_args!("expected `\"{}\"`, found `\"{s}\"`", $lit)))
                }
            }
        }
    )*};
}

/// The literal `"type"` tags.
pub(crate) mod literal {
    use super::{Deserialize, Serialize};

    literal! {
        /// `"create_session"`.
        CreateSession = "create_session";
        /// `"session_heartbeat"`.
        SessionHeartbeat = "session_heartbeat";
        /// `"create_model"`.
        CreateModel = "create_model";
        /// `"get_info"`.
        GetInfo = "get_info";
        /// `"optim_step"`.
        OptimStep = "optim_step";
        /// `"save_weights"`.
        SaveWeights = "save_weights";
        /// `"save_weights_for_sampler"`.
        SaveWeightsForSampler = "save_weights_for_sampler";
        /// `"load_weights"`.
        LoadWeights = "load_weights";
        /// `"save_weights_external"`.
        SaveWeightsExternal = "save_weights_external";
        /// `"create_sampling_session"`.
        CreateSamplingSession = "create_sampling_session";
        /// `"sample"` (the `asample` request).
        Sample = "sample";
        /// `"try_again"`.
        TryAgain = "try_again";
        /// `"encoded_text"`.
        EncodedText = "encoded_text";
    }
}

// ---------------------------------------------------------------------------------------------
// Bootstrap and sessions (§2)

/// `POST /api/v1/client/config` and `/client/dynamic_config` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ClientConfigRequest {
    /// The SDK's version (`"0.38.0"`).
    pub sdk_version: String,
}

/// `POST /api/v1/client/config` response: server feature flags. Omitted keys take the SDK's
/// defaults (the `Default` here); unknown keys are ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ClientConfigResponse {
    /// Exchange the API key for a JWT first.
    pub pjwt_auth_enabled: bool,
    /// Submit the chunks of one forward_backward in parallel (chunks 2..n before chunk 1).
    pub parallel_fwdbwd_chunks: bool,
    /// zstd-compress forward_backward bodies.
    pub proto_compress_fwdbwd: bool,
    /// Most datums per forward_backward chunk.
    pub fwdbwd_max_chunk_len: u64,
    /// Most estimated bytes per forward_backward chunk.
    pub fwdbwd_max_chunk_bytes_count: u64,
    /// Ask for a clone id when unpickling a sampling client.
    pub sample_join_sampling_session: bool,
    /// Poll `/retrieve_futures` in batches.
    pub sample_use_retrieve_futures: bool,
}

impl Default for ClientConfigResponse {
    fn default() -> Self {
        ClientConfigResponse {
            pjwt_auth_enabled: false,
            parallel_fwdbwd_chunks: true,
            proto_compress_fwdbwd: false,
            fwdbwd_max_chunk_len: 1024,
            fwdbwd_max_chunk_bytes_count: 5_000_000,
            sample_join_sampling_session: false,
            sample_use_retrieve_futures: false,
        }
    }
}

/// `POST /api/v1/client/dynamic_config` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct DynamicConfigResponse {
    /// Seconds between refreshes.
    pub refresh_interval_sec: u64,
    /// Whether `cancel` of in-flight samples is served.
    pub sample_cancel_enabled: bool,
    /// Most samples per cancel.
    pub sample_cancel_max_batch_size: u64,
}

/// `GET /api/v1/healthz` and `POST /api/v1/telemetry` responses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StatusResponse {
    /// `ok` / `accepted`.
    pub status: String,
}

/// One base model of `GET /api/v1/get_server_capabilities`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SupportedModel {
    /// The name clients pass as `base_model`.
    pub model_name: String,
    /// Trainable with `create_model`.
    pub trainable: bool,
    /// Sampleable with `create_sampling_session`.
    pub sampleable: bool,
}

/// `GET /api/v1/get_server_capabilities` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ServerCapabilities {
    /// The base models served.
    pub supported_models: Vec<SupportedModel>,
}

/// `POST /api/v1/create_session`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CreateSessionRequest {
    /// `TINKER_TAGS`.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Free-form metadata (the SDK always sends it, `{}` when empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_metadata: Option<serde_json::Map<String, Value>>,
    /// The client's SDK version.
    pub sdk_version: String,
    /// `TINKER_PROJECT_ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// `"create_session"`.
    #[serde(default)]
    pub r#type: literal::CreateSession,
}

/// `create_session` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CreateSessionResponse {
    /// `"create_session"`.
    #[serde(default)]
    pub r#type: literal::CreateSession,
    /// Logged at info level by the SDK.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info_message: Option<String>,
    /// Logged as a warning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning_message: Option<String>,
    /// Logged as an error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// The new session.
    pub session_id: String,
}

/// `POST /api/v1/session_heartbeat` (every 10 s).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SessionHeartbeatRequest {
    /// The session.
    pub session_id: String,
    /// `"session_heartbeat"`.
    #[serde(default)]
    pub r#type: literal::SessionHeartbeat,
}

/// Heartbeat response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct SessionHeartbeatResponse {
    /// `"session_heartbeat"`.
    #[serde(default)]
    pub r#type: literal::SessionHeartbeat,
}

/// Why a session finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FinishStatus {
    /// The client finished normally.
    Success,
    /// The client failed.
    Errored,
    /// The client was interrupted.
    Interrupted,
}

/// `{"type": <status>}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FinishReason {
    /// The status.
    pub r#type: FinishStatus,
}

/// `POST /api/v1/sessions/{session_id}/finish` (a plain dict in the SDK: `detail` is sent as
/// `null` when absent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct FinishSessionRequest {
    /// First finish reason wins.
    pub reason: FinishReason,
    /// Free text.
    #[serde(default)]
    pub detail: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Futures (§3)

/// What a submission answers: the future to poll.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct UntypedApiFuture {
    /// Poll with this.
    pub request_id: String,
    /// The model the request addressed (`create_model`, training requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_id: Option<String>,
    /// `asample` only: exactly `num_samples` ids, in result order (SDK 0.38 asserts this).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_sequence_ids: Option<Vec<String>>,
}

/// `POST /api/v1/retrieve_future`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct FutureRetrieveRequest {
    /// The future.
    pub request_id: String,
    /// Allow a `complete_metadata` answer for a large payload.
    #[serde(default)]
    pub allow_metadata_only: bool,
}

/// Queue state reported with a try-again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum QueueState {
    /// Running or queued normally.
    Active,
    /// Waiting for capacity.
    PausedCapacity,
    /// Waiting on a rate limit.
    PausedRateLimit,
}

/// `retrieve_future`: not done yet, poll again at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TryAgainResponse {
    /// `"try_again"`.
    #[serde(default)]
    pub r#type: literal::TryAgain,
    /// The future.
    pub request_id: String,
    /// Why it is not done.
    pub queue_state: QueueState,
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_state_reason: Option<String>,
}

/// Who is to blame for a failed request (`RequestErrorCategory`, lowercase).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ErrorCategory {
    /// Unknown.
    Unknown,
    /// The server's fault.
    Server,
    /// The request's fault (bad input).
    User,
}

/// `retrieve_future` of a failed request: HTTP 200 with this body (§12), final.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RequestFailedResponse {
    /// What went wrong.
    pub error: String,
    /// Whose fault.
    pub category: ErrorCategory,
}

/// `retrieve_future`: done, but the payload is larger than the inline limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CompleteMetadataResponse {
    /// `"complete_metadata"`.
    pub status: String,
    /// Bytes of the payload.
    #[serde(default)]
    pub response_payload_size: u64,
}

impl CompleteMetadataResponse {
    /// The `status` of this answer.
    pub(crate) const STATUS: &'static str = "complete_metadata";
}

/// A non-2xx answer outside `retrieve_future`'s result: FastAPI's `{"detail": ...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ErrorBody {
    /// The message.
    pub detail: String,
}

// ---------------------------------------------------------------------------------------------
// Training models (§5.2)

/// `lora_config` of `create_model`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoraConfig {
    /// LoRA rank (SDK default 32).
    pub rank: u32,
    /// Adapter initialisation seed; absent ⇒ random.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Adapter on the unembedding.
    #[serde(default = "yes")]
    pub train_unembed: bool,
    /// Adapters on the MLPs.
    #[serde(default = "yes")]
    pub train_mlp: bool,
    /// Adapters on attention.
    #[serde(default = "yes")]
    pub train_attn: bool,
}

fn yes() -> bool {
    true
}

/// `optimizer_config`: `{"type": "adamw"}` (default) or `{"type": "dimuon", "version": 1}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct OptimizerConfig {
    /// The optimizer family.
    pub r#type: String,
    /// Dimuon's version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        OptimizerConfig { r#type: "adamw".into(), version: None }
    }
}

/// `POST /api/v1/create_model` (a future).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CreateModelRequest {
    /// The session.
    pub session_id: String,
    /// Per-session model counter: the model id is `<session_id>:train:<model_seq_id>`.
    pub model_seq_id: u64,
    /// The base model's name.
    pub base_model: String,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_metadata: Option<serde_json::Map<String, Value>>,
    /// LoRA settings (absent ⇒ server default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_config: Option<LoraConfig>,
    /// The optimizer.
    #[serde(default)]
    pub optimizer_config: OptimizerConfig,
    /// `"create_model"`.
    #[serde(default)]
    pub r#type: literal::CreateModel,
}

/// `create_model` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CreateModelResponse {
    /// The new model.
    pub model_id: String,
    /// `"create_model"`.
    #[serde(default)]
    pub r#type: literal::CreateModel,
}

/// `POST /api/v1/get_info` (answered directly, not a future).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct GetInfoRequest {
    /// The model.
    pub model_id: String,
    /// `"get_info"`.
    #[serde(default)]
    pub r#type: literal::GetInfo,
}

/// `model_data` of `get_info`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct ModelData {
    /// Architecture name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    /// Base model name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    /// What the SDK hands to `AutoTokenizer.from_pretrained` after cutting at the first `:`
    /// (so a local directory path must not contain one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer_id: Option<String>,
}

/// `get_info` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct GetInfoResponse {
    /// `"get_info"`.
    #[serde(default)]
    pub r#type: literal::GetInfo,
    /// Model facts.
    pub model_data: ModelData,
    /// The model.
    pub model_id: String,
    /// Its optimizer.
    #[serde(default)]
    pub optimizer_config: OptimizerConfig,
    /// LoRA or full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_lora: Option<bool>,
    /// LoRA rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_rank: Option<u32>,
    /// Base model name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
}

/// Tinker's `AdamParams`: the backend's own type (missing fields take the SDK defaults).
pub(crate) use crate::seam::AdamParams;

/// `POST /api/v1/optim_step` (a future). The SDK's serializer moves `optim_params` to the end
/// as `adam_params` (Adam) or `optimizer_params` (other families).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct OptimStepRequest {
    /// The model.
    pub model_id: String,
    /// Its next seq id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq_id: Option<u64>,
    /// `"optim_step"`.
    #[serde(default)]
    pub r#type: literal::OptimStep,
    /// Adam hyper-parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adam_params: Option<AdamParams>,
    /// Another optimizer family's parameters (`{"type": "dimuon", ...}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer_params: Option<Value>,
}

/// `optim_step` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct OptimStepResponse {
    /// `name:reduction` metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<BTreeMap<String, f64>>,
}

// ---------------------------------------------------------------------------------------------
// Checkpoints (§5.5)

/// `POST /api/v1/save_weights` (`save_state`; a future).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SaveWeightsRequest {
    /// The model.
    pub model_id: String,
    /// The checkpoint's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Its next seq id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq_id: Option<u64>,
    /// Expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u64>,
    /// Replace an existing checkpoint of that name.
    #[serde(default)]
    pub overwrite: bool,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_metadata: Option<BTreeMap<String, String>>,
    /// `"save_weights"`.
    #[serde(default)]
    pub r#type: literal::SaveWeights,
}

/// `forward`/`forward_backward` result in JSON (when the `Accept` header does not ask for
/// protobuf): the legacy shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ForwardBackwardOutput {
    /// `"ArrayRecord"`.
    pub loss_fn_output_type: String,
    /// Per datum: `{"logprobs": TensorData}`.
    pub loss_fn_outputs: Vec<BTreeMap<String, TensorData>>,
    /// `name:reduction` metrics (`loss:sum`).
    pub metrics: BTreeMap<String, f64>,
}

/// `POST /api/v1/forward_backward` or `/api/v1/forward` with a JSON body: the wire of SDKs
/// before 0.25, which SkyRL, verl_tinker and TuFT read (and `rlx serve` still accepts).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct JsonForwardBackwardRequest {
    /// The model.
    pub model_id: String,
    /// The model's request counter (servers that order by arrival ignore it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq_id: Option<u64>,
    /// The batch, for `forward_backward`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_backward_input: Option<JsonForwardBackwardInput>,
    /// The batch, for `forward`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_input: Option<JsonForwardBackwardInput>,
}

/// The batch and loss of a JSON `forward_backward`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct JsonForwardBackwardInput {
    /// The datums.
    pub data: Vec<JsonDatum>,
    /// The loss's name.
    pub loss_fn: String,
    /// Its parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_fn_config: Option<BTreeMap<String, f64>>,
}

/// A JSON datum: text chunks and named tensors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct JsonDatum {
    /// The input tokens.
    pub model_input: ModelInput,
    /// `target_tokens`, `weights`, `logprobs`, `advantages`.
    pub loss_fn_inputs: BTreeMap<String, JsonTensor>,
}

/// A tensor of a JSON datum (`dtype` and `shape` are implied by the field).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct JsonTensor {
    /// Flattened values.
    pub data: Vec<f64>,
}

/// `save_weights` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SaveWeightsResponse {
    /// `tinker://<model_id>/weights/<name>`.
    pub path: String,
    /// `"save_weights"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#type: Option<literal::SaveWeights>,
}

/// `POST /api/v1/save_weights_external` (a future): the model's current weights in Hugging
/// Face's format, as an `external_weights` checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SaveWeightsExternalRequest {
    /// The model.
    pub model_id: String,
    /// The checkpoint's name.
    pub path: String,
    /// Its next seq id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq_id: Option<u64>,
    /// Expiry, 3600 s to 10 years (absent: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u64>,
    /// age recipients to encrypt every file to (files then end in `.age`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age_encryption_recipients: Option<Vec<String>>,
    /// `"save_weights_external"`.
    #[serde(default)]
    pub r#type: literal::SaveWeightsExternal,
}

/// `save_weights_external` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SaveWeightsExternalResponse {
    /// `tinker://<model_id>/external_weights/<name>`.
    pub path: String,
    /// The files' total size.
    #[serde(default)]
    pub size_bytes: Option<u64>,
    /// `"save_weights_external"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#type: Option<literal::SaveWeightsExternal>,
}

/// `GET …/checkpoints/external_weights/{name}/external_weights_urls`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ExternalWeightsUrlsResponse {
    /// A signed download URL per file, keyed by the file's path relative to the checkpoint.
    pub urls: BTreeMap<String, String>,
    /// When the URLs stop working (RFC 3339).
    pub expires: String,
}

/// `PUT …/checkpoints/{checkpoint_id}/ttl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CheckpointTtlRequest {
    /// Seconds from now, 3600 to 10 years; `null` removes the expiry.
    pub ttl_seconds: Option<u64>,
}

/// `POST /api/v1/save_weights_for_sampler` (a future). Named (`path`) it writes sampler weights;
/// unnamed (`sampling_session_seq_id`) it answers a sampling session on the current weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SaveWeightsForSamplerRequest {
    /// The model.
    pub model_id: String,
    /// The checkpoint's name (named saves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The session's sampling counter (unnamed saves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling_session_seq_id: Option<u64>,
    /// `snapshot` or `inflight`.
    #[serde(default = "snapshot")]
    pub kind: String,
    /// Its next seq id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq_id: Option<u64>,
    /// Expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u64>,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_metadata: Option<BTreeMap<String, String>>,
    /// `"save_weights_for_sampler"`.
    #[serde(default)]
    pub r#type: literal::SaveWeightsForSampler,
}

fn snapshot() -> String {
    "snapshot".into()
}

/// `save_weights_for_sampler` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct SaveWeightsForSamplerResponse {
    /// `tinker://<model_id>/sampler_weights/<name>` (named saves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The sampling session (unnamed saves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling_session_id: Option<String>,
    /// `"save_weights_for_sampler"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#type: Option<literal::SaveWeightsForSampler>,
}

/// `POST /api/v1/load_weights` (a future). Create-via-load (`session_id` + `model_seq_id`, what
/// `create_training_client_from_state[_with_optimizer]` sends) or the deprecated load into an
/// existing model (`model_id` + `seq_id`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LoadWeightsRequest {
    /// Legacy addressing: the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_id: Option<String>,
    /// Legacy addressing: its next seq id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq_id: Option<u64>,
    /// Create-via-load: the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Create-via-load: the new model's counter (model id `<session_id>:train:<n>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_seq_id: Option<u64>,
    /// Compatible base-model override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_model: Option<String>,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_metadata: Option<serde_json::Map<String, Value>>,
    /// `tinker://<model_id>/weights/<name>`.
    pub path: String,
    /// Restore the optimizer moments too.
    pub optimizer: bool,
    /// Optimizer of a weights-only load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer_config: Option<OptimizerConfig>,
    /// Cross-account access.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights_access_token: Option<String>,
    /// `"load_weights"`.
    #[serde(default)]
    pub r#type: literal::LoadWeights,
}

/// `load_weights` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct LoadWeightsResponse {
    /// The loaded path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The model it went into.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_id: Option<String>,
    /// `"load_weights"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#type: Option<literal::LoadWeights>,
}

// ---------------------------------------------------------------------------------------------
// Sampling (§5.6)

/// `POST /api/v1/create_sampling_session` (answered directly).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CreateSamplingSessionRequest {
    /// The session.
    pub session_id: String,
    /// Per-session sampling counter (shared with unnamed `save_weights_for_sampler`).
    pub sampling_session_seq_id: u64,
    /// Sample the base model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_model: Option<String>,
    /// Sample saved weights (`tinker://…/sampler_weights/…` or `…/weights/…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_path: Option<String>,
    /// `"create_sampling_session"`.
    #[serde(default)]
    pub r#type: literal::CreateSamplingSession,
}

/// `create_sampling_session` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CreateSamplingSessionResponse {
    /// `"create_sampling_session"`.
    #[serde(default)]
    pub r#type: literal::CreateSamplingSession,
    /// `<session_id>:sample:<n>`.
    pub sampling_session_id: String,
}

/// `GET /api/v1/samplers/{id}` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct GetSamplerResponse {
    /// The sampling session.
    pub sampler_id: String,
    /// Its base model.
    pub base_model: String,
    /// The weights it samples, if not the base model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_path: Option<String>,
}

/// One chunk of a JSON `ModelInput` (discriminated by `"type"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct EncodedTextChunk {
    /// Token ids.
    pub tokens: Vec<i64>,
    /// `"encoded_text"`.
    #[serde(default)]
    pub r#type: literal::EncodedText,
}

/// A JSON `ModelInput`: rlx's models take text chunks only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ModelInput {
    /// The chunks.
    pub chunks: Vec<EncodedTextChunk>,
}

impl ModelInput {
    /// One text chunk of `tokens`.
    pub(crate) fn from_tokens(tokens: &[u32]) -> Self {
        ModelInput { chunks: vec![EncodedTextChunk { tokens: tokens.iter().map(|&t| i64::from(t)).collect(), r#type: literal::EncodedText }] }
    }
}

/// `sampling_params.stop`: a string, strings, or token ids.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum StopSpec {
    /// One string.
    Text(String),
    /// Token ids (`[]` disables every stop, EOS included).
    Tokens(Vec<i64>),
    /// Strings.
    Texts(Vec<String>),
}

/// Tinker's JSON `SamplingParams`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SamplingParams {
    /// Generated-token cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Stop conditions; absent ⇒ the model's EOS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<StopSpec>,
    /// Temperature (default 1).
    #[serde(default = "one")]
    pub temperature: f64,
    /// Top-k, -1 off.
    #[serde(default = "minus_one")]
    pub top_k: i64,
    /// Nucleus mass (default 1).
    #[serde(default = "one")]
    pub top_p: f64,
}

fn one() -> f64 {
    1.0
}
fn minus_one() -> i64 {
    -1
}

/// Tinker's JSON `TensorData` (legacy bodies, `target_prompt_logprobs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TensorData {
    /// Flattened values.
    pub data: Vec<f64>,
    /// `float32` or `int64`.
    pub dtype: String,
    /// Shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<i64>>,
}

/// One completion of a JSON `asample` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SampledSequence {
    /// Why it ended: `stop` or `length`.
    pub stop_reason: String,
    /// Generated tokens.
    pub tokens: Vec<u32>,
    /// Their log-probabilities.
    pub logprobs: Vec<f32>,
}

/// `asample` result in JSON (when the `Accept` header does not ask for protobuf).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SampleResponse {
    /// `"sample"`.
    #[serde(default)]
    pub r#type: literal::Sample,
    /// One per sample.
    pub sequences: Vec<SampledSequence>,
    /// Prompt log-probabilities when asked for; `null` where unscored (JSON has no NaN).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<Vec<Option<f32>>>,
    /// Top-k prompt log-probabilities when asked for: per position `[[id, logprob], ...]`, most
    /// likely first, `null` where unscored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topk_prompt_logprobs: Option<Vec<Option<crate::seam::TopK>>>,
}

/// `POST /api/v1/asample` (a future whose result is a protobuf `SampleResponse`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SampleRequest {
    /// Completions wanted.
    #[serde(default = "one_u64")]
    pub num_samples: u64,
    /// The prompt.
    pub prompt: ModelInput,
    /// Sampling settings.
    pub sampling_params: SamplingParams,
    /// Legacy session-less addressing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_model: Option<String>,
    /// Legacy session-less addressing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_path: Option<String>,
    /// The sampling session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling_session_id: Option<String>,
    /// Per-sampling-client counter (reused across HTTP retries of one submission).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq_id: Option<u64>,
    /// Also score the prompt (`compute_logprobs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<bool>,
    /// Top-k prompt log-probabilities.
    #[serde(default)]
    pub topk_prompt_logprobs: u64,
    /// Top-k sampled log-probabilities.
    #[serde(default)]
    pub topk_sample_logprobs: u64,
    /// Requested prompt targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_prompt_logprobs: Option<TensorData>,
    /// Alternative prompt tokens.
    #[serde(default)]
    pub prompt_alt_tokens_k: u64,
    /// Score only the last N prompt tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs_last_n: Option<u64>,
    /// StableReinforce bookkeeping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_stability_info: Option<bool>,
    /// `"sample"`.
    #[serde(default)]
    pub r#type: literal::Sample,
}

fn one_u64() -> u64 {
    1
}

// ---------------------------------------------------------------------------------------------
// REST reads (§5.7)

/// A checkpoint in a training run's listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Checkpoint {
    /// `weights/<name>`, `sampler_weights/<name>` or `external_weights/<name>`.
    pub checkpoint_id: String,
    /// `training`, `sampler` or `external`.
    pub checkpoint_type: String,
    /// RFC 3339.
    pub time: String,
    /// `tinker://…`.
    pub tinker_path: String,
    /// Bytes on disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// Published.
    #[serde(default)]
    pub public: bool,
    /// When it expires (RFC 3339; absent: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// `GET /api/v1/training_runs/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TrainingRun {
    /// The model id.
    pub training_run_id: String,
    /// Its base model.
    pub base_model: String,
    /// Owner.
    pub model_owner: String,
    /// LoRA or full.
    pub is_lora: bool,
    /// Corrupted state.
    #[serde(default)]
    pub corrupted: bool,
    /// LoRA rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_rank: Option<u32>,
    /// RFC 3339.
    pub last_request_time: String,
    /// Latest training checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checkpoint: Option<Checkpoint>,
    /// Latest sampler checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sampler_checkpoint: Option<Checkpoint>,
    /// `user_metadata` of the `create_model` (or create-via-load) that made it: tinker-cookbook
    /// keeps its renderer name there and checks it on resume.
    #[serde(default)]
    pub user_metadata: serde_json::Map<String, Value>,
}

/// `GET /api/v1/training_runs/{id}/checkpoints`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CheckpointsListResponse {
    /// The checkpoints.
    pub checkpoints: Vec<Checkpoint>,
    /// Pagination (`null`: one page).
    #[serde(default)]
    pub cursor: Option<Value>,
}

/// `POST /api/v1/weights_info`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct WeightsInfoRequest {
    /// `tinker://…`.
    pub tinker_path: String,
}

/// `weights_info` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct WeightsInfoResponse {
    /// Base model.
    pub base_model: String,
    /// The optimizer.
    #[serde(default)]
    pub optimizer_config: OptimizerConfig,
    /// LoRA or full.
    pub is_lora: bool,
    /// LoRA rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_rank: Option<u32>,
    /// The adapter covers the unembedding.
    #[serde(default)]
    pub train_unembed: bool,
    /// The adapter covers the MLP projections.
    #[serde(default)]
    pub train_mlp: bool,
    /// The adapter covers the attention projections.
    #[serde(default)]
    pub train_attn: bool,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Parse `sent`, re-serialize it and expect the same JSON (order included).
    fn round_trip<T: Serialize + serde::de::DeserializeOwned>(sent: &str) -> T {
        let v: T = serde_json::from_str(sent).unwrap();
        // Through `Value` on both sides: Python writes `1e-05` where serde_json writes `1e-5`.
        let expected = serde_json::to_string(&serde_json::from_str::<Value>(sent).unwrap()).unwrap();
        assert_eq!(serde_json::to_string(&v).unwrap(), expected);
        v
    }

    // The bodies below are what SDK 0.38.0 serializes (SDK 0.38.0; pydantic's
    // `model_dump(exclude_none=True)` in declaration order).

    #[test]
    fn session_bodies() {
        let r: CreateSessionRequest = round_trip(r#"{"tags":[],"user_metadata":{"recipe":"test"},"sdk_version":"0.38.0","type":"create_session"}"#);
        assert_eq!(r.sdk_version, "0.38.0");
        round_trip::<SessionHeartbeatRequest>(r#"{"session_id":"sess-1","type":"session_heartbeat"}"#);
        let f: FinishSessionRequest = round_trip(r#"{"reason":{"type":"success"},"detail":null}"#);
        assert_eq!(f.reason.r#type, FinishStatus::Success);
        round_trip::<CreateSessionResponse>(r#"{"type":"create_session","session_id":"s"}"#);
    }

    #[test]
    fn model_bodies() {
        let r: CreateModelRequest = round_trip(
            r#"{"session_id":"sess-1","model_seq_id":0,"base_model":"Qwen/Qwen3-8B","lora_config":{"rank":16,"seed":7,"train_unembed":false,"train_mlp":true,"train_attn":true},"optimizer_config":{"type":"adamw"},"type":"create_model"}"#,
        );
        assert_eq!(r.lora_config.unwrap().rank, 16);
        round_trip::<GetInfoRequest>(r#"{"model_id":"sess-1:train:0","type":"get_info"}"#);
        let o: OptimStepRequest = round_trip(
            r#"{"model_id":"sess-1:train:0","seq_id":2,"type":"optim_step","adam_params":{"learning_rate":1e-05,"beta1":0.9,"beta2":0.95,"eps":1e-08,"weight_decay":0.0,"grad_clip_norm":0.0}}"#,
        );
        assert_eq!(o.adam_params.unwrap().learning_rate, 1e-5);
        round_trip::<SaveWeightsRequest>(r#"{"model_id":"m","path":"000001","seq_id":4,"ttl_seconds":3600,"overwrite":false,"type":"save_weights"}"#);
        round_trip::<SaveWeightsForSamplerRequest>(r#"{"model_id":"m","sampling_session_seq_id":0,"kind":"snapshot","seq_id":6,"type":"save_weights_for_sampler"}"#);
        let l: LoadWeightsRequest = round_trip(r#"{"session_id":"sess-1","model_seq_id":1,"path":"tinker://sess-1:train:0/weights/000001","optimizer":true,"type":"load_weights"}"#);
        assert!(l.optimizer);
    }

    #[test]
    fn sample_body() {
        let r: SampleRequest = round_trip(
            r#"{"num_samples":2,"prompt":{"chunks":[{"tokens":[1,2,3],"type":"encoded_text"}]},"sampling_params":{"max_tokens":16,"seed":3,"stop":[151645],"temperature":1.0,"top_k":-1,"top_p":1.0},"sampling_session_id":"sess-1:sample:1","seq_id":0,"prompt_logprobs":false,"topk_prompt_logprobs":0,"topk_sample_logprobs":0,"prompt_alt_tokens_k":0,"record_stability_info":false,"type":"sample"}"#,
        );
        assert_eq!(r.sampling_params.stop, Some(StopSpec::Tokens(vec![151645])));
        let s: SamplingParams = serde_json::from_value(json!({"stop": ["</s>"]})).unwrap();
        assert_eq!(s.stop, Some(StopSpec::Texts(vec!["</s>".into()])));
        assert_eq!((s.temperature, s.top_k, s.top_p), (1.0, -1, 1.0));
    }

    #[test]
    fn external_weights_bodies() {
        let r: SaveWeightsExternalRequest = round_trip(r#"{"model_id":"s:train:0","path":"download","seq_id":1,"ttl_seconds":3600,"type":"save_weights_external"}"#);
        assert_eq!((r.path.as_str(), r.ttl_seconds), ("download", Some(3600)));
        round_trip::<SaveWeightsExternalResponse>(r#"{"path":"tinker://s:train:0/external_weights/download","size_bytes":123,"type":"save_weights_external"}"#);
        let u: ExternalWeightsUrlsResponse = round_trip(r#"{"urls":{"adapter_config.json":"http://h/f/t/adapter_config.json"},"expires":"2026-01-01T00:00:00Z"}"#);
        assert_eq!(u.urls.len(), 1);
        round_trip::<CheckpointTtlRequest>(r#"{"ttl_seconds":null}"#);
    }

    #[test]
    fn a_wrong_type_literal_is_rejected_and_a_missing_one_accepted() {
        let e = serde_json::from_value::<GetInfoRequest>(json!({"model_id": "m", "type": "get_inf"})).unwrap_err();
        assert!(e.to_string().contains("expected `\"get_info\"`"), "{e}");
        serde_json::from_value::<GetInfoRequest>(json!({"model_id": "m"})).unwrap();
    }

    #[test]
    fn future_responses() {
        let t: TryAgainResponse = round_trip(r#"{"type":"try_again","request_id":"r","queue_state":"active"}"#);
        assert_eq!(t.queue_state, QueueState::Active);
        round_trip::<RequestFailedResponse>(r#"{"error":"bad","category":"user"}"#);
        round_trip::<UntypedApiFuture>(r#"{"request_id":"r","sample_sequence_ids":["a","b"]}"#);
        let c: ClientConfigResponse = serde_json::from_value(json!({"pjwt_auth_enabled": false, "new_flag": 1})).unwrap();
        assert!(c.parallel_fwdbwd_chunks, "omitted keys take the SDK defaults");
    }
}
