//! HTTP in and out: the accept loop (hyper 1, HTTP/1.1, one task per connection, as
//! `sandbox::server`), fault injection around each request, the request record, and one handler
//! per endpoint.
//!
//! Error shapes (§1.5, §12): a request that cannot be accepted (unreadable JSON or protobuf, an
//! unknown model, session or future, a base model not served) gets a 4xx with a JSON
//! `{"detail": "..."}` body (never an empty 400, which the SDK takes for a proxy rejection).
//! Once a training request's `model_id` and `seq_id` are known it is always accepted, because
//! the client has used up that `seq_id` and the model's later requests wait for it: a bad datum,
//! a wrong loss name or a failure of the trainer then fails its future, which `retrieve_future`
//! reports as HTTP 200 `{"error", "category"}` (`user` for bad input, `server` otherwise). The
//! model keeps serving.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use prost::Message as _;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use super::State;
use super::checkpoints;
use super::faults::Fault;
use super::reply::{Body, Handled, Reply, bad, error_body, model, not_found, parse, unprocessable};
use super::signed;
use super::futures::{FutureResult, Submitted};
use super::models::{Meta, Start};
use super::sessions::SamplingSession;
use crate::seam;
use crate::backend;
use crate::seam::SampleRequest;
use crate::tinker::wire::{self, ErrorCategory};
use crate::tinker::{self, RequestType, TinkerPath, content_type, convert, header, path as p, proto};

/// Tinker's alpha loss without a public formula.
const STABLE_REINFORCE: &str = "stable_reinforce";

/// Why it is refused, and what to use.
const STABLE_REINFORCE_REFUSAL: &str = "loss `stable_reinforce` is not served by rlx serve: Tinker documents it as an alpha loss without a public formula, and rlx does not invent one; use `ppo` (clipped importance ratio, what tinker-cookbook's async mode needs), `cispo`, `importance_sampling` or `dro` (see docs/backends.md)";

/// Largest request body accepted.
const MAX_BODY: usize = 256 << 20;

/// Serve until `shutdown` resolves, then let the requests being answered finish (up to a
/// minute: a `forward_backward` in flight on the embedded trainer takes seconds).
///
/// # Errors
/// Only a failing `accept` that is not transient.
pub(crate) async fn serve(listener: TcpListener, state: Arc<State>, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
    let handler = move |req| {
        let state = state.clone();
        async move { handle(&state, req).await }
    };
    crate::http_server::serve(listener, handler, shutdown, Duration::from_secs(60)).await
}

/// An injected dropped connection: returning it from the service makes hyper close the
/// connection without an answer.
#[derive(Debug)]
struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped by fault injection")
    }
}

impl std::error::Error for Dropped {}

async fn handle(state: &Arc<State>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Dropped> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    // A signed download URL is its own credential (the SDK fetches it without a key).
    let allowed = path.starts_with(signed::PREFIX) || crate::http_server::authorized(state.api_key.as_ref(), &parts.headers);
    // The key before the body: a client without it must not make the server buffer anything
    // (reading first let unauthenticated requests hold 256 MiB each).
    let body = if allowed { crate::http_server::read_body(body, &parts.headers, MAX_BODY).await } else { Ok(Bytes::new()) };
    let latency = state.faults.faults().latency;
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let fault = state.faults.draw(&path);
    let mut line = serde_json::Map::new();
    line.insert("time".into(), json!(super::record::now()));
    line.insert("method".into(), json!(parts.method.as_str()));
    line.insert("path".into(), json!(checkpoints::redact(&path)));
    // Decoding bodies for the record costs a protobuf decode per forward_backward: only when
    // recording.
    if state.record.is_some() {
        let record_body = body.as_ref().ok().map(|b| body_json(&parts.headers, &path, b)).unwrap_or(Value::Null);
        super::record::ids(&record_body, &mut line);
        line.insert("body".into(), record_body);
    }
    for (k, h) in [("request_type", header::REQUEST_TYPE), ("iteration", header::REQUEST_ITERATION), ("idempotency_key", header::IDEMPOTENCY_KEY)] {
        if let Some(v) = parts.headers.get(h).and_then(|v| v.to_str().ok()) {
            line.insert(k.into(), json!(v));
        }
    }
    if let Some(f) = fault.name() {
        line.insert("fault".into(), json!(f));
    }

    let reply = match fault {
        Fault::TooMany => Some(Reply::error(StatusCode::TOO_MANY_REQUESTS, "rate limited (injected fault)")),
        Fault::Status { code, after: false } => Some(Reply::error(StatusCode::from_u16(code).expect("5xx"), "server error (injected fault)")),
        Fault::Drop { after: false } => None,
        _ => {
            let reply = match &body {
                _ if !allowed => Reply::error(StatusCode::UNAUTHORIZED, "missing or wrong `X-API-Key` (this server was started with an API key)"),
                Err(e @ crate::http_server::BodyError::TooLarge { .. }) => Reply::error(StatusCode::PAYLOAD_TOO_LARGE, e.to_string()),
                Err(e) => bad(e.to_string()),
                Ok(b) => route(state, &parts.method, &path, &parts.headers, b).await,
            };
            match fault {
                Fault::Status { code, after: true } => Some(Reply { status: StatusCode::from_u16(code).expect("5xx"), body: Body::Json(error_body("server error (injected fault)")), duplicate: reply.duplicate }),
                Fault::Drop { after: true } => {
                    if let Some(d) = reply.duplicate {
                        line.insert("duplicate".into(), json!(d));
                    }
                    None
                }
                _ => Some(reply),
            }
        }
    };
    let Some(reply) = reply else {
        line.insert("status".into(), Value::Null);
        if let Some(r) = &state.record {
            r.write(&Value::Object(line));
        }
        return Err(Dropped);
    };
    line.insert("status".into(), json!(reply.status.as_u16()));
    if let Some(d) = reply.duplicate {
        line.insert("duplicate".into(), json!(d));
    }
    if let Some(r) = &state.record {
        r.write(&Value::Object(line));
    }
    let mut resp = Response::builder().status(reply.status);
    if reply.status == StatusCode::TOO_MANY_REQUESTS {
        // The SDK honours either; milliseconds keep fault tests quick.
        resp = resp.header(header::RETRY_AFTER, "1").header(header::RETRY_AFTER_MS, "100");
    }
    let resp = match reply.body {
        Body::Json(v) => resp.header("content-type", content_type::JSON).body(Full::new(Bytes::from(v.to_string()))),
        Body::Proto(b) => resp.header("content-type", content_type::PROTOBUF).body(Full::new(Bytes::from(b))),
        Body::Empty => resp.header("content-type", content_type::JSON).body(Full::new(Bytes::from_static(b"null"))),
        Body::Bytes(b) => resp.header("content-type", "application/octet-stream").body(Full::new(Bytes::from(b))),
    };
    Ok(resp.expect("static response parts are valid"))
}

/// The body as record JSON (protobuf `forward_backward` bodies decoded).
fn body_json(headers: &HeaderMap, path: &str, b: &Bytes) -> Value {
    if b.is_empty() {
        return Value::Null;
    }
    if path == p::FORWARD_BACKWARD && is_protobuf(headers) {
        return proto::ForwardBackwardRequest::decode(b.as_ref()).map_or_else(|e| json!({"undecodable_protobuf": e.to_string()}), |r| super::record::forward_backward_json(&r));
    }
    serde_json::from_slice(b).unwrap_or_else(|_| json!({"unparsable": String::from_utf8_lossy(b)}))
}

fn is_protobuf(headers: &HeaderMap) -> bool {
    headers.get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains(content_type::PROTOBUF))
}

async fn route(state: &Arc<State>, method: &Method, path: &str, headers: &HeaderMap, b: &[u8]) -> Reply {
    let r = match (method, path) {
        (&Method::POST, p::CLIENT_CONFIG) => Ok(Reply::json(&wire::ClientConfigResponse { parallel_fwdbwd_chunks: false, ..Default::default() })),
        (&Method::POST, p::DYNAMIC_CONFIG) => Ok(Reply::json(&wire::DynamicConfigResponse { refresh_interval_sec: 300, sample_cancel_enabled: false, sample_cancel_max_batch_size: 64 })),
        (&Method::GET, p::HEALTHZ) => Ok(Reply::json(&wire::StatusResponse { status: "ok".into() })),
        (&Method::GET, p::SERVER_CAPABILITIES) => Ok(capabilities(state)),
        (&Method::POST, p::TELEMETRY) => Ok(Reply::json(&wire::StatusResponse { status: "accepted".into() })),
        (&Method::POST, p::CREATE_SESSION) => create_session(state, b),
        (&Method::POST, p::SESSION_HEARTBEAT) => heartbeat(state, b),
        (&Method::POST, p::CREATE_MODEL) => create_model(state, b),
        (&Method::POST, p::GET_INFO) => get_info(state, b),
        (&Method::POST, p::FORWARD_BACKWARD) => forward_backward(state, headers, b),
        (&Method::POST, p::FORWARD) => forward_backward_legacy(state, b, true),
        (&Method::POST, p::OPTIM_STEP) => optim_step(state, b),
        (&Method::POST, p::SAVE_WEIGHTS) => save_weights(state, b),
        (&Method::POST, p::SAVE_WEIGHTS_FOR_SAMPLER) => save_weights_for_sampler(state, b),
        (&Method::POST, p::LOAD_WEIGHTS) => load_weights(state, b),
        (&Method::POST, p::CREATE_SAMPLING_SESSION) => create_sampling_session(state, b).await,
        (&Method::POST, p::ASAMPLE) => asample(state, b),
        (&Method::POST, p::RETRIEVE_FUTURE) => retrieve_future(state, headers, b).await,
        (&Method::POST, p::WEIGHTS_INFO) => weights_info(state, b),
        (&Method::POST, p::SAVE_WEIGHTS_EXTERNAL) => save_weights_external(state, b),
        (&Method::POST, _) if path.starts_with("/api/v1/sessions/") && path.ends_with("/finish") => {
            finish_session(state, &path["/api/v1/sessions/".len()..path.len() - "/finish".len()], b)
        }
        (&Method::GET, _) if path.starts_with("/api/v1/samplers/") => get_sampler(state, &path["/api/v1/samplers/".len()..]),
        (_, _) if path.starts_with("/api/v1/training_runs/") => checkpoints::training_runs(state, method, &path["/api/v1/training_runs/".len()..], headers, b),
        (&Method::GET, _) if path.starts_with(signed::PREFIX) => checkpoints::file(state, &path[signed::PREFIX.len()..]),
        _ => Err(not_found(format!("`{method} {path}` is not an endpoint of rlx serve (see docs/backends.md for what it implements)"))),
    };
    r.unwrap_or_else(|e| e)
}

/// One sampler reply: the completions of each request.
type SampleReply = Vec<Vec<seam::SampledSequence>>;

fn capabilities(state: &Arc<State>) -> Reply {
    let supported_models = state.registry.base.names.iter().map(|n| wire::SupportedModel { model_name: n.clone(), trainable: true, sampleable: true }).collect();
    Reply::json(&wire::ServerCapabilities { supported_models })
}

fn live_session(state: &Arc<State>, session_id: &str) -> Result<(), Reply> {
    match state.sessions.touch(session_id) {
        Ok(()) => Ok(()),
        Err(e @ super::sessions::Error::Unknown(_)) => Err(not_found(e.to_string())),
        Err(e @ super::sessions::Error::Finished(_)) => Err(bad(e.to_string())),
    }
}

fn create_session(state: &Arc<State>, b: &[u8]) -> Handled {
    let _: wire::CreateSessionRequest = parse(b, "create_session")?;
    // The session's `user_metadata` is not kept: nothing of the protocol that rlx serves reads it
    // back (`GET /sessions/{id}` is not served); a model's is (`GET /training_runs/{id}`).
    let session_id = state.sessions.create();
    Ok(Reply::json(&wire::CreateSessionResponse { r#type: Default::default(), info_message: None, warning_message: None, error_message: None, session_id }))
}

fn heartbeat(state: &Arc<State>, b: &[u8]) -> Handled {
    let r: wire::SessionHeartbeatRequest = parse(b, "session_heartbeat")?;
    match state.sessions.touch(&r.session_id) {
        Ok(()) => Ok(Reply::json(&wire::SessionHeartbeatResponse::default())),
        Err(e @ super::sessions::Error::Unknown(_)) => Err(not_found(e.to_string())),
        // 410 tells the SDK to stop heartbeating.
        Err(e @ super::sessions::Error::Finished(_)) => Err(Reply::error(StatusCode::GONE, e.to_string())),
    }
}

fn finish_session(state: &Arc<State>, session_id: &str, b: &[u8]) -> Handled {
    let r: wire::FinishSessionRequest = parse(b, "finish")?;
    state.sessions.finish(session_id, r.reason.r#type).map_err(|e| not_found(e.to_string()))?;
    Ok(Reply { status: StatusCode::OK, body: Body::Empty, duplicate: None })
}

fn create_model(state: &Arc<State>, b: &[u8]) -> Handled {
    let r: wire::CreateModelRequest = parse(b, "create_model")?;
    live_session(state, &r.session_id)?;
    state.registry.base.check_name(&r.base_model).map_err(bad)?;
    if r.optimizer_config.r#type != "adamw" {
        return Err(bad(format!("optimizer `{}` is not supported by rlx serve (only `adamw`)", r.optimizer_config.r#type)));
    }
    let lora = super::models::lora_of(r.lora_config.as_ref().unwrap_or(&wire::LoraConfig { rank: 32, seed: None, train_unembed: true, train_mlp: true, train_attn: true })).map_err(bad)?;
    let model_id = tinker::model_id(&r.session_id, r.model_seq_id);
    let seed = r.lora_config.as_ref().and_then(|l| l.seed).unwrap_or(r.model_seq_id);
    let s = state.futures.submit(RequestType::CreateModel, Some((model_id.clone(), 0)));
    let reply = Reply::submitted(&s, wire::UntypedApiFuture { request_id: s.request_id().to_string(), model_id: Some(model_id.clone()), sample_sequence_ids: None });
    if let Submitted::New { completion, .. } = s {
        let meta = Meta { model_id: model_id.clone(), base_model: r.base_model, lora, seed, user_metadata: r.user_metadata.unwrap_or_default() };
        let done = move |r: Result<(), String>| match r {
            Ok(()) => completion.finish(FutureResult::json(&wire::CreateModelResponse { model_id, r#type: Default::default() })),
            Err(e) => completion.fail(ErrorCategory::Server, format!("cannot create the model: {e}")),
        };
        if state.registry.create(meta, Start::Fresh, done).is_none() {
            // `done` was dropped with its completion, which fails the request.
            tracing::warn!("create_model for an existing model id");
        }
    }
    Ok(reply)
}

fn get_info(state: &Arc<State>, b: &[u8]) -> Handled {
    let r: wire::GetInfoRequest = parse(b, "get_info")?;
    let m = model(state, &r.model_id)?;
    Ok(Reply::json(&wire::GetInfoResponse {
        r#type: Default::default(),
        model_data: wire::ModelData { arch: None, model_name: Some(m.meta.base_model.clone()), tokenizer_id: Some(state.registry.base.tokenizer_dir.display().to_string()) },
        model_id: r.model_id,
        optimizer_config: Default::default(),
        is_lora: Some(true),
        lora_rank: Some(m.meta.lora.rank as u32),
        model_name: Some(m.meta.base_model.clone()),
    }))
}

fn category(e: &backend::Error) -> ErrorCategory {
    if e.is_user_error() || matches!(e, backend::Error::InvalidDatum { .. } | backend::Error::InvalidArgument { .. } | backend::Error::Loss(_)) {
        ErrorCategory::User
    } else {
        ErrorCategory::Server
    }
}

/// Accepts a training request `(model_id, seq_id)`: a duplicate answers the original future;
/// a new one queues `job` in the model's `seq_id` order.
fn submit_training(
    state: &Arc<State>,
    kind: RequestType,
    model_id: &str,
    seq_id: Option<u64>,
    job: impl FnOnce(Arc<dyn backend::Trainer>, super::futures::Completion) + Send + 'static,
) -> Handled {
    let m = model(state, model_id)?;
    let seq_id = seq_id.ok_or_else(|| bad("`seq_id` is required (the per-model request counter, from 1)"))?;
    if seq_id == 0 {
        return Err(bad("`seq_id` 0 is out of range: a model's requests count from 1"));
    }
    if let Some(session) = tinker::session_of(model_id) {
        live_session(state, session)?;
    }
    let s = state.futures.submit(kind, Some((model_id.to_string(), seq_id)));
    let reply = Reply::submitted(&s, wire::UntypedApiFuture { request_id: s.request_id().to_string(), model_id: Some(model_id.to_string()), sample_sequence_ids: None });
    if let Submitted::New { completion, .. } = s {
        m.enqueue(
            seq_id,
            Box::new(move |trainer| match trainer {
                Ok(t) => job(t.clone(), completion),
                Err(e) => completion.fail(ErrorCategory::Server, format!("the model failed to open: {e}")),
            }),
        );
    }
    Ok(reply)
}

/// Awaits a submitted trainer request on a task and stores its outcome.
fn finish_with<T: Send + 'static>(completion: super::futures::Completion, pending: backend::Pending<T>, map: impl FnOnce(T) -> FutureResult + Send + 'static) {
    tokio::spawn(async move {
        match pending.await {
            Ok(v) => completion.finish(map(v)),
            Err(e) => completion.fail(category(&e), e.to_string()),
        }
    });
}

fn forward_backward(state: &Arc<State>, headers: &HeaderMap, b: &[u8]) -> Handled {
    if !is_protobuf(headers) {
        return forward_backward_legacy(state, b, false);
    }
    if headers.get("content-encoding").is_some_and(|v| v.as_bytes() != b"identity") {
        return Err(bad("compressed `forward_backward` bodies are not supported (this server answers `proto_compress_fwdbwd: false`)"));
    }
    let r = proto::ForwardBackwardRequest::decode(b).map_err(|e| bad(format!("invalid protobuf `ForwardBackwardRequest`: {e}")))?;
    let seq_id = u64::try_from(r.seq_id).map_err(|_| bad(format!("`seq_id` {} is negative", r.seq_id)))?;
    if r.loss_fn == STABLE_REINFORCE {
        // Refused when submitted rather than failed in its future (tinker-cookbook's async mode
        // defaults to it, and a failure at `.result()` comes far from the call that chose it).
        // The seq_id is spent on the client's side: a no-op takes its turn so the model's next
        // requests do not wait for it.
        model(state, &r.model_id)?.enqueue(seq_id, Box::new(|_| {}));
        return Err(bad(STABLE_REINFORCE_REFUSAL));
    }
    // Decode now, fail inside the future: the seq_id is spent either way.
    let input = r
        .data
        .iter()
        .enumerate()
        .map(|(i, d)| convert::datum_from_proto(d, i))
        .collect::<Result<Vec<_>, _>>()
        .and_then(|data| Ok((data, convert::loss_from_proto(&r)?)))
        .map_err(|e| e.to_string());
    let forward_only = r.forward_only;
    let kind = if forward_only { RequestType::Forward } else { RequestType::ForwardBackward };
    submit_training(state, kind, &r.model_id, Some(seq_id), move |t, completion| match input {
        Err(e) => completion.fail(ErrorCategory::User, e),
        Ok((data, (loss, temperature))) => scored(&t, completion, data, loss, temperature, forward_only),
    })
}

/// A forward (or forward/backward) scored at `temperature` (`loss_fn_config.temperature`):
/// set on the trainer's queue right before the call, for every call, so a call without the key
/// scores at 1 whatever the previous one asked.
fn scored(t: &Arc<dyn backend::Trainer>, completion: super::futures::Completion, data: Vec<seam::Datum>, loss: seam::LossFn, temperature: f32, forward_only: bool) {
    let set = t.set_learner_temperature(temperature);
    let pending = if forward_only { t.forward(data, loss) } else { t.forward_backward(data, loss) };
    let pending: backend::Pending<seam::ForwardBackwardOutput> = Box::pin(async move {
        set.await?;
        pending.await
    });
    finish_with(completion, pending, FutureResult::ForwardBackward);
}

/// The JSON body of SDKs before 0.25 (`forward_backward_input`, or `forward_input` on
/// `/forward`), as SkyRL, verl_tinker and TuFT read it: rlx's client sends it to servers on
/// that wire, and `rlx serve` accepts it so that the same client path runs against a local
/// server. `seq_id` is required here as on the protobuf wire (rlx's client always sends it).
fn forward_backward_legacy(state: &Arc<State>, b: &[u8], forward_only: bool) -> Handled {
    let r: wire::JsonForwardBackwardRequest = parse(b, if forward_only { "forward" } else { "forward_backward" })?;
    let input = if forward_only { r.forward_input } else { r.forward_backward_input };
    let key = if forward_only { "forward_input" } else { "forward_backward_input" };
    let input = input.ok_or_else(|| bad(format!("`{key}` is missing")))?;
    let decoded = input
        .data
        .iter()
        .enumerate()
        .map(|(i, d)| convert::datum_from_json(d, i))
        .collect::<Result<Vec<_>, _>>()
        .and_then(|data| {
            let mut config = input.loss_fn_config.clone().unwrap_or_default();
            let temperature = convert::learner_temperature(&mut config)?;
            Ok((data, (seam::LossFn::from_tinker(&input.loss_fn, &config)?, temperature)))
        })
        .map_err(|e| e.to_string());
    let kind = if forward_only { RequestType::Forward } else { RequestType::ForwardBackward };
    submit_training(state, kind, &r.model_id, r.seq_id, move |t, completion| match decoded {
        Err(e) => completion.fail(ErrorCategory::User, e),
        Ok((data, (loss, temperature))) => scored(&t, completion, data, loss, temperature, forward_only),
    })
}

fn optim_step(state: &Arc<State>, b: &[u8]) -> Handled {
    let r: wire::OptimStepRequest = parse(b, "optim_step")?;
    let adam = match (&r.adam_params, &r.optimizer_params) {
        (Some(a), _) => Ok(*a),
        (None, Some(o)) => Err(format!("optimizer parameters `{o}` are not supported by rlx serve (only `adam_params`)")),
        (None, None) => Err("`adam_params` is missing".to_string()),
    };
    submit_training(state, RequestType::OptimStep, &r.model_id, r.seq_id, move |t, completion| match adam {
        Err(e) => completion.fail(ErrorCategory::User, e),
        Ok(a) => finish_with(completion, t.optim_step(a), |o| FutureResult::json(&wire::OptimStepResponse { metrics: Some(convert::optim_metrics(&o)) })),
    })
}

/// A checkpoint name that stays inside its directory.
fn checkpoint_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        Err(format!("checkpoint name `{name}` must be one non-empty path segment"))
    } else {
        Ok(())
    }
}

fn save_weights(state: &Arc<State>, b: &[u8]) -> Handled {
    let r: wire::SaveWeightsRequest = parse(b, "save_weights")?;
    let name = r.path.clone().unwrap_or_else(|| format!("{:06}", r.seq_id.unwrap_or(0)));
    let path = TinkerPath { training_run_id: r.model_id.clone(), kind: tinker::CheckpointKind::State, name: name.clone() };
    let dir = state.registry.checkpoint_dir(&path);
    let check = checkpoint_name(&name).and_then(|()| if dir.exists() && !r.overwrite { Err(format!("checkpoint `{path}` exists; pass `overwrite`")) } else { Ok(()) });
    submit_training(state, RequestType::SaveWeights, &r.model_id, r.seq_id, move |t, completion| match check {
        Err(e) => completion.fail(ErrorCategory::User, e),
        Ok(()) => finish_with(completion, t.save_state(&format!("weights/{name}")), move |_| FutureResult::json(&wire::SaveWeightsResponse { path: path.to_string(), r#type: Some(Default::default()) })),
    })
}

fn save_weights_for_sampler(state: &Arc<State>, b: &[u8]) -> Handled {
    let r: wire::SaveWeightsForSamplerRequest = parse(b, "save_weights_for_sampler")?;
    let m = model(state, &r.model_id)?;
    let st = state.clone();
    let base_model = m.meta.base_model.clone();
    match r.path.clone() {
        Some(name) => {
            let path = TinkerPath { training_run_id: r.model_id.clone(), kind: tinker::CheckpointKind::Sampler, name: name.clone() };
            let check = checkpoint_name(&name);
            submit_training(state, RequestType::SaveWeightsForSampler, &r.model_id, r.seq_id, move |t, completion| match check {
                Err(e) => completion.fail(ErrorCategory::User, e),
                Ok(()) => {
                    let saved = t.save_state(&format!("sampler_weights/{name}"));
                    let sampler = t.sampler();
                    tokio::spawn(async move {
                        let r = async { saved.await?; sampler.await }.await;
                        match r {
                            Ok(s) => {
                                st.registry.remember_sampler(&path, s).await;
                                completion.finish(FutureResult::json(&wire::SaveWeightsForSamplerResponse { path: Some(path.to_string()), sampling_session_id: None, r#type: Some(Default::default()) }));
                            }
                            Err(e) => completion.fail(category(&e), e.to_string()),
                        }
                    });
                }
            })
        }
        None => {
            let session = tinker::session_of(&r.model_id).map(str::to_string);
            let sid = match (session, r.sampling_session_seq_id) {
                (Some(s), Some(n)) => Ok(tinker::sampling_session_id(&s, n)),
                (_, None) => Err("an unnamed `save_weights_for_sampler` needs `sampling_session_seq_id`".to_string()),
                (None, _) => Err(format!("model id `{}` has no session part", r.model_id)),
            };
            submit_training(state, RequestType::SaveWeightsForSampler, &r.model_id, r.seq_id, move |t, completion| match sid {
                Err(e) => completion.fail(ErrorCategory::User, e),
                Ok(sid) => finish_with(completion, t.sampler(), move |s| {
                    st.sessions.add_sampler(&sid, SamplingSession { sampler: s, base_model, model_path: None });
                    FutureResult::json(&wire::SaveWeightsForSamplerResponse { path: None, sampling_session_id: Some(sid), r#type: Some(Default::default()) })
                }),
            })
        }
    }
}

/// `save_weights_external`: the model's current weights, saved as a trainer state in a hidden
/// scratch directory, written as a PEFT adapter (the exporter's `--adapter-only` files, which is
/// what Tinker's external weights of a LoRA model are) into `external_weights/<name>` through a
/// staging directory, the scratch state removed.
fn save_weights_external(state: &Arc<State>, b: &[u8]) -> Handled {
    let r: wire::SaveWeightsExternalRequest = parse(b, "save_weights_external")?;
    let m = model(state, &r.model_id)?;
    let path = TinkerPath { training_run_id: r.model_id.clone(), kind: tinker::CheckpointKind::External, name: r.path.clone() };
    let check = checkpoint_name(&r.path)
        .and_then(|()| if r.path.starts_with('.') { Err(format!("checkpoint name `{}` must not start with `.`", r.path)) } else { Ok(()) })
        .and_then(|()| checkpoints::check_ttl(r.ttl_seconds))
        .and_then(|()| if r.age_encryption_recipients.as_ref().is_some_and(|v| !v.is_empty()) { Err("age encryption of external weights is not supported by rlx serve".into()) } else { Ok(()) })
        .and_then(|()| if state.registry.exists(&path) { Err(format!("checkpoint `{path}` exists; delete it first or choose another name")) } else { Ok(()) });
    let (st, base_name, ttl) = (state.clone(), m.meta.base_model.clone(), r.ttl_seconds);
    submit_training(state, RequestType::SaveWeightsExternal, &r.model_id, r.seq_id, move |t, completion| match check {
        Err(e) => completion.fail(ErrorCategory::User, e),
        Ok(()) => {
            let saved = t.save_state(&format!(".external-state/{}", path.name));
            tokio::spawn(async move {
                let written = async {
                    let state_ref = saved.await.map_err(|e| (category(&e), e.to_string()))?;
                    let scratch = std::path::PathBuf::from(state_ref.0);
                    let out = st.registry.checkpoint_dir(&path);
                    let files = tokio::task::spawn_blocking(move || {
                        let r = crate::export::adapter_files(&scratch, &out, &base_name);
                        let _ = std::fs::remove_dir_all(&scratch);
                        r
                    });
                    let files = files.await.map_err(|e| (ErrorCategory::Server, e.to_string()))?.map_err(|e| (ErrorCategory::Server, crate::causes::causes(&e).join(": ")))?;
                    if let Some(ttl) = ttl {
                        st.registry.set_expiry(&path, Some(std::time::SystemTime::now() + Duration::from_secs(ttl))).map_err(|e| (ErrorCategory::Server, e.to_string()))?;
                    }
                    Ok::<_, (ErrorCategory, String)>(files.iter().map(|(_, n)| n).sum::<u64>())
                };
                match written.await {
                    Ok(size) => completion.finish(FutureResult::json(&wire::SaveWeightsExternalResponse { path: path.to_string(), size_bytes: Some(size), r#type: Some(Default::default()) })),
                    Err((cat, e)) => completion.fail(cat, format!("cannot export `{path}`: {e}")),
                }
            });
        }
    })
}

fn load_weights(state: &Arc<State>, b: &[u8]) -> Handled {
    let r: wire::LoadWeightsRequest = parse(b, "load_weights")?;
    let path = TinkerPath::parse(&r.path).map_err(|e| bad(e.to_string()))?;
    match (&r.session_id, r.model_seq_id, &r.model_id) {
        (Some(session), Some(n), _) => {
            live_session(state, session)?;
            let meta = state.registry.meta_of(&path).map_err(not_found)?;
            if let Some(b) = &r.base_model {
                state.registry.base.check_name(b).map_err(bad)?;
            }
            let model_id = tinker::model_id(session, n);
            let s = state.futures.submit(RequestType::LoadWeights, Some((model_id.clone(), 0)));
            let reply = Reply::submitted(&s, wire::UntypedApiFuture { request_id: s.request_id().to_string(), model_id: Some(model_id.clone()), sample_sequence_ids: None });
            if let Submitted::New { completion, .. } = s {
                let dir = state.registry.checkpoint_dir(&path);
                // Metadata the client sends now, else what the checkpoint's model was created with.
                let user_metadata = r.user_metadata.clone().unwrap_or(meta.user_metadata);
                let new = Meta { model_id: model_id.clone(), base_model: r.base_model.clone().unwrap_or(meta.base_model), lora: meta.lora, seed: meta.seed, user_metadata };
                let shown = path.to_string();
                let done = move |res: Result<(), String>| match res {
                    Ok(()) => completion.finish(FutureResult::json(&loaded(shown, model_id))),
                    Err(e) => completion.fail(ErrorCategory::User, format!("cannot load `{shown}`: {e}")),
                };
                let _ = state.registry.create(new, Start::From(dir), done);
            }
            Ok(reply)
        }
        (_, _, Some(model_id)) => {
            let dir = state.registry.checkpoint_dir(&path);
            let exists = state.registry.meta_of(&path);
            let model_id = model_id.clone();
            let shown = path.to_string();
            submit_training(state, RequestType::LoadWeights, &model_id.clone(), r.seq_id, move |t, completion| match exists {
                Err(e) => completion.fail(ErrorCategory::User, e),
                Ok(_) => finish_with(completion, t.load_state(&seam::StateRef::local(&dir)), move |()| FutureResult::json(&loaded(shown, model_id))),
            })
        }
        _ => Err(bad("`load_weights` needs `session_id` + `model_seq_id` (create from state) or `model_id` + `seq_id`")),
    }
}

async fn create_sampling_session(state: &Arc<State>, b: &[u8]) -> Handled {
    let r: wire::CreateSamplingSessionRequest = parse(b, "create_sampling_session")?;
    live_session(state, &r.session_id)?;
    let id = tinker::sampling_session_id(&r.session_id, r.sampling_session_seq_id);
    if !state.sessions.has_sampler(&id) {
        let (sampler, base_model, model_path) = match (&r.model_path, &r.base_model) {
            (Some(mp), _) => {
                let path = TinkerPath::parse(mp).map_err(|e| bad(e.to_string()))?;
                let meta = state.registry.meta_of(&path).map_err(not_found)?;
                let s = state.registry.sampler_of_path(&path).await.map_err(|e| Reply::error(StatusCode::INTERNAL_SERVER_ERROR, e))?;
                (s, meta.base_model, Some(mp.clone()))
            }
            (None, Some(base)) => {
                state.registry.base.check_name(base).map_err(bad)?;
                let s = state.registry.base_sampler().await.map_err(|e| Reply::error(StatusCode::INTERNAL_SERVER_ERROR, e))?;
                (s, base.clone(), None)
            }
            (None, None) => return Err(bad("`create_sampling_session` needs `model_path` or `base_model`")),
        };
        state.sessions.add_sampler(&id, SamplingSession { sampler, base_model, model_path });
    }
    Ok(Reply::json(&wire::CreateSamplingSessionResponse { r#type: Default::default(), sampling_session_id: id }))
}

fn get_sampler(state: &Arc<State>, id: &str) -> Handled {
    let s = state.sessions.sampler(id).ok_or_else(|| not_found(format!("unknown sampling session `{id}`")))?;
    Ok(Reply::json(&wire::GetSamplerResponse { sampler_id: id.to_string(), base_model: s.base_model, model_path: s.model_path }))
}

/// Samples one `asample` may ask for: far above a GRPO group or an eval's pass@k (tens), far
/// below what would exhaust the server (each sample's id is allocated when the request is
/// accepted, before anything is sampled: `num_samples: 10^12` used to take the process down).
const MAX_SAMPLES_PER_REQUEST: u64 = 4096;

/// Tokens one sample may ask for: the longest context of the models `rlx serve` loads.
const MAX_TOKENS_PER_SAMPLE: u64 = 131_072;

/// Top-k prompt log-probabilities one request may ask for per position: distillation uses tens
/// (the cookbook's SDFT 20); the reply holds prompt length × k pairs, which a k near the
/// vocabulary (49 152 for SmolLM2) would make gigabytes.
const MAX_TOPK: u64 = 1024;

/// What one `asample` may ask for, checked before it is queued: 422 past a cap (the SDK does not
/// retry it, as it would a 5xx).
fn check_sample_caps(r: &wire::SampleRequest) -> Result<(), Reply> {
    if r.num_samples > MAX_SAMPLES_PER_REQUEST {
        return Err(unprocessable(format!("`num_samples` {} is past this server's cap of {MAX_SAMPLES_PER_REQUEST} per request", r.num_samples)));
    }
    if r.topk_prompt_logprobs > MAX_TOPK {
        return Err(unprocessable(format!("`topk_prompt_logprobs` {} is past this server's cap of {MAX_TOPK}", r.topk_prompt_logprobs)));
    }
    if let Some(m) = r.sampling_params.max_tokens.filter(|&m| m > MAX_TOKENS_PER_SAMPLE) {
        return Err(unprocessable(format!("`sampling_params.max_tokens` {m} is past this server's cap of {MAX_TOKENS_PER_SAMPLE}")));
    }
    Ok(())
}

/// What a sample request asked to know about its prompt.
#[derive(Default)]
struct PromptScores {
    logprobs: Option<Vec<f32>>,
    topk: Option<Vec<seam::TopK>>,
}

/// Submits the prompt scoring `r` asks for (`prompt_logprobs`, `topk_prompt_logprobs`), with
/// `prompt_logprobs_last_n` applied to both: only the last N positions scored, the rest NaN or
/// empty.
fn score_prompt(sampler: &Arc<dyn backend::Sampler>, r: &wire::SampleRequest, prompt: &[u32]) -> backend::Pending<PromptScores> {
    let logprobs = (r.prompt_logprobs == Some(true)).then(|| sampler.prompt_logprobs(prompt.to_vec()));
    let topk = (r.topk_prompt_logprobs > 0).then(|| sampler.prompt_topk_logprobs(prompt.to_vec(), r.topk_prompt_logprobs as usize));
    let last_n = r.prompt_logprobs_last_n.map(|n| n as usize);
    Box::pin(async move {
        let mut out = PromptScores::default();
        if let Some(p) = logprobs {
            out.logprobs = Some(p.await?);
        }
        if let Some(p) = topk {
            out.topk = Some(p.await?);
        }
        if let Some(n) = last_n {
            if let Some(lp) = out.logprobs.as_mut() {
                let keep = lp.len().saturating_sub(n);
                lp[..keep].fill(f32::NAN);
            }
            if let Some(tk) = out.topk.as_mut() {
                let keep = tk.len().saturating_sub(n);
                tk[..keep].iter_mut().for_each(Vec::clear);
            }
        }
        Ok(out)
    })
}

fn asample(state: &Arc<State>, b: &[u8]) -> Handled {
    let r: wire::SampleRequest = parse(b, "asample")?;
    check_sample_caps(&r)?;
    let sid = r.sampling_session_id.clone().ok_or_else(|| bad("`asample` needs `sampling_session_id` (session-less `base_model`/`model_path` addressing is not supported)"))?;
    let session = state.sessions.sampler(&sid).ok_or_else(|| not_found(format!("unknown sampling session `{sid}`")))?;
    if let Some(s) = tinker::session_of(&sid) {
        live_session(state, s)?;
    }
    let n = r.num_samples;
    if n == 0 {
        return Err(bad("`num_samples` must be at least 1"));
    }
    let s = state.futures.submit(RequestType::Sample, r.seq_id.map(|q| (sid.clone(), q)));
    let ids: Vec<String> = (0..n).map(|i| format!("{}:{i}", s.request_id())).collect();
    let reply = Reply::submitted(&s, wire::UntypedApiFuture { request_id: s.request_id().to_string(), model_id: None, sample_sequence_ids: Some(ids) });
    if let Submitted::New { completion, .. } = s {
        let unsupported = if r.topk_sample_logprobs > 0 {
            Some("top-k log-probabilities of sampled tokens")
        } else if r.prompt_alt_tokens_k > 0 || r.target_prompt_logprobs.is_some() {
            Some("prompt alternatives and targets")
        } else {
            None
        };
        let request = convert::prompt_from_wire(&r.prompt)
            .and_then(|prompt| Ok((prompt, convert::sampling_params_from_wire(&r.sampling_params, &state.registry.base.eos)?)))
            .map_err(|e| e.to_string());
        match (unsupported, request) {
            (Some(what), _) => completion.fail(ErrorCategory::User, format!("{what} is not supported by rlx serve")),
            (None, Err(e)) => completion.fail(ErrorCategory::User, e),
            (None, Ok((prompt, params))) => {
                // Scores submitted first, then the sample, in order on the session's sampler.
                let scores = score_prompt(&session.sampler, &r, &prompt);
                let req = SampleRequest { prompt, num_samples: n as usize, seed: params.seed, greedy: false };
                let sampled = session.sampler.sample(vec![req], &params);
                let both: backend::Pending<(SampleReply, PromptScores)> = Box::pin(async move { Ok((sampled.await?, scores.await?)) });
                finish_with(completion, both, |(mut v, scores)| FutureResult::Sample { sequences: v.pop().unwrap_or_default(), prompt_logprobs: scores.logprobs, topk_prompt_logprobs: scores.topk });
            }
        }
    }
    Ok(reply)
}

async fn retrieve_future(state: &Arc<State>, headers: &HeaderMap, b: &[u8]) -> Handled {
    let r: wire::FutureRetrieveRequest = parse(b, "retrieve_future")?;
    let try_again = || Reply::json(&wire::TryAgainResponse { r#type: Default::default(), request_id: r.request_id.clone(), queue_state: wire::QueueState::Active, queue_state_reason: None });
    let Some(_) = state.futures.kind(&r.request_id) else {
        return Err(not_found(format!("unknown request id `{}`", r.request_id)));
    };
    if state.faults.try_again() {
        return Ok(try_again());
    }
    let outcome = state.futures.wait(&r.request_id, state.long_poll).await.map_err(|_| not_found(format!("unknown request id `{}`", r.request_id)))?;
    let Some(outcome) = outcome else { return Ok(try_again()) };
    let proto = headers.get("accept").and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains(content_type::PROTOBUF));
    Ok(match &*outcome {
        FutureResult::Json(v) => Reply::ok(v.clone()),
        FutureResult::Failed { error, category } => Reply::json(&wire::RequestFailedResponse { error: error.clone(), category: *category }),
        FutureResult::ForwardBackward(o) if proto => Reply { status: StatusCode::OK, body: Body::Proto(convert::forward_backward_output_to_proto(o).encode_to_vec()), duplicate: None },
        FutureResult::ForwardBackward(o) => Reply::json(&forward_backward_json(o)),
        FutureResult::Sample { sequences, prompt_logprobs, topk_prompt_logprobs: topk } if proto => {
            let body = convert::sample_response_to_proto(sequences, prompt_logprobs.as_deref(), topk.as_deref()).encode_to_vec();
            Reply { status: StatusCode::OK, body: Body::Proto(body), duplicate: None }
        }
        FutureResult::Sample { sequences, prompt_logprobs, topk_prompt_logprobs: topk } => Reply::json(&sample_json(sequences, prompt_logprobs.as_deref(), topk.as_deref())),
    })
}

fn weights_info(state: &Arc<State>, b: &[u8]) -> Handled {
    let r: wire::WeightsInfoRequest = parse(b, "weights_info")?;
    let path = TinkerPath::parse(&r.tinker_path).map_err(|e| bad(e.to_string()))?;
    let meta = state.registry.meta_of(&path).map_err(not_found)?;
    Ok(Reply::json(&wire::WeightsInfoResponse {
        base_model: meta.base_model,
        optimizer_config: wire::OptimizerConfig::default(),
        is_lora: true,
        lora_rank: Some(meta.lora.rank as u32),
        train_unembed: false,
        train_mlp: meta.lora.targets.iter().any(|t| t == "up_proj"),
        train_attn: meta.lora.targets.iter().any(|t| t == "q_proj"),
    }))
}

fn loaded(path: String, model_id: String) -> wire::LoadWeightsResponse {
    wire::LoadWeightsResponse { path: Some(path), model_id: Some(model_id), r#type: Some(Default::default()) }
}

/// The legacy JSON shape of a forward/backward result.
fn forward_backward_json(o: &seam::ForwardBackwardOutput) -> wire::ForwardBackwardOutput {
    let logprobs = |d: &seam::DatumOutput| wire::TensorData { data: d.logprobs.iter().map(|&x| f64::from(x)).collect(), dtype: "float32".into(), shape: Some(vec![d.logprobs.len() as i64]) };
    wire::ForwardBackwardOutput {
        loss_fn_output_type: "ArrayRecord".into(),
        loss_fn_outputs: o.outputs.iter().map(|d| std::collections::BTreeMap::from([("logprobs".to_string(), logprobs(d))])).collect(),
        metrics: std::collections::BTreeMap::from([(convert::LOSS_SUM.to_string(), o.loss)]),
    }
}

/// The JSON shape of a sample result.
fn sample_json(sequences: &[seam::SampledSequence], prompt_logprobs: Option<&[f32]>, topk: Option<&[seam::TopK]>) -> wire::SampleResponse {
    let stop_reason = |r: seam::StopReason| match r {
        seam::StopReason::Stop => "stop",
        seam::StopReason::Length => "length",
    };
    wire::SampleResponse {
        r#type: Default::default(),
        sequences: sequences.iter().map(|q| wire::SampledSequence { stop_reason: stop_reason(q.stop_reason).into(), tokens: q.tokens.clone(), logprobs: q.logprobs.clone() }).collect(),
        // JSON has no NaN: unscored positions are `null`, as in the legacy shape.
        prompt_logprobs: prompt_logprobs.map(|v| v.iter().map(|x| (!x.is_nan()).then_some(*x)).collect()),
        topk_prompt_logprobs: topk.map(|rows| rows.iter().map(|row| (!row.is_empty()).then(|| row.clone())).collect()),
    }
}
