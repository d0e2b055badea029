//! A GGUF file for llama.cpp: the merged weights as f32, f16 or Q8_0, under llama.cpp's tensor
//! names, with the metadata llama.cpp reads.
//!
//! - A GGUF base (the quickstart's SmolLM2) gives its metadata (architecture keys, the whole
//!   `tokenizer.*` section, the chat template), copied as it is except `general.*`, which names
//!   the export; tensors rlx does not use (`rope_freqs`, ...) are copied raw. The base's own
//!   quantisation (SmolLM2's is Q4_1) is not kept: the weights written are the dequantised base
//!   plus the merged adapter, in the format asked for.
//! - A Hugging Face base gets metadata built from its config and its `tokenizer.json`, which must
//!   be a BPE tokenizer (written as llama.cpp's `gpt2` model).
//!
//! Llama-architecture q/k rows are permuted back into llama.cpp's interleaved rotary layout (the
//! loader undoes the permutation, see `backend::local::load`). One-dimensional tensors (norms,
//! biases) stay f32, and a Q8_0 export keeps a matrix whose rows are not a multiple of 32 (Q8_0's
//! block) in f16, as llama.cpp's converter does.

use std::path::Path;

use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
use candle_core::{DType, Tensor};
use serde_json::Value as Json;

use super::merge::Merged;
use super::error::Error;
use super::types::Dtype;
use crate::backend::local::load::gguf_name;
use crate::backend::local::model::{Arch, Config};

type Meta = gguf_file::Value;

/// The file name for a weight format: `model-q8_0.gguf`.
pub(crate) fn file_name(dtype: Dtype) -> String {
    format!("model-{}.gguf", dtype.name())
}

/// Writes the merged model to `path`.
///
/// # Errors
/// I/O and tensor failures; a Hugging Face base whose tokenizer is not BPE.
pub(crate) fn write(path: &Path, m: &Merged, dtype: Dtype, name: &str) -> Result<(), Error> {
    let is_gguf = !m.base.is_dir();
    let mut meta: Vec<(String, Meta)> = if is_gguf { base_metadata(&m.base)? } else { built_metadata(m)? };
    meta.retain(|(k, _)| !k.starts_with("general."));
    let file_type: u32 = match dtype {
        Dtype::F16 => 1,
        Dtype::Q8_0 => 7,
        _ => 0,
    };
    meta.push(("general.architecture".into(), Meta::String(arch_name(m.config.arch).into())));
    meta.push(("general.name".into(), Meta::String(name.into())));
    meta.push(("general.file_type".into(), Meta::U32(file_type)));
    meta.push(("general.quantization_version".into(), Meta::U32(2)));
    meta.sort_by(|a, b| a.0.cmp(&b.0));

    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    for (hf, t) in &m.weights {
        let Some(g) = gguf_name(hf) else { continue };
        let t = permute_for_llama_cpp(&m.config, &g, t)?;
        tensors.push((g, quantize(&t, dtype)?));
    }
    if is_gguf {
        copy_unused(&m.base, &mut tensors)?;
    }
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let file = std::fs::File::create(path).map_err(|source| Error::Io { action: "create", path: path.to_path_buf(), source })?;
    let mut w = std::io::BufWriter::new(file);
    let meta_refs: Vec<(&str, &Meta)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    gguf_file::write(&mut w, &meta_refs, &tensor_refs)?;
    std::io::Write::flush(&mut w).map_err(|source| Error::Io { action: "write", path: path.to_path_buf(), source })
}

fn arch_name(arch: Arch) -> &'static str {
    match arch {
        Arch::Llama => "llama",
        Arch::Qwen2 => "qwen2",
        Arch::Qwen3 => "qwen3",
    }
}

fn quantize(t: &Tensor, dtype: Dtype) -> Result<QTensor, Error> {
    let t = t.to_dtype(DType::F32)?.contiguous()?;
    let ggml = match (t.rank(), dtype) {
        (r, _) if r < 2 => GgmlDType::F32,
        (_, Dtype::F16) => GgmlDType::F16,
        (_, Dtype::Q8_0) if t.dims()[t.rank() - 1] % 32 == 0 => GgmlDType::Q8_0,
        (_, Dtype::Q8_0) => GgmlDType::F16,
        _ => GgmlDType::F32,
    };
    Ok(QTensor::quantize(&t, ggml)?)
}

/// `convert_hf_to_gguf.py`'s `LlamaModel.permute`: rows `reshape(n_head, 2, hd/2, in)` with the
/// middle axes swapped, on Llama q/k weights only.
fn permute_for_llama_cpp(cfg: &Config, gguf: &str, t: &Tensor) -> Result<Tensor, Error> {
    let heads = if gguf.ends_with("attn_q.weight") {
        cfg.num_attention_heads
    } else if gguf.ends_with("attn_k.weight") {
        cfg.num_key_value_heads
    } else {
        return Ok(t.clone());
    };
    if cfg.arch != Arch::Llama {
        return Ok(t.clone());
    }
    let (out, inp) = t.dims2()?;
    Ok(t.reshape((heads, 2, out / heads / 2, inp))?.transpose(1, 2)?.contiguous()?.reshape((out, inp))?)
}

fn base_metadata(base: &Path) -> Result<Vec<(String, Meta)>, Error> {
    let content = crate::prompt::gguf::read_header(base).map_err(|e| crate::backend::Error::Model { path: base.to_path_buf(), reason: e.to_string() })?;
    Ok(content.metadata.into_iter().collect())
}

/// Base tensors the merged weights do not cover (llama.cpp's `rope_freqs`, ...), copied raw.
fn copy_unused(base: &Path, tensors: &mut Vec<(String, QTensor)>) -> Result<(), Error> {
    let content = crate::prompt::gguf::read_header(base).map_err(|e| crate::backend::Error::Model { path: base.to_path_buf(), reason: e.to_string() })?;
    let mut file = std::fs::File::open(base).map_err(|source| Error::Io { action: "open", path: base.to_path_buf(), source })?;
    let have: std::collections::HashSet<String> = tensors.iter().map(|(n, _)| n.clone()).collect();
    for name in content.tensor_infos.keys() {
        if !have.contains(name) && name != "output.weight" {
            tensors.push((name.clone(), content.tensor(&mut file, name, &candle_core::Device::Cpu)?));
        }
    }
    Ok(())
}

/// Metadata for a Hugging Face base: the architecture keys from its config, the tokenizer from
/// its `tokenizer.json`.
fn built_metadata(m: &Merged) -> Result<Vec<(String, Meta)>, Error> {
    let c = &m.config;
    let a = arch_name(c.arch);
    let u = |x: usize| Meta::U32(x as u32);
    let mut meta: Vec<(String, Meta)> = vec![
        (format!("{a}.context_length"), u(c.max_position_embeddings)),
        (format!("{a}.embedding_length"), u(c.hidden_size)),
        (format!("{a}.block_count"), u(c.num_hidden_layers)),
        (format!("{a}.feed_forward_length"), u(c.intermediate_size)),
        (format!("{a}.attention.head_count"), u(c.num_attention_heads)),
        (format!("{a}.attention.head_count_kv"), u(c.num_key_value_heads)),
        (format!("{a}.attention.key_length"), u(c.head_dim)),
        (format!("{a}.attention.value_length"), u(c.head_dim)),
        (format!("{a}.rope.dimension_count"), u(c.head_dim)),
        (format!("{a}.attention.layer_norm_rms_epsilon"), Meta::F32(c.rms_norm_eps as f32)),
        (format!("{a}.rope.freq_base"), Meta::F32(c.rope_theta as f32)),
        (format!("{a}.vocab_size"), u(c.vocab_size)),
    ];
    meta.extend(tokenizer_metadata(m)?);
    Ok(meta)
}

fn tokenizer_metadata(m: &Merged) -> Result<Vec<(String, Meta)>, Error> {
    let Some(tok) = &m.prompt.tokenizer else {
        return Err(Error::Usage(format!("the base model `{}` has no tokenizer to put into the GGUF file", m.base.display())));
    };
    let json: Json = serde_json::from_str(&tok.to_string(false).map_err(|e| Error::Usage(format!("cannot read the base's tokenizer: {e}")))?).expect("tokenizers writes JSON");
    let model = &json["model"];
    if model["type"] != "BPE" {
        return Err(Error::Usage(format!("GGUF export of a Hugging Face base needs a BPE tokenizer; `{}` has a `{}` one", m.base.display(), model["type"])));
    }
    let n = m.config.vocab_size.max(tok.get_vocab_size(true));
    let mut tokens: Vec<String> = (0..n).map(|i| format!("[PAD{i}]")).collect();
    let mut types: Vec<Meta> = vec![Meta::I32(1); n];
    for (t, id) in tok.get_vocab(true) {
        if let Some(slot) = tokens.get_mut(id as usize) {
            *slot = t;
        }
    }
    for (i, slot) in types.iter_mut().enumerate() {
        if tokens[i].starts_with("[PAD") && tok.id_to_token(i as u32).is_none() {
            *slot = Meta::I32(5); // unused
        }
    }
    for added in json["added_tokens"].as_array().into_iter().flatten() {
        if let Some(id) = added["id"].as_u64().map(|x| x as usize).filter(|&i| i < n) {
            types[id] = Meta::I32(if added["special"].as_bool() == Some(true) { 3 } else { 4 });
        }
    }
    let merges: Vec<Meta> = model["merges"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|mg| match mg {
            Json::String(s) => Some(s.clone()),
            Json::Array(p) if p.len() == 2 => Some(format!("{} {}", p[0].as_str()?, p[1].as_str()?)),
            _ => None,
        })
        .map(Meta::String)
        .collect();
    let mut meta: Vec<(String, Meta)> = vec![
        ("tokenizer.ggml.model".into(), Meta::String("gpt2".into())),
        ("tokenizer.ggml.tokens".into(), Meta::Array(tokens.into_iter().map(Meta::String).collect())),
        ("tokenizer.ggml.token_type".into(), Meta::Array(types)),
        ("tokenizer.ggml.merges".into(), Meta::Array(merges)),
    ];
    if matches!(m.config.arch, Arch::Qwen2 | Arch::Qwen3) {
        meta.push(("tokenizer.ggml.pre".into(), Meta::String("qwen2".into())));
    }
    let id = |s: &Option<String>| s.as_deref().and_then(|t| tok.token_to_id(t));
    if let Some(eos) = id(&m.prompt.special.eos_token).or_else(|| m.config.eos_token_ids.first().copied()) {
        meta.push(("tokenizer.ggml.eos_token_id".into(), Meta::U32(eos)));
    }
    if let Some(bos) = id(&m.prompt.special.bos_token) {
        meta.push(("tokenizer.ggml.bos_token_id".into(), Meta::U32(bos)));
    }
    if let Some(t) = &m.prompt.chat_template {
        meta.push(("tokenizer.chat_template".into(), Meta::String(t.clone())));
    }
    Ok(meta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn names_invert_the_loader() {
        assert_eq!(gguf_name("model.layers.3.self_attn.q_proj.weight").as_deref(), Some("blk.3.attn_q.weight"));
        assert_eq!(gguf_name("model.layers.1.self_attn.k_proj.bias").as_deref(), Some("blk.1.attn_k.bias"));
        assert_eq!(gguf_name("model.layers.0.post_attention_layernorm.weight").as_deref(), Some("blk.0.ffn_norm.weight"));
        assert_eq!(gguf_name("lm_head.weight").as_deref(), Some("output.weight"));
        assert_eq!(gguf_name("model.layers.0.self_attn.rotary_emb.inv_freq"), None);
    }

    #[test]
    fn llama_rows_are_permuted_and_qwen_rows_are_not() {
        let mut cfg = crate::backend::local::model::Config {
            arch: Arch::Llama,
            vocab_size: 4,
            hidden_size: 3,
            intermediate_size: 4,
            num_hidden_layers: 1,
            num_attention_heads: 2,
            num_key_value_heads: 2,
            head_dim: 4,
            rms_norm_eps: 1e-6,
            rope_theta: 1e4,
            max_position_embeddings: 8,
            tie_word_embeddings: true,
            attention_bias: false,
            eos_token_ids: vec![],
        };
        let w = Tensor::arange(0f32, 24.0, &Device::Cpu).unwrap().reshape((8, 3)).unwrap();
        let p = permute_for_llama_cpp(&cfg, "blk.0.attn_q.weight", &w).unwrap();
        // Head 0's rows [0,1,2,3] become [0,2,1,3]: the two halves interleaved.
        let rows: Vec<f32> = p.to_vec2::<f32>().unwrap().iter().map(|r| r[0]).collect();
        assert_eq!(rows, vec![0.0, 6.0, 3.0, 9.0, 12.0, 18.0, 15.0, 21.0]);
        cfg.arch = Arch::Qwen3;
        assert_eq!(permute_for_llama_cpp(&cfg, "blk.0.attn_q.weight", &w).unwrap().to_vec2::<f32>().unwrap(), w.to_vec2::<f32>().unwrap());
    }
}
