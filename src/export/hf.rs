//! A Hugging Face model directory: `config.json`, `model.safetensors` (with the `format: pt`
//! metadata transformers checks), the tokenizer files, `generation_config.json` and the chat
//! template (`tokenizer_config.json`'s `chat_template` and `chat_template.jinja`).
//!
//! Tokenizer files: a base that is a Hugging Face directory gives its own files, copied as they
//! are (re-serialising them could change what a tokenizer does). A GGUF base has none: its
//! tokenizer as rlx rebuilds it from the GGUF metadata is written as `tokenizer.json`, with a
//! `tokenizer_config.json` naming `PreTrainedTokenizerFast` so transformers loads that file
//! verbatim rather than a model-specific class that would rebuild its own pipeline.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Tensor};
use serde_json::{Value, json};

use super::merge::Merged;
use super::error::Error;
use super::types::Dtype;

/// Tokenizer and generation files of an HF base directory, copied when present.
const COPIED: &[&str] = &[
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "tokenizer.model",
    "generation_config.json",
];

/// Writes the merged model into `dir`.
///
/// # Errors
/// I/O and tensor failures.
pub(crate) fn write(dir: &Path, m: &Merged, dtype: Dtype) -> Result<(), Error> {
    let torch = match dtype {
        Dtype::F16 => "float16",
        Dtype::Bf16 => "bfloat16",
        _ => "float32",
    };
    let mut cfg = m.config.to_hf_json();
    cfg["torch_dtype"] = json!(torch);
    cfg["dtype"] = json!(torch);
    if let Some(bos) = special_id(m, |s| s.bos_token.as_deref()) {
        cfg["bos_token_id"] = json!(bos);
    }
    write_json(&dir.join("config.json"), &cfg)?;
    let candle_dtype = match dtype {
        Dtype::F16 => DType::F16,
        Dtype::Bf16 => DType::BF16,
        _ => DType::F32,
    };
    let tensors: HashMap<String, Tensor> = m.weights.iter().map(|(k, t)| Ok((k.clone(), t.to_dtype(candle_dtype)?))).collect::<Result<_, candle_core::Error>>()?;
    write_safetensors(&dir.join("model.safetensors"), &tensors)?;
    if m.base.is_dir() {
        for name in COPIED {
            let from = m.base.join(name);
            if from.is_file() {
                let to = dir.join(name);
                std::fs::copy(&from, &to).map_err(|source| Error::Io { action: "copy", path: from.clone(), source })?;
            }
        }
    } else {
        write_tokenizer(dir, m)?;
    }
    if !dir.join("generation_config.json").exists() {
        let mut gen_cfg = json!({"eos_token_id": m.config.eos_token_ids});
        if let Some(bos) = special_id(m, |s| s.bos_token.as_deref()) {
            gen_cfg["bos_token_id"] = json!(bos);
        }
        write_json(&dir.join("generation_config.json"), &gen_cfg)?;
    }
    Ok(())
}

/// `safetensors` with the `format: pt` metadata `save_pretrained` writes.
pub(crate) fn write_safetensors(path: &Path, tensors: &HashMap<String, Tensor>) -> Result<(), Error> {
    let meta: HashMap<String, String> = [("format".to_string(), "pt".to_string())].into_iter().collect();
    let mut sorted: Vec<(&String, &Tensor)> = tensors.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    safetensors::serialize_to_file(sorted, Some(meta), path).map_err(|e| Error::Io { action: "write", path: path.to_path_buf(), source: std::io::Error::other(e.to_string()) })
}

/// A GGUF base's tokenizer as `tokenizer.json`, `tokenizer_config.json`,
/// `special_tokens_map.json` and `chat_template.jinja`.
fn write_tokenizer(dir: &Path, m: &Merged) -> Result<(), Error> {
    let Some(tok) = &m.prompt.tokenizer else { return Ok(()) };
    let path = dir.join("tokenizer.json");
    tok.save(&path, false).map_err(|e| Error::Io { action: "write", path: path.clone(), source: std::io::Error::other(e.to_string()) })?;
    let s = &m.prompt.special;
    let mut special = serde_json::Map::new();
    for (key, value) in [("bos_token", &s.bos_token), ("eos_token", &s.eos_token), ("pad_token", &s.pad_token), ("unk_token", &s.unk_token)] {
        if let Some(v) = value {
            special.insert(key.into(), json!(v));
        }
    }
    let mut cfg = Value::Object(special.clone());
    cfg["tokenizer_class"] = json!("PreTrainedTokenizerFast");
    cfg["model_max_length"] = json!(m.config.max_position_embeddings);
    cfg["clean_up_tokenization_spaces"] = json!(false);
    if let Some(t) = &m.prompt.chat_template {
        cfg["chat_template"] = json!(t);
        let p = dir.join("chat_template.jinja");
        std::fs::write(&p, t).map_err(|source| Error::Io { action: "write", path: p, source })?;
    }
    write_json(&dir.join("tokenizer_config.json"), &cfg)?;
    write_json(&dir.join("special_tokens_map.json"), &Value::Object(special))
}

/// The id of a special token (by its text in the base's special tokens).
fn special_id(m: &Merged, pick: impl Fn(&crate::prompt::chat::SpecialTokens) -> Option<&str>) -> Option<u32> {
    let text = pick(&m.prompt.special)?;
    m.prompt.tokenizer.as_ref()?.token_to_id(text)
}

pub(crate) fn write_json(path: &Path, value: &Value) -> Result<(), Error> {
    let mut text = serde_json::to_string_pretty(value).expect("JSON values serialise");
    text.push('\n');
    std::fs::write(path, text).map_err(|source| Error::Io { action: "write", path: path.to_path_buf(), source })
}
