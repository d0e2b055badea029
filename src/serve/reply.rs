//! A handler's answer ([`Reply`]) and the error shapes every endpoint shares: FastAPI's
//! `{"detail": "..."}` body (a `tinker::wire::ErrorBody`) with a 4xx or 5xx status.

use hyper::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::futures::Submitted;
use crate::tinker::wire;

/// A response body.
pub(super) enum Body {
    /// A JSON document.
    Json(Value),
    /// A protobuf message.
    Proto(Vec<u8>),
    /// `null` (what `DELETE` and `PUT …/ttl` answer; the SDK reads nothing).
    Empty,
    /// A file's bytes (a signed download URL).
    Bytes(Vec<u8>),
}

/// A handler's answer, with what the record needs.
pub(super) struct Reply {
    pub(super) status: StatusCode,
    pub(super) body: Body,
    /// Submissions: whether this resubmitted an accepted request.
    pub(super) duplicate: Option<bool>,
}

impl Reply {
    /// 200 with a JSON body.
    pub(super) fn ok(v: Value) -> Self {
        Reply { status: StatusCode::OK, body: Body::Json(v), duplicate: None }
    }
    /// Every protocol reply goes through here, from its `tinker::wire` type.
    pub(super) fn json<T: serde::Serialize>(v: &T) -> Self {
        Self::ok(serde_json::to_value(v).expect("wire types serialise"))
    }
    /// An error status with FastAPI's body.
    pub(super) fn error(status: StatusCode, detail: impl Into<String>) -> Self {
        Reply { status, body: Body::Json(error_body(detail)), duplicate: None }
    }
    /// A submission's answer, marked new or duplicate for the record.
    pub(super) fn submitted(s: &Submitted, extra: wire::UntypedApiFuture) -> Self {
        let mut r = Self::json(&extra);
        r.duplicate = Some(matches!(s, Submitted::Duplicate { .. }));
        r
    }
}

/// `{"detail": ...}`.
pub(super) fn error_body(detail: impl Into<String>) -> Value {
    serde_json::to_value(wire::ErrorBody { detail: detail.into() }).expect("wire types serialise")
}

/// 400.
pub(super) fn bad(detail: impl Into<String>) -> Reply {
    Reply::error(StatusCode::BAD_REQUEST, detail)
}

/// 422: a well-formed request asking for more than the server gives one request.
pub(super) fn unprocessable(detail: impl Into<String>) -> Reply {
    Reply::error(StatusCode::UNPROCESSABLE_ENTITY, detail)
}

/// 404.
pub(super) fn not_found(detail: impl Into<String>) -> Reply {
    Reply::error(StatusCode::NOT_FOUND, detail)
}

/// A handler's outcome: `Err` is an error reply, so `?` works on the way.
pub(super) type Handled = Result<Reply, Reply>;

/// A JSON request body, or a 400 naming the endpoint.
pub(super) fn parse<T: DeserializeOwned>(b: &[u8], what: &str) -> Result<T, Reply> {
    serde_json::from_slice(b).map_err(|e| bad(format!("invalid `{what}` body: {e}")))
}


/// A training model, or a 404 that says why models may be missing.
pub(super) fn model(state: &std::sync::Arc<super::State>, model_id: &str) -> Result<std::sync::Arc<super::models::TrainingModel>, Reply> {
    state.registry.get(model_id).ok_or_else(|| not_found(format!("unknown model `{model_id}` (models do not survive a restart of `rlx serve`; reopen a checkpoint with create_training_client_from_state)")))
}
