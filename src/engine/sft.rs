//! A supervised row as tokens with per-token weights, and a batch of them as cross-entropy
//! datums.
//!
//! The tokens are built turn by turn from the chat template, the way a completion is sampled:
//! the context before an assistant turn is rendered with the generation prompt and encoded on
//! its own (what the model is prompted with), then the turn's text up to and including the
//! end-of-turn marker (what the model would produce, weight 1 when trained), then the template's
//! glue after the marker (context, weight 0). Rejected: encoding the whole transcript once and
//! mapping character offsets back to tokens, since a merge across a turn boundary then trains
//! tokens the model never produces at generation time (tinker-cookbook's renderer bugs #176 and
//! #177 were of this kind).

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

/// The row's tokens and weights (the module's doc). `Err(reason)` when the chat template cannot
/// express it: it rewrites earlier turns (each turn's render must extend the previous one), or
/// the transcript has no assistant turn, or nothing is left to train.
///
/// # Errors
/// Template or tokenizer failures; the template's shortfall as [`Error::Stage`]-ready text.
pub(crate) fn example(prompting: &Prompting, messages: &[Message], train_on: TrainOn) -> Result<Result<Example, String>, Error> {
    let assistant: Vec<usize> = messages.iter().enumerate().filter(|(_, m)| m.role == "assistant").map(|(i, _)| i).collect();
    let Some(&last) = assistant.last() else { return Ok(Err("the transcript has no assistant message".into())) };
    let markers: Vec<String> = prompting.tokenizer.stop_ids().iter().filter_map(|&id| prompting.tokenizer.decode(&[id], false).ok()).filter(|s| !s.is_empty()).collect();
    let (mut tokens, mut weights, mut covered) = (vec![], vec![], String::new());
    let push = |text: &str, w: f32, tokens: &mut Vec<u32>, weights: &mut Vec<f32>| -> Result<(), Error> {
        let ids = prompting.tokenizer.encode(text)?;
        weights.extend(std::iter::repeat_n(w, ids.len()));
        tokens.extend(ids);
        Ok(())
    };
    for &i in &assistant {
        let prompt = prompting.chat.render(&messages[..i], true)?;
        let Some(context) = prompt.strip_prefix(covered.as_str()) else {
            return Ok(Err(format!("the chat template renders the turns before message {i} differently once later turns follow (it rewrites history), so per-turn weights cannot be built")));
        };
        push(context, 0.0, &mut tokens, &mut weights)?;
        let through = prompting.chat.render(&messages[..=i], false)?;
        let Some(turn) = through.strip_prefix(prompt.as_str()) else {
            return Ok(Err(format!("the chat template's render of message {i} does not extend its generation prompt, so the answer's tokens cannot be told apart")));
        };
        // The answer ends at the first end-of-turn marker: sampling stops there, so what the
        // template writes after it is context.
        let end = markers.iter().filter_map(|m| turn.find(m.as_str()).map(|p| p + m.len())).min().unwrap_or(turn.len());
        let trained = train_on == TrainOn::AllAssistant || i == last;
        push(&turn[..end], if trained { 1.0 } else { 0.0 }, &mut tokens, &mut weights)?;
        push(&turn[end..], 0.0, &mut tokens, &mut weights)?;
        covered = through;
    }
    if tokens.len() < 2 || weights[1..].iter().all(|&w| w == 0.0) {
        return Ok(Err("nothing to train: the assistant's answer renders to no token after the first".into()));
    }
    Ok(Ok(Example { tokens, weights }))
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
        let none = example(&p, &transcript()[..2], TrainOn::AllAssistant).unwrap().unwrap_err();
        assert!(none.contains("no assistant"), "{none}");
    }
}
