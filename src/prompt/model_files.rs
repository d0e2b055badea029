//! What a model directory says about prompting: `tokenizer_config.json`'s chat template and
//! special tokens.

use std::path::Path;

use serde_json::Value;

use super::Error;
use super::chat::{ChatTemplate, SpecialTokens};

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
