//! The Qwen3/Hermes tool-call text format, `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`:
//! read from a turn's text and written back. Pure text ↔ JSON, with no knowledge of which tools
//! exist, so that both the engine (which checks calls against `rollout.tools`) and the
//! OpenAI-compatible backend (which turns calls into `tool_calls` and back) use one parser; it
//! lives here, below both layers, rather than in the engine, which the backend may not name.

use serde_json::{Value, json};

/// Opens a call.
pub const OPEN: &str = "<tool_call>";
/// Closes a call.
pub const CLOSE: &str = "</tool_call>";
const THINK_END: &str = "</think>";

/// One call as written: its name and arguments (a JSON object, or a string that was not JSON
/// when the model wrote the arguments as one).
#[derive(Debug, Clone, PartialEq)]
pub struct RawCall {
    /// The tool's name.
    pub name: String,
    /// Its arguments.
    pub arguments: Value,
}

/// The calls in `text`, in order, and the text around them (the turn's content without the
/// calls, trimmed). Reasoning before a `</think>` is not searched: a model thinking about a call
/// has not made one.
///
/// # Errors
/// Why a call could not be read (what the model is told): a block without its end, a body that
/// is not JSON, no `name`, no `arguments`, or `arguments` given as a string that is not JSON.
pub fn parse(text: &str) -> Result<(Vec<RawCall>, String), String> {
    let (think, text) = match text.rfind(THINK_END) {
        Some(i) => text.split_at(i + THINK_END.len()),
        None => ("", text),
    };
    let mut calls = vec![];
    let mut content = think.to_owned();
    let mut rest = text;
    while let Some(i) = rest.find(OPEN) {
        content.push_str(&rest[..i]);
        let body_start = &rest[i + OPEN.len()..];
        let Some(end) = body_start.find(CLOSE) else {
            return Err(format!("a `{OPEN}` without its `{CLOSE}`"));
        };
        calls.push(call(body_start[..end].trim())?);
        rest = &body_start[end + CLOSE.len()..];
    }
    content.push_str(rest);
    Ok((calls, content.trim().to_owned()))
}

/// One call's JSON body.
fn call(body: &str) -> Result<RawCall, String> {
    let v: Value = serde_json::from_str(body).map_err(|e| format!("the tool call is not JSON ({e})"))?;
    let name = v.get("name").and_then(Value::as_str).ok_or("the tool call has no `name` string")?;
    // Some models write the arguments as a JSON string.
    let arguments = match v.get("arguments") {
        Some(Value::String(s)) => serde_json::from_str(s).map_err(|e| format!("`arguments` is a string that is not JSON ({e})"))?,
        Some(a) => a.clone(),
        None => return Err("the tool call has no `arguments`".into()),
    };
    Ok(RawCall { name: name.to_owned(), arguments })
}

/// `name(arguments)` written as a call, the way Qwen3's template writes an assistant's
/// `tool_calls` (`name` first, so text rendered from an OpenAI reply reads as the model's own;
/// a JSON object would sort the keys).
pub fn render(name: &str, arguments: &Value) -> String {
    format!("{OPEN}\n{{\"name\": {}, \"arguments\": {arguments}}}\n{CLOSE}", json!(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_and_the_text_around_them_come_apart_and_render_back() {
        let text = "<think>a <tool_call>x</tool_call></think>Let me test.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"code\": \"1\"}}\n</tool_call>";
        let (calls, content) = parse(text).unwrap();
        assert_eq!(calls, vec![RawCall { name: "f".into(), arguments: json!({"code": "1"}) }]);
        assert_eq!(content, "<think>a <tool_call>x</tool_call></think>Let me test.");
        let again = render("f", &json!({"code": "1"}));
        assert_eq!(parse(&again).unwrap(), (calls, String::new()));
        assert_eq!(parse("no call").unwrap(), (vec![], "no call".into()));
        assert!(parse("<tool_call>{\"name\": 1}</tool_call>").unwrap_err().contains("`name`"));
    }
}
