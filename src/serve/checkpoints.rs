//! The REST endpoints over checkpoints (SDK 0.38's `RestClient`, what `tinker checkpoint
//! list|set-ttl|delete|download` call), and the signed download URLs of external weights:
//!
//! | endpoint | answer |
//! |---|---|
//! | `GET /api/v1/training_runs/{id}` | `TrainingRun` (the model's facts, its last checkpoints) |
//! | `GET …/{id}/checkpoints` | every checkpoint: `training`, `sampler`, `external`, with sizes and expiries |
//! | `GET …/checkpoints/external_weights/{name}/external_weights_urls` | a signed URL per file, and their expiry |
//! | `PUT …/checkpoints/{kind}/{name}/ttl` | sets or removes the expiry (`null`) |
//! | `DELETE …/checkpoints/{kind}/{name}` | deletes it and revokes its URLs |
//! | `GET /files/{token}/{file}` | the file, without an API key; 403 once expired, 404 if unknown |
//!
//! An unknown run or checkpoint is a 404 with FastAPI's `{"detail": ...}`, as the service's.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hyper::{HeaderMap, Method, StatusCode};

use super::State;
use super::reply::{Body, Handled, Reply, bad, model, not_found, parse};
use super::signed::{self, Lookup};
use crate::tinker::{CheckpointKind, TinkerPath, wire};

/// The shortest and longest TTL the service accepts (SDK: "between 1 hour (3600) and 10 years").
const TTL_RANGE: std::ops::RangeInclusive<u64> = 3600..=10 * 365 * 24 * 3600;

/// Checks a requested TTL.
///
/// # Errors
/// A TTL outside [`TTL_RANGE`], in words.
pub(crate) fn check_ttl(ttl: Option<u64>) -> Result<(), String> {
    match ttl {
        Some(t) if !TTL_RANGE.contains(&t) => Err(format!("`ttl_seconds` is {t}; it must be between {} (one hour) and {} (ten years), or null for no expiry", TTL_RANGE.start(), TTL_RANGE.end())),
        _ => Ok(()),
    }
}

/// Routes `/api/v1/training_runs/{rest}`.
pub(super) fn training_runs(state: &Arc<State>, method: &Method, rest: &str, headers: &HeaderMap, b: &[u8]) -> Handled {
    let parts: Vec<&str> = rest.split('/').collect();
    match (method, parts.as_slice()) {
        (&Method::GET, [id]) => run(state, id),
        (&Method::GET, [id, "checkpoints"]) => Ok(Reply::json(&wire::CheckpointsListResponse { checkpoints: listing(state, id)?, cursor: None })),
        (_, [id, "checkpoints", kind, name, action @ ..]) => {
            let path = TinkerPath::parse(&format!("tinker://{id}/{kind}/{name}")).map_err(|e| bad(e.to_string()))?;
            match (method, action) {
                (&Method::DELETE, []) => delete(state, &path),
                (&Method::PUT, ["ttl"]) => ttl(state, &path, b),
                (&Method::GET, ["external_weights_urls"]) => urls(state, &path, headers),
                _ => Err(not_found(format!("`{method} /api/v1/training_runs/{rest}` is not an endpoint of rlx serve"))),
            }
        }
        _ => Err(not_found(format!("`{method} /api/v1/training_runs/{rest}` is not an endpoint of rlx serve"))),
    }
}

fn run(state: &Arc<State>, id: &str) -> Handled {
    let m = model(state, id)?;
    let all = listing(state, id)?;
    let last = |kind: &str| all.iter().rev().find(|c| c.checkpoint_type == kind).cloned();
    Ok(Reply::json(&wire::TrainingRun {
        training_run_id: id.to_string(),
        base_model: m.meta.base_model.clone(),
        model_owner: "rlx".into(),
        is_lora: true,
        corrupted: false,
        lora_rank: Some(m.meta.lora.rank as u32),
        last_request_time: super::record::now(),
        last_checkpoint: last(CheckpointKind::State.checkpoint_type()),
        last_sampler_checkpoint: last(CheckpointKind::Sampler.checkpoint_type()),
        user_metadata: m.meta.user_metadata.clone(),
    }))
}

/// Every live checkpoint of run `id`: training, then sampler, then external, each oldest first.
fn listing(state: &Arc<State>, id: &str) -> Result<Vec<wire::Checkpoint>, Reply> {
    if !state.registry.model_dir(id).join("model.json").is_file() {
        return Err(not_found(format!("unknown training run `{id}`")));
    }
    let mut out = vec![];
    for kind in [CheckpointKind::State, CheckpointKind::Sampler, CheckpointKind::External] {
        for (written, name, bytes) in state.registry.list(id, kind) {
            let path = TinkerPath { training_run_id: id.to_string(), kind, name };
            out.push(wire::Checkpoint {
                checkpoint_id: path.checkpoint_id(),
                checkpoint_type: kind.checkpoint_type().into(),
                time: humantime::format_rfc3339_millis(written).to_string(),
                tinker_path: path.to_string(),
                size_bytes: Some(bytes),
                public: false,
                expires_at: state.registry.expires_at(&path).map(|t| humantime::format_rfc3339_seconds(t).to_string()),
            });
        }
    }
    Ok(out)
}

fn missing(path: &TinkerPath) -> Reply {
    not_found(format!("checkpoint `{path}` not found (it was never saved, was deleted, or expired)"))
}

fn delete(state: &Arc<State>, path: &TinkerPath) -> Handled {
    if !state.registry.exists(path) {
        return Err(missing(path));
    }
    state.signed.revoke_under(&state.registry.checkpoint_dir(path));
    state.registry.delete(path).map_err(|e| Reply::error(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot delete `{path}`: {e}")))?;
    Ok(Reply { status: StatusCode::OK, body: Body::Empty, duplicate: None })
}

fn ttl(state: &Arc<State>, path: &TinkerPath, b: &[u8]) -> Handled {
    let r: wire::CheckpointTtlRequest = parse(b, "ttl")?;
    check_ttl(r.ttl_seconds).map_err(bad)?;
    if !state.registry.exists(path) {
        return Err(missing(path));
    }
    let at = r.ttl_seconds.map(|t| SystemTime::now() + Duration::from_secs(t));
    state.registry.set_expiry(path, at).map_err(|e| Reply::error(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot set the expiry of `{path}`: {e}")))?;
    Ok(Reply { status: StatusCode::OK, body: Body::Empty, duplicate: None })
}

/// Signed URLs for every file of an external-weights checkpoint, on the host the client
/// reached this server at.
fn urls(state: &Arc<State>, path: &TinkerPath, headers: &HeaderMap) -> Handled {
    if path.kind != CheckpointKind::External {
        return Err(bad(format!("`{path}` is not external weights: only `external_weights/` checkpoints have download URLs (write one with `save_weights_external`)")));
    }
    if !state.registry.exists(path) {
        return Err(missing(path));
    }
    let host = headers.get("host").and_then(|v| v.to_str().ok()).ok_or_else(|| bad("no `Host` header to build download URLs on"))?;
    let dir = state.registry.checkpoint_dir(path);
    let expires = SystemTime::now() + state.url_ttl;
    let mut urls = std::collections::BTreeMap::new();
    for name in files(&dir) {
        let token = state.signed.sign(&dir.join(&name), expires).map_err(|e| Reply::error(StatusCode::INTERNAL_SERVER_ERROR, format!("no randomness for a download token: {e}")))?;
        urls.insert(name.clone(), format!("http://{host}{}{token}/{name}", signed::PREFIX));
    }
    Ok(Reply::json(&wire::ExternalWeightsUrlsResponse { urls, expires: humantime::format_rfc3339_seconds(expires).to_string() }))
}

/// The files under `dir`, as `/`-separated paths relative to it, sorted.
fn files(dir: &std::path::Path) -> Vec<String> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(rel) = p.strip_prefix(dir) {
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out.sort();
    out
}

/// `GET /files/{token}/{file}`: the URL is the credential.
pub(super) fn file(state: &Arc<State>, rest: &str) -> Handled {
    let (token, name) = rest.split_once('/').unwrap_or((rest, ""));
    match state.signed.lookup(token) {
        Lookup::Unknown => Err(not_found("unknown or revoked download URL; ask `external_weights_urls` for new ones")),
        Lookup::Expired(t) => Err(Reply::error(StatusCode::FORBIDDEN, format!("this download URL expired at {}; ask `external_weights_urls` for new ones", humantime::format_rfc3339_seconds(t)))),
        Lookup::File(p) if name.is_empty() || !p.ends_with(name) => Err(not_found("the download URL names another file")),
        Lookup::File(p) => match std::fs::read(&p) {
            Ok(bytes) => Ok(Reply { status: StatusCode::OK, body: Body::Bytes(bytes), duplicate: None }),
            Err(_) => Err(not_found("the checkpoint of this download URL is gone")),
        },
    }
}

/// A request path with any signed-URL token replaced, for the request record (a token is a
/// credential).
pub(super) fn redact(path: &str) -> String {
    match path.strip_prefix(signed::PREFIX).and_then(|rest| rest.split_once('/')) {
        Some((_, name)) => format!("{}…/{name}", signed::PREFIX),
        None => path.to_string(),
    }
}
