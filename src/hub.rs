//! The Hugging Face Hub as rlx reaches it: where the cache is, whether the network may be used,
//! which endpoint and token to use, and the `hf-hub` client built from them.
//!
//! Two modules fetch from the Hub: [`crate::data::hf`] (datasets, `hf://` sources) and
//! [`crate::backend::model_source`] (models, `model.base: org/name`). They used to read the
//! environment each in its own way (one honoured `HF_TOKEN` only, the other also the token file;
//! one counted `HF_HUB_OFFLINE=0` as offline): both now take an [`Options`] from here.
//!
//! The variables are `huggingface_hub`'s, so a cache filled by Python tools is found:
//! - cache: `$HF_HUB_CACHE` (or the older `$HUGGINGFACE_HUB_CACHE`), else `$HF_HOME/hub`, else
//!   `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`;
//! - offline: `HF_HUB_OFFLINE` or `RLX_OFFLINE` (and, for datasets, `HF_DATASETS_OFFLINE`) set
//!   to a true value (`1`, `on`, `yes`, `true`, any case);
//! - endpoint: `HF_ENDPOINT` (default `https://huggingface.co`);
//! - token: `HF_TOKEN`, else the file `$HF_TOKEN_PATH`, else `$HF_HOME/token`.

use std::future::Future;
use std::path::PathBuf;

use hf_hub::api::tokio::{Api, ApiBuilder, ApiError};

/// Which kind of repository is fetched: datasets honour one more offline variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepoKind {
    /// A model repository (`models--owner--name` in the cache).
    Model,
    /// A dataset repository (`datasets--owner--name` in the cache).
    Dataset,
}

/// Where the Hub cache is and whether the network may be used; [`Options::from_env`] reads the
/// same variables as `huggingface_hub` (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The hub cache directory (the one holding `models--*` and `datasets--*`).
    pub cache_dir: PathBuf,
    /// Never use the network.
    pub offline: bool,
    /// Hub URL (`HF_ENDPOINT`); `None` for `https://huggingface.co`.
    pub endpoint: Option<String>,
    /// Access token (`HF_TOKEN`, else the `token` file next to the cache).
    pub token: Option<String>,
}

impl Options {
    /// Options from the process environment.
    pub fn from_env(kind: RepoKind) -> Options {
        Options::from_vars(kind, |k| std::env::var(k).ok())
    }

    /// Options from a variable lookup (tests pass a map instead of mutating the environment).
    pub fn from_vars(kind: RepoKind, var: impl Fn(&str) -> Option<String>) -> Options {
        let set = |k: &str| var(k).filter(|v| !v.is_empty());
        let hf_home = set("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
            let cache = set("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| set("HOME").map(PathBuf::from).unwrap_or_default().join(".cache"));
            cache.join("huggingface")
        });
        let cache_dir = set("HF_HUB_CACHE")
            .or_else(|| set("HUGGINGFACE_HUB_CACHE"))
            .map(PathBuf::from)
            .unwrap_or_else(|| hf_home.join("hub"));
        // huggingface_hub's `_is_true`: 1, ON, YES, TRUE in any case; anything else (`0`) is off.
        let truthy = |k: &str| set(k).is_some_and(|v| ["1", "on", "yes", "true"].contains(&v.trim().to_ascii_lowercase().as_str()));
        let offline = truthy("HF_HUB_OFFLINE") || truthy(crate::switches::OFFLINE.name) || (kind == RepoKind::Dataset && truthy("HF_DATASETS_OFFLINE"));
        let token = set("HF_TOKEN").or_else(|| {
            let file = set("HF_TOKEN_PATH").map(PathBuf::from).unwrap_or_else(|| hf_home.join("token"));
            std::fs::read_to_string(file).ok().map(|t| t.trim().to_owned()).filter(|t| !t.is_empty())
        });
        Options { cache_dir, offline, endpoint: set("HF_ENDPOINT"), token }
    }

    /// The `hf-hub` client for these options: their cache, token and endpoint, no progress bars
    /// (rlx draws its own).
    ///
    /// # Errors
    /// hf-hub's, when its HTTP client cannot be built.
    pub(crate) fn client(&self) -> Result<Api, ApiError> {
        let mut builder = ApiBuilder::new().with_cache_dir(self.cache_dir.clone()).with_progress(false).with_token(self.token.clone());
        if let Some(endpoint) = &self.endpoint {
            builder = builder.with_endpoint(endpoint.clone());
        }
        builder.build()
    }
}

/// Runs an async Hub request to completion from synchronous code.
///
/// hf-hub's client is async. A private current-thread runtime on a thread of its own works
/// whether or not the caller is already inside a tokio runtime (where `block_on` would panic), so
/// the loaders that call this stay plain functions.
///
/// # Errors
/// An I/O error when the thread or the runtime cannot be started, or when the request panicked.
pub(crate) fn block_on<T, F, Fut>(thread_name: &str, request: F) -> std::io::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T>,
{
    let handle = std::thread::Builder::new().name(thread_name.to_owned()).spawn(move || -> std::io::Result<T> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        Ok(rt.block_on(request()))
    })?;
    handle.join().unwrap_or_else(|_| Err(std::io::Error::other(format!("the `{thread_name}` thread panicked"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn environment_follows_huggingface_hub() {
        let o = Options::from_vars(RepoKind::Model, env(&[("HOME", "/home/u")]));
        assert_eq!(o.cache_dir, PathBuf::from("/home/u/.cache/huggingface/hub"));
        assert!(!o.offline);
        let o = Options::from_vars(RepoKind::Model, env(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "/x")]));
        assert_eq!(o.cache_dir, PathBuf::from("/x/huggingface/hub"));
        let o = Options::from_vars(RepoKind::Model, env(&[("HOME", "/home/u"), ("HF_HOME", "/hf"), ("HF_HUB_OFFLINE", "1")]));
        assert_eq!(o.cache_dir, PathBuf::from("/hf/hub"));
        assert!(o.offline);
        let o = Options::from_vars(RepoKind::Model, env(&[("HF_HOME", "/hf"), ("HF_HUB_CACHE", "/c"), ("HF_HUB_OFFLINE", "0")]));
        assert_eq!(o.cache_dir, PathBuf::from("/c"));
        assert!(!o.offline, "`0` is not true, for models as for datasets");
        assert!(Options::from_vars(RepoKind::Model, env(&[("RLX_OFFLINE", "yes")])).offline);
        assert!(Options::from_vars(RepoKind::Dataset, env(&[("RLX_OFFLINE", "ON")])).offline);
        // HF_DATASETS_OFFLINE is the `datasets` library's: it keeps models online.
        assert!(Options::from_vars(RepoKind::Dataset, env(&[("HF_DATASETS_OFFLINE", "True")])).offline);
        assert!(!Options::from_vars(RepoKind::Model, env(&[("HF_DATASETS_OFFLINE", "True")])).offline);
        let o = Options::from_vars(RepoKind::Model, env(&[("HF_ENDPOINT", "http://mirror"), ("HF_TOKEN", "hf_x")]));
        assert_eq!((o.endpoint.as_deref(), o.token.as_deref()), (Some("http://mirror"), Some("hf_x")));
    }

    #[test]
    fn the_token_file_is_read_when_hf_token_is_unset() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("token"), "hf_from_file\n").unwrap();
        let home = d.path().to_str().unwrap().to_owned();
        let o = Options::from_vars(RepoKind::Model, move |k| (k == "HF_HOME").then(|| home.clone()));
        assert_eq!(o.token.as_deref(), Some("hf_from_file"));
    }

    #[test]
    fn block_on_works_inside_a_runtime() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let v = rt.block_on(async { block_on("rlx-test", || async { 41 + 1 }).unwrap() });
        assert_eq!(v, 42);
    }
}
