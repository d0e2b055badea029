//! The prompt pipeline of a run: prompt templates → chat template → token ids, built from the
//! plan and the loaded model's own tokenizer and chat template.

use crate::data::Problem;
use crate::prompt::model_files::ModelPrompt;
use crate::prompt::{ChatTemplate, Message, PromptTemplates, Tokenizer};
use crate::plan::Plan;

use super::env::toolset::ToolSet;
use super::error::Error;

/// Everything needed to turn a problem (and feedback turns) into prompt tokens.
#[derive(Debug)]
pub(crate) struct Prompting {
    /// The spec's templates.
    pub templates: PromptTemplates,
    /// The chat template.
    pub chat: ChatTemplate,
    /// The tokenizer.
    pub tokenizer: Tokenizer,
    /// `rollout.tools`, as this chat template takes them (`None`: no tool turns).
    pub tools: Option<std::sync::Arc<ToolSet>>,
}

/// A rendered prompt.
#[derive(Debug, Clone)]
pub(crate) struct Rendered {
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// Token ids ending with the generation prompt.
    pub tokens: Vec<u32>,
}

impl Prompting {
    /// Builds the pipeline from the plan: its prompt templates, and the tokenizer and chat
    /// template of its model, read from the model's files without its weights (the one loader,
    /// [`crate::backend::model_source::prompt_files`], that the backends and `rlx render` use too).
    ///
    /// # Errors
    /// A model that cannot be located, no tokenizer, no chat template, templates that fail to
    /// compile.
    /// Blocking (it may fetch the model's files): call it where blocking is allowed.
    pub(crate) fn load(plan: &Plan) -> Result<Self, Error> {
        let m = &plan.model;
        let files = crate::backend::model_source::prompt_files(&m.source, m.tokenizer.as_ref(), &m.chat_template)?;
        Self::new(plan, files)
    }

    /// Builds the pipeline from the plan's prompt templates and a model's tokenizer and chat
    /// template.
    ///
    /// # Errors
    /// Templates that fail to compile.
    pub(crate) fn new(plan: &Plan, model: ModelPrompt) -> Result<Self, Error> {
        let templates = plan.prompt_templates()?;
        let tools = ToolSet::new(&plan.rollout, &model.chat).map(std::sync::Arc::new);
        Ok(Prompting { templates, chat: model.chat, tokenizer: model.tokenizer, tools })
    }

    /// Renders a conversation with the generation prompt and tokenizes it.
    ///
    /// # Errors
    /// Template or tokenizer failures.
    pub(crate) fn render(&self, messages: Vec<Message>) -> Result<Rendered, Error> {
        let text = self.chat_text(&messages)?;
        let tokens = self.tokenizer.encode(&text)?;
        Ok(Rendered { messages, tokens })
    }

    /// A conversation through the chat template with the generation prompt (and the tool
    /// schemas, for a template that lists them).
    fn chat_text(&self, messages: &[Message]) -> Result<String, crate::prompt::Error> {
        let schemas = self.tools.as_ref().and_then(|t| t.template_schemas());
        self.chat.render_with_tools(messages, true, schemas.as_ref())
    }

    /// The first messages of a problem: the prompt templates' (with the tools declared, for a
    /// chat template that does not list them).
    ///
    /// # Errors
    /// Template failures.
    pub(crate) fn first_messages(&self, problem: &Problem) -> Result<Vec<Message>, Error> {
        let messages = self.templates.messages(problem)?;
        Ok(match &self.tools {
            Some(t) => t.declare(messages),
            None => messages,
        })
    }

    /// The first prompt of a problem.
    ///
    /// # Errors
    /// Template or tokenizer failures.
    pub(crate) fn first_turn(&self, problem: &Problem) -> Result<Rendered, Error> {
        self.render(self.first_messages(problem)?)
    }

    /// The prompt of the next attempt: `prev`, the model's answer `sampled`, and the feedback
    /// turn, with the generation prompt.
    ///
    /// The tokens extend `prev.tokens + sampled` (what the model saw and produced, token for
    /// token) with the tokens of the text the chat template adds after the answer, so one
    /// trajectory is one sequence and every attempt is trained in its true context. Templates
    /// that rewrite earlier turns (Qwen3 drops `<think>` blocks from history) cannot be extended;
    /// the conversation is then rendered afresh, and its tokens do not start with the previous
    /// turn's.
    ///
    /// # Errors
    /// Template or tokenizer failures.
    pub(crate) fn next_turn(&self, prev: &Rendered, sampled: &[u32], answer: &str, feedback: Vec<Message>) -> Result<Rendered, Error> {
        let mut messages = prev.messages.clone();
        messages.push(Message::new("assistant", answer));
        messages.extend(feedback);
        let full = self.chat_text(&messages)?;
        let seen = self.chat_text(&prev.messages)? + &self.tokenizer.decode(sampled, false)?;
        if let Some(rest) = full.strip_prefix(seen.as_str()) {
            // After a truncated answer `rest` starts with the end-of-turn marker the model never
            // produced; it is encoded with the rest, as context, not as a sampled token.
            let mut tokens = prev.tokens.clone();
            tokens.extend_from_slice(sampled);
            tokens.extend(self.tokenizer.encode(rest)?);
            return Ok(Rendered { messages, tokens });
        }
        let tokens = self.tokenizer.encode(&full)?;
        Ok(Rendered { messages, tokens })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;
    use crate::prompt::chat::SpecialTokens;

    pub(crate) const CHATML: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

    /// A character-level tokenizer with ChatML's two markers as special tokens.
    pub(crate) fn char_tokenizer() -> Tokenizer {
        let mut vocab = serde_json::Map::new();
        let mut added = vec![];
        for (i, s) in ["<|im_start|>", "<|im_end|>", "<unk>"].iter().enumerate() {
            vocab.insert((*s).to_string(), json!(i));
            added.push(json!({"id": i, "content": s, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}));
        }
        for c in std::iter::once('\n').chain((32u8..=126).map(char::from)) {
            let id = vocab.len();
            vocab.insert(c.to_string(), json!(id));
        }
        let tok = json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
            "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": {"type": "Fuse"},
            "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
                      "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                      "vocab": vocab, "merges": []}
        });
        let mut t = Tokenizer::new(tokenizers::Tokenizer::from_bytes(tok.to_string().as_bytes()).unwrap());
        t.set_stop_tokens(&["<|im_end|>"]);
        t
    }

    pub(crate) fn prompting(chat: &str) -> Prompting {
        let templates = PromptTemplates::from_sources(&[("user", "{{ problem.statement }}"), ("feedback", "failed: {{ feedback.status }}")], json!({})).unwrap();
        Prompting { templates, chat: ChatTemplate::jinja(chat, SpecialTokens::default()).unwrap(), tokenizer: char_tokenizer(), tools: None }
    }

    #[test]
    fn the_next_turn_extends_what_the_model_saw_and_equals_a_fresh_render() {
        let p = prompting(CHATML);
        let first = p.render(vec![Message::new("user", "add two numbers")]).unwrap();
        for (answer, sampled_text) in [("```python\nx = 1\n```", "```python\nx = 1\n```<|im_end|>"), ("```python\nx = ", "```python\nx = ")] {
            // The second case was cut off by max_tokens: no end-of-turn token was sampled.
            let sampled = p.tokenizer.encode(sampled_text).unwrap();
            let next = p.next_turn(&first, &sampled, answer, vec![Message::new("user", "failed: wrong answer")]).unwrap();
            assert!(next.tokens.starts_with(&[first.tokens.as_slice(), sampled.as_slice()].concat()), "{answer:?}");
            let fresh = p.tokenizer.encode(&p.chat.render(&next.messages, true).unwrap()).unwrap();
            assert_eq!(next.tokens, fresh, "{answer:?}: the model sees what a fresh render of the conversation gives");
            assert_eq!(next.messages.len(), 3);
        }
    }

    fn with_tools(chat: &str) -> Prompting {
        let mut p = prompting(chat);
        let rollout = crate::spec::types::Rollout { tools: vec![crate::spec::types::Tool::CheckSolution], ..Default::default() };
        p.tools = ToolSet::new(&rollout, &p.chat).map(std::sync::Arc::new);
        p
    }

    #[test]
    fn tools_go_to_a_template_that_lists_them_and_are_declared_to_one_that_does_not() {
        let problem = Problem { id: "p".into(), statement: "add".into(), starter_code: None, tests: crate::data::Tests::Stdin { cases: vec![] }, metadata: Default::default() };
        // ChatML without `tools` (SmolLM2's kind): a system message declares the format; results
        // come back as user messages.
        let plain = with_tools(CHATML);
        let set = plain.tools.clone().unwrap();
        assert!(!set.template_tools && !set.tool_role);
        let first = plain.first_messages(&problem).unwrap();
        assert_eq!(first[0].role, "system");
        assert!(first[0].content.contains("<tool_call>") && first[0].content.contains("\"name\":\"check_solution\""), "{}", first[0].content);
        assert_eq!(set.result("passed").role, "user");
        assert_eq!(set.result("passed").content, "<tool_response>\npassed\n</tool_response>");
        // A Hermes-style template: the schemas through `tools`, results in the `tool` role.
        let hermes = CHATML.replace("{% for m in messages %}", "{% if tools %}<|im_start|>system\n{% for t in tools %}{{ t.function.name }};{% endfor %}<|im_end|>\n{% endif %}{% for m in messages %}{% if m.role == 'tool' %}<tool_response>{% endif %}");
        let h = with_tools(&hermes);
        let set = h.tools.clone().unwrap();
        assert!(set.template_tools && set.tool_role);
        let first = h.first_messages(&problem).unwrap();
        assert_eq!(first.len(), 1, "nothing declared by hand");
        let text = h.tokenizer.decode(&h.first_turn(&problem).unwrap().tokens, false).unwrap();
        assert!(text.starts_with("<|im_start|>system\ncheck_solution;<|im_end|>"), "{text}");
        assert_eq!(set.result("x").role, "tool");
        // Without tools, the same template renders no tool list.
        assert!(!prompting(&hermes).tokenizer.decode(&prompting(&hermes).first_turn(&problem).unwrap().tokens, false).unwrap().contains("check_solution"));
    }

    #[test]
    fn a_template_that_rewrites_history_is_rendered_afresh() {
        // Like Qwen3 dropping <think> blocks: earlier assistant turns are not shown as sampled.
        let rewriting = CHATML.replace("{{ m.content }}", "{% if m.role == 'assistant' %}{{ m.content | replace('x', 'y') }}{% else %}{{ m.content }}{% endif %}");
        let p = prompting(&rewriting);
        let first = p.render(vec![Message::new("user", "hi")]).unwrap();
        let sampled = p.tokenizer.encode("x<|im_end|>").unwrap();
        let next = p.next_turn(&first, &sampled, "x", vec![Message::new("user", "again")]).unwrap();
        assert!(!next.tokens.starts_with(&[first.tokens.as_slice(), sampled.as_slice()].concat()));
        assert_eq!(next.tokens, p.tokenizer.encode(&p.chat.render(&next.messages, true).unwrap()).unwrap());
    }
}
