//! A transcript as training tokens with per-token weights, for supervised fine-tuning.
//!
//! The tokens are built turn by turn from the chat template, the way a completion is sampled:
//! the context before an assistant turn is rendered with the generation prompt and encoded on
//! its own (what the model is prompted with), then the turn's text up to and including the
//! end-of-turn marker (what the model would produce, weight 1 when trained), then the template's
//! glue after the marker (context, weight 0). Rejected: encoding the whole transcript once and
//! mapping character offsets back to tokens, since a merge across a turn boundary then trains
//! tokens the model never produces at generation time (tinker-cookbook's renderer bugs #176 and
//! #177 were of this kind).

use crate::spec::types::TrainOn;

use super::Error;
use super::chat::{ChatTemplate, Message};
use super::tokenizer::Tokenizer;

/// A transcript's tokens and, per token, its weight.
pub type Weighted = (Vec<u32>, Vec<f32>);

/// A transcript's tokens and the weight of each (1 trained, 0 context; the module's doc).
/// `Err(reason)` when the chat template cannot express it: it rewrites earlier turns (each
/// turn's render must extend the previous one), or the transcript has no assistant turn, or
/// nothing is left to train.
///
/// # Errors
/// Template or tokenizer failures; the template's shortfall is the inner `Err`.
pub fn weighted_tokens(chat: &ChatTemplate, tokenizer: &Tokenizer, messages: &[Message], train_on: TrainOn) -> Result<Result<Weighted, String>, Error> {
    let assistant: Vec<usize> = messages.iter().enumerate().filter(|(_, m)| m.role == "assistant").map(|(i, _)| i).collect();
    let Some(&last) = assistant.last() else { return Ok(Err("the transcript has no assistant message".into())) };
    let markers: Vec<String> = tokenizer.stop_ids().iter().filter_map(|&id| tokenizer.decode(&[id], false).ok()).filter(|s| !s.is_empty()).collect();
    let (mut tokens, mut weights, mut covered) = (vec![], vec![], String::new());
    let push = |text: &str, w: f32, tokens: &mut Vec<u32>, weights: &mut Vec<f32>| -> Result<(), Error> {
        let ids = tokenizer.encode(text)?;
        weights.extend(std::iter::repeat_n(w, ids.len()));
        tokens.extend(ids);
        Ok(())
    };
    // With `last_assistant` the earlier turns are context as the last turn's prompt renders
    // them (what the model sees when it answers), so a template that rewrites history can
    // still express it; `all_assistant` needs each turn's render to extend the previous one.
    let turns = if train_on == TrainOn::AllAssistant { assistant.as_slice() } else { std::slice::from_ref(&last) };
    for &i in turns {
        let prompt = chat.render(&messages[..i], true)?;
        let Some(context) = prompt.strip_prefix(covered.as_str()) else {
            return Ok(Err(format!("the chat template renders the turns before message {i} differently once later turns follow (it rewrites history), so per-turn weights cannot be built")));
        };
        push(context, 0.0, &mut tokens, &mut weights)?;
        let through = chat.render(&messages[..=i], false)?;
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
    Ok(Ok((tokens, weights)))
}
