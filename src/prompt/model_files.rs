//! What a model's files say about prompting, read without its weights: the tokenizer, the chat
//! template and the special tokens, from a Hugging Face directory (`tokenizer.json`,
//! `tokenizer_config.json`) or a GGUF file's metadata. [`load`] applies the spec's choices
//! (`model.tokenizer`, `model.chat_template`) on top: the one loader `rlx run`, `rlx render` and
//! the backends share, so they can never disagree on how a prompt is tokenized.

use std::path::Path;

use serde_json::Value;

use super::chat::{ChatTemplate, SpecialTokens};
use super::{Error, Tokenizer};
use super::chat::ChatTemplateChoice;

/// What prompting needs from a model, read without its weights.
#[derive(Debug, Clone, Default)]
pub struct PromptFiles {
    /// The tokenizer, if the source has one.
    pub tokenizer: Option<tokenizers::Tokenizer>,
    /// The Jinja chat template, if the source has one (the `default` one of a list).
    pub chat_template: Option<String>,
    /// Special tokens (BOS/EOS text for templates and stop tokens).
    pub special: SpecialTokens,
}

/// Reads the tokenizer, chat template and special tokens of a GGUF file, a Hugging Face
/// directory, or a lone `tokenizer.json`, without loading (or dequantising) any weights.
///
/// # Errors
/// Unreadable files, a tokenizer that does not load, a `tokenizer_config.json` that is not JSON.
pub fn read(path: &Path) -> Result<PromptFiles, Error> {
    if path.is_dir() {
        let tok_path = path.join("tokenizer.json");
        let tokenizer = if tok_path.exists() { Some(super::tokenizer::read_file(&tok_path)?) } else { None };
        let tc_path = path.join("tokenizer_config.json");
        let (chat_template, special) = if tc_path.exists() {
            let cfg = TokenizerConfig::from_file(&tc_path)?;
            (cfg.chat_template, cfg.special)
        } else {
            (None, SpecialTokens::default())
        };
        return Ok(PromptFiles { tokenizer, chat_template, special });
    }
    if path.extension().is_some_and(|e| e == "json") {
        return Ok(PromptFiles { tokenizer: Some(super::tokenizer::read_file(path)?), ..PromptFiles::default() });
    }
    let content = super::gguf::read_header(path)?;
    let tokens = super::gguf::tokens(&content.metadata, path)?;
    let tokenizer = super::gguf::tokenizer(&content.metadata, &tokens, path)?;
    let (chat_template, special) = super::gguf::chat_metadata(&content.metadata, &tokens);
    Ok(PromptFiles { tokenizer: Some(tokenizer), chat_template, special })
}

/// A model's tokenizer (stop tokens set) and chat template, as a spec chooses them.
#[derive(Debug)]
pub struct ModelPrompt {
    /// The tokenizer; its stop tokens are the EOS token and the usual end-of-turn tokens.
    pub tokenizer: Tokenizer,
    /// The chat template.
    pub chat: ChatTemplate,
}

/// Loads what prompting needs from the model at `model` (a located model file or directory),
/// with the tokenizer from `tokenizer` when the spec names one, and the chat template `choice`.
///
/// # Errors
/// Unreadable model files, no tokenizer, no chat template under `auto`, a template that does
/// not compile.
pub fn load(model: &Path, tokenizer: Option<&Path>, choice: &ChatTemplateChoice) -> Result<ModelPrompt, Error> {
    let files = read(model)?;
    let tokenizer = match (tokenizer, files.tokenizer) {
        (Some(t), _) => read(t)?.tokenizer.ok_or_else(|| Error::ModelFile { path: t.to_path_buf(), message: "has no `tokenizer.json`".into() })?,
        (None, Some(t)) => t,
        (None, None) => {
            return Err(Error::ModelFile { path: model.to_path_buf(), message: "has no tokenizer; set `model.tokenizer`".into() });
        }
    };
    let mut tokenizer = Tokenizer::new(tokenizer);
    let special = files.special;
    if let Some(eos) = &special.eos_token {
        let mut stops: Vec<&str> = vec![eos.as_str()];
        for extra in ["<|im_end|>", "<|endoftext|>", "<|eot_id|>"] {
            if tokenizer.token_id(extra).is_some() && extra != eos {
                stops.push(extra);
            }
        }
        tokenizer.set_stop_tokens(&stops);
    }
    let chat = match choice {
        ChatTemplateChoice::Auto => match files.chat_template {
            Some(src) => ChatTemplate::jinja(&src, special)?,
            None => return Err(Error::ModelFile { path: model.to_path_buf(), message: "has no chat template; set `model.chat_template`".into() }),
        },
        ChatTemplateChoice::Builtin(name) => ChatTemplate::builtin(name)?,
        ChatTemplateChoice::File(path) => {
            let src = std::fs::read_to_string(path).map_err(|e| Error::ModelFile { path: path.clone(), message: format!("cannot read the chat template: {e}") })?;
            ChatTemplate::jinja(&src, special)?
        }
    };
    Ok(ModelPrompt { tokenizer, chat })
}

/// The chat template and special tokens of an HF `tokenizer_config.json`.
#[derive(Debug, Clone)]
pub struct TokenizerConfig {
    /// The default chat template, if the file has one.
    pub chat_template: Option<String>,
    /// Special tokens.
    pub special: SpecialTokens,
}

impl TokenizerConfig {
    /// Reads `tokenizer_config.json`.
    ///
    /// # Errors
    /// [`Error::ModelFile`] when it cannot be read or is not JSON.
    pub fn from_file(path: &Path) -> Result<Self, Error> {
        let bad = |message: String| Error::ModelFile { path: path.to_path_buf(), message };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
        Self::from_json(&v).map_err(bad)
    }

    /// Reads the fields from parsed JSON.
    ///
    /// # Errors
    /// A message when `chat_template` has an unexpected shape.
    pub fn from_json(v: &Value) -> Result<Self, String> {
        // `chat_template` is a string, or a list of `{name, template}` with a `default` entry.
        let chat_template = match &v["chat_template"] {
            Value::String(s) => Some(s.clone()),
            Value::Array(items) => {
                let named = |n: &str| items.iter().find(|i| i["name"] == n).and_then(|i| i["template"].as_str()).map(str::to_string);
                Some(named("default").ok_or("`chat_template` is a list without a `default` entry")?)
            }
            Value::Null => None,
            other => return Err(format!("`chat_template` must be a string or a list, found {other}")),
        };
        // A special token is a string or an AddedToken object `{"content": ...}`.
        let tok = |k: &str| match &v[k] {
            Value::String(s) => Some(s.clone()),
            Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_string),
            _ => None,
        };
        Ok(TokenizerConfig {
            chat_template,
            special: SpecialTokens { bos_token: tok("bos_token"), eos_token: tok("eos_token"), pad_token: tok("pad_token"), unk_token: tok("unk_token") },
        })
    }

    /// The compiled chat template.
    ///
    /// # Errors
    /// When the file has none, or it does not compile.
    pub fn template(&self) -> Result<ChatTemplate, Error> {
        let src = self.chat_template.as_deref().ok_or_else(|| Error::UnknownBuiltin("auto (the tokenizer_config.json has no chat_template)".into()))?;
        ChatTemplate::jinja(src, self.special.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shapes_of_chat_template_and_tokens() {
        let c = TokenizerConfig::from_json(&json!({"chat_template": "x", "eos_token": {"content": "</s>"}, "bos_token": "<s>"})).unwrap();
        assert_eq!(c.chat_template.as_deref(), Some("x"));
        assert_eq!(c.special.eos_token.as_deref(), Some("</s>"));
        assert_eq!(c.special.bos_token.as_deref(), Some("<s>"));
        let c = TokenizerConfig::from_json(&json!({"chat_template": [{"name": "tool_use", "template": "t"}, {"name": "default", "template": "d"}]})).unwrap();
        assert_eq!(c.chat_template.as_deref(), Some("d"));
        assert!(TokenizerConfig::from_json(&json!({"chat_template": 3})).is_err());
    }
}
