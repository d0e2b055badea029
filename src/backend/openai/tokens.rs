//! The server's completion tokens as our tokenizer's ids, checked against our tokenizer.
//!
//! A server that reports ids (vLLM, llama-server) is checked on the ids: each must be in our
//! vocabulary, and they must decode to the text the server sent (a prefix of it is enough: a
//! stop string is cut from the text, not always from the tokens). A server that reports token
//! strings (llama-cpp-python) has each string looked up among the single-token decodings of our
//! vocabulary; a string that several ids decode to (a byte of a multi-byte character, which
//! servers print as empty) makes the whole completion fall back to our own encoding of its text,
//! which must then match the server's strings one for one. Anything else is a
//! [`super::Error::TokenMismatch`]: the served model is not the spec's `model.base`, or the
//! server tokenizes differently, and the tokens cannot be trusted.
//!
//! Rejected alternative: always re-encoding the text. A sampled sequence is not always the
//! canonical encoding of its text (the model may spell `ab` as `a` + `b`), so re-encoding
//! would silently change the tokens whose log-probabilities the server reported.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use crate::prompt::Tokenizer;

use super::error::Error;
use super::wire::Reported;

/// Our tokenizer, with the reverse map from a token's text to its id built on first use.
#[derive(Debug)]
pub(crate) struct Vocab {
    tokenizer: Arc<Tokenizer>,
    /// Single-token decoding → id; `None` where several ids decode the same.
    pieces: OnceLock<HashMap<String, Option<u32>>>,
}

fn mismatch(detail: String) -> Error {
    Error::TokenMismatch { detail }
}

/// `ours.starts_with(text)`, where a U+FFFD in `ours` (bytes our tokenizer could not decode on
/// their own, which llama-server's detokenizer printed as up to four characters, a space and a
/// symbol, say) stands for one to four characters of `text`.
fn starts_with_lossy(ours: &str, text: &str) -> bool {
    fn go(o: &[char], t: &[char]) -> bool {
        let (mut i, mut j) = (0, 0);
        while j < t.len() {
            match o.get(i) {
                None => return false,
                Some('\u{FFFD}') => return (1..=4.min(t.len() - j)).any(|n| go(&o[i + 1..], &t[j + n..])),
                Some(&c) if c == t[j] => (i, j) = (i + 1, j + 1),
                Some(_) => return false,
            }
        }
        true
    }
    go(&ours.chars().collect::<Vec<_>>(), &text.chars().collect::<Vec<_>>())
}

fn quote(s: &str) -> String {
    let cut: String = s.chars().take(60).collect();
    format!("{cut:?}")
}

impl Vocab {
    /// Wraps our tokenizer.
    pub(crate) fn new(tokenizer: Arc<Tokenizer>) -> Vocab {
        Vocab { tokenizer, pieces: OnceLock::new() }
    }

    /// The tokenizer.
    pub(crate) fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    fn decode(&self, ids: &[u32]) -> Result<String, Error> {
        self.tokenizer.decode(ids, false).map_err(|e| Error::Tokenizer(e.to_string()))
    }

    fn pieces(&self) -> &HashMap<String, Option<u32>> {
        self.pieces.get_or_init(|| {
            let mut map: HashMap<String, Option<u32>> = HashMap::new();
            for id in 0..self.tokenizer.vocab_size() as u32 {
                if let Ok(p) = self.tokenizer.decode(&[id], false) {
                    map.entry(p).and_modify(|v| *v = None).or_insert(Some(id));
                }
            }
            map
        })
    }

    /// The ids of a completion the server reported as `reported`, with `text` its text.
    ///
    /// # Errors
    /// [`Error::TokenMismatch`] naming the first disagreement.
    pub(crate) fn ids(&self, reported: &Reported, text: &str) -> Result<Vec<u32>, Error> {
        match reported {
            Reported::Ids(ids) => {
                let vocab = self.tokenizer.vocab_size();
                if let Some((i, id)) = ids.iter().enumerate().find(|(_, id)| **id as usize >= vocab) {
                    return Err(mismatch(format!("token {i} is id {id}, beyond our vocabulary of {vocab}")));
                }
                let ours = self.decode(ids)?;
                // llama-server leaves special tokens out of the text (an `<|im_end|>` sampled
                // past the end with `ignore_eos`), so the ids may also match without them.
                let plain = || self.tokenizer.decode(ids, true).is_ok_and(|t| starts_with_lossy(&t, text));
                if !starts_with_lossy(&ours, text) && !plain() {
                    // Quoted from where they part: a long common start says nothing.
                    let at = text.char_indices().zip(ours.chars()).find(|((_, a), b)| a != b).map_or(text.len().min(ours.len()), |((i, _), _)| i);
                    let from = text[..at].char_indices().rev().nth(20).map_or(0, |(i, _)| i);
                    return Err(mismatch(format!(
                        "from character {from}, the server's text is {} but its token ids decode to {} with our tokenizer",
                        quote(&text[from..]),
                        quote(ours.get(from..).unwrap_or(""))
                    )));
                }
                Ok(ids.clone())
            }
            Reported::Pieces(pieces) => self.ids_of_pieces(pieces, text),
            Reported::None => self.tokenizer.encode(text).map_err(|e| Error::Tokenizer(e.to_string())),
        }
    }

    fn ids_of_pieces(&self, pieces: &[String], text: &str) -> Result<Vec<u32>, Error> {
        let map = self.pieces();
        let looked_up: Option<Vec<u32>> = pieces.iter().map(|p| map.get(p).copied().flatten()).collect();
        if let Some(ids) = looked_up {
            let ours = self.decode(&ids)?;
            if ours.starts_with(text) {
                return Ok(ids);
            }
        }
        // Fallback: our encoding of the text, string for string.
        let ours = self.tokenizer.encode(text).map_err(|e| Error::Tokenizer(e.to_string()))?;
        for (i, p) in pieces.iter().enumerate() {
            let Some(&id) = ours.get(i) else {
                // The server sampled more tokens than the text has: a stop string it cut off;
                // those must map on their own.
                match map.get(p).copied().flatten() {
                    Some(_) => continue,
                    None => return Err(mismatch(format!("token {i} {} is no single token of our vocabulary", quote(p)))),
                }
            };
            let mine = self.decode(&[id])?;
            if &mine != p && !p.is_empty() {
                return Err(mismatch(format!("token {i} is {} on the server but {} with our tokenizer", quote(p), quote(&mine))));
            }
        }
        if ours.len() > pieces.len() {
            return Err(mismatch(format!("the server reports {} tokens, our tokenizer makes {} of its text", pieces.len(), ours.len())));
        }
        let mut ids = ours;
        let extra: Vec<u32> = pieces[ids.len()..].iter().filter_map(|p| map.get(p).copied().flatten()).collect();
        ids.extend(extra);
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A word-level vocabulary `a`, `b` and the special `<|im_end|>`.
    fn vocab() -> Vocab {
        let json = r#"{"version":"1.0","truncation":null,"padding":null,
            "added_tokens":[{"id":2,"content":"<|im_end|>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
            "normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
            "model":{"type":"WordLevel","vocab":{"a":0,"b":1,"<|im_end|>":2},"unk_token":"a"}}"#;
        Vocab::new(Arc::new(Tokenizer::from_bytes(json.as_bytes()).unwrap()))
    }

    /// llama-server's text leaves a special token sampled past the end out; the ids still match
    /// it, and ids that decode to other text still do not.
    #[test]
    fn ids_match_a_text_without_its_special_tokens() {
        let v = vocab();
        assert_eq!(v.ids(&Reported::Ids(vec![0, 1, 2, 0]), "a b a").unwrap(), vec![0, 1, 2, 0]);
        assert_eq!(v.ids(&Reported::Ids(vec![0, 1, 2, 0]), "a b <|im_end|> a").unwrap(), vec![0, 1, 2, 0]);
        assert!(matches!(v.ids(&Reported::Ids(vec![1, 1]), "a b"), Err(Error::TokenMismatch { .. })));
        assert!(starts_with_lossy("x\u{FFFD}y z", "x←y"));
        assert!(!starts_with_lossy("x\u{FFFD}yyyyy", "x←zzzzz"));
        assert!(!starts_with_lossy("x", "xy"));
        assert!(starts_with_lossy("()\u{FFFD}\nd", "() ←\nd"), "one replacement for a space and a symbol");
    }
}
