//! A Tinker checkpoint's files, downloaded through the service's REST API the way SDK 0.38's
//! `tinker checkpoint download` does (`tinker/cli/commands/checkpoint.py`):
//!
//! - `tinker://RUN/external_weights/NAME` (what `save_weights_external` wrote): the signed URLs
//!   of its files (`GET …/checkpoints/external_weights/NAME/external_weights_urls`), then each
//!   file, signed again when the URLs are about to expire;
//! - `tinker://RUN/weights/NAME` (a training checkpoint, what `rlx run` records): a training
//!   model created from it (`load_weights`, weights only), its weights exported as temporary
//!   external weights (`save_weights_external`, TTL one hour, renewed with `PUT …/ttl` whenever
//!   the URLs are signed), downloaded as above and deleted (`DELETE …`) afterwards;
//! - `tinker://RUN/sampler_weights/NAME`: refused, as the SDK refuses it; SDK 0.38 has no call
//!   that downloads sampler weights (the archive endpoint of SDK ≤ 0.25 that tinker-cookbook's
//!   `weights.download` still names is gone from it).
//!
//! Files land in the directory the caller gives (inside the export's staging directory), each
//! checked against the `Content-Length` it came with and the total against the size the save
//! reported. What the files are (a PEFT adapter for a LoRA model) is for [`super::remote`] to
//! read.

use std::path::{Component, Path};
use std::time::{Duration, SystemTime};

use super::error::Error;
use crate::backend::tinker::http::{Body, Client, Verb};
use crate::backend::tinker::{Error as TinkerError, Session, future};
use crate::tinker::{self, CheckpointKind, RequestType, TinkerPath, wire};

/// The temporary export's lifetime (the SDK's `_TEMPORARY_EXPORT_TTL_SECONDS`).
const TEMPORARY_TTL: u64 = 3600;

/// The name the temporary export is saved under (the SDK's).
const TEMPORARY_NAME: &str = "download";

/// URLs expiring within this are signed again before the next file (the SDK's five minutes).
const RESIGN_MARGIN: Duration = Duration::from_secs(300);

/// What was downloaded.
#[derive(Debug, Clone)]
pub(crate) struct Fetched {
    /// `(relative path, bytes)` of each file, sorted.
    pub(crate) files: Vec<(String, u64)>,
    /// The external-weights checkpoint the files came from.
    pub(crate) source: TinkerPath,
}

impl Fetched {
    /// All bytes.
    pub(crate) fn total(&self) -> u64 {
        self.files.iter().map(|(_, n)| n).sum()
    }
}

/// Parses `path` and refuses the kinds that cannot be downloaded.
///
/// # Errors
/// [`Error::Usage`] for a string that is not a tinker path; [`Error::SamplerPath`].
pub(crate) fn downloadable(path: &str) -> Result<TinkerPath, Error> {
    let p = TinkerPath::parse(path).map_err(|e| Error::Usage(e.to_string()))?;
    if p.kind == CheckpointKind::Sampler {
        return Err(refusal(&p));
    }
    Ok(p)
}

/// Why a sampler checkpoint is not downloaded, naming the training checkpoint of its name.
fn refusal(p: &TinkerPath) -> Error {
    let state = TinkerPath { kind: CheckpointKind::State, ..p.clone() };
    Error::SamplerPath { path: p.to_string(), state: state.to_string() }
}

/// Downloads the files of `path` (external or training weights) into `dir`.
///
/// # Errors
/// [`Error::UnknownCheckpoint`] on a 404, [`Error::UrlExpired`], [`Error::BadDownload`] (unsafe
/// or missing files, sizes that disagree), and the service's other failures as
/// [`Error::Tinker`].
pub(crate) async fn fetch(session: &Session, path: &TinkerPath, dir: &Path) -> Result<Fetched, Error> {
    let client = session.client();
    match path.kind {
        CheckpointKind::External => files(client, path, dir, None).await,
        CheckpointKind::State => {
            let (export, size) = export_state(session, path).await?;
            let fetched = files(client, &export, dir, Some(TEMPORARY_TTL)).await;
            // Best effort, as the SDK's: the export expires within the hour anyway.
            if let Err(e) = client.call(&tinker::path::checkpoint(&export), Verb::Delete, "RestClient.delete_checkpoint_from_tinker_path").await {
                tracing::warn!("cannot delete the temporary export `{export}` ({e}); it expires in {TEMPORARY_TTL} s");
            }
            let fetched = fetched?;
            if let Some(n) = size.filter(|n| *n != fetched.total()) {
                return Err(Error::BadDownload { path: path.to_string(), reason: format!("the export reported {n} bytes and its files hold {}", fetched.total()) });
            }
            Ok(fetched)
        }
        CheckpointKind::Sampler => Err(refusal(path)),
    }
}

/// A training checkpoint's weights as a temporary external-weights checkpoint: its path and
/// size.
async fn export_state(session: &Session, path: &TinkerPath) -> Result<(TinkerPath, Option<u64>), Error> {
    let client = session.client();
    let model_seq = u64::from(session.next_model_seq());
    let metadata: serde_json::Map<String, serde_json::Value> = [("created_by".to_string(), serde_json::Value::from("rlx export"))].into_iter().collect();
    let load = wire::LoadWeightsRequest {
        model_id: None,
        seq_id: None,
        session_id: Some(session.id().to_string()),
        model_seq_id: Some(model_seq),
        base_model: None,
        user_metadata: Some(metadata),
        path: path.to_string(),
        optimizer: false,
        optimizer_config: None,
        weights_access_token: None,
        r#type: wire::literal::LoadWeights,
    };
    let submitted: wire::UntypedApiFuture = client.post_json(tinker::path::LOAD_WEIGHTS, &load, "ServiceClient.create_training_client_from_state").await.map_err(|e| unknown(path, e))?;
    let loaded: wire::LoadWeightsResponse = future::retrieve_json(client, &submitted.request_id, RequestType::LoadWeights).await?;
    let model_id = loaded.model_id.unwrap_or_else(|| tinker::model_id(session.id(), model_seq));
    let save = wire::SaveWeightsExternalRequest {
        model_id,
        path: TEMPORARY_NAME.into(),
        seq_id: Some(1),
        ttl_seconds: Some(TEMPORARY_TTL),
        age_encryption_recipients: None,
        r#type: wire::literal::SaveWeightsExternal,
    };
    let submitted: wire::UntypedApiFuture = client.post_json(tinker::path::SAVE_WEIGHTS_EXTERNAL, &save, "TrainingClient.save_weights_external").await?;
    let saved: wire::SaveWeightsExternalResponse = future::retrieve_json(client, &submitted.request_id, RequestType::SaveWeightsExternal).await?;
    let export = TinkerPath::parse(&saved.path).map_err(|e| Error::BadDownload { path: path.to_string(), reason: format!("`save_weights_external` answered a path that is not one: {e}") })?;
    Ok((export, saved.size_bytes))
}

/// A 404 is the user's unknown checkpoint; anything else stays the service's error.
fn unknown(path: &TinkerPath, e: TinkerError) -> Error {
    match e {
        TinkerError::Status { status: 404, body, .. } => Error::UnknownCheckpoint { path: path.to_string(), detail: body },
        e => Error::Tinker(e),
    }
}

/// Signed URLs for `path`'s files, and when they expire (`None`: a time rlx cannot read).
async fn sign(client: &Client, path: &TinkerPath, renew: Option<u64>) -> Result<(wire::ExternalWeightsUrlsResponse, Option<SystemTime>), Error> {
    let urls: wire::ExternalWeightsUrlsResponse = client.get_json(&tinker::path::external_weights_urls(path), "RestClient.get_external_weights_urls").await.map_err(|e| unknown(path, e))?;
    if let Some(ttl) = renew {
        let body = Body::json(&wire::CheckpointTtlRequest { ttl_seconds: Some(ttl) });
        client.call(&tinker::path::ttl(path), Verb::Put(&body), "RestClient.set_checkpoint_ttl_from_tinker_path").await?;
    }
    let expires = parse_time(&urls.expires);
    Ok((urls, expires))
}

/// RFC 3339 as services write it: `Z`, `+00:00` or no zone (UTC), fractions of a second or
/// none.
pub(crate) fn parse_time(s: &str) -> Option<SystemTime> {
    let s = s.trim();
    let utc = s.strip_suffix("+00:00").unwrap_or(s);
    humantime::parse_rfc3339_weak(utc).ok()
}

/// Every file of the external-weights checkpoint `path` into `dir`.
async fn files(client: &Client, path: &TinkerPath, dir: &Path, renew: Option<u64>) -> Result<Fetched, Error> {
    let (mut urls, mut expires) = sign(client, path, renew).await?;
    if urls.urls.is_empty() {
        return Err(Error::BadDownload { path: path.to_string(), reason: "the checkpoint has no files".into() });
    }
    let names: Vec<String> = urls.urls.keys().cloned().collect();
    for name in &names {
        safe(name).map_err(|reason| Error::BadDownload { path: path.to_string(), reason })?;
    }
    let mut out = Vec::with_capacity(names.len());
    // Signed since the last file was fetched: signing again would give the same URLs.
    let mut fresh = true;
    for name in names {
        if !fresh && expires.is_some_and(|t| SystemTime::now() + RESIGN_MARGIN >= t) {
            (urls, expires) = sign(client, path, renew).await?;
        }
        let dest = dir.join(&name);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(|source| Error::Io { action: "create", path: parent.to_path_buf(), source })?;
        }
        let url = urls.urls.get(&name).cloned().ok_or_else(|| Error::BadDownload { path: path.to_string(), reason: format!("signing again dropped `{name}`") })?;
        let got = match client.download(&url, &name, &dest).await {
            // A refused URL (expired, revoked) is signed again once.
            Err(TinkerError::Status { status: 400..=499, .. }) if !fresh => {
                (urls, expires) = sign(client, path, renew).await?;
                let url = urls.urls.get(&name).cloned().unwrap_or(url);
                client.download(&url, &name, &dest).await
            }
            r => r,
        };
        let n = got.map_err(|e| match e {
            TinkerError::Status { status: 400..=499, .. } if expires.is_some_and(|t| SystemTime::now() >= t) => Error::UrlExpired { file: name.clone(), expires: urls.expires.clone() },
            e => Error::Tinker(e),
        })?;
        tracing::debug!(file = %name, bytes = n, "downloaded");
        out.push((name, n));
        fresh = false;
    }
    Ok(Fetched { files: out, source: path.clone() })
}

/// A file path the service gave stays inside the download directory.
fn safe(name: &str) -> Result<(), String> {
    let p = Path::new(name);
    if name.is_empty() || !p.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(format!("unsafe file path `{name}` in the checkpoint"));
    }
    if name.ends_with(".age") {
        return Err(format!("`{name}` is age-encrypted; decrypt the checkpoint with `age -d` and export the directory"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_in_the_forms_services_write() {
        let t = parse_time("2026-01-02T03:04:05Z").unwrap();
        assert_eq!(parse_time("2026-01-02T03:04:05+00:00"), Some(t));
        assert_eq!(parse_time("2026-01-02T03:04:05.000Z"), Some(t));
        assert_eq!(parse_time("tomorrow"), None);
    }

    #[test]
    fn file_paths_stay_inside_and_sampler_paths_are_refused() {
        assert!(safe("adapter_model.safetensors").is_ok() && safe("sub/a.json").is_ok());
        for bad in ["../x", "/etc/passwd", "a/../../b", "", "w.safetensors.age"] {
            assert!(safe(bad).is_err(), "{bad}");
        }
        let e = downloadable("tinker://s:train:0/sampler_weights/000004").unwrap_err();
        assert!(matches!(&e, Error::SamplerPath { state, .. } if state == "tinker://s:train:0/weights/000004"), "{e:?}");
        assert!(matches!(downloadable("tinker://x/other/a"), Err(Error::Usage(_))));
        assert_eq!(downloadable("tinker://s:train:0/external_weights/hf").unwrap().kind, CheckpointKind::External);
    }
}
