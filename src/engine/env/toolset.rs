//! The spec's tools as a chat template takes them: the schemas for a template's `tools`
//! variable or the declared text format, and the role tool results come back in.

use crate::prompt::{ChatTemplate, Message};
use crate::spec::types::{Rollout, Tool, ToolLimits};

use super::calls;

/// The spec's tools and limits, and how the chat template takes them.
#[derive(Debug, Clone)]
pub(crate) struct ToolSet {
    pub tools: Vec<Tool>,
    pub limits: ToolLimits,
    /// The template lists tool schemas from its `tools` variable (Qwen3's, Hermes'); otherwise
    /// the declared text format goes into the system message.
    pub template_tools: bool,
    /// The template renders the `tool` role its own way; otherwise results are user messages.
    pub tool_role: bool,
}

impl ToolSet {
    /// The spec's tools for `chat`; `None` without tools.
    pub(crate) fn new(rollout: &Rollout, chat: &ChatTemplate) -> Option<ToolSet> {
        (!rollout.tools.is_empty()).then(|| ToolSet {
            tools: rollout.tools.clone(),
            limits: rollout.limits.clone().unwrap_or_default(),
            template_tools: chat.reads_tools(),
            tool_role: chat.knows_tool_role(),
        })
    }

    /// The schemas for the template's `tools` variable (`None` when it has none).
    pub(crate) fn template_schemas(&self) -> Option<serde_json::Value> {
        self.template_tools.then(|| serde_json::Value::Array(self.schemas()))
    }

    /// The tools' schemas, in the OpenAI function format.
    pub(crate) fn schemas(&self) -> Vec<serde_json::Value> {
        self.tools.iter().map(|t| calls::schema(*t)).collect()
    }

    /// The first messages with the tools declared, when the template does not list them: in the
    /// system message, or a new one.
    pub(crate) fn declare(&self, mut messages: Vec<Message>) -> Vec<Message> {
        if self.template_tools {
            return messages;
        }
        let text = calls::declare(&self.tools);
        match messages.first_mut() {
            Some(m) if m.role == "system" => m.content = format!("{}\n\n{text}", m.content),
            _ => messages.insert(0, Message::new("system", text)),
        }
        messages
    }

    /// A tool's result as the next message.
    pub(crate) fn result(&self, text: &str) -> Message {
        if self.tool_role { Message::new("tool", text) } else { Message::new("user", format!("<tool_response>\n{text}\n</tool_response>")) }
    }
}

