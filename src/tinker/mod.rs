//! Tinker's wire protocol, shared by rlx's Tinker client (`backend::tinker`) and its
//! Tinker-compatible server (`rlx serve`, [`crate::serve`]): what SDK 0.38.0 sends and expects
//! (the `tinker` package on PyPI, https://github.com/thinking-machines-lab/tinker; where its
//! documentation and its client disagree, the client wins).
//!
//! - [`wire`]: serde types of every JSON request and response body.
//! - [`proto`]: the `tinker_public` protobuf messages (prost derive, no `protoc`).
//! - [`convert`]: between wire tensors/datums/params and rlx's backend types ([`crate::backend`]).
//! - here: ids, `tinker://` paths, header names, endpoint paths.
//!
//! Nothing here does I/O.

pub(crate) mod convert;
pub(crate) mod proto;
pub(crate) mod wire;

/// The SDK version whose protocol this module implements (sent as `sdk_version`).
pub(crate) const SDK_VERSION: &str = "0.38.0";

/// Header names the SDK sends or reads (lowercase: HTTP/1.1 header names are case-insensitive
/// and `http` stores them lowercase).
pub(crate) mod header {
    /// The credential on every request (`tml-…` API key or a JWT).
    pub(crate) const API_KEY: &str = "x-api-key";
    /// Same key across the HTTP-layer retries of one call, a new one per resubmission.
    pub(crate) const IDEMPOTENCY_KEY: &str = "x-idempotency-key";
    /// `retrieve_future`: which poll this is (0, 1, ...).
    pub(crate) const REQUEST_ITERATION: &str = "x-tinker-request-iteration";
    /// `retrieve_future`: the expected result (`ForwardBackward`, `Sample`, ...).
    pub(crate) const REQUEST_TYPE: &str = "x-tinker-request-type";
    /// Server hint: retry (or not) regardless of the status.
    pub(crate) const SHOULD_RETRY: &str = "x-should-retry";
    /// Server hint: wait this many milliseconds before retrying.
    pub(crate) const RETRY_AFTER_MS: &str = "retry-after-ms";
    /// Server hint: wait this many seconds (or until this HTTP date).
    pub(crate) const RETRY_AFTER: &str = "retry-after";
    /// HTTP-layer retry counter of the SDK.
    pub(crate) const RETRY_COUNT: &str = "x-stainless-retry-count";
    /// The public SDK method behind a request (`TrainingClient.forward_backward`).
    pub(crate) const SDK_METHOD: &str = "x-sdk-method";
    /// The SDK version, beside `SDK_METHOD`.
    pub(crate) const SDK_VERSION: &str = "x-sdk-version";
}

/// Content types.
pub(crate) mod content_type {
    /// JSON bodies.
    pub(crate) const JSON: &str = "application/json";
    /// Protobuf bodies (`forward_backward` requests; `ForwardBackwardOutput`/`SampleResponse`
    /// results when the `Accept` header names it).
    pub(crate) const PROTOBUF: &str = "application/x-protobuf";
}

/// Endpoint paths, relative to the base URL (append; never `Url::join`, §1.1).
pub(crate) mod path {
    /// Server feature flags (must exist: a 404 aborts the SDK).
    pub(crate) const CLIENT_CONFIG: &str = "/api/v1/client/config";
    /// Dynamic config (may 404).
    pub(crate) const DYNAMIC_CONFIG: &str = "/api/v1/client/dynamic_config";
    /// Liveness.
    pub(crate) const HEALTHZ: &str = "/api/v1/healthz";
    /// Models served.
    pub(crate) const SERVER_CAPABILITIES: &str = "/api/v1/get_server_capabilities";
    /// New session.
    pub(crate) const CREATE_SESSION: &str = "/api/v1/create_session";
    /// Heartbeat.
    pub(crate) const SESSION_HEARTBEAT: &str = "/api/v1/session_heartbeat";
    /// New LoRA model (future).
    pub(crate) const CREATE_MODEL: &str = "/api/v1/create_model";
    /// Model facts (direct).
    pub(crate) const GET_INFO: &str = "/api/v1/get_info";
    /// Protobuf forward/backward (future).
    pub(crate) const FORWARD_BACKWARD: &str = "/api/v1/forward_backward";
    /// Forward only, JSON body (SDKs before 0.25; later ones send `forward_only` in
    /// `forward_backward`).
    pub(crate) const FORWARD: &str = "/api/v1/forward";
    /// Adam step (future).
    pub(crate) const OPTIM_STEP: &str = "/api/v1/optim_step";
    /// Save training state (future).
    pub(crate) const SAVE_WEIGHTS: &str = "/api/v1/save_weights";
    /// Save sampler weights / open a sampling session on current weights (future).
    pub(crate) const SAVE_WEIGHTS_FOR_SAMPLER: &str = "/api/v1/save_weights_for_sampler";
    /// Load state (future).
    pub(crate) const LOAD_WEIGHTS: &str = "/api/v1/load_weights";
    /// Sampling session on a path or base model (direct).
    pub(crate) const CREATE_SAMPLING_SESSION: &str = "/api/v1/create_sampling_session";
    /// Sample (future, protobuf result).
    pub(crate) const ASAMPLE: &str = "/api/v1/asample";
    /// Poll a future.
    pub(crate) const RETRIEVE_FUTURE: &str = "/api/v1/retrieve_future";
    /// Telemetry batches.
    pub(crate) const TELEMETRY: &str = "/api/v1/telemetry";
    /// Checkpoint facts.
    pub(crate) const WEIGHTS_INFO: &str = "/api/v1/weights_info";
    /// Export the model's weights in Hugging Face's format (future).
    pub(crate) const SAVE_WEIGHTS_EXTERNAL: &str = "/api/v1/save_weights_external";
    /// Training runs; `{TRAINING_RUNS}/{run_id}/checkpoints/{checkpoint_id}[/ttl|/external_weights_urls]`.
    pub(crate) const TRAINING_RUNS: &str = "/api/v1/training_runs";

    /// `GET`: signed download URLs of an external-weights checkpoint's files.
    pub(crate) fn external_weights_urls(p: &super::TinkerPath) -> String {
        format!("{}/external_weights_urls", checkpoint(p))
    }

    /// `PUT {"ttl_seconds": …}`: set or remove a checkpoint's expiry.
    pub(crate) fn ttl(p: &super::TinkerPath) -> String {
        format!("{}/ttl", checkpoint(p))
    }

    /// `DELETE`: a checkpoint (its `checkpoint_id` contains a `/`, kept as is, as the SDK sends it).
    pub(crate) fn checkpoint(p: &super::TinkerPath) -> String {
        format!("{TRAINING_RUNS}/{}/checkpoints/{}", p.training_run_id, p.checkpoint_id())
    }
}

/// What a future will hold: the SDK's `X-Tinker-Request-Type` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub(crate) enum RequestType {
    /// `create_model`.
    CreateModel,
    /// `forward_backward` with `forward_only = false`.
    ForwardBackward,
    /// `forward_backward` with `forward_only = true`.
    Forward,
    /// `optim_step`.
    OptimStep,
    /// `save_weights`.
    SaveWeights,
    /// `save_weights_for_sampler`.
    SaveWeightsForSampler,
    /// `load_weights`.
    LoadWeights,
    /// `asample`.
    Sample,
    /// `save_weights_external`.
    SaveWeightsExternal,
}

impl RequestType {
    /// The header value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RequestType::CreateModel => "CreateModel",
            RequestType::ForwardBackward => "ForwardBackward",
            RequestType::Forward => "Forward",
            RequestType::OptimStep => "OptimStep",
            RequestType::SaveWeights => "SaveWeights",
            RequestType::SaveWeightsForSampler => "SaveWeightsForSampler",
            RequestType::LoadWeights => "LoadWeights",
            RequestType::Sample => "Sample",
            RequestType::SaveWeightsExternal => "SaveWeightsExternal",
        }
    }
}

impl std::fmt::Display for RequestType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `<session_id>:train:<model_seq_id>`: every training model's id (§4, §12).
pub(crate) fn model_id(session_id: &str, model_seq_id: u64) -> String {
    format!("{session_id}:train:{model_seq_id}")
}

/// `<session_id>:sample:<n>`: a sampling session's id.
pub(crate) fn sampling_session_id(session_id: &str, n: u64) -> String {
    format!("{session_id}:sample:{n}")
}

/// The session part of a model or sampling session id (`None` if it has neither form).
pub(crate) fn session_of(id: &str) -> Option<&str> {
    let (head, n) = id.rsplit_once(':')?;
    n.parse::<u64>().ok()?;
    head.strip_suffix(":train").or_else(|| head.strip_suffix(":sample"))
}

/// What kind of checkpoint a [`TinkerPath`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub(crate) enum CheckpointKind {
    /// `weights`: full training state (weights and optimizer moments), `save_weights`.
    State,
    /// `sampler_weights`: weights to sample from, `save_weights_for_sampler`.
    Sampler,
    /// `external_weights`: the weights in Hugging Face's format (a PEFT adapter for a LoRA
    /// model), `save_weights_external`; the only kind SDK 0.38 downloads.
    External,
}

impl CheckpointKind {
    /// The path segment.
    pub(crate) fn segment(self) -> &'static str {
        match self {
            CheckpointKind::State => "weights",
            CheckpointKind::Sampler => "sampler_weights",
            CheckpointKind::External => "external_weights",
        }
    }

    /// `checkpoint_type` in a listing.
    pub(crate) fn checkpoint_type(self) -> &'static str {
        match self {
            CheckpointKind::State => "training",
            CheckpointKind::Sampler => "sampler",
            CheckpointKind::External => "external",
        }
    }
}

/// A parsed `tinker://<training_run_id>/<weights|sampler_weights|external_weights>/<name>`: exactly three
/// segments after the scheme (the run id, which is a model id, contains colons).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct TinkerPath {
    /// The model that wrote it.
    pub training_run_id: String,
    /// State or sampler weights.
    pub kind: CheckpointKind,
    /// The checkpoint name.
    pub name: String,
}

/// Why a string is not a [`TinkerPath`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{path}` is not a tinker path: {reason} (expected `tinker://<model_id>/<weights|sampler_weights|external_weights>/<name>`)")]
pub(crate) struct PathError {
    /// The string.
    pub path: String,
    /// What is wrong.
    pub reason: &'static str,
}

impl TinkerPath {
    /// Parses `s`.
    ///
    /// # Errors
    /// A missing `tinker://` scheme, a number of segments other than three, an unknown kind, an
    /// empty segment, or a name that could leave its directory (`.`, `..`).
    pub(crate) fn parse(s: &str) -> Result<Self, PathError> {
        let bad = |reason| PathError { path: s.to_string(), reason };
        let rest = s.strip_prefix("tinker://").ok_or_else(|| bad("it does not start with `tinker://`"))?;
        let parts: Vec<&str> = rest.split('/').collect();
        let [run, kind, name] = parts.as_slice() else { return Err(bad("it does not have exactly three segments")) };
        let kind = match *kind {
            "weights" => CheckpointKind::State,
            "sampler_weights" => CheckpointKind::Sampler,
            "external_weights" => CheckpointKind::External,
            _ => return Err(bad("the second segment is not `weights`, `sampler_weights` or `external_weights`")),
        };
        if run.is_empty() || name.is_empty() || matches!(*name, "." | "..") {
            return Err(bad("a segment is empty or `.`/`..`"));
        }
        Ok(TinkerPath { training_run_id: run.to_string(), kind, name: name.to_string() })
    }

    /// `weights/<name>`: the id the checkpoint endpoints take.
    pub(crate) fn checkpoint_id(&self) -> String {
        format!("{}/{}", self.kind.segment(), self.name)
    }
}

impl std::fmt::Display for TinkerPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tinker://{}/{}/{}", self.training_run_id, self.kind.segment(), self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_paths() {
        assert_eq!(model_id("sess-1", 0), "sess-1:train:0");
        assert_eq!(session_of("sess-1:train:0"), Some("sess-1"));
        assert_eq!(session_of(&sampling_session_id("a:b", 3)), Some("a:b"));
        assert_eq!(session_of("sess-1"), None);
        let p = TinkerPath::parse("tinker://sess-1:train:0/weights/000001").unwrap();
        assert_eq!((p.training_run_id.as_str(), p.kind, p.name.as_str()), ("sess-1:train:0", CheckpointKind::State, "000001"));
        assert_eq!(p.to_string(), "tinker://sess-1:train:0/weights/000001");
        let e = TinkerPath::parse("tinker://a:train:0/external_weights/hf").unwrap();
        assert_eq!((e.kind, e.checkpoint_id()), (CheckpointKind::External, "external_weights/hf".to_string()));
        assert_eq!(path::external_weights_urls(&e), "/api/v1/training_runs/a:train:0/checkpoints/external_weights/hf/external_weights_urls");
        for bad in ["http://x/weights/a", "tinker://x/weights", "tinker://x/other/a", "tinker://x/weights/a/b", "tinker://x/weights/.."] {
            assert!(TinkerPath::parse(bad).is_err(), "{bad}");
        }
    }
}
