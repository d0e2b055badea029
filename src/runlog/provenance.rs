//! `provenance.json`: enough to tell later exactly what produced a run.

use std::path::Path;
use std::process::Command;

use serde::Serialize;

use crate::spec::Plan;
use crate::spec::plan::{Template, sha256_hex};

/// Where a run came from.
#[derive(Debug, Clone, Serialize)]
pub struct Provenance {
    /// Format version.
    pub schema_version: u32,
    /// rlx's version.
    pub rlx_version: &'static str,
    /// The run id and the hash it ends with.
    pub run_id: String,
    /// Hash of the resolved spec.
    pub spec_hash: String,
    /// The spec file and the SHA-256 of its text.
    pub spec_path: String,
    /// SHA-256 of the spec text as written.
    pub spec_sha256: String,
    /// Overrides applied, in order (aliases expanded).
    pub overrides: Vec<String>,
    /// The command line that started the run.
    pub argv: Vec<String>,
    /// Git state of the spec's repository, when it is in one.
    pub git: Option<Git>,
    /// Templates and their hashes.
    pub templates: Vec<Template>,
    /// Dataset fingerprints.
    pub datasets: Vec<Dataset>,
    /// Model and tokenizer ids.
    pub model: ModelIds,
    /// The machine.
    pub host: Host,
    /// When the run directory was created.
    pub created_at: String,
}

/// Git state.
#[derive(Debug, Clone, Serialize)]
pub struct Git {
    /// HEAD commit.
    pub commit: String,
    /// Whether tracked files had uncommitted changes.
    pub dirty: bool,
}

/// A dataset fingerprint.
#[derive(Debug, Clone, Serialize)]
pub struct Dataset {
    /// `train` or `eval`.
    pub split: &'static str,
    /// Path or `hf://` URI.
    pub path: String,
    /// SHA-256 of a local file's bytes; `None` for remote sources (their revision is recorded
    /// when they are fetched).
    pub sha256: Option<String>,
    /// Size of a local file.
    pub bytes: Option<u64>,
}

/// Model identity.
#[derive(Debug, Clone, Serialize)]
pub struct ModelIds {
    /// `model.base`.
    pub base: String,
    /// `model.revision`.
    pub revision: Option<String>,
    /// Tokenizer source.
    pub tokenizer: String,
    /// Chat template.
    pub chat_template: String,
}

/// The machine a run started on.
#[derive(Debug, Clone, Serialize)]
pub struct Host {
    /// Host name.
    pub hostname: String,
    /// OS and architecture.
    pub os: String,
    /// Available parallelism.
    pub cores: usize,
}

/// Builds the provenance record of a plan.
pub fn provenance(plan: &Plan) -> Provenance {
    let spec = &plan.spec;
    let mut datasets = vec![];
    for (split, sources) in [("train", &spec.data.train), ("eval", &spec.data.eval)] {
        for s in sources {
            let local = !s.path.starts_with("hf://");
            let bytes = if local { std::fs::read(&s.path).ok() } else { None };
            datasets.push(Dataset {
                split,
                path: s.path.clone(),
                sha256: bytes.as_deref().map(sha256_hex),
                bytes: bytes.as_ref().map(|b| b.len() as u64),
            });
        }
    }
    Provenance {
        schema_version: super::SCHEMA_VERSION,
        rlx_version: env!("CARGO_PKG_VERSION"),
        run_id: plan.run_id.clone(),
        spec_hash: plan.hash.clone(),
        spec_path: plan.spec_path.display().to_string(),
        spec_sha256: sha256_hex(plan.spec_text.as_bytes()),
        overrides: plan.overrides.clone(),
        argv: std::env::args().collect(),
        git: plan.spec_path.parent().and_then(git_state),
        templates: plan.templates.clone(),
        datasets,
        model: ModelIds {
            base: spec.model.base.clone(),
            revision: spec.model.revision.clone(),
            tokenizer: spec.model.tokenizer.clone().unwrap_or_else(|| spec.model.base.clone()),
            chat_template: spec.model.chat_template.clone(),
        },
        host: Host {
            hostname: std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default(),
            os: format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH),
            cores: std::thread::available_parallelism().map_or(1, usize::from),
        },
        created_at: super::now(),
    }
}

fn git_state(dir: &Path) -> Option<Git> {
    let run = |args: &[&str]| Command::new("git").arg("-C").arg(dir).args(args).output().ok().filter(|o| o.status.success());
    let commit = String::from_utf8(run(&["rev-parse", "HEAD"])?.stdout).ok()?.trim().to_string();
    let dirty = run(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|o| !o.stdout.is_empty());
    Some(Git { commit, dirty })
}
