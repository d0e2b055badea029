//! `rlx export` of a Tinker checkpoint: `tinker://RUN/weights/NAME`,
//! `tinker://RUN/external_weights/NAME`, or a run directory whose checkpoints are on Tinker.
//! The files are downloaded ([`super::download`]) into the export's staging directory, then:
//!
//! - `--format hf --adapter-only`: the download as it is (Tinker's external weights of a LoRA
//!   model are a PEFT adapter), plus the model card;
//! - `--format hf`, `--format gguf`: the adapter merged into the base model, which must be on
//!   this machine or fetchable (`--base`, else the run's `model.base`, else the adapter's
//!   `base_model_name_or_path`), written as a local checkpoint's merged weights are. A download
//!   that is a whole model (`config.json` and weights) is its own base.
//!
//! The network part is async; merging and writing run on a blocking thread.

use std::path::{Path, PathBuf};

use super::card::{self, Info};
use super::download::{self, Fetched};
use super::staging::Staging;
use super::error::Error;
use super::local::{check_dtype, list, write_weights};
use super::locate::Checkpoint;
use super::merge;
use super::types::{Dtype, Format, Report, Request};
use crate::backend::local::model::Tuning;
use crate::backend::tinker::http::Client;
use crate::backend::tinker::Session;
use crate::seam::ModelSource;
use crate::tinker::{self, wire};

/// The download's directory inside the staging directory (hidden: it never reaches the output
/// under its own name).
const DOWNLOAD: &str = ".tinker-download";

/// Exports the Tinker checkpoint `ck` (its `state` a `tinker://` path) as `req` asks, talking to
/// the service through `client`; `base` is `--base`.
///
/// # Errors
/// As [`super::export`], and the download's: a sampler path, an unknown checkpoint, an expired
/// URL, a base model that cannot be found, the service's failures.
pub(crate) async fn export(req: &Request, ck: Checkpoint, client: Client, base: Option<String>) -> Result<Report, Error> {
    check_dtype(req, req.dtype.unwrap_or(Dtype::F32))?;
    let path = download::downloadable(&ck.state.to_string_lossy())?;
    let stage = Staging::begin(&req.out)?;
    let dir = stage.path().join(DOWNLOAD);
    std::fs::create_dir(&dir).map_err(|source| Error::Io { action: "create", path: dir.clone(), source })?;
    let metadata = [("created_by".to_string(), serde_json::Value::from("rlx export"))].into_iter().collect();
    // Export needs `client/config` defaults only; a server without it (SkyRL) answers 404,
    // which the session takes as the defaults.
    let session = Session::create(client, metadata, &crate::backend::tinker::Server::Tinker.profile()).await?;
    let fetched = download::fetch(&session, &path, &dir).await;
    let named = match &fetched {
        Ok(_) => name_base(&session, &path, &dir).await,
        Err(_) => Ok(()),
    };
    let status = if fetched.is_ok() { wire::FinishStatus::Success } else { wire::FinishStatus::Errored };
    session.finish(status, None).await;
    let fetched = fetched?;
    named?;
    tracing::info!(files = fetched.files.len(), bytes = fetched.total(), from = %fetched.source, "downloaded");
    let req = req.clone();
    tokio::task::spawn_blocking(move || write(&req, ck, stage, &fetched, base.as_deref()))
        .await
        .map_err(|e| Error::Io { action: "export", path: PathBuf::from(DOWNLOAD), source: std::io::Error::other(e.to_string()) })?
}

/// An adapter whose config names no base model gets the one the service records for the
/// checkpoint (`weights_info`), as `tinker checkpoint push-hf` fills it in; if the service does
/// not say, the adapter stays as it is.
async fn name_base(session: &Session, path: &tinker::TinkerPath, dir: &Path) -> Result<(), Error> {
    let cfg_path = dir.join("adapter_config.json");
    let Ok(text) = std::fs::read_to_string(&cfg_path) else { return Ok(()) };
    let Ok(mut cfg) = serde_json::from_str::<serde_json::Value>(&text) else { return Ok(()) };
    if cfg["base_model_name_or_path"].is_string() {
        return Ok(());
    }
    let ask = wire::WeightsInfoRequest { tinker_path: path.to_string() };
    match session.client().post_json::<wire::WeightsInfoResponse>(tinker::path::WEIGHTS_INFO, &ask, "RestClient.get_weights_info_by_tinker_path").await {
        Ok(info) => {
            cfg["base_model_name_or_path"] = serde_json::Value::from(info.base_model);
            super::hf::write_json(&cfg_path, &cfg)
        }
        Err(e) => {
            tracing::debug!("no base model name for `{path}`: {e}");
            Ok(())
        }
    }
}

/// What the service's files are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// `adapter_config.json` + `adapter_model.safetensors`.
    Adapter,
    /// `config.json` + safetensors weights.
    Model,
}

fn layout(dir: &Path, path: &str) -> Result<Layout, Error> {
    if dir.join("adapter_config.json").is_file() && dir.join("adapter_model.safetensors").is_file() {
        return Ok(Layout::Adapter);
    }
    let has_weights = std::fs::read_dir(dir).into_iter().flatten().flatten().any(|e| e.file_name().to_string_lossy().ends_with(".safetensors"));
    if dir.join("config.json").is_file() && has_weights {
        return Ok(Layout::Model);
    }
    let reason = "neither a PEFT adapter (`adapter_config.json`, `adapter_model.safetensors`) nor a model (`config.json`, safetensors)".to_string();
    Err(Error::BadDownload { path: path.to_string(), reason })
}

/// Everything after the download, on a blocking thread.
fn write(req: &Request, ck: Checkpoint, stage: Staging, fetched: &Fetched, base: Option<&str>) -> Result<Report, Error> {
    let dir = stage.path().join(DOWNLOAD);
    let shown = ck.state.display().to_string();
    let kind = layout(&dir, &shown)?;
    let as_is = req.format == Format::Hf && (req.adapter_only || (kind == Layout::Model && req.dtype.is_none()));
    if as_is {
        let (tuning, base_name) = match kind {
            Layout::Adapter => (Tuning::Lora(merge::peft_config(&dir)?), adapter_base(&dir).unwrap_or_else(|| "unknown".into())),
            Layout::Model if req.adapter_only => return Err(Error::Usage(format!("`{shown}` is a whole model ({} files), not an adapter: export it without `--adapter-only`", fetched.files.len()))),
            Layout::Model => (Tuning::Full, "unknown".into()),
        };
        lift(&dir, stage.path())?;
        let info = Info::gather(&ck, &tuning, &base_name, req.format, None, req.adapter_only);
        card::write(stage.path(), &info, None)?;
    } else {
        let merged = match kind {
            Layout::Adapter => merge::from_peft(&locate_base(base, &ck, &dir)?, &dir)?,
            Layout::Model => merge::whole(&dir)?,
        };
        let dtype = req.dtype.unwrap_or(Dtype::F32);
        let info = Info::gather(&ck, &merged.tuning, &merged.base.display().to_string(), req.format, Some(dtype), false);
        write_weights(stage.path(), &merged, req.format, false, dtype, &info)?;
        std::fs::remove_dir_all(&dir).map_err(|source| Error::Io { action: "remove", path: dir.clone(), source })?;
        let base_path = (kind == Layout::Adapter).then_some(merged.base.as_path());
        card::write(stage.path(), &info, base_path)?;
    }
    let files = list(stage.path())?;
    let out = stage.commit()?;
    Ok(Report { checkpoint: ck, out, files })
}

/// Moves the download's files up into the output directory, then removes it.
fn lift(dir: &Path, to: &Path) -> Result<(), Error> {
    for e in std::fs::read_dir(dir).map_err(|source| Error::Io { action: "list", path: dir.to_path_buf(), source })?.flatten() {
        let target = to.join(e.file_name());
        std::fs::rename(e.path(), &target).map_err(|source| Error::Io { action: "move into", path: target, source })?;
    }
    std::fs::remove_dir(dir).map_err(|source| Error::Io { action: "remove", path: dir.to_path_buf(), source })
}

/// `base_model_name_or_path` of the adapter.
fn adapter_base(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("adapter_config.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["base_model_name_or_path"].as_str().map(str::to_string)
}

/// The base model's files: `--base`, else the run's `model.base`, else the adapter's
/// `base_model_name_or_path`; a path as it is, a Hugging Face id from the cache or the Hub.
fn locate_base(arg: Option<&str>, ck: &Checkpoint, dir: &Path) -> Result<PathBuf, Error> {
    let from_run = || ck.run.as_ref().and_then(|r| r.provenance().ok()).map(|p| p.model.base);
    let Some(name) = arg.map(str::to_string).or_else(from_run).or_else(|| adapter_base(dir)) else {
        return Err(Error::NoBase { name: "(unnamed)".into(), reason: "the adapter does not name its base model, and no run directory does".into() });
    };
    let fail = |reason: String| Error::NoBase { name: name.clone(), reason };
    let source = ModelSource::parse(&name, None).map_err(|e| fail(e.to_string()))?;
    crate::backend::model_source::locate(&source).map_err(|e| fail(crate::causes::causes(&e).join(": ")))
}
