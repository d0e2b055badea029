//! A supervised row as tokens with per-token weights, and a batch of them as cross-entropy
//! datums. How the tokens and weights are built from the chat template (turn by turn, the way a
//! completion is sampled) is [`crate::prompt::sft`], which validation uses too.

use crate::data::sft::SftRow;
use crate::prompt::Message;
use crate::seam::{Datum, LossFnInputs};
use crate::spec::types::TrainOn;

use super::error::Error;
use super::prompting::Prompting;

/// One example: the transcript's tokens and the weight of each (1 trained, 0 context).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Example {
    /// Every token of the transcript, through the last assistant turn.
    pub tokens: Vec<u32>,
    /// Per token: 1 when it is trained.
    pub weights: Vec<f32>,
}

impl Example {
    /// Its cross-entropy datum: position i predicts token i + 1 with that token's weight.
    pub(crate) fn datum(&self) -> Datum {
        let n = self.tokens.len() - 1;
        Datum {
            model_input: self.tokens[..n].to_vec(),
            loss_fn_inputs: LossFnInputs { target_tokens: self.tokens[1..].to_vec(), weights: Some(self.weights[1..].to_vec()), logprobs: None, advantages: None },
        }
    }

    /// Tokens trained.
    pub(crate) fn trained(&self) -> f64 {
        self.weights.iter().map(|&w| f64::from(w)).sum()
    }
}

/// A row's messages: a transcript as written, or a problem's prompt (the spec's templates) with
/// its reference code in a Python fence as the assistant's answer (what the grader extracts).
///
/// # Errors
/// A prompt template that fails on the problem.
pub(crate) fn messages(prompting: &Prompting, row: &SftRow) -> Result<Vec<Message>, Error> {
    Ok(match row {
        SftRow::Chat(m) => m.iter().map(|(r, c)| Message::new(r, c.clone())).collect(),
        SftRow::Solution { problem, code } => {
            let mut m = prompting.templates.messages(problem)?;
            m.push(Message::new("assistant", format!("```python\n{}\n```", code.trim_end())));
            m
        }
    })
}

/// The row's tokens and weights ([`crate::prompt::sft::weighted_tokens`]). `Err(reason)` when
/// the chat template cannot express it.
///
/// # Errors
/// Template or tokenizer failures.
pub(crate) fn example(prompting: &Prompting, messages: &[Message], train_on: TrainOn) -> Result<Result<Example, String>, Error> {
    Ok(crate::prompt::sft::weighted_tokens(&prompting.chat, &prompting.tokenizer, messages, train_on)?.map(|(tokens, weights)| Example { tokens, weights }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::prompting::tests::{CHATML, prompting as with_template};
    use crate::prompt::ChatTemplate;
    use crate::prompt::chat::SpecialTokens;

    /// The prompting tests' pipeline: ChatML, a character-level tokenizer (no merges, so
    /// encoding turn by turn and encoding the whole transcript must agree), `{{ problem.statement }}`
    /// as the user template.
    fn prompting() -> Prompting {
        with_template(CHATML)
    }

    fn transcript() -> Vec<Message> {
        vec![
            Message::new("system", "You write Python."),
            Message::new("user", "add"),
            Message::new("assistant", "def add(a, b): return a + b"),
            Message::new("user", "now subtract"),
            Message::new("assistant", "def sub(a, b): return a - b"),
        ]
    }

    /// The trained tokens, decoded run by run (maximal runs of weight-1 tokens).
    fn trained_runs(p: &Prompting, ex: &Example) -> Vec<String> {
        let mut runs = vec![];
        let mut cur: Vec<u32> = vec![];
        for (&t, &w) in ex.tokens.iter().zip(&ex.weights) {
            if w == 1.0 {
                cur.push(t);
            } else if !cur.is_empty() {
                runs.push(p.tokenizer.decode(&std::mem::take(&mut cur), false).unwrap());
            }
        }
        if !cur.is_empty() {
            runs.push(p.tokenizer.decode(&cur, false).unwrap());
        }
        runs
    }

    #[test]
    fn the_trained_tokens_are_exactly_the_assistants_and_the_whole_is_the_transcript() {
        let p = prompting();
        let m = transcript();
        // Independent reference: the full render, tokenized at once, and the answers as the
        // model would write them (content, then its end-of-turn token).
        let full = p.tokenizer.encode(&p.chat.render(&m, false).unwrap()).unwrap();
        for (train_on, want) in [
            (TrainOn::LastAssistant, vec!["def sub(a, b): return a - b<|im_end|>"]),
            (TrainOn::AllAssistant, vec!["def add(a, b): return a + b<|im_end|>", "def sub(a, b): return a - b<|im_end|>"]),
        ] {
            let ex = example(&p, &m, train_on).unwrap().unwrap();
            assert_eq!(trained_runs(&p, &ex), want, "{train_on:?}");
            assert_eq!(ex.tokens, full, "turn-by-turn tokens are the transcript's (a char-level tokenizer cannot merge across turns)");
            // Each trained run starts right after the generation prompt of its turn.
            let prompt = p.tokenizer.encode(&p.chat.render(&m[..4], true).unwrap()).unwrap();
            assert_eq!(ex.weights[prompt.len() - 1], 0.0);
            assert_eq!(ex.weights[prompt.len()], 1.0, "the first token after the generation prompt is trained");
            assert_eq!(ex.weights.last(), Some(&0.0), "the newline after <|im_end|> is template glue");
            let d = ex.datum();
            assert_eq!(d.loss_fn_inputs.target_tokens.len(), d.model_input.len());
            assert_eq!(d.loss_fn_inputs.weights.as_ref().unwrap().iter().sum::<f32>() as f64, ex.trained());
        }
    }

    #[test]
    fn a_reference_solution_is_the_fenced_answer_after_the_rendered_prompt() {
        let p = prompting();
        let problem = crate::data::Problem {
            id: "1".into(),
            statement: "add two numbers".into(),
            starter_code: None,
            tests: crate::data::Tests::Check { prompt: String::new(), entry_point: "f".into(), test: String::new() },
            metadata: Default::default(),
        };
        let row = SftRow::Solution { problem: Box::new(problem), code: "def add(a, b):\n    return a + b\n".into() };
        let m = messages(&p, &row).unwrap();
        assert_eq!(m[0].content, "add two numbers");
        let ex = example(&p, &m, TrainOn::LastAssistant).unwrap().unwrap();
        assert_eq!(trained_runs(&p, &ex), vec!["```python\ndef add(a, b):\n    return a + b\n```<|im_end|>"]);
    }

    #[test]
    fn a_template_that_rewrites_history_cannot_weight_every_turn() {
        let rewriting = CHATML.replace("{{ m.content }}", "{% if m.role == 'assistant' and not loop.last %}(earlier){% else %}{{ m.content }}{% endif %}");
        let p = Prompting { chat: ChatTemplate::jinja(&rewriting, SpecialTokens::default()).unwrap(), ..prompting() };
        let why = example(&p, &transcript(), TrainOn::AllAssistant).unwrap().unwrap_err();
        assert!(why.contains("rewrites history"), "{why}");
        // The last turn alone needs only its own prompt, earlier turns as the template shows them.
        let last = example(&p, &transcript(), TrainOn::LastAssistant).unwrap().unwrap();
        assert_eq!(trained_runs(&p, &last), vec!["def sub(a, b): return a - b<|im_end|>"]);
        assert_eq!(p.tokenizer.decode(&last.tokens, false).unwrap(), p.chat.render(&transcript(), false).unwrap());
        let none = example(&p, &transcript()[..2], TrainOn::AllAssistant).unwrap().unwrap_err();
        assert!(none.contains("no assistant"), "{none}");
    }
}
