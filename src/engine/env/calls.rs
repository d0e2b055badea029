//! Tool calls in sampled text: the Qwen3/Hermes format, `<tool_call>{"name": ..., "arguments":
//! {...}}</tool_call>`, parsed from what the model wrote (never from a re-rendering of it).
//!
//! Templates whose `tools` variable lists the schemas (Qwen3's) ask for this format themselves;
//! for templates without one (SmolLM2's ChatML) [`declare`] writes the same format into the
//! system message, so one parser serves both.

use serde_json::{Value, json};

use crate::prompt::hermes;
use crate::spec::types::Tool;

/// One parsed tool call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Call {
    /// The tool.
    pub tool: Tool,
    /// Its arguments, as written.
    pub arguments: Value,
}

impl Call {
    /// The one string argument its tool takes ([`Tool::argument`]): `check_solution`'s and
    /// `python`'s code, `bash`'s command.
    pub(crate) fn code(&self) -> &str {
        self.arguments.get(self.tool.argument()).and_then(Value::as_str).unwrap_or_default()
    }
}

/// What a turn's text is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Parsed {
    /// No tool call: the final answer.
    Answer,
    /// Well-formed calls, in order.
    Calls(Vec<Call>),
    /// A call that could not be read, and why (what the model is told).
    Malformed(String),
}

/// Parses a turn (the format's reading is [`hermes::parse`]; this checks the calls against the
/// enabled tools).
pub(crate) fn parse(text: &str, tools: &[Tool]) -> Parsed {
    let raw = match hermes::parse(text) {
        Ok((raw, _)) => raw,
        Err(why) => return Parsed::Malformed(why),
    };
    let mut calls = Vec::with_capacity(raw.len());
    for c in raw {
        match call(c, tools) {
            Ok(c) => calls.push(c),
            Err(why) => return Parsed::Malformed(why),
        }
    }
    if calls.is_empty() { Parsed::Answer } else { Parsed::Calls(calls) }
}

/// One call, checked: an enabled tool, and the one string argument it takes.
fn call(raw: hermes::RawCall, tools: &[Tool]) -> Result<Call, String> {
    let name = raw.name.as_str();
    let tool = tools.iter().copied().find(|t| t.name() == name).ok_or_else(|| {
        let known: Vec<&str> = tools.iter().map(|t| t.name()).collect();
        format!("no tool is named `{name}` (tools: {})", known.join(", "))
    })?;
    let arg = tool.argument();
    if !raw.arguments.get(arg).is_some_and(Value::is_string) {
        return Err(format!("`{name}` takes `{{\"{arg}\": \"...\"}}`: a `{arg}` string is missing"));
    }
    Ok(Call { tool, arguments: raw.arguments })
}

/// A tool's schema, in the OpenAI function format chat templates' `tools` variable takes.
pub(crate) fn schema(tool: Tool) -> Value {
    let description = match tool {
        Tool::CheckSolution => "Runs a complete solution against the problem's public tests and returns the verdict and the first failing test.",
        Tool::Python => "Runs a Python snippet and returns its stdout and stderr.",
        Tool::Bash => "Runs a shell command in your own container and returns its exit code, stdout and stderr. Files persist between calls; each command starts in `/`.",
    };
    let what = match tool {
        Tool::CheckSolution => "The complete solution, as it would be submitted.",
        Tool::Python => "The Python code to run.",
        Tool::Bash => "The command, run with `bash -c`.",
    };
    let arg = tool.argument();
    json!({"type": "function", "function": {"name": tool.name(), "description": description,
        "parameters": {"type": "object", "properties": {arg: {"type": "string", "description": what}}, "required": [arg]}}})
}

/// The declared text format for a chat template without a `tools` variable: the schemas and how
/// to call them, as a system message's text.
pub(crate) fn declare(tools: &[Tool]) -> String {
    let mut out = String::from("You may call tools. To call one, write\n<tool_call>\n{\"name\": <tool name>, \"arguments\": <arguments as a JSON object>}\n</tool_call>\nand end your turn; the result comes back in the next message. A reply without a tool call is your final answer.\nTools:\n");
    for t in tools {
        out.push_str(&schema(*t)["function"].to_string());
        out.push('\n');
    }
    out
}

/// `text` clipped to `max` characters (on a character boundary), saying how much was cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((i, _)) => format!("{}… [{} more characters]", &text[..i], text[i..].chars().count()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: &[Tool] = &[Tool::CheckSolution, Tool::Python];

    #[test]
    fn bash_takes_a_command_and_its_schema_says_so() {
        let Parsed::Calls(c) = parse("<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \"ls /\"}}</tool_call>", &[Tool::Bash]) else { panic!() };
        assert_eq!((c[0].tool, c[0].code()), (Tool::Bash, "ls /"));
        match parse("<tool_call>{\"name\": \"bash\", \"arguments\": {\"code\": \"ls\"}}</tool_call>", &[Tool::Bash]) {
            Parsed::Malformed(why) => assert!(why.contains("`command` string is missing"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(schema(Tool::Bash)["function"]["parameters"]["required"], json!(["command"]));
    }

    #[test]
    fn hermes_calls_are_read_in_order_and_thinking_is_skipped() {
        let text = "<think>maybe <tool_call>{\"name\": \"python\"}</tool_call></think>Let me test.\n<tool_call>\n{\"name\": \"check_solution\", \"arguments\": {\"code\": \"print(1)\"}}\n</tool_call><tool_call>{\"name\": \"python\", \"arguments\": \"{\\\"code\\\": \\\"2\\\"}\"}</tool_call>";
        let Parsed::Calls(c) = parse(text, BOTH) else { panic!("{:?}", parse(text, BOTH)) };
        assert_eq!(c.len(), 2);
        assert_eq!((c[0].tool, c[0].code()), (Tool::CheckSolution, "print(1)"));
        assert_eq!((c[1].tool, c[1].code()), (Tool::Python, "2"), "arguments as a JSON string");
        assert_eq!(parse("```python\nprint(1)\n```", BOTH), Parsed::Answer);
    }

    #[test]
    fn malformed_calls_say_what_is_wrong() {
        for (text, says) in [
            ("<tool_call>{\"name\": \"python\", \"arguments\": {\"code\": \"1\"}}", "without its"),
            ("<tool_call>{name: python}</tool_call>", "not JSON"),
            ("<tool_call>{\"arguments\": {}}</tool_call>", "no `name`"),
            ("<tool_call>{\"name\": \"bash\", \"arguments\": {\"code\": \"ls\"}}</tool_call>", "no tool is named `bash`"),
            ("<tool_call>{\"name\": \"python\"}</tool_call>", "no `arguments`"),
            ("<tool_call>{\"name\": \"python\", \"arguments\": {\"src\": \"1\"}}</tool_call>", "`code` string is missing"),
        ] {
            match parse(text, BOTH) {
                Parsed::Malformed(why) => assert!(why.contains(says), "{text}: {why}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        // A tool that is not enabled is unknown.
        assert!(matches!(parse("<tool_call>{\"name\": \"python\", \"arguments\": {\"code\": \"1\"}}</tool_call>", &[Tool::CheckSolution]), Parsed::Malformed(_)));
    }

    #[test]
    fn clipping_keeps_whole_characters_and_counts_the_rest() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("ééééé", 2), "éé… [3 more characters]");
    }
}
