//! `hf://owner/name[/config][:split]` dataset sources: which files of a Hugging Face dataset repo
//! hold the split, fetched into (or found in) the standard Hugging Face cache.
//!
//! Grammar: `owner` and `name` are the repo id; `config` (optional) is the subset directory
//! (DeepCoder-Preview: `taco`, `lcbv5`, ...); `split` defaults to `train`. Inside a snapshot a file
//! belongs to the split when its stem is the split or starts with `<split>-` (`train-00000-of-00002`)
//! or when one of its directories is named after the split (`default/train/0000.parquet`, the layout
//! of the auto-converted parquet branch); it belongs to the config when one of its directories is
//! the config (`taco/train-*.parquet`, `data/taco/...`). Parquet files win over JSONL over JSON when
//! a split has several encodings. Without a config, the split's files must all sit in one
//! directory; otherwise the URI is ambiguous and the error lists the configs.
//!
//! The cache, the network policy, the endpoint and the token are [`crate::hub`]'s (shared with
//! model downloads): the cache `huggingface_hub` and the `hf-hub` crate share holds
//! `datasets--<owner>--<name>/{refs/main,snapshots/<commit>/...,blobs/}`.
//!
//! Online, the repo's file list and commit come from the Hub API and missing files are downloaded by
//! `hf-hub` (0.5, its tokio client on a private runtime so callers need not be async). Offline
//! (`HF_HUB_OFFLINE`, `HF_DATASETS_OFFLINE` or `RLX_OFFLINE` true) nothing touches the network: the
//! snapshot `refs/main` points to is scanned instead. When the Hub cannot be reached (no HTTP
//! response at all) the cached snapshot is used too, as `huggingface_hub` does; HTTP errors such
//! as 401 (gated) or 404 are reported, since they mean the request itself was wrong.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The split used when the URI names none.
pub const DEFAULT_SPLIT: &str = "train";

/// Data file extensions, most preferred first.
const EXTENSIONS: [&str; 3] = ["parquet", "jsonl", "json"];

/// How long to wait for the Hub's file list before falling back to the cache.
const API_TIMEOUT: Duration = Duration::from_secs(30);

/// A parsed `hf://` URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uri {
    /// Repo owner (user or organisation).
    pub owner: String,
    /// Repo name.
    pub name: String,
    /// Subset directory, if named.
    pub config: Option<String>,
    /// Split (`train` when not named).
    pub split: String,
}

impl Uri {
    /// Parse `hf://owner/name[/config][:split]`.
    ///
    /// # Errors
    /// [`Error::BadUri`] saying which part is wrong.
    pub fn parse(uri: &str) -> Result<Uri, Error> {
        let bad = |reason: &str| Error::BadUri { uri: uri.to_owned(), reason: reason.to_owned() };
        let rest = uri.strip_prefix("hf://").ok_or_else(|| bad("does not start with `hf://`"))?;
        let (repo, split) = match rest.split_once(':') {
            Some((r, s)) => (r, Some(s)),
            None => (rest, None),
        };
        let parts: Vec<&str> = repo.split('/').collect();
        if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.is_empty()) {
            return Err(bad("expected `hf://owner/name`, `hf://owner/name/config` or `hf://owner/name/config:split`"));
        }
        let valid = |s: &str| s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) && !s.starts_with('.');
        if let Some(p) = parts.iter().find(|p| !valid(p)) {
            return Err(bad(&format!("`{p}` may only hold letters, digits, `-`, `_` and `.`")));
        }
        let split = match split {
            None => DEFAULT_SPLIT.to_owned(),
            Some("") => return Err(bad("empty split after `:`")),
            Some(s) if !valid(s) => return Err(bad(&format!("split `{s}` may only hold letters, digits, `-`, `_` and `.`"))),
            Some(s) => s.to_owned(),
        };
        Ok(Uri {
            owner: parts[0].to_owned(),
            name: parts[1].to_owned(),
            config: parts.get(2).map(|c| (*c).to_owned()),
            split,
        })
    }

    /// `owner/name`.
    pub fn repo_id(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }

    /// The repo's directory name in the cache.
    pub fn cache_folder(&self) -> String {
        format!("datasets--{}--{}", self.owner, self.name)
    }

    /// A stem for the ids of rows that have none: `name[/config]/split`.
    pub fn id_stem(&self) -> String {
        match &self.config {
            Some(c) => format!("{}/{c}/{}", self.name, self.split),
            None => format!("{}/{}", self.name, self.split),
        }
    }
}

impl std::fmt::Display for Uri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "hf://{}/{}", self.owner, self.name)?;
        if let Some(c) = &self.config {
            write!(f, "/{c}")?;
        }
        write!(f, ":{}", self.split)
    }
}

/// Where the cache is and whether the network may be used: the one [`crate::hub::Options`] that
/// models use too. Build it with `Options::from_env(RepoKind::Dataset)`, which also honours
/// `HF_DATASETS_OFFLINE`.
pub use crate::hub::{Options, RepoKind};

/// The files of one split, ready to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Local paths (inside the cache snapshot), in shard order.
    pub files: Vec<PathBuf>,
    /// The same files relative to the repo root.
    pub repo_files: Vec<String>,
    /// The commit they come from.
    pub revision: String,
    /// True when the cache was used without asking the Hub (offline, or the Hub unreachable).
    pub from_cache: bool,
}

/// Why an `hf://` source could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The URI does not follow the grammar.
    #[error("invalid dataset `{uri}`: {reason}")]
    BadUri {
        /// As written.
        uri: String,
        /// What is wrong.
        reason: String,
    },
    /// Offline and the cache lacks what is needed.
    #[error("`{uri}`: {missing} in the Hugging Face cache `{}`, and offline mode is on (`HF_HUB_OFFLINE`, `HF_DATASETS_OFFLINE` or `RLX_OFFLINE`) so it cannot be downloaded", cache.display())]
    Offline {
        /// The source.
        uri: String,
        /// The cache directory searched.
        cache: PathBuf,
        /// What is missing, e.g. "the dataset is not".
        missing: String,
    },
    /// The Hub gave no answer and the cache lacks what is needed.
    #[error("`{uri}`: cannot reach the Hugging Face Hub ({reason}), and {missing} in the cache `{}`", cache.display())]
    Unreachable {
        /// The source.
        uri: String,
        /// The cache directory searched.
        cache: PathBuf,
        /// What is missing.
        missing: String,
        /// The network error.
        reason: String,
    },
    /// The Hub answered with an error (repo not found, gated, ...), or a download failed.
    #[error("`{uri}`: the Hugging Face Hub refused {what}")]
    Api {
        /// The source.
        uri: String,
        /// The request.
        what: String,
        /// hf-hub's error.
        #[source]
        source: hf_hub::api::tokio::ApiError,
    },
    /// The repo snapshot has no files for the split (or config).
    #[error("`{uri}` (revision {revision}): {what}")]
    NoFiles {
        /// The source.
        uri: String,
        /// The commit searched.
        revision: String,
        /// What was looked for and what exists.
        what: String,
    },
    /// A snapshot entry whose blob is gone (an interrupted download or a pruned cache).
    #[error("`{uri}`: `{file}` is listed in the cached snapshot but its content is missing; delete `{}` and load again online", path.display())]
    Broken {
        /// The source.
        uri: String,
        /// The repo file.
        file: String,
        /// The dangling snapshot entry.
        path: PathBuf,
    },
    /// No thread or async runtime for the download could be started.
    #[error("`{uri}`: cannot start the download runtime")]
    Runtime {
        /// The source.
        uri: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Whether the user can fix it (exit code 2): a malformed URI, a dataset missing from the
    /// cache while offline, a split that does not exist, a broken cache entry, or the Hub
    /// refusing the request (4xx: not found, gated). An unreachable Hub, a Hub error (5xx) or a
    /// local failure to start the download is not the user's (exit code 3).
    pub fn is_user_error(&self) -> bool {
        match self {
            Error::BadUri { .. } | Error::Offline { .. } | Error::NoFiles { .. } | Error::Broken { .. } => true,
            Error::Api { source, .. } => {
                matches!(source, hf_hub::api::tokio::ApiError::RequestError(e) if e.status().is_some_and(|s| s.is_client_error()))
            }
            Error::Unreachable { .. } | Error::Runtime { .. } => false,
        }
    }
}

/// Find (offline, or as a fallback) or fetch (online) the files of `uri`'s split.
///
/// # Errors
/// See [`Error`]; every variant names the URI.
pub fn resolve(uri: &Uri, opts: &Options) -> Result<Resolved, Error> {
    if opts.offline {
        return from_cache(uri, &opts.cache_dir).map_err(|missing| match missing {
            CacheMiss::Missing(missing) => Error::Offline { uri: uri.to_string(), cache: opts.cache_dir.clone(), missing },
            CacheMiss::Other(e) => e,
        });
    }
    match online(uri, opts) {
        Ok(r) => Ok(r),
        Err(Online::Unreachable(reason)) => {
            tracing::warn!(%uri, %reason, "Hugging Face Hub unreachable; using the cached snapshot");
            from_cache(uri, &opts.cache_dir).map_err(|miss| match miss {
                CacheMiss::Missing(missing) => {
                    Error::Unreachable { uri: uri.to_string(), cache: opts.cache_dir.clone(), missing, reason }
                }
                CacheMiss::Other(e) => e,
            })
        }
        Err(Online::Failed(e)) => Err(e),
    }
}

/// A cache lookup that failed: either something is missing (worded to follow "`uri`: "), or a
/// definite error such as a broken snapshot or a missing split.
enum CacheMiss {
    Missing(String),
    Other(Error),
}

fn from_cache(uri: &Uri, cache: &Path) -> Result<Resolved, CacheMiss> {
    let repo = cache.join(uri.cache_folder());
    if !repo.is_dir() {
        return Err(CacheMiss::Missing("the dataset is not".into()));
    }
    let snapshots = repo.join("snapshots");
    let revision = match std::fs::read_to_string(repo.join("refs").join("main")) {
        Ok(r) => r.trim().to_owned(),
        // Without `refs/main`, a single snapshot is unambiguous; several are not.
        Err(_) => {
            let mut revs: Vec<String> = std::fs::read_dir(&snapshots)
                .map(|d| d.filter_map(Result::ok).filter_map(|e| e.file_name().to_str().map(str::to_owned)).collect())
                .unwrap_or_default();
            revs.sort();
            match revs.len() {
                1 => revs.remove(0),
                0 => return Err(CacheMiss::Missing("the dataset has no snapshot".into())),
                n => return Err(CacheMiss::Missing(format!("`refs/main` is missing (and {n} snapshots exist, so none is chosen)"))),
            }
        }
    };
    let root = snapshots.join(&revision);
    if !root.is_dir() {
        return Err(CacheMiss::Missing(format!("the snapshot `{revision}` that `refs/main` names is not")));
    }
    let mut listed = Vec::new();
    list_files(&root, "", &mut listed);
    let chosen = select(&listed, uri.config.as_deref(), &uri.split)
        .map_err(|what| CacheMiss::Other(Error::NoFiles { uri: uri.to_string(), revision: revision.clone(), what }))?;
    let mut files = Vec::with_capacity(chosen.len());
    for file in &chosen {
        let path = root.join(file);
        // `is_file` follows the snapshot's symlink to its blob.
        if !path.is_file() {
            return Err(CacheMiss::Other(Error::Broken { uri: uri.to_string(), file: file.clone(), path }));
        }
        files.push(path);
    }
    Ok(Resolved { files, repo_files: chosen, revision, from_cache: true })
}

/// Relative paths (with `/`) of every entry under `dir` that is a file or a symlink (a snapshot
/// entry whose blob may be missing), skipping hidden names.
fn list_files(dir: &Path, prefix: &str, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.filter_map(Result::ok) {
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else { continue };
        if name.starts_with('.') {
            continue;
        }
        let rel = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
        let Ok(kind) = entry.file_type() else { continue };
        // Snapshot directories in the HF cache may be symlinks to directories: followed too.
        if kind.is_dir() || (kind.is_symlink() && entry.path().is_dir()) {
            list_files(&entry.path(), &rel, out);
        } else {
            out.push(rel);
        }
    }
}

/// A data file's extension rank in [`EXTENSIONS`], or `None` for other files.
fn data_rank(path: &str) -> Option<usize> {
    let base = path.rsplit('/').next().unwrap_or(path);
    EXTENSIONS.iter().position(|e| base.len() > e.len() + 1 && base.ends_with(&format!(".{e}")))
}

fn stem(path: &str) -> &str {
    let base = path.rsplit('/').next().unwrap_or(path);
    base.split_once('.').map_or(base, |(s, _)| s)
}

fn dirs(path: &str) -> Vec<&str> {
    let mut parts: Vec<&str> = path.split('/').collect();
    parts.pop();
    parts
}

fn in_split(path: &str, split: &str) -> bool {
    let s = stem(path);
    s == split || s.strip_prefix(split).is_some_and(|rest| rest.starts_with('-')) || dirs(path).contains(&split)
}

/// The directory that identifies a file's config: its parent, minus a trailing split directory.
fn config_dir(path: &str, split: &str) -> String {
    let mut d = dirs(path);
    if d.last() == Some(&split) {
        d.pop();
    }
    d.join("/")
}

/// Choose the files of `split` (within `config`) among a snapshot's relative paths.
///
/// Returns them sorted (shard order), keeping only the most preferred extension present.
/// The error describes what was looked for and what the snapshot offers.
pub fn select(files: &[String], config: Option<&str>, split: &str) -> Result<Vec<String>, String> {
    let data: Vec<&String> = files.iter().filter(|f| data_rank(f).is_some()).collect();
    if data.is_empty() {
        return Err("the snapshot holds no .parquet, .jsonl or .json files".into());
    }
    let configs = || {
        let mut c: Vec<String> =
            data.iter().filter_map(|f| dirs(f).first().map(|d| format!("`{d}`"))).collect::<Vec<_>>();
        c.sort();
        c.dedup();
        if c.is_empty() { "none (all files are at the top level)".to_owned() } else { c.join(", ") }
    };
    let splits = |fs: &[&String]| {
        let mut s: Vec<String> = fs.iter().map(|f| format!("`{}`", stem(f).split('-').next().unwrap_or_default())).collect();
        s.sort();
        s.dedup();
        s.join(", ")
    };
    let mut candidates: Vec<&String> = match config {
        Some(c) => {
            let in_config: Vec<&String> = data.iter().copied().filter(|f| dirs(f).contains(&c)).collect();
            if in_config.is_empty() {
                return Err(format!("no config `{c}`; directories with data files: {}", configs()));
            }
            let hit: Vec<&String> = in_config.iter().copied().filter(|f| in_split(f, split)).collect();
            if hit.is_empty() {
                return Err(format!("config `{c}` has no split `{split}`; its files start with {}", splits(&in_config)));
            }
            hit
        }
        None => {
            let hit: Vec<&String> = data.iter().copied().filter(|f| in_split(f, split)).collect();
            if hit.is_empty() {
                return Err(format!("no split `{split}`; data files start with {}", splits(&data)));
            }
            let mut groups: Vec<String> = hit.iter().map(|f| config_dir(f, split)).collect();
            groups.sort();
            groups.dedup();
            if groups.len() > 1 {
                let named: Vec<String> = groups.iter().map(|g| format!("`{g}`")).collect();
                return Err(format!(
                    "split `{split}` exists in several directories ({}); name the config, e.g. `hf://owner/name/{}:{split}`",
                    named.join(", "),
                    groups[0].rsplit('/').next().unwrap_or_default()
                ));
            }
            hit
        }
    };
    let best = candidates.iter().filter_map(|f| data_rank(f)).min().unwrap_or(0);
    candidates.retain(|f| data_rank(f) == Some(best));
    let mut out: Vec<String> = candidates.into_iter().cloned().collect();
    out.sort();
    Ok(out)
}

/// Why the online path did not produce files.
enum Online {
    /// No HTTP response (DNS, connection, TLS, timeout): the cache may still serve.
    Unreachable(String),
    /// A definite failure.
    Failed(Error),
}

fn online(uri: &Uri, opts: &Options) -> Result<Resolved, Online> {
    let (uri2, opts2) = (uri.clone(), opts.clone());
    crate::hub::block_on("rlx-hf-download", move || async move { fetch(&uri2, &opts2).await })
        .unwrap_or_else(|source| Err(Online::Failed(Error::Runtime { uri: uri.to_string(), source })))
}

async fn fetch(uri: &Uri, opts: &Options) -> Result<Resolved, Online> {
    use hf_hub::api::tokio::ApiError;
    use hf_hub::{Repo, RepoType};

    let api_failure = |what: String, source: ApiError| -> Online {
        // No HTTP status means the request never got an answer; anything else is the Hub's verdict.
        let unanswered = matches!(&source, ApiError::RequestError(e) if e.status().is_none() && !e.is_decode());
        if unanswered { Online::Unreachable(source.to_string()) } else { Online::Failed(Error::Api { uri: uri.to_string(), what, source }) }
    };
    let api = opts.client().map_err(|e| api_failure("to build a client".into(), e))?;
    let repo = api.repo(Repo::with_revision(uri.repo_id(), RepoType::Dataset, "main".into()));
    let info = match tokio::time::timeout(API_TIMEOUT, repo.info()).await {
        Err(_) => return Err(Online::Unreachable(format!("no answer within {} s", API_TIMEOUT.as_secs()))),
        Ok(r) => r.map_err(|e| api_failure(format!("the file list of `{}`", uri.repo_id()), e))?,
    };
    let listed: Vec<String> = info.siblings.iter().map(|s| s.rfilename.clone()).collect();
    let chosen = select(&listed, uri.config.as_deref(), &uri.split).map_err(|what| {
        Online::Failed(Error::NoFiles { uri: uri.to_string(), revision: info.sha.clone(), what })
    })?;
    let snapshot = opts.cache_dir.join(uri.cache_folder()).join("snapshots").join(&info.sha);
    let mut files = Vec::with_capacity(chosen.len());
    for file in &chosen {
        let cached = snapshot.join(file);
        if cached.is_file() {
            files.push(cached);
            continue;
        }
        let path = repo.download(file).await.map_err(|e| api_failure(format!("the download of `{file}`"), e))?;
        files.push(path);
    }
    Ok(Resolved { files, repo_files: chosen, revision: info.sha, from_cache: false })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_grammar() {
        let u = Uri::parse("hf://agentica-org/DeepCoder-Preview-Dataset/taco:train").unwrap();
        assert_eq!(u.config.as_deref(), Some("taco"));
        assert_eq!(u.split, "train");
        assert_eq!(u.cache_folder(), "datasets--agentica-org--DeepCoder-Preview-Dataset");
        let u = Uri::parse("hf://openai/openai_humaneval:test").unwrap();
        assert_eq!((u.config, u.split.as_str()), (None, "test"));
        assert_eq!(Uri::parse("hf://a/b").unwrap().split, "train");
        assert_eq!(Uri::parse("hf://a/b/c").unwrap().to_string(), "hf://a/b/c:train");
        for bad in ["hf://a", "hf://a/b/c/d", "hf://a//c", "hf://a/b:", "a/b", "hf://a/b c", "hf://a/../x"] {
            assert!(matches!(Uri::parse(bad), Err(Error::BadUri { .. })), "{bad}");
        }
    }

    fn files(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn split_selection_by_layout() {
        let deepcoder = files(&[
            "README.md",
            ".gitattributes",
            "lcbv5/test-00000-of-00001.parquet",
            "lcbv5/train-00000-of-00001.parquet",
            "taco/train-00001-of-00002.parquet",
            "taco/train-00000-of-00002.parquet",
            "codeforces/test-00000-of-00001.parquet",
        ]);
        assert_eq!(
            select(&deepcoder, Some("taco"), "train").unwrap(),
            ["taco/train-00000-of-00002.parquet", "taco/train-00001-of-00002.parquet"]
        );
        let err = select(&deepcoder, None, "train").unwrap_err();
        assert!(err.contains("`lcbv5`, `taco`") && err.contains("name the config"), "{err}");
        // `test` is in two configs (lcbv5, codeforces): ambiguous as well.
        assert!(select(&deepcoder, None, "test").is_err());
        let err = select(&deepcoder, Some("apps"), "train").unwrap_err();
        assert!(err.contains("no config `apps`") && err.contains("`codeforces`, `lcbv5`, `taco`"), "{err}");
        let err = select(&deepcoder, Some("codeforces"), "train").unwrap_err();
        assert!(err.contains("no split `train`") && err.contains("`test`"), "{err}");

        let data_dir = files(&["data/train-00000-of-00001.parquet", "data/test-00000-of-00001.parquet", "data/test.jsonl"]);
        assert_eq!(select(&data_dir, None, "test").unwrap(), ["data/test-00000-of-00001.parquet"]);
        let converted = files(&["default/train/0000.parquet", "default/train/0001.parquet", "default/test/0000.parquet"]);
        assert_eq!(select(&converted, None, "train").unwrap(), ["default/train/0000.parquet", "default/train/0001.parquet"]);
        assert_eq!(select(&converted, Some("default"), "test").unwrap(), ["default/test/0000.parquet"]);
        let flat = files(&["train.jsonl", "training.jsonl", "test.jsonl"]);
        assert_eq!(select(&flat, None, "train").unwrap(), ["train.jsonl"]);
        assert!(select(&files(&["README.md"]), None, "train").unwrap_err().contains("no .parquet"));
    }
}
