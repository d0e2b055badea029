//! The request record (`--record FILE`): one JSON line per HTTP request received, written after
//! it was answered, so tests can check what a client sent (field for field) and that no work was
//! done twice.
//!
//! A line: `time` (when received; RFC 3339, UTC), `method`, `path`, the ids found in the body (`model_id`,
//! `seq_id`, `session_id`, `sampling_session_id`, `request_id`; absent ones omitted), `body`
//! (the JSON body; a protobuf `forward_backward` body decoded to the JSON shape below; `null`
//! when empty or unreadable), `status` (the HTTP status answered, `null` for a dropped
//! connection), `fault` (the injected fault, if any), `duplicate` (submissions only: `true` when
//! the request resubmitted an accepted one and got its original id back, so no work was
//! started), `request_type` and `iteration` (the SDK's `X-Tinker-Request-Type` /
//! `X-Tinker-Request-Iteration` on polls), `idempotency_key`.
//!
//! A decoded `forward_backward` body: `{"model_id", "seq_id", "loss_fn", "loss_fn_config":
//! {k: number}, "forward_only", "data": [{"model_input": [[tokens...] per chunk],
//! "loss_fn_inputs": {name: {"dtype": "int64"|"float32", "shape": [...], "data": [...]}}}]}`
//! (`loss_fn_config` merges both maps, v2 winning).

use std::io::Write as _;
use std::path::Path;
use std::sync::Mutex;

use serde_json::{Value, json};

use crate::tinker::convert;
use crate::tinker::proto::{self, DType};

/// Writes record lines to a file.
pub(crate) struct Recorder {
    file: Mutex<std::fs::File>,
}

impl Recorder {
    /// Creates (truncates) `path`.
    ///
    /// # Errors
    /// When the file cannot be created.
    pub(crate) fn create(path: &Path) -> std::io::Result<Self> {
        Ok(Recorder { file: Mutex::new(std::fs::File::create(path)?) })
    }

    /// Appends one line (flushed, so a test can read the file while the server runs).
    pub(crate) fn write(&self, line: &Value) {
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        // A failing record write must not fail the request it describes.
        if let Err(e) = writeln!(f, "{line}").and_then(|()| f.flush()) {
            tracing::warn!("cannot write the request record: {e}");
        }
    }
}

/// Copies the id fields of a JSON body into `line`.
pub(crate) fn ids(body: &Value, line: &mut serde_json::Map<String, Value>) {
    for k in ["model_id", "seq_id", "session_id", "sampling_session_id", "request_id", "model_seq_id", "sampling_session_seq_id"] {
        if let Some(v) = body.get(k).filter(|v| !v.is_null()) {
            line.insert(k.into(), v.clone());
        }
    }
}

fn tensor_json(t: &proto::Tensor, name: &str) -> Value {
    let dtype = DType::try_from(t.dtype).ok();
    let data = match (dtype, &t.encoding) {
        (Some(DType::Int64 | DType::Int32), _) => convert::tensor_tokens(t, name).map(|v| json!(v)),
        (Some(DType::Float32 | DType::Bfloat16), _) => convert::tensor_f32(t, name).map(|v| json!(v)),
        _ => Err("unsupported dtype".to_string()),
    }
    .unwrap_or_else(|e| json!({"undecodable": e}));
    let dtype = match dtype {
        Some(DType::Int64) => "int64",
        Some(DType::Int32) => "int32",
        Some(DType::Float32) => "float32",
        Some(DType::Bfloat16) => "bfloat16",
        _ => "unspecified",
    };
    json!({"dtype": dtype, "shape": t.shape, "data": data})
}

/// A `ForwardBackwardRequest` as record JSON (see the module docs).
pub(crate) fn forward_backward_json(r: &proto::ForwardBackwardRequest) -> Value {
    let mut config = serde_json::Map::new();
    for (k, v) in &r.loss_fn_config {
        config.insert(k.clone(), json!(v));
    }
    for (k, v) in &r.loss_fn_config_v2 {
        let v = match &v.value {
            Some(proto::loss_config_value::Value::Number(x)) => json!(x),
            Some(proto::loss_config_value::Value::Text(s)) => json!(s),
            None => Value::Null,
        };
        config.insert(k.clone(), v);
    }
    let data: Vec<Value> = r
        .data
        .iter()
        .map(|d| {
            let chunks: Vec<Value> = d
                .model_input
                .iter()
                .map(|c| match &c.chunk {
                    Some(proto::chunk::Chunk::EncodedText(t)) => convert::tokens_from_i32_bytes(&t.tokens, "tokens").map_or_else(|e| json!({"undecodable": e}), |v| json!(v)),
                    Some(proto::chunk::Chunk::Image(_)) => json!("image"),
                    Some(proto::chunk::Chunk::Dmel(_)) => json!("dmel"),
                    None => Value::Null,
                })
                .collect();
            let inputs: serde_json::Map<String, Value> = d.loss_fn_inputs.iter().map(|(k, t)| (k.clone(), tensor_json(t, k))).collect();
            json!({"model_input": chunks, "loss_fn_inputs": inputs})
        })
        .collect();
    json!({"model_id": r.model_id, "seq_id": r.seq_id, "loss_fn": r.loss_fn, "loss_fn_config": config, "forward_only": r.forward_only, "data": data})
}

/// Now, RFC 3339 in UTC with milliseconds.
pub(crate) fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}
