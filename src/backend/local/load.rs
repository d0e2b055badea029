//! Loading a model: a Hugging Face directory or a GGUF file, into f32 tensors under Hugging Face
//! names, plus its tokenizer and chat template.
//!
//! - HF directory: `config.json`, `*.safetensors` (any dtype, converted), `tokenizer.json`,
//!   `tokenizer_config.json` (chat template, EOS token).
//! - GGUF (llama.cpp): quantised tensors are dequantised on load (training needs f32 anyway);
//!   tensor names are mapped to HF names; the tokenizer is rebuilt from `tokenizer.ggml.*`
//!   metadata and the chat template read from `tokenizer.chat_template`.
//!
//! GGUF detail worth knowing: llama.cpp's converter permutes the rows of `q_proj`/`k_proj` of
//! Llama-architecture models so that its interleaved rotary kernel works; we undo that permutation
//! so one rotary implementation (HF "rotate half") serves both sources. Qwen2/Qwen3 GGUFs are not
//! permuted.
//!
//! Downloading from the Hugging Face Hub is not implemented: pass a local directory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device, Tensor};

use super::model::{Arch, Config};
use crate::backend::{Error, Result};

/// A model read from disk.
pub struct Loaded {
    /// Hyper-parameters.
    pub config: Config,
    /// f32 weights under Hugging Face names.
    pub weights: HashMap<String, Tensor>,
    /// The tokenizer, if the source has one.
    pub tokenizer: Option<tokenizers::Tokenizer>,
    /// The Jinja chat template, if the source has one.
    pub chat_template: Option<String>,
    /// The BOS token text (for templates that use `bos_token`).
    pub bos_token: Option<String>,
    /// The EOS token text.
    pub eos_token: Option<String>,
    /// Where it came from.
    pub source: PathBuf,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded").field("config", &self.config).field("tensors", &self.weights.len()).field("source", &self.source).finish()
    }
}

/// Load a GGUF file or an HF directory, by what `path` is.
///
/// # Errors
/// I/O failures, unsupported architectures, missing files or tensors.
pub fn load(path: &Path) -> Result<Loaded> {
    if path.is_dir() { load_hf_dir(path) } else { load_gguf(path) }
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io { action, path: path.to_path_buf(), source }
}

fn model_err(path: &Path, reason: impl Into<String>) -> Error {
    Error::Model { path: path.to_path_buf(), reason: reason.into() }
}

/// A candle error's message without the backtrace candle appends when `RUST_BACKTRACE` is set
/// (`Error::bt`, used by its `bail!`): a truncated GGUF file is the user's problem, told in one
/// line, not thirteen frames of candle internals.
pub(crate) fn candle_reason(e: &candle_core::Error) -> String {
    match e {
        candle_core::Error::WithBacktrace { inner, .. } => candle_reason(inner),
        candle_core::Error::Context { inner, context } => format!("{context}: {}", candle_reason(inner)),
        candle_core::Error::WithPath { inner, path } => format!("`{}`: {}", path.display(), candle_reason(inner)),
        other => other.to_string(),
    }
}

/// Load a Hugging Face model directory.
///
/// # Errors
/// I/O failures, a bad `config.json`, missing safetensors, an unreadable tokenizer.
pub fn load_hf_dir(dir: &Path) -> Result<Loaded> {
    let cfg_path = dir.join("config.json");
    let text = std::fs::read_to_string(&cfg_path).map_err(io("read", &cfg_path))?;
    let mut config = Config::from_hf_json(&text, &cfg_path)?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io("list", dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(model_err(dir, "no `*.safetensors` file"));
    }
    let mut weights = HashMap::new();
    for f in &files {
        let ts = candle_core::safetensors::load(f, &Device::Cpu).map_err(|e| model_err(f, format!("not a readable safetensors file: {}", candle_reason(&e))))?;
        for (k, t) in ts {
            weights.insert(k, t.to_dtype(DType::F32)?);
        }
    }
    let tok_path = dir.join("tokenizer.json");
    let tokenizer = if tok_path.exists() {
        Some(tokenizers::Tokenizer::from_file(&tok_path).map_err(|e| Error::Tokenizer(format!("`{}`: {e}", tok_path.display())))?)
    } else {
        None
    };
    let (mut chat_template, mut bos_token, mut eos_token) = (None, None, None);
    let tc_path = dir.join("tokenizer_config.json");
    if tc_path.exists() {
        let text = std::fs::read_to_string(&tc_path).map_err(io("read", &tc_path))?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| model_err(&tc_path, format!("not valid JSON: {e}")))?;
        chat_template = v.get("chat_template").and_then(|t| t.as_str()).map(String::from);
        let tok_text = |k: &str| match v.get(k) {
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(o) => o.get("content").and_then(|c| c.as_str()).map(String::from),
            None => None,
        };
        bos_token = tok_text("bos_token");
        eos_token = tok_text("eos_token");
    }
    if let (Some(eos), Some(tok)) = (&eos_token, &tokenizer)
        && let Some(id) = tok.token_to_id(eos)
            && !config.eos_token_ids.contains(&id) {
                config.eos_token_ids.push(id);
            }
    Ok(Loaded { config, weights, tokenizer, chat_template, bos_token, eos_token, source: dir.to_path_buf() })
}

fn meta_u64(v: &gguf_file::Value) -> Option<u64> {
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

fn meta_f64(v: &gguf_file::Value) -> Option<f64> {
    match v {
        gguf_file::Value::F32(x) => Some(f64::from(*x)),
        gguf_file::Value::F64(x) => Some(*x),
        other => meta_u64(other).map(|x| x as f64),
    }
}

/// Load a GGUF file (dequantising every tensor to f32).
///
/// # Errors
/// I/O failures, an unsupported architecture or tokenizer, missing metadata or tensors.
pub fn load_gguf(path: &Path) -> Result<Loaded> {
    let mut file = std::fs::File::open(path).map_err(io("open", path))?;
    let content = gguf_file::Content::read(&mut file).map_err(|e| model_err(path, format!("not a readable GGUF file: {}", candle_reason(&e))))?;
    let md = &content.metadata;
    let get = |k: &str| md.get(k).ok_or_else(|| model_err(path, format!("missing metadata `{k}`")));
    let arch_name = get("general.architecture")?.to_string().map_err(|e| model_err(path, candle_reason(&e)))?.clone();
    let arch = match arch_name.as_str() {
        "llama" => Arch::Llama,
        "qwen2" => Arch::Qwen2,
        "qwen3" => Arch::Qwen3,
        other => return Err(model_err(path, format!("unsupported architecture `{other}` (expected llama, qwen2 or qwen3)"))),
    };
    let int = |k: &str| -> Result<usize> {
        let key = format!("{arch_name}.{k}");
        meta_u64(get(&key)?).map(|x| x as usize).ok_or_else(|| model_err(path, format!("metadata `{key}` is not an integer")))
    };
    let float = |k: &str, d: f64| md.get(&format!("{arch_name}.{k}")).and_then(meta_f64).unwrap_or(d);
    let tokens = gguf_tokens(md, path)?;
    let heads = int("attention.head_count")?;
    let hidden = int("embedding_length")?;
    let kv_heads = int("attention.head_count_kv").unwrap_or(heads);
    let head_dim = int("attention.key_length").unwrap_or(hidden / heads.max(1));
    let tied = !content.tensor_infos.contains_key("output.weight");
    let eos_id = md.get("tokenizer.ggml.eos_token_id").and_then(meta_u64).map(|x| x as u32);
    let bos_id = md.get("tokenizer.ggml.bos_token_id").and_then(meta_u64).map(|x| x as u32);
    let config = Config {
        arch,
        vocab_size: tokens.len(),
        hidden_size: hidden,
        intermediate_size: int("feed_forward_length")?,
        num_hidden_layers: int("block_count")?,
        num_attention_heads: heads,
        num_key_value_heads: kv_heads,
        head_dim,
        rms_norm_eps: float("attention.layer_norm_rms_epsilon", 1e-6),
        rope_theta: float("rope.freq_base", 10_000.0),
        max_position_embeddings: int("context_length").unwrap_or(4096),
        tie_word_embeddings: tied,
        attention_bias: content.tensor_infos.contains_key("blk.0.attn_q.bias"),
        eos_token_ids: eos_id.into_iter().collect(),
    };
    config.validate(path)?;

    let mut weights = HashMap::new();
    for name in content.tensor_infos.keys() {
        let Some(hf) = hf_name(name) else { continue };
        let q = content.tensor(&mut file, name, &Device::Cpu).map_err(|e| model_err(path, format!("tensor `{name}`: {} (is the file truncated?)", candle_reason(&e))))?;
        let mut t = q.dequantize(&Device::Cpu)?.to_dtype(DType::F32)?;
        if arch == Arch::Llama && (name.ends_with("attn_q.weight") || name.ends_with("attn_k.weight")) {
            let n = if name.ends_with("attn_q.weight") { heads } else { kv_heads };
            t = unpermute_rows(&t, n)?;
        }
        weights.insert(hf, t);
    }
    let tokenizer = Some(gguf_tokenizer(md, &tokens, path)?);
    let chat_template = md.get("tokenizer.chat_template").and_then(|v| v.to_string().ok()).cloned();
    let text_of = |id: Option<u32>| id.and_then(|i| tokens.get(i as usize)).cloned();
    Ok(Loaded { config, weights, tokenizer, chat_template, bos_token: text_of(bos_id), eos_token: text_of(eos_id), source: path.to_path_buf() })
}

/// The vocabulary of a GGUF file, from `tokenizer.ggml.tokens`.
fn gguf_tokens(md: &HashMap<String, gguf_file::Value>, path: &Path) -> Result<Vec<String>> {
    md.get("tokenizer.ggml.tokens")
        .ok_or_else(|| model_err(path, "missing metadata `tokenizer.ggml.tokens`"))?
        .to_vec()
        .map_err(|e| model_err(path, candle_reason(&e)))?
        .iter()
        .map(|v| v.to_string().cloned())
        .collect::<candle_core::Result<_>>()
        .map_err(|e| model_err(path, candle_reason(&e)))
}

/// What prompting needs from a model, read without its weights.
pub struct PromptFiles {
    /// The tokenizer, if the source has one.
    pub tokenizer: Option<tokenizers::Tokenizer>,
    /// The Jinja chat template, if the source has one.
    pub chat_template: Option<String>,
    /// The BOS token text.
    pub bos_token: Option<String>,
    /// The EOS token text.
    pub eos_token: Option<String>,
}

/// Reads the tokenizer, chat template and special tokens of a GGUF file or HF directory without
/// loading (or dequantising) any weights: what `rlx render` needs.
///
/// # Errors
/// I/O failures, unreadable tokenizer or metadata.
pub fn load_prompt_files(path: &Path) -> Result<PromptFiles> {
    if path.is_dir() {
        let tok_path = path.join("tokenizer.json");
        let tokenizer = if tok_path.exists() {
            Some(tokenizers::Tokenizer::from_file(&tok_path).map_err(|e| Error::Tokenizer(format!("`{}`: {e}", tok_path.display())))?)
        } else {
            None
        };
        let tc_path = path.join("tokenizer_config.json");
        let (mut chat_template, mut bos_token, mut eos_token) = (None, None, None);
        if tc_path.exists() {
            let cfg = crate::prompt::model_files::TokenizerConfig::from_file(&tc_path).map_err(|e| model_err(&tc_path, e.to_string()))?;
            chat_template = cfg.chat_template;
            bos_token = cfg.special.bos_token;
            eos_token = cfg.special.eos_token;
        }
        return Ok(PromptFiles { tokenizer, chat_template, bos_token, eos_token });
    }
    let mut file = std::fs::File::open(path).map_err(io("open", path))?;
    let content = gguf_file::Content::read(&mut file).map_err(|e| model_err(path, format!("not a readable GGUF file: {}", candle_reason(&e))))?;
    let md = &content.metadata;
    let tokens = gguf_tokens(md, path)?;
    let id = |k: &str| md.get(k).and_then(meta_u64).map(|x| x as u32);
    let text_of = |id: Option<u32>| id.and_then(|i| tokens.get(i as usize)).cloned();
    Ok(PromptFiles {
        tokenizer: Some(gguf_tokenizer(md, &tokens, path)?),
        chat_template: md.get("tokenizer.chat_template").and_then(|v| v.to_string().ok()).cloned(),
        bos_token: text_of(id("tokenizer.ggml.bos_token_id")),
        eos_token: text_of(id("tokenizer.ggml.eos_token_id")),
    })
}

/// The Hugging Face name of a llama.cpp tensor name; `None` for tensors we do not use.
fn hf_name(gguf: &str) -> Option<String> {
    let top = match gguf {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(t) = top {
        return Some(t.to_string());
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, tail) = rest.split_once('.')?;
    let (module, kind) = tail.rsplit_once('.')?;
    let hf = match module {
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        "attn_norm" => "input_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}.{kind}"))
}

/// Undo llama.cpp's q/k row permutation (`convert_hf_to_gguf.py` `LlamaModel.permute`):
/// GGUF rows are `reshape(n_head, 2, hd/2, in).swapaxes(1, 2)` of the HF rows.
fn unpermute_rows(w: &Tensor, n_head: usize) -> Result<Tensor> {
    let (out, inp) = w.dims2()?;
    let half = out / n_head / 2;
    Ok(w.reshape((n_head, half, 2, inp))?.transpose(1, 2)?.contiguous()?.reshape((out, inp))?)
}

/// Build a `tokenizers` BPE tokenizer from GGUF metadata (byte-level BPE, `tokenizer.ggml.model =
/// gpt2`), choosing the pre-tokenizer from `tokenizer.ggml.pre` like llama.cpp does.
fn gguf_tokenizer(md: &HashMap<String, gguf_file::Value>, tokens: &[String], path: &Path) -> Result<tokenizers::Tokenizer> {
    let model = md.get("tokenizer.ggml.model").and_then(|v| v.to_string().ok()).map(String::as_str).unwrap_or("gpt2");
    if model != "gpt2" {
        return Err(Error::Tokenizer(format!("`{}`: GGUF tokenizer model `{model}` is not supported (only byte-level BPE, `gpt2`)", path.display())));
    }
    let merges: Vec<String> = match md.get("tokenizer.ggml.merges") {
        Some(v) => v.to_vec().map_err(|e| Error::Tokenizer(candle_reason(&e)))?.iter().filter_map(|m| m.to_string().ok().cloned()).collect(),
        None => Vec::new(),
    };
    let types: Vec<u64> = match md.get("tokenizer.ggml.token_type") {
        Some(v) => v.to_vec().map_err(|e| Error::Tokenizer(candle_reason(&e)))?.iter().map(|t| meta_u64(t).unwrap_or(1)).collect(),
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
    tokenizers::Tokenizer::from_bytes(serde_json::to_vec(&json).map_err(|e| Error::Tokenizer(e.to_string()))?)
        .map_err(|e| Error::Tokenizer(format!("`{}`: cannot build the tokenizer from GGUF metadata: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gguf_names_map_to_hf() {
        assert_eq!(hf_name("blk.3.attn_q.weight").as_deref(), Some("model.layers.3.self_attn.q_proj.weight"));
        assert_eq!(hf_name("blk.0.ffn_down.weight").as_deref(), Some("model.layers.0.mlp.down_proj.weight"));
        assert_eq!(hf_name("blk.1.attn_k.bias").as_deref(), Some("model.layers.1.self_attn.k_proj.bias"));
        assert_eq!(hf_name("token_embd.weight").as_deref(), Some("model.embed_tokens.weight"));
        assert_eq!(hf_name("rope_freqs.weight"), None);
    }

    #[test]
    fn unpermute_inverts_llama_cpp_permute() {
        // permute(w) = w.reshape(h, 2, hd/2, in).swapaxes(1, 2).reshape(out, in)
        let (h, hd, inp) = (2usize, 4usize, 3usize);
        let w = Tensor::arange(0f32, (h * hd * inp) as f32, &Device::Cpu).unwrap().reshape((h * hd, inp)).unwrap();
        let permuted = w.reshape((h, 2, hd / 2, inp)).unwrap().transpose(1, 2).unwrap().contiguous().unwrap().reshape((h * hd, inp)).unwrap();
        let back = unpermute_rows(&permuted, h).unwrap();
        assert_eq!(back.to_vec2::<f32>().unwrap(), w.to_vec2::<f32>().unwrap());
    }
}
