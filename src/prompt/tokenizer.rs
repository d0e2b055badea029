//! Text ↔ token ids with a model's `tokenizer.json` (HF `tokenizers`, pure-Rust regex backend).

use std::path::Path;

use super::Error;

/// A model's tokenizer and its end-of-turn tokens.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    stop_ids: Vec<u32>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer").field("vocab", &self.inner.get_vocab_size(true)).field("stop_ids", &self.stop_ids).finish()
    }
}

/// Reads a `tokenizer.json` as the `tokenizers` crate's type (what the model loader keeps).
///
/// # Errors
/// [`Error::Tokenizer`] naming the file.
pub(crate) fn read_file(path: &Path) -> Result<tokenizers::Tokenizer, Error> {
    tokenizers::Tokenizer::from_file(path).map_err(|e| Error::Tokenizer { what: format!("cannot load `{}`", path.display()), message: e.to_string() })
}

impl Tokenizer {
    /// Loads `tokenizer.json`.
    ///
    /// # Errors
    /// [`Error::Tokenizer`] naming the file.
    pub fn from_file(path: &Path) -> Result<Self, Error> {
        Ok(Self::new(read_file(path)?))
    }

    /// Parses a `tokenizer.json` held in memory.
    ///
    /// # Errors
    /// [`Error::Tokenizer`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, Error> {
        let inner = tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| Error::Tokenizer { what: "cannot parse tokenizer.json".into(), message: e.to_string() })?;
        Ok(Self::new(inner))
    }

    /// Wraps a tokenizer; stop tokens default to the common end-of-turn markers it knows.
    pub fn new(inner: tokenizers::Tokenizer) -> Self {
        let stop_ids = ["<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>", "<|end_of_text|>"].iter().filter_map(|t| inner.token_to_id(t)).collect();
        Tokenizer { inner, stop_ids }
    }

    /// Sets the end-of-turn tokens (e.g. the `eos_token` of `tokenizer_config.json`).
    pub fn set_stop_tokens(&mut self, tokens: &[&str]) {
        self.stop_ids = tokens.iter().filter_map(|t| self.inner.token_to_id(t)).collect();
    }

    /// Token ids that end a completion.
    pub fn stop_ids(&self) -> &[u32] {
        &self.stop_ids
    }

    /// Encodes rendered chat text. Special-token markers in the text (`<|im_start|>`) become
    /// their ids; no BOS/EOS is added, since chat templates write those themselves (as
    /// `apply_chat_template(tokenize=True)` does).
    ///
    /// # Errors
    /// [`Error::Tokenizer`].
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, Error> {
        let enc = self.inner.encode(text, false).map_err(|e| Error::Tokenizer { what: "cannot encode".into(), message: e.to_string() })?;
        Ok(enc.get_ids().to_vec())
    }

    /// Decodes ids; `skip_special` drops control tokens such as `<|im_end|>`.
    ///
    /// # Errors
    /// [`Error::Tokenizer`].
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, Error> {
        self.inner.decode(ids, skip_special).map_err(|e| Error::Tokenizer { what: "cannot decode".into(), message: e.to_string() })
    }

    /// The id of a token string, if it is in the vocabulary.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}
