//! `provenance.json`: enough to tell later exactly what produced a run.
//!
//! [`Provenance::of`] fills what the plan knows when the run directory is created; the engine
//! adds what it learns while setting up (the loaded data, prompt lengths, the sandbox's
//! protection) through [`super::RunDir::update_provenance`]. The optional fields are absent on
//! disk until then.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::plan::{Plan, sha256_hex};

/// Where a run came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// Format version of the run directory.
    pub schema_version: u32,
    /// rlx's version.
    pub rlx_version: String,
    /// The run id and the hash it ends with.
    pub run_id: String,
    /// Hash of the resolved spec.
    pub spec_hash: String,
    /// The spec file as given.
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
    /// Dataset files named by the spec, fingerprinted before loading.
    pub datasets: Vec<Dataset>,
    /// Model and tokenizer ids.
    pub model: ModelIds,
    /// The machine.
    pub host: Host,
    /// When the run directory was created.
    pub created_at: String,
    /// The problems the run trains and evaluates on, once loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Data>,
    /// First-turn prompt lengths over the training problems, once tokenized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<PromptTokens>,
    /// The isolation actually in force, as the grader reports it: the local sandbox's
    /// protection layers, or `{"kind": "fusion", "url": ...}`. Kept as the grader's JSON because
    /// the sandbox owns that shape and it differs between graders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<serde_json::Value>,
    /// Whether the run was a dry run (`schedule.dry_run`, `rlx run --dry-run`): rollouts,
    /// grades, rewards and advantages, no training and no checkpoints. Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// The value in force of each environment switch that changes results (`RLX_TRAIN_PACK`,
    /// ...: [`crate::switches`]), set or default. Absent in runs older than the record.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub switches: std::collections::BTreeMap<String, String>,
}

/// Git state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Git {
    /// HEAD commit.
    pub commit: String,
    /// Whether tracked files had uncommitted changes.
    pub dirty: bool,
}

/// A template the run uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Template {
    /// The key that names it (`prompt.user`).
    pub role: String,
    /// Absolute path.
    pub path: PathBuf,
    /// SHA-256 of its text, hex.
    pub sha256: String,
}

/// Which side of the data a source feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Split {
    /// `data.train`.
    Train,
    /// `data.eval`.
    Eval,
}

/// A dataset file's fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dataset {
    /// Train or eval.
    pub split: Split,
    /// Path or `hf://` URI.
    pub path: String,
    /// SHA-256 of a local file's bytes; `None` for remote sources (their revision is recorded
    /// in [`Provenance::data`] when they are fetched).
    pub sha256: Option<String>,
    /// Size of a local file.
    pub bytes: Option<u64>,
    /// The stage whose file it is (`stages.N.train`, `stages.N.eval`); `None` for `data:`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<usize>,
    /// The spec key that names a stage's file (`stages.0.train`, a `distill` stage's
    /// `stages.1.train.0.path`), the key `rlx compare` shows when two runs' files differ: a
    /// supervised stage names one file and a `distill` stage a list, so the stage number alone
    /// cannot say which. Absent for `data:` and in runs older than the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// Model identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    /// Host name.
    pub hostname: String,
    /// OS and architecture.
    pub os: String,
    /// Available parallelism.
    pub cores: usize,
}

/// The loaded problems.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Data {
    /// Training problems, after filters and the seeded shuffle.
    pub train: DataSet,
    /// Evaluation problems.
    pub eval: DataSet,
}

/// One side of the loaded data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataSet {
    /// Fingerprint of the problems in their final order: what the run trained (or evaluated) on.
    pub fingerprint: String,
    /// Problems kept.
    pub problems: usize,
    /// Each source's origin, filter statistics and fingerprint, as the data loader reports them
    /// (its `SourceSummary`); kept as JSON because the loader owns that shape.
    pub sources: Vec<serde_json::Value>,
}

/// Prompt lengths in tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptTokens {
    /// Shortest; `None` when there were no problems.
    pub min: Option<usize>,
    /// Mean.
    pub mean: f64,
    /// Longest; `None` when there were no problems.
    pub max: Option<usize>,
    /// Problems measured.
    pub problems: usize,
}

impl Provenance {
    /// The provenance of a run of `plan`, as known before it starts.
    pub(crate) fn of(plan: &Plan) -> Provenance {
        let spec = &plan.written.spec;
        let mut datasets = vec![];
        let fingerprint = |split, path: String, stage: Option<(usize, String)>| {
            let bytes = if path.starts_with("hf://") { None } else { std::fs::read(&path).ok() };
            let (stage, key) = stage.unzip();
            Dataset { split, sha256: bytes.as_deref().map(sha256_hex), bytes: bytes.as_ref().map(|b| b.len() as u64), path, stage, key }
        };
        for (split, sources) in [(Split::Train, &spec.data.train), (Split::Eval, &spec.data.eval)] {
            datasets.extend(sources.iter().map(|s| fingerprint(split, s.path.clone(), None)));
        }
        // A stage's rows (a supervised stage's transcripts, a `distill` stage's own problems)
        // are data the run trains on: two runs that differ only in them must not look alike.
        for (i, st) in plan.stages.iter().enumerate() {
            match &st.kind {
                crate::plan::StageKind::Sft { spec: sft, .. } => {
                    datasets.push(fingerprint(Split::Train, sft.train.display().to_string(), Some((i, format!("stages.{i}.train")))));
                    datasets.extend(sft.eval.iter().map(|e| fingerprint(Split::Eval, e.display().to_string(), Some((i, format!("stages.{i}.eval"))))));
                }
                crate::plan::StageKind::Distill { train: Some(sources), .. } => {
                    datasets.extend(sources.iter().enumerate().map(|(j, s)| fingerprint(Split::Train, s.path.clone(), Some((i, format!("stages.{i}.train.{j}.path"))))));
                }
                _ => {}
            }
        }
        Provenance {
            schema_version: super::SCHEMA_VERSION,
            rlx_version: env!("CARGO_PKG_VERSION").to_string(),
            run_id: plan.run_id.clone(),
            spec_hash: plan.hash.clone(),
            spec_path: plan.written.path.display().to_string(),
            spec_sha256: sha256_hex(plan.written.text.as_bytes()),
            overrides: plan.written.overrides.clone(),
            argv: std::env::args().collect(),
            git: plan.written.path.parent().and_then(git_state),
            templates: plan.written.templates.iter().map(|t| Template { role: t.role.clone(), path: t.path.clone(), sha256: t.sha256.clone() }).collect(),
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
            data: None,
            prompt_tokens: None,
            sandbox: None,
            dry_run: spec.schedule.dry_run,
            switches: crate::switches::recorded(),
        }
    }
}

fn git_state(dir: &Path) -> Option<Git> {
    let run = |args: &[&str]| Command::new("git").arg("-C").arg(dir).args(args).output().ok().filter(|o| o.status.success());
    let commit = String::from_utf8(run(&["rev-parse", "HEAD"])?.stdout).ok()?.trim().to_string();
    let dirty = run(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|o| !o.stdout.is_empty());
    Some(Git { commit, dirty })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A provenance.json as rlx wrote it before this type could be read, after the engine's
    /// read-modify-write of `data`, `prompt_tokens` and `sandbox` (in that order).
    fn old() -> serde_json::Value {
        json!({
            "schema_version": 1, "rlx_version": "0.1.0", "run_id": "quick-3f2a", "spec_hash": "3f2a",
            "spec_path": "spec.yaml", "spec_sha256": "ab", "overrides": ["optimizer.learning_rate=2e-5"],
            "argv": ["rlx", "run", "spec.yaml"], "git": null,
            "templates": [{"role": "prompt.user", "path": "/w/user.j2", "sha256": "cd"}],
            "datasets": [{"split": "train", "path": "/w/train.jsonl", "sha256": "ef", "bytes": 10}, {"split": "eval", "path": "hf://x/y", "sha256": null, "bytes": null}],
            "model": {"base": "tiny", "revision": null, "tokenizer": "tiny", "chat_template": "chatml"},
            "host": {"hostname": "h", "os": "linux-x86_64", "cores": 2},
            "created_at": "2025-01-01T00:00:00Z",
            "data": {
                "train": {"fingerprint": "f1", "problems": 6, "sources": [{"origin": {"path": "/w/train.jsonl"}, "stats": {"rows": 6}, "fingerprint": "f1"}]},
                "eval": {"fingerprint": "f2", "problems": 0, "sources": []},
            },
            "prompt_tokens": {"min": 10, "mean": 12.5, "max": 15, "problems": 6},
            "sandbox": {"user_namespace": true, "network_namespace": true, "notes": []},
        })
    }

    #[test]
    fn reads_what_earlier_versions_wrote_and_writes_it_back_unchanged() {
        let text = serde_json::to_string_pretty(&old()).unwrap();
        let p: Provenance = serde_json::from_str(&text).unwrap();
        assert_eq!(p.datasets[1].split, Split::Eval);
        assert_eq!(p.data.as_ref().unwrap().train.problems, 6);
        assert_eq!(p.prompt_tokens.as_ref().unwrap().max, Some(15));
        assert_eq!(p.sandbox.as_ref().unwrap()["network_namespace"], true);
        assert_eq!(serde_json::to_string_pretty(&p).unwrap(), text);
    }

    #[test]
    fn later_fields_are_absent_until_set() {
        let mut v = old();
        let obj = v.as_object_mut().unwrap();
        for k in ["data", "prompt_tokens", "sandbox"] {
            obj.remove(k);
        }
        let text = serde_json::to_string(&v).unwrap();
        let p: Provenance = serde_json::from_str(&text).unwrap();
        assert!(p.data.is_none() && p.prompt_tokens.is_none() && p.sandbox.is_none());
        assert_eq!(serde_json::to_string(&p).unwrap(), text);
    }
}
