//! The pieces every scripted backend of these tests shares: the problems of
//! `experiments/data/easy_python_*.jsonl` found by the prompt that asks for them, a completion's
//! text turned into the sampled tokens the engine expects, and a trainer's saved states by name.
//! Each test file keeps only what its script decides (which answer, which numbers).

use std::collections::HashMap;
use std::sync::Mutex;

use rlx::backend::Pending;
use rlx::seam::{SampledSequence, StateRef, StopReason};
use serde_json::Value;

use crate::common::{TestContext, repo};

/// One problem of the scripted data.
pub(crate) struct Problem {
    /// The statement, as the prompt carries it.
    pub(crate) statement: String,
    /// The reference solution.
    pub(crate) solution: String,
    /// From the eval file (`easy_python_eval.jsonl`) rather than the training file.
    pub(crate) eval: bool,
}

/// The scripted data and the tiny model's tokenizer (`cx`'s `tiny/`).
pub(crate) struct Problems {
    tokenizer: tokenizers::Tokenizer,
    pub(crate) rows: Vec<Problem>,
}

impl Problems {
    /// The training file's problems, then, with `with_eval`, the eval file's.
    pub(crate) fn load(cx: &TestContext, with_eval: bool) -> Problems {
        let tokenizer = tokenizers::Tokenizer::from_file(cx.path().join("tiny/tokenizer.json")).unwrap();
        let mut rows = vec![];
        let files: &[(&str, bool)] = if with_eval { &[("easy_python_train.jsonl", false), ("easy_python_eval.jsonl", true)] } else { &[("easy_python_train.jsonl", false)] };
        for &(file, eval) in files {
            for line in std::fs::read_to_string(repo().join("experiments/data").join(file)).unwrap().lines() {
                let v: Value = serde_json::from_str(line).unwrap();
                rows.push(Problem { statement: v["text"].as_str().unwrap().to_string(), solution: v["code"].as_str().unwrap().to_string(), eval });
            }
        }
        Problems { tokenizer, rows }
    }

    /// The index of the problem `prompt` asks for.
    pub(crate) fn index(&self, prompt: &[u32]) -> usize {
        let text = self.tokenizer.decode(prompt, false).unwrap();
        self.rows.iter().position(|p| text.contains(p.statement.as_str())).expect("a known problem")
    }

    /// `text` as sampled: its tokens, `<|im_end|>` (the engine's stop token) when it stopped,
    /// and `logprob` for every token.
    pub(crate) fn sequence(&self, text: &str, stop_reason: StopReason, logprob: f32) -> SampledSequence {
        let mut tokens = self.tokenizer.encode(text, false).unwrap().get_ids().to_vec();
        if stop_reason == StopReason::Stop {
            tokens.push(1);
        }
        SampledSequence { logprobs: vec![logprob; tokens.len()], tokens, stop_reason }
    }
}

/// A trainer's saved states: `scripted://<name>` with the optimizer step each was saved at.
#[derive(Default)]
pub(crate) struct States(Mutex<HashMap<String, u64>>);

impl States {
    /// Saves `name` at `step`.
    pub(crate) fn save(&self, name: &str, step: u64) -> Pending<StateRef> {
        let uri = format!("scripted://{name}");
        self.0.lock().unwrap().insert(uri.clone(), step);
        Box::pin(async move { Ok(StateRef(uri)) })
    }

    /// The step `state` was saved at (`None`: never saved), and the reply to give the engine:
    /// an unknown state is an error, as a real trainer's.
    pub(crate) fn load(&self, state: &StateRef) -> (Option<u64>, Pending<()>) {
        let found = self.0.lock().unwrap().get(&state.0).copied();
        (found, Box::pin(async move { found.map(|_| ()).ok_or_else(|| rlx::backend::Error::InvalidArgument { what: "state", reason: "unknown".into() }) }))
    }
}
