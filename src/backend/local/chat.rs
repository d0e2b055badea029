//! Rendering a model's own chat template (from GGUF metadata or `tokenizer_config.json`).
//!
//! Deliberately minimal: enough to prompt a small instruct model in tests and benchmarks. The
//! general prompt renderer (byte-exact with HF, tool calls) belongs to the `prompt` module; this
//! uses the same minijinja settings HF uses (`trim_blocks`, `lstrip_blocks`, Python string
//! methods via `pycompat`, `raise_exception`) so the output matches `apply_chat_template`.

use crate::backend::{Error, Result};

/// One chat message.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

impl Message {
    /// A message with `role` and `content`.
    pub fn new(role: &str, content: &str) -> Self {
        Self { role: role.to_string(), content: content.to_string() }
    }
}

/// Render `messages` with `template`; `add_generation_prompt` appends the assistant header.
///
/// # Errors
/// [`Error::Template`] if the template does not compile or fails while rendering.
pub fn render(template: &str, messages: &[Message], add_generation_prompt: bool, bos_token: &str, eos_token: &str) -> Result<String> {
    let mut env = minijinja::Environment::new();
    env.set_syntax(
        minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| Error::Template(e.to_string()))?,
    );
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", |msg: String| -> std::result::Result<String, minijinja::Error> {
        Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
    });
    env.add_template("chat", template).map_err(|e| Error::Template(e.to_string()))?;
    let ctx = minijinja::context! {
        messages => minijinja::Value::from(minijinja::value::Serde(messages)),
        add_generation_prompt => add_generation_prompt,
        bos_token => bos_token,
        eos_token => eos_token,
    };
    env.get_template("chat").and_then(|t| t.render(ctx)).map_err(|e| Error::Template(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_chatml_template() {
        let t = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content.strip() }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
        let out = render(t, &[Message::new("user", " hi ")], true, "", "").unwrap();
        assert_eq!(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
        assert!(matches!(render("{% if %}", &[], true, "", ""), Err(Error::Template(_))));
    }
}
