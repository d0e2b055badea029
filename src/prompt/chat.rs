//! Chat templates: messages → the exact text a chat model expects.
//!
//! A model's own template (HF `tokenizer_config.json` `chat_template`, or GGUF
//! `tokenizer.chat_template`) is rendered the way `transformers.apply_chat_template` renders it:
//! Jinja with `trim_blocks` and `lstrip_blocks`, loop controls, `raise_exception`,
//! `strftime_now`, a `tojson` that matches Python's `json.dumps(ensure_ascii=False)` (minijinja's
//! own HTML-escapes and sorts keys, which changes tool prompts), Python string methods
//! (`.startswith`, `.split`, `.strip`, ...) through minijinja-contrib's pycompat, and the special
//! tokens (`bos_token`, `eos_token`, ...) in the context. HF's `{% generation %}` marker (used for
//! assistant masks) is not Jinja; it is removed before compiling, as it renders nothing.
//!
//! Built-in renderers produce the same text without a template file: `qwen3_instruct` (and its
//! alias `chatml`) is ChatML without think blocks, as Qwen3-Instruct-2507 and the tinker-cookbook
//! `Qwen3InstructRenderer` format conversations. `qwen3_5` is Qwen3.5 in thinking mode, as its
//! own template (`Qwen/Qwen3.5-4B` `tokenizer_config.json`) and the cookbook's `Qwen3_5Renderer`
//! render text conversations: contents trimmed, the generation prompt opening a `<think>` block,
//! an assistant turn after the last user message carrying its `<think>` block (an empty one when
//! it has none), and earlier assistant turns without their reasoning.

use std::path::PathBuf;

use minijinja::value::{Kwargs, Value};
use serde::{Deserialize, Serialize};

use super::Error;

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text.
    pub content: String,
}

impl Message {
    /// A message with a role.
    pub fn new(role: &str, content: impl Into<String>) -> Self {
        Message { role: role.to_string(), content: content.into() }
    }
}

/// Special tokens a template may refer to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SpecialTokens {
    /// `bos_token`.
    pub bos_token: Option<String>,
    /// `eos_token`.
    pub eos_token: Option<String>,
    /// `pad_token`.
    pub pad_token: Option<String>,
    /// `unk_token`.
    pub unk_token: Option<String>,
}

/// A way to turn messages into model text.
#[derive(Debug)]
pub enum ChatTemplate {
    /// A Jinja chat template (the model's own, or a user file).
    Jinja {
        /// Compiled environment holding the template `chat`.
        env: Box<minijinja::Environment<'static>>,
        /// Special tokens for the context.
        special: SpecialTokens,
    },
    /// ChatML without think blocks (Qwen3-Instruct-2507).
    Qwen3Instruct,
    /// Qwen3.5 in thinking mode (text only; no tools, no images).
    Qwen35Thinking,
}

/// Names of the built-in renderers.
pub const BUILTINS: &[&str] = &["qwen3_instruct", "chatml", "qwen3_5"];

impl ChatTemplate {
    /// A built-in renderer by name.
    ///
    /// # Errors
    /// [`Error::UnknownBuiltin`].
    pub fn builtin(name: &str) -> Result<Self, Error> {
        match name {
            "qwen3_instruct" | "chatml" => Ok(ChatTemplate::Qwen3Instruct),
            "qwen3_5" => Ok(ChatTemplate::Qwen35Thinking),
            _ => Err(Error::UnknownBuiltin(name.to_string())),
        }
    }

    /// What each completion submits for grading. A generation prompt that opens a `<think>` block
    /// (Qwen3.5's, in thinking mode) makes everything up to `</think>` reasoning, so a completion
    /// cut off before it submitted nothing (the cookbook's parser finds no answer there either);
    /// any other completion is graded as written ([`crate::sandbox::extract_code`] then reads
    /// what follows a `</think>`).
    pub(crate) fn submitted(&self, completions: &[String]) -> Vec<String> {
        let opens_think = self.render(&[Message::new("user", "x")], true).is_ok_and(|p| p.trim_end().ends_with("<think>"));
        completions.iter().map(|c| if opens_think && !c.contains("</think>") { String::new() } else { c.clone() }).collect()
    }

    /// Compiles a Jinja chat template.
    ///
    /// # Errors
    /// [`Error::Template`] with the line of a syntax error.
    pub fn jinja(source: &str, special: SpecialTokens) -> Result<Self, Error> {
        let mut env = hf_environment();
        let source = strip_generation_tags(source);
        env.add_template_owned("chat", source).map_err(|e| Error::Template { what: "chat template does not compile".into(), source: e })?;
        Ok(ChatTemplate::Jinja { env: Box::new(env), special })
    }

    /// Renders a conversation; with `add_generation_prompt` the text ends where the assistant's
    /// reply begins.
    ///
    /// # Errors
    /// [`Error::Template`] when the template raises or fails.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String, Error> {
        self.render_with_tools(messages, add_generation_prompt, None)
    }

    /// Whether the template reads a `tools` variable (Qwen3's and Hermes' list tool schemas from
    /// it). The built-in renderers have none.
    pub fn reads_tools(&self) -> bool {
        match self {
            ChatTemplate::Jinja { env, .. } => env.get_template("chat").is_ok_and(|t| t.undeclared_variables(false).contains("tools")),
            _ => false,
        }
    }

    /// Whether the template names the `tool` role (renders tool results its own way); one that
    /// does not would print an unknown role verbatim.
    pub fn knows_tool_role(&self) -> bool {
        match self {
            ChatTemplate::Jinja { env, .. } => env.get_template("chat").is_ok_and(|t| t.source().contains("'tool'") || t.source().contains("\"tool\"")),
            _ => false,
        }
    }

    /// [`Self::render`] with tool schemas for the template's `tools` variable (ignored by
    /// templates without one).
    ///
    /// # Errors
    /// [`Error::Template`] when the template raises or fails.
    pub fn render_with_tools(&self, messages: &[Message], add_generation_prompt: bool, tools: Option<&serde_json::Value>) -> Result<String, Error> {
        match self {
            ChatTemplate::Qwen3Instruct => {
                let mut out = String::new();
                for m in messages {
                    out.push_str("<|im_start|>");
                    out.push_str(&m.role);
                    out.push('\n');
                    out.push_str(&m.content);
                    out.push_str("<|im_end|>\n");
                }
                if add_generation_prompt {
                    out.push_str("<|im_start|>assistant\n");
                }
                Ok(out)
            }
            ChatTemplate::Qwen35Thinking => Ok(render_qwen3_5(messages, add_generation_prompt)),
            ChatTemplate::Jinja { env, special } => {
                let tmpl = env.get_template("chat").map_err(|e| Error::Template { what: "chat template".into(), source: e })?;
                let ctx = minijinja::context! {
                    messages => Value::from(minijinja::value::Serde(messages)),
                    add_generation_prompt => add_generation_prompt,
                    bos_token => special.bos_token.clone().unwrap_or_default(),
                    eos_token => special.eos_token.clone().unwrap_or_default(),
                    pad_token => special.pad_token.clone(),
                    unk_token => special.unk_token.clone(),
                    tools => tools.map(|t| Value::from(minijinja::value::Serde(t.clone()))),
                };
                tmpl.render(ctx).map_err(|e| {
                    let what = if e.kind() == minijinja::ErrorKind::OutOfFuel {
                        format!("the chat template ran {} instructions without finishing, the most one render may run", super::limits::FUEL)
                    } else {
                        "rendering the chat template".into()
                    };
                    Error::Template { what, source: e }
                })
            }
        }
    }
}

/// Qwen3.5's template for text turns (see the module docs). The sampled text of a thinking turn
/// starts after the prompt's `<think>\n`, so an assistant message may hold `reasoning</think>
/// answer` without the opening tag; it is restored, as the cookbook's renderer does.
fn render_qwen3_5(messages: &[Message], add_generation_prompt: bool) -> String {
    let last_user = messages.iter().rposition(|m| m.role == "user");
    let mut out = String::new();
    for (i, m) in messages.iter().enumerate() {
        let content = m.content.trim();
        out.push_str("<|im_start|>");
        out.push_str(&m.role);
        out.push('\n');
        if m.role != "assistant" {
            out.push_str(content);
        } else {
            let (reasoning, answer) = match content.rfind("</think>") {
                Some(end) => {
                    let thought = content[..end].trim_start().strip_prefix("<think>").unwrap_or(&content[..end]);
                    (thought.trim(), content[end + "</think>".len()..].trim_start())
                }
                None => ("", content),
            };
            if last_user.is_none_or(|u| i > u) {
                // The turns of the current query keep their reasoning, empty or not.
                out.push_str("<think>\n");
                out.push_str(reasoning);
                out.push_str("\n</think>\n\n");
            }
            out.push_str(answer);
        }
        out.push_str("<|im_end|>\n");
    }
    if add_generation_prompt {
        out.push_str("<|im_start|>assistant\n<think>\n");
    }
    out
}

/// The Jinja environment of HF chat templates (see the module docs).
pub fn hf_environment() -> minijinja::Environment<'static> {
    let mut env = minijinja::Environment::new();
    // Every render, prompt and chat template alike, stops at the same instruction budget.
    env.set_fuel(Some(super::limits::FUEL));
    let syntax = minijinja::syntax::SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).build();
    env.set_syntax(syntax.expect("default delimiters are valid"));
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", |msg: String| -> Result<String, minijinja::Error> {
        Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
    });
    env.add_function("strftime_now", |fmt: String| -> String {
        // Only what chat templates use (dates in system prompts): %Y %m %d %B %b %H %M.
        strftime_now(&fmt)
    });
    env.add_filter("tojson", py_tojson);
    env
}

fn strip_generation_tags(src: &str) -> String {
    let re_like = ["{% generation %}", "{%- generation %}", "{% generation -%}", "{%- generation -%}", "{% endgeneration %}", "{%- endgeneration %}", "{% endgeneration -%}", "{%- endgeneration -%}"];
    let mut s = src.to_string();
    for tag in re_like {
        s = s.replace(tag, "");
    }
    s
}

/// Python's `json.dumps(x, ensure_ascii=False)` formatting: `", "` and `": "` separators, no
/// HTML escaping, keys in insertion order; `indent=N` as Python does it.
struct PyFormatter {
    indent: Option<usize>,
    level: usize,
    has_value: bool,
}

impl PyFormatter {
    fn newline<W: ?Sized + std::io::Write>(&self, w: &mut W) -> std::io::Result<()> {
        if let Some(n) = self.indent {
            w.write_all(b"\n")?;
            w.write_all(" ".repeat(n * self.level).as_bytes())?;
        }
        Ok(())
    }
}

impl serde_json::ser::Formatter for PyFormatter {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.level += 1;
        self.has_value = false;
        w.write_all(b"[")
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.level -= 1;
        if self.has_value {
            self.newline(w)?;
        }
        self.has_value = true;
        w.write_all(b"]")
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if !first {
            w.write_all(if self.indent.is_some() { b"," } else { b", " })?;
        }
        self.newline(w)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.level += 1;
        self.has_value = false;
        w.write_all(b"{")
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.level -= 1;
        if self.has_value {
            self.newline(w)?;
        }
        self.has_value = true;
        w.write_all(b"}")
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if !first {
            w.write_all(if self.indent.is_some() { b"," } else { b", " })?;
        }
        self.newline(w)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

fn py_tojson(v: Value, kwargs: Kwargs) -> Result<Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, PyFormatter { indent, level: 0, has_value: false });
    serde::Serialize::serialize(&v, &mut ser).map_err(|e| minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, e.to_string()))?;
    Ok(Value::from_safe_string(String::from_utf8(out).expect("serde_json writes UTF-8")))
}

fn strftime_now(fmt: &str) -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let (y, m, d) = crate::calendar::civil_from_days(days);
    let (hh, mm) = ((secs % 86_400) / 3600, (secs % 3600) / 60);
    const MONTHS: [&str; 12] = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"];
    let month = MONTHS[(m - 1) as usize];
    fmt.replace("%Y", &y.to_string())
        .replace("%m", &format!("{m:02}"))
        .replace("%d", &format!("{d:02}"))
        .replace("%B", month)
        .replace("%b", &month[..3])
        .replace("%H", &format!("{hh:02}"))
        .replace("%M", &format!("{mm:02}"))
}

/// Which chat template renders conversations (`model.chat_template`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatTemplateChoice {
    /// The model's own: `tokenizer_config.json`'s `chat_template` (its `default` entry when it
    /// is a list) or GGUF's `tokenizer.chat_template`.
    Auto,
    /// A renderer built into rlx, by name (one of [`BUILTINS`]).
    Builtin(String),
    /// A Jinja file (absolute after checking).
    File(PathBuf),
}

impl std::fmt::Display for ChatTemplateChoice {
    /// As `model.chat_template` says it (a file by its absolute path).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChatTemplateChoice::Auto => f.write_str("auto"),
            ChatTemplateChoice::Builtin(name) => f.write_str(name),
            ChatTemplateChoice::File(path) => write!(f, "{}", path.display()),
        }
    }
}

impl ChatTemplateChoice {
    /// Reads `model.chat_template` as the checks accepted it.
    pub fn parse(text: &str) -> Self {
        match text {
            "auto" => ChatTemplateChoice::Auto,
            b if BUILTINS.contains(&b) => ChatTemplateChoice::Builtin(b.to_string()),
            path => ChatTemplateChoice::File(PathBuf::from(path)),
        }
    }
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qwen3_instruct_is_chatml() {
        let t = ChatTemplate::builtin("qwen3_instruct").unwrap();
        let s = t.render(&[Message::new("system", "S"), Message::new("user", "hi")], true).unwrap();
        assert_eq!(s, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
        assert!(ChatTemplate::builtin("llama9").is_err());
    }

    #[test]
    fn qwen3_5_opens_a_think_block_and_drops_old_reasoning() {
        let t = ChatTemplate::builtin("qwen3_5").unwrap();
        let s = t.render(&[Message::new("system", " S \n"), Message::new("user", "\nhi ")], true).unwrap();
        assert_eq!(s, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n");
        // A sampled turn (its `<think>` was in the prompt) followed by feedback: the reasoning of
        // a turn before the last user message is not shown again.
        let turns = [
            Message::new("user", "solve"),
            Message::new("assistant", "let me see\n</think>\n\n```python\nprint(1)\n```"),
            Message::new("user", "wrong answer"),
        ];
        let s = t.render(&turns, true).unwrap();
        assert_eq!(
            s,
            "<|im_start|>user\nsolve<|im_end|>\n<|im_start|>assistant\n```python\nprint(1)\n```<|im_end|>\n\
             <|im_start|>user\nwrong answer<|im_end|>\n<|im_start|>assistant\n<think>\n"
        );
        // After the last user message a turn keeps its reasoning, and one without any gets an
        // empty block, as Qwen3.5's template writes it.
        let s = t.render(&turns[..2], false).unwrap();
        assert_eq!(s, "<|im_start|>user\nsolve<|im_end|>\n<|im_start|>assistant\n<think>\nlet me see\n</think>\n\n```python\nprint(1)\n```<|im_end|>\n");
        let s = t.render(&[Message::new("user", "q"), Message::new("assistant", "42")], false).unwrap();
        assert!(s.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n42<|im_end|>\n"), "{s}");
    }

    #[test]
    fn a_thinking_prompt_makes_an_unclosed_completion_submit_nothing() {
        let done = "plan\n</think>\n\n```python\nprint(1)\n```".to_owned();
        let cut = "plan\n```python\nprint(0)\n```".to_owned();
        let both = [done.clone(), cut.clone()];
        assert_eq!(ChatTemplate::builtin("qwen3_5").unwrap().submitted(&both), [done.clone(), String::new()]);
        // A template that does not open a think block (Qwen3-Instruct-2507): graded as written.
        assert_eq!(ChatTemplate::builtin("qwen3_instruct").unwrap().submitted(&both), both);
        // The model's own Jinja template is judged by what it renders.
        let jinja = "{% for m in messages %}{{ m.content }}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}";
        assert_eq!(ChatTemplate::jinja(jinja, SpecialTokens::default()).unwrap().submitted(&both), [done, String::new()]);
    }

    #[test]
    fn tojson_matches_python() {
        let t = ChatTemplate::jinja("{{ x | tojson }}|{{ x | tojson(indent=2) }}", SpecialTokens::default()).unwrap();
        let ChatTemplate::Jinja { env, .. } = &t else { panic!() };
        let out = env.get_template("chat").unwrap().render(minijinja::context! { x => Value::from(minijinja::value::Serde(serde_json::json!({"b": [1, "<a&b>"], "a": {"c": null}}))) }).unwrap();
        assert_eq!(out, "{\"b\": [1, \"<a&b>\"], \"a\": {\"c\": null}}|{\n  \"b\": [\n    1,\n    \"<a&b>\"\n  ],\n  \"a\": {\n    \"c\": null\n  }\n}");
    }

    #[test]
    fn raise_exception_and_python_methods() {
        let t = ChatTemplate::jinja(
            "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}{{ messages[0].content.strip().upper() }}",
            SpecialTokens::default(),
        )
        .unwrap();
        assert_eq!(t.render(&[Message::new("user", " hi ")], false).unwrap(), "HI");
        let err = t.render(&[Message::new("system", "x")], false).unwrap_err();
        assert!(format!("{err:?}").contains("first must be user"));
    }
}

#[cfg(test)]
mod choice_tests {
    use super::*;

    #[test]
    fn chat_template_choices() {
        assert_eq!(ChatTemplateChoice::parse("auto"), ChatTemplateChoice::Auto);
        assert_eq!(ChatTemplateChoice::parse("chatml"), ChatTemplateChoice::Builtin("chatml".into()));
        assert_eq!(ChatTemplateChoice::parse("/t/x.j2"), ChatTemplateChoice::File("/t/x.j2".into()));
    }
}
