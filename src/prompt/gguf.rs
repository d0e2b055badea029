//! What a GGUF file (llama.cpp) says about prompting, read from its metadata without touching
//! the tensors: the vocabulary, a `tokenizers` tokenizer rebuilt from `tokenizer.ggml.*`, the chat
//! template and the special tokens. The local backend's loader uses the same functions for the
//! model it loads, so a prompt and a model can never disagree on the tokenizer.

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::gguf_file;

use super::Error;
use super::chat::SpecialTokens;

fn bad(path: &Path, message: impl Into<String>) -> Error {
    Error::ModelFile { path: path.to_path_buf(), message: message.into() }
}

/// An integer metadata value of any width, if it is a non-negative integer.
pub(crate) fn meta_u64(v: &gguf_file::Value) -> Option<u64> {
    use gguf_file::Value as V;
    Some(match v {
        V::U8(x) => u64::from(*x),
        V::I8(x) => u64::try_from(*x).ok()?,
        V::U16(x) => u64::from(*x),
        V::I16(x) => u64::try_from(*x).ok()?,
        V::U32(x) => u64::from(*x),
        V::I32(x) => u64::try_from(*x).ok()?,
        V::U64(x) => *x,
        V::I64(x) => u64::try_from(*x).ok()?,
        _ => return None,
    })
}

/// The vocabulary of a GGUF file, from `tokenizer.ggml.tokens`.
///
/// # Errors
/// [`Error::ModelFile`] when the key is missing or not a list of strings.
pub(crate) fn tokens(md: &HashMap<String, gguf_file::Value>, path: &Path) -> Result<Vec<String>, Error> {
    md.get("tokenizer.ggml.tokens")
        .ok_or_else(|| bad(path, "missing metadata `tokenizer.ggml.tokens`"))?
        .to_vec()
        .map_err(|e| bad(path, format!("`tokenizer.ggml.tokens`: {}", crate::causes::candle_reason(&e))))?
        .iter()
        .map(|v| v.to_string().cloned())
        .collect::<candle_core::Result<_>>()
        .map_err(|e| bad(path, format!("`tokenizer.ggml.tokens`: {}", crate::causes::candle_reason(&e))))
}

/// Builds a `tokenizers` BPE tokenizer from GGUF metadata (byte-level BPE, `tokenizer.ggml.model =
/// gpt2`), choosing the pre-tokenizer from `tokenizer.ggml.pre` like llama.cpp does.
///
/// # Errors
/// An unsupported tokenizer model, or metadata the tokenizer cannot be built from.
pub(crate) fn tokenizer(md: &HashMap<String, gguf_file::Value>, tokens: &[String], path: &Path) -> Result<tokenizers::Tokenizer, Error> {
    let fail = |message: String| Error::Tokenizer { what: format!("from `{}`", path.display()), message };
    let model = md.get("tokenizer.ggml.model").and_then(|v| v.to_string().ok()).map(String::as_str).unwrap_or("gpt2");
    if model != "gpt2" {
        return Err(fail(format!("GGUF tokenizer model `{model}` is not supported (only byte-level BPE, `gpt2`)")));
    }
    let merges: Vec<String> = match md.get("tokenizer.ggml.merges") {
        Some(v) => v.to_vec().map_err(|e| fail(e.to_string()))?.iter().filter_map(|m| m.to_string().ok().cloned()).collect(),
        None => Vec::new(),
    };
    let types: Vec<u64> = match md.get("tokenizer.ggml.token_type") {
        Some(v) => v.to_vec().map_err(|e| fail(e.to_string()))?.iter().map(|t| meta_u64(t).unwrap_or(1)).collect(),
        None => vec![1; tokens.len()],
    };
    let pre = md.get("tokenizer.ggml.pre").and_then(|v| v.to_string().ok()).map(String::as_str).unwrap_or("default");
    let byte_level = serde_json::json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
    let pre_tokenizer = match pre {
        // SmolLM's tokenizer.json: every digit is its own pre-token, then GPT-2 byte-level.
        "smollm" => serde_json::json!({"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true}, byte_level]}),
        "qwen2" => serde_json::json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"},
             "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]}),
        _ => byte_level,
    };
    // Control (3) and user-defined (4) tokens are added tokens; control ones are special.
    let added: Vec<serde_json::Value> = tokens
        .iter()
        .enumerate()
        .filter(|(i, _)| matches!(types.get(*i), Some(3) | Some(4)))
        .map(|(i, t)| serde_json::json!({"id": i, "content": t, "single_word": false, "lstrip": false, "rstrip": false,
                                          "normalized": false, "special": types[i] == 3}))
        .collect();
    let vocab: serde_json::Map<String, serde_json::Value> = tokens.iter().enumerate().map(|(i, t)| (t.clone(), serde_json::json!(i))).collect();
    let json = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": null, "pre_tokenizer": pre_tokenizer, "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab, "merges": merges}
    });
    tokenizers::Tokenizer::from_bytes(serde_json::to_vec(&json).map_err(|e| fail(e.to_string()))?)
        .map_err(|e| fail(format!("cannot build the tokenizer from GGUF metadata: {e}")))
}

/// The chat template and special tokens in GGUF metadata.
pub(crate) fn chat_metadata(md: &HashMap<String, gguf_file::Value>, tokens: &[String]) -> (Option<String>, SpecialTokens) {
    let id = |k: &str| md.get(k).and_then(meta_u64).map(|x| x as u32);
    let text_of = |id: Option<u32>| id.and_then(|i| tokens.get(i as usize)).cloned();
    let template = md.get("tokenizer.chat_template").and_then(|v| v.to_string().ok()).cloned();
    let special = SpecialTokens {
        bos_token: text_of(id("tokenizer.ggml.bos_token_id")),
        eos_token: text_of(id("tokenizer.ggml.eos_token_id")),
        ..SpecialTokens::default()
    };
    (template, special)
}

/// Reads a GGUF file's header (metadata and tensor index, not the tensors).
///
/// # Errors
/// [`Error::ModelFile`] when the file cannot be opened or is not GGUF (a truncated download).
pub(crate) fn read_header(path: &Path) -> Result<gguf_file::Content, Error> {
    let mut file = std::fs::File::open(path).map_err(|e| bad(path, format!("cannot open: {e}")))?;
    gguf_file::Content::read(&mut file).map_err(|e| bad(path, format!("not a readable GGUF file: {}", crate::causes::candle_reason(&e))))
}

