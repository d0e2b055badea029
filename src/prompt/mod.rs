//! From problems to prompt tokens: prompt templates (`prompts/*.j2`), chat templates (the model's
//! own Jinja template, or a built-in renderer), and the tokenizer.
//!
//! - [`chat`]: messages → the exact text a chat model was trained on (HF-compatible Jinja
//!   rendering with minijinja, plus built-in renderers such as `qwen3_instruct`).
//! - [`tokenizer`]: text ↔ token ids with the model's `tokenizer.json`, stop tokens.
//! - [`model_files`]: tokenizer, chat template and special tokens from a model's files (HF
//!   directory or GGUF metadata, never the weights); [`model_files::load`] is the one loader.
//! - [`gguf`]: the GGUF side of that (the tokenizer rebuilt from `tokenizer.ggml.*`).
//! - [`limits`]: what one render may cost (instructions, output bytes).

pub mod chat;
pub(crate) mod gguf;
pub mod hermes;
pub mod limits;
pub mod model_files;
pub(crate) mod render;
pub mod sft;
pub(crate) mod tokenizer;

pub use chat::{ChatTemplate, Message};
pub use render::PromptTemplates;
pub(crate) use render::problem_context;
pub use tokenizer::Tokenizer;

/// Errors of prompt rendering and tokenization.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Jinja template failed to compile or render.
    #[error("{what}: {source}")]
    Template {
        /// Which template.
        what: String,
        /// The minijinja error (with line information).
        #[source]
        source: minijinja::Error,
    },
    /// A tokenizer file could not be loaded, or text could not be encoded.
    #[error("tokenizer {what}: {message}")]
    Tokenizer {
        /// What was being done (and on which file).
        what: String,
        /// The tokenizers crate's message.
        message: String,
    },
    /// A model file could not be read or has unexpected content.
    #[error("`{}`: {message}", path.display())]
    ModelFile {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A built-in renderer name that does not exist.
    #[error("unknown chat template `{0}`")]
    UnknownBuiltin(String),
}

impl Error {
    /// Templates and model files are the user's to fix; a tokenizer failing on text is rlx's.
    pub fn is_user_error(&self) -> bool {
        !matches!(self, Error::Tokenizer { .. })
    }
}
