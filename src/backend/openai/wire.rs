//! What goes over the wire: request bodies for `/v1/completions` and `/v1/chat/completions`, and
//! the parsing of their replies in the dialects that servers speak.
//!
//! The OpenAI protocol leaves out what RL needs, so each server extends it differently:
//! - vLLM reports the sampled token ids when asked (`return_tokens_as_token_ids`, as
//!   `"token_id:123"` strings in the legacy `logprobs.tokens`) and takes `stop_token_ids`.
//! - llama.cpp's C++ `llama-server` reports ids in the chat-style `logprobs.content[].id`.
//! - llama-cpp-python's server reports token *strings* (legacy `logprobs.tokens`), which
//!   [`super::tokens`] maps back to ids, and defaults to `top_k` 40, `min_p` 0.05 and
//!   `repeat_penalty` 1.1, which must be switched off to sample the model's distribution.
//!
//! [`Dialect`] is learnt from `/v1/models` (`owned_by`), so the spec names no server type.

use serde_json::{Map, Value, json};

use crate::seam::{SamplingParams, StopReason};

/// Which server answers: decides the extension fields sent and how tokens come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// vLLM (`owned_by: vllm`).
    Vllm,
    /// llama.cpp's C++ server (`owned_by: llamacpp`).
    LlamaServer,
    /// llama-cpp-python's server (`owned_by: me`).
    LlamaCppPython,
    /// Any other: the standard fields only.
    Generic,
}

impl Dialect {
    /// The dialect of the server whose `/v1/models` listed `models` (id, owner), if it serves
    /// `model`; otherwise the list of what it serves.
    ///
    /// # Errors
    /// The served models, quoted, for the message.
    pub fn of(models: &[(String, String)], model: &str) -> Result<Dialect, String> {
        let Some((_, owner)) = models.iter().find(|(id, _)| id == model) else {
            let ids: Vec<String> = models.iter().map(|(id, _)| format!("`{id}`")).collect();
            return Err(if ids.is_empty() { "no model".into() } else { ids.join(", ") });
        };
        Ok(match owner.as_str() {
            "vllm" => Dialect::Vllm,
            "llamacpp" => Dialect::LlamaServer,
            "me" => Dialect::LlamaCppPython,
            _ => Dialect::Generic,
        })
    }

    fn is_llama_cpp(self) -> bool {
        matches!(self, Dialect::LlamaServer | Dialect::LlamaCppPython)
    }
}

/// The prompt of a `/v1/completions` request.
#[derive(Debug, Clone)]
pub enum Prompt<'a> {
    /// Token ids.
    Tokens(&'a [u32]),
    /// Text.
    Text(String),
}

/// Fields shared by both endpoints: sampling parameters, the seed, stop conditions, and the
/// dialect's switches that make the server sample the plain (tempered, nucleus) distribution.
fn common(model: &str, params: &SamplingParams, seed: Option<u64>, stop_texts: &[String], stop_ids: &[u32], dialect: Dialect) -> Map<String, Value> {
    let mut b = Map::new();
    b.insert("model".into(), json!(model));
    b.insert("max_tokens".into(), json!(params.max_tokens));
    b.insert("temperature".into(), json!(params.temperature));
    b.insert("top_p".into(), json!(params.top_p));
    b.insert("n".into(), json!(1));
    b.insert("stream".into(), json!(false));
    if let Some(s) = seed {
        b.insert("seed".into(), json!(s));
    }
    if !stop_texts.is_empty() {
        b.insert("stop".into(), json!(stop_texts));
    }
    // No stop token asked for means "run to `max_tokens`" (the seam's meaning); servers that
    // can be told not to stop at end-of-generation are told so.
    let ignore_eos = !params.stop.iter().any(|s| matches!(s, crate::seam::Stop::Token(_)));
    if ignore_eos && matches!(dialect, Dialect::Vllm | Dialect::LlamaServer) {
        b.insert("ignore_eos".into(), json!(true));
    }
    match dialect {
        Dialect::Vllm => {
            b.insert("top_k".into(), json!(params.top_k.map_or(-1, |k| k as i64)));
            b.insert("stop_token_ids".into(), json!(stop_ids));
            b.insert("skip_special_tokens".into(), json!(false));
        }
        d if d.is_llama_cpp() => {
            // llama.cpp reads top_k ≤ 0 as "off" (llama-cpp-python rejects negative values).
            b.insert("top_k".into(), json!(params.top_k.unwrap_or(0)));
            b.insert("min_p".into(), json!(0.0));
            b.insert("typical_p".into(), json!(1.0));
            b.insert("repeat_penalty".into(), json!(1.0));
            b.insert("frequency_penalty".into(), json!(0.0));
            b.insert("presence_penalty".into(), json!(0.0));
        }
        _ => {
            if let Some(k) = params.top_k {
                b.insert("top_k".into(), json!(k));
            }
        }
    }
    b
}

/// The body of one `/v1/completions` request for one completion.
pub fn completion_body(model: &str, prompt: Prompt<'_>, params: &SamplingParams, seed: Option<u64>, stop_texts: &[String], stop_ids: &[u32], dialect: Dialect) -> Value {
    let mut b = common(model, params, seed, stop_texts, stop_ids, dialect);
    b.insert(
        "prompt".into(),
        match prompt {
            Prompt::Tokens(t) => json!(t),
            Prompt::Text(t) => json!(t),
        },
    );
    b.insert("logprobs".into(), json!(1));
    match dialect {
        Dialect::Vllm => {
            b.insert("return_tokens_as_token_ids".into(), json!(true));
        }
        Dialect::LlamaServer => {
            b.insert("n_probs".into(), json!(1));
            b.insert("cache_prompt".into(), json!(true));
        }
        _ => {}
    }
    Value::Object(b)
}

/// The body of one `/v1/chat/completions` request for one completion; with `tools` (OpenAI
/// function schemas), the conversation's tool calls and results in the protocol's own fields.
pub fn chat_body(model: &str, messages: &[crate::prompt::Message], tools: &[Value], params: &SamplingParams, seed: Option<u64>, stop_texts: &[String], dialect: Dialect) -> Value {
    let mut b = common(model, params, seed, stop_texts, &[], dialect);
    // No logprobs: chat replies report token strings at best, which are not the ids a chat
    // template around them would give, and llama-cpp-python computes them in Python per token.
    if tools.is_empty() {
        b.insert("messages".into(), json!(messages));
    } else {
        b.insert("messages".into(), Value::Array(with_tool_calls(messages)));
        b.insert("tools".into(), json!(tools));
    }
    Value::Object(b)
}

/// The conversation with its tool turns as the protocol has them: an assistant turn's Hermes
/// `<tool_call>` blocks become `tool_calls` (ids `call_0`, `call_1`, … in the conversation's
/// order, arguments as a JSON string), and the results after it (`tool` messages, or the user
/// `<tool_response>` messages of a template without a tool role) become `tool` messages with the
/// matching `tool_call_id`, in order. A result with no call to answer (a malformed turn's error)
/// goes as a user message: a `tool` message without its call is refused by OpenAI's servers.
/// Sending the Hermes text as it is was the alternative; a served template that formats
/// `tool_calls` itself would then see prose where it expects calls.
fn with_tool_calls(messages: &[crate::prompt::Message]) -> Vec<Value> {
    let mut out = Vec::with_capacity(messages.len());
    let mut unanswered = std::collections::VecDeque::new();
    let mut next_id = 0;
    for m in messages {
        let response = match m.role.as_str() {
            "tool" => Some(m.content.as_str()),
            "user" => m.content.strip_prefix("<tool_response>\n").and_then(|c| c.strip_suffix("\n</tool_response>")),
            _ => None,
        };
        if let Some(result) = response {
            if let Some(id) = unanswered.pop_front() {
                out.push(json!({"role": "tool", "tool_call_id": id, "content": result}));
            } else {
                out.push(json!({"role": "user", "content": if m.role == "tool" { format!("<tool_response>\n{result}\n</tool_response>") } else { m.content.clone() }}));
            }
            continue;
        }
        unanswered.clear();
        match crate::prompt::hermes::parse(&m.content) {
            Ok((calls, content)) if m.role == "assistant" && !calls.is_empty() => {
                let tool_calls: Vec<Value> = calls
                    .into_iter()
                    .map(|c| {
                        let id = format!("call_{next_id}");
                        next_id += 1;
                        unanswered.push_back(id.clone());
                        json!({"id": id, "type": "function", "function": {"name": c.name, "arguments": c.arguments.to_string()}})
                    })
                    .collect();
                out.push(json!({"role": "assistant", "content": content, "tool_calls": tool_calls}));
            }
            _ => out.push(json!(m)),
        }
    }
    out
}

/// A chat reply's text: its content, then its `tool_calls` written as Hermes blocks the way
/// Qwen3's template writes them (a newline before each but a first one with no content before
/// it), so the environment reads them exactly as it reads sampled text.
fn reply_text(message: &Value) -> Result<String, String> {
    let content = message.get("content").and_then(Value::as_str);
    let calls = message.get("tool_calls").and_then(Value::as_array).filter(|c| !c.is_empty());
    let (mut text, Some(calls)) = (content.unwrap_or_default().to_owned(), calls) else {
        return content.map(str::to_owned).ok_or_else(|| "no `choices[0].message.content` text".into());
    };
    for (i, c) in calls.iter().enumerate() {
        let f = c.get("function").ok_or_else(|| format!("`tool_calls[{i}]` has no `function`"))?;
        let name = f.get("name").and_then(Value::as_str).ok_or_else(|| format!("`tool_calls[{i}].function` has no `name`"))?;
        // Arguments that are not JSON stay a string: the environment tells the model so.
        let arguments = match f.get("arguments") {
            Some(Value::String(s)) => serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone())),
            Some(v) => v.clone(),
            None => json!({}),
        };
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&crate::prompt::hermes::render(name, &arguments));
    }
    Ok(text)
}

/// The completion tokens as the server reports them.
#[derive(Debug, Clone, PartialEq)]
pub enum Reported {
    /// Token ids (vLLM, llama-server).
    Ids(Vec<u32>),
    /// Token strings (llama-cpp-python, OpenAI chat logprobs).
    Pieces(Vec<String>),
    /// No per-token report.
    None,
}

/// One parsed choice.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// The completion text (stop strings cut off).
    pub text: String,
    /// Why it ended.
    pub finish: StopReason,
    /// The tokens as reported.
    pub tokens: Reported,
    /// Log-probability per reported token (empty with [`Reported::None`]).
    pub logprobs: Vec<f32>,
    /// `usage.prompt_tokens`, when reported.
    pub prompt_tokens: Option<u64>,
    /// `usage.completion_tokens`, when reported.
    pub completion_tokens: Option<u64>,
}

/// Parses a `/v1/completions` (`chat: false`) or `/v1/chat/completions` reply with one choice.
///
/// # Errors
/// What is missing or inconsistent, for [`super::Error::Malformed`].
pub fn parse_reply(v: Value, chat: bool) -> Result<Choice, String> {
    let choice = v.get("choices").and_then(Value::as_array).and_then(|c| c.first()).ok_or("no `choices[0]`")?;
    let text = if chat {
        reply_text(choice.get("message").ok_or("no `choices[0].message`")?)?
    } else {
        choice.get("text").and_then(Value::as_str).ok_or("no `choices[0].text`")?.to_string()
    };
    let finish = match choice.get("finish_reason").and_then(Value::as_str) {
        // A turn that ends on tool calls stopped on its own.
        Some("stop" | "eos" | "stop_sequence" | "tool_calls" | "function_call") => StopReason::Stop,
        Some("length") => StopReason::Length,
        other => return Err(format!("`finish_reason` is {other:?}, expected `stop` or `length`")),
    };
    let (tokens, logprobs) = match choice.get("logprobs") {
        None | Some(Value::Null) => (Reported::None, vec![]),
        Some(lp) => parse_logprobs(lp)?,
    };
    let usage = |k: &str| v.get("usage").and_then(|u| u.get(k)).and_then(Value::as_u64);
    Ok(Choice { text, finish, tokens, logprobs, prompt_tokens: usage("prompt_tokens"), completion_tokens: usage("completion_tokens") })
}

fn logprob(v: &Value, at: usize) -> Result<f32, String> {
    let x = v.as_f64().ok_or_else(|| format!("log-probability {at} is {v}, not a number"))?;
    if !x.is_finite() || x > 1e-3 {
        return Err(format!("log-probability {at} is {x}"));
    }
    Ok(x as f32)
}

fn parse_logprobs(lp: &Value) -> Result<(Reported, Vec<f32>), String> {
    // Chat-style (OpenAI chat, llama-server): `content: [{token, logprob, id?}]`.
    if let Some(content) = lp.get("content") {
        let items = content.as_array().ok_or("`logprobs.content` is not a list")?;
        let mut ids = Vec::with_capacity(items.len());
        let mut pieces = Vec::with_capacity(items.len());
        let mut lps = Vec::with_capacity(items.len());
        for (i, it) in items.iter().enumerate() {
            lps.push(logprob(it.get("logprob").unwrap_or(&Value::Null), i)?);
            pieces.push(it.get("token").and_then(Value::as_str).ok_or_else(|| format!("`logprobs.content[{i}].token` is missing"))?.to_string());
            if let Some(id) = it.get("id").and_then(Value::as_u64) {
                ids.push(u32::try_from(id).map_err(|_| format!("token id {id} out of range"))?);
            }
        }
        let reported = if ids.len() == items.len() { Reported::Ids(ids) } else { Reported::Pieces(pieces) };
        return Ok((reported, lps));
    }
    // Legacy completions: parallel `tokens` and `token_logprobs`.
    let tokens = lp.get("tokens").and_then(Value::as_array).ok_or("`logprobs` has neither `content` nor `tokens`")?;
    let values = lp.get("token_logprobs").and_then(Value::as_array).ok_or("`logprobs.token_logprobs` is missing")?;
    if tokens.len() != values.len() {
        return Err(format!("{} tokens but {} log-probabilities", tokens.len(), values.len()));
    }
    let lps = values.iter().enumerate().map(|(i, v)| logprob(v, i)).collect::<Result<Vec<f32>, String>>()?;
    let pieces: Vec<String> = tokens.iter().enumerate().map(|(i, t)| t.as_str().map(str::to_string).ok_or_else(|| format!("`logprobs.tokens[{i}]` is not a string"))).collect::<Result<_, _>>()?;
    // vLLM with `return_tokens_as_token_ids`: every token is `token_id:N`.
    let ids: Option<Vec<u32>> = pieces.iter().map(|p| p.strip_prefix("token_id:").and_then(|n| n.parse().ok())).collect();
    match ids {
        Some(ids) if !pieces.is_empty() => Ok((Reported::Ids(ids), lps)),
        _ => Ok((Reported::Pieces(pieces), lps)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dialects_come_from_the_model_list() {
        let models = vec![("m".to_string(), "vllm".to_string()), ("l".to_string(), "llamacpp".to_string())];
        assert_eq!(Dialect::of(&models, "m"), Ok(Dialect::Vllm));
        assert_eq!(Dialect::of(&models, "l"), Ok(Dialect::LlamaServer));
        assert_eq!(Dialect::of(&models, "x"), Err("`m`, `l`".to_string()));
    }

    #[test]
    fn the_three_logprob_shapes_parse() {
        let vllm = json!({"choices": [{"text": "ab", "finish_reason": "stop", "logprobs": {"tokens": ["token_id:5", "token_id:7"], "token_logprobs": [-0.5, -1.0]}}], "usage": {"prompt_tokens": 3, "completion_tokens": 2}});
        let c = parse_reply(vllm, false).unwrap();
        assert_eq!((c.tokens, c.logprobs, c.prompt_tokens), (Reported::Ids(vec![5, 7]), vec![-0.5, -1.0], Some(3)));
        let server = json!({"choices": [{"text": "ab", "finish_reason": "length", "logprobs": {"content": [{"id": 9, "token": "a", "logprob": -0.1}]}}]});
        let c = parse_reply(server, false).unwrap();
        assert_eq!((c.tokens, c.finish), (Reported::Ids(vec![9]), StopReason::Length));
        let python = json!({"choices": [{"text": "ab", "finish_reason": "stop", "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-0.1, -0.2]}}]});
        assert_eq!(parse_reply(python, false).unwrap().tokens, Reported::Pieces(vec!["a".into(), "b".into()]));
    }

    #[test]
    fn inconsistent_replies_are_refused_with_a_reason() {
        let short = json!({"choices": [{"text": "ab", "finish_reason": "stop", "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-0.1]}}]});
        assert!(parse_reply(short, false).unwrap_err().contains("2 tokens but 1"));
        let positive = json!({"choices": [{"text": "a", "finish_reason": "stop", "logprobs": {"tokens": ["a"], "token_logprobs": [0.5]}}]});
        assert!(parse_reply(positive, false).is_err());
        assert!(parse_reply(json!({"choices": []}), false).is_err());
        assert!(parse_reply(json!({"choices": [{"text": "a", "finish_reason": "abort"}]}), false).unwrap_err().contains("abort"));
        assert!(parse_reply(json!({"choices": [{"text": "a", "finish_reason": "stop"}]}), true).unwrap_err().contains("message"));
    }

    #[test]
    fn tool_turns_go_as_tool_calls_and_tool_messages_and_come_back_as_hermes_text() {
        use crate::prompt::Message;
        let call = "Let me check.\n<tool_call>\n{\"name\": \"python\", \"arguments\": {\"code\":\"print(1)\"}}\n</tool_call>";
        let conversation = [
            Message::new("user", "add"),
            Message::new("assistant", call),
            Message::new("user", "<tool_response>\n1\n</tool_response>"),
            Message::new("assistant", "<tool_call>oops</tool_call>"),
            Message::new("tool", "error: not JSON"),
        ];
        let tools = [json!({"type": "function", "function": {"name": "python"}})];
        let body = chat_body("m", &conversation, &tools, &SamplingParams::default(), None, &[], Dialect::Generic);
        assert_eq!(body["tools"], json!(tools));
        assert_eq!(body["messages"], json!([
            {"role": "user", "content": "add"},
            {"role": "assistant", "content": "Let me check.", "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": "python", "arguments": "{\"code\":\"print(1)\"}"}}]},
            {"role": "tool", "tool_call_id": "call_0", "content": "1"},
            {"role": "assistant", "content": "<tool_call>oops</tool_call>"},
            {"role": "user", "content": "<tool_response>\nerror: not JSON\n</tool_response>"},
        ]));
        // Without tools the conversation goes as it is.
        assert_eq!(chat_body("m", &conversation[..2], &[], &SamplingParams::default(), None, &[], Dialect::Generic)["messages"][1]["content"], call);
        let reply = json!({"choices": [{"finish_reason": "tool_calls", "message": {"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"id": "x", "type": "function", "function": {"name": "python", "arguments": "{\"code\": \"print(1)\"}"}}]}}]});
        let c = parse_reply(reply, true).unwrap();
        assert_eq!((c.text.as_str(), c.finish), (call, StopReason::Stop));
        let bare = json!({"choices": [{"finish_reason": "tool_calls", "message": {"content": null, "tool_calls": [
            {"function": {"name": "f", "arguments": "{bad"}}, {"function": {"name": "g", "arguments": "{}"}}]}}]});
        assert_eq!(parse_reply(bare, true).unwrap().text, "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{bad\"}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>");
    }
}
