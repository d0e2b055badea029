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
//! Locating a model (a path, `pypi:`, or a Hub repo id) is [`crate::backend::model_source`]'s job.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device, Tensor};
use rlx_kernels::{GgmlType, QMatrix};

use super::model::{Arch, Config};
use crate::backend::error::{Error, Result};

/// A model read from disk. Its chat template and special tokens are prompting's business:
/// [`crate::prompt::model_files`] reads them (from the same files, with the same functions).
pub struct Loaded {
    /// Hyper-parameters.
    pub config: Config,
    /// f32 weights under Hugging Face names.
    pub weights: HashMap<String, Tensor>,
    /// The tokenizer, if the source has one (the sampler needs it for stop strings).
    pub tokenizer: Option<tokenizers::Tokenizer>,
    /// Where it came from.
    pub source: PathBuf,
    /// The projection weights a GGUF file stores in a format the sampler decodes as stored
    /// (Q4_0, Q4_1, Q8_0), under Hugging Face names (`lm_head.weight` for a tied head);
    /// `backend.sample_weights: gguf` decodes frozen weights with these.
    pub blocks: HashMap<String, Arc<QMatrix>>,
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
        let ts = candle_core::safetensors::load(f, &Device::Cpu).map_err(|e| model_err(f, format!("not a readable safetensors file: {}", crate::causes::candle_reason(&e))))?;
        for (k, t) in ts {
            weights.insert(k, t.to_dtype(DType::F32)?);
        }
    }
    let files = crate::prompt::model_files::read(dir).map_err(|e| crate::backend::model_source::prompt_error(&e, dir))?;
    if let (Some(eos), Some(tok)) = (&files.special.eos_token, &files.tokenizer)
        && let Some(id) = tok.token_to_id(eos)
        && !config.eos_token_ids.contains(&id)
    {
        config.eos_token_ids.push(id);
    }
    let tokenizer = files.tokenizer;
    Ok(Loaded { config, weights, tokenizer, source: dir.to_path_buf(), blocks: HashMap::new() })
}


fn meta_f64(v: &gguf_file::Value) -> Option<f64> {
    match v {
        gguf_file::Value::F32(x) => Some(f64::from(*x)),
        gguf_file::Value::F64(x) => Some(*x),
        other => crate::prompt::gguf::meta_u64(other).map(|x| x as f64),
    }
}

/// Load a GGUF file (dequantising every tensor to f32).
///
/// # Errors
/// I/O failures, an unsupported architecture or tokenizer, missing metadata or tensors.
pub fn load_gguf(path: &Path) -> Result<Loaded> {
    let content = crate::prompt::gguf::read_header(path).map_err(|e| crate::backend::model_source::prompt_error(&e, path))?;
    let mut file = std::fs::File::open(path).map_err(io("open", path))?;
    let md = &content.metadata;
    let get = |k: &str| md.get(k).ok_or_else(|| model_err(path, format!("missing metadata `{k}`")));
    let arch_name = get("general.architecture")?.to_string().map_err(|e| model_err(path, crate::causes::candle_reason(&e)))?.clone();
    let arch = match arch_name.as_str() {
        "llama" => Arch::Llama,
        "qwen2" => Arch::Qwen2,
        "qwen3" => Arch::Qwen3,
        other => return Err(model_err(path, format!("unsupported architecture `{other}` (expected llama, qwen2 or qwen3)"))),
    };
    let int = |k: &str| -> Result<usize> {
        let key = format!("{arch_name}.{k}");
        crate::prompt::gguf::meta_u64(get(&key)?).map(|x| x as usize).ok_or_else(|| model_err(path, format!("metadata `{key}` is not an integer")))
    };
    let float = |k: &str, d: f64| md.get(&format!("{arch_name}.{k}")).and_then(meta_f64).unwrap_or(d);
    let tokens = crate::prompt::gguf::tokens(md, path).map_err(|e| crate::backend::model_source::prompt_error(&e, path))?;
    let heads = int("attention.head_count")?;
    let hidden = int("embedding_length")?;
    let kv_heads = int("attention.head_count_kv").unwrap_or(heads);
    let head_dim = int("attention.key_length").unwrap_or(hidden / heads.max(1));
    let tied = !content.tensor_infos.contains_key("output.weight");
    let eos_id = md.get("tokenizer.ggml.eos_token_id").and_then(crate::prompt::gguf::meta_u64).map(|x| x as u32);
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
    let mut blocks = HashMap::new();
    for name in content.tensor_infos.keys() {
        let Some(hf) = hf_name(name) else { continue };
        let q = content.tensor(&mut file, name, &Device::Cpu).map_err(|e| model_err(path, format!("tensor `{name}`: {} (is the file truncated?)", crate::causes::candle_reason(&e))))?;
        let mut t = q.dequantize(&Device::Cpu)?.to_dtype(DType::F32)?;
        let mut native = as_stored(&q).map_err(|reason| model_err(path, format!("tensor `{name}`: {reason}")))?;
        if arch == Arch::Llama && (name.ends_with("attn_q.weight") || name.ends_with("attn_k.weight")) {
            let n = if name.ends_with("attn_q.weight") { heads } else { kv_heads };
            t = unpermute_rows(&t, n)?;
            native = native.map(|m| m.select_rows(&unpermuted_order(m.n(), n)));
        }
        if let Some(m) = native {
            let m = Arc::new(m);
            if hf == "model.embed_tokens.weight" && tied {
                blocks.insert("lm_head.weight".to_string(), m.clone());
            }
            blocks.insert(hf.clone(), m);
        }
        weights.insert(hf, t);
    }
    let tokenizer = Some(crate::prompt::gguf::tokenizer(md, &tokens, path).map_err(|e| crate::backend::model_source::prompt_error(&e, path))?);
    Ok(Loaded { config, weights, tokenizer, source: path.to_path_buf(), blocks })
}




/// The Hugging Face name of a llama.cpp tensor name; `None` for tensors we do not use.
fn hf_name(gguf: &str) -> Option<String> {
    if let Some((_, hf)) = TOP_NAMES.iter().find(|(g, _)| *g == gguf) {
        return Some((*hf).to_string());
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, tail) = rest.split_once('.')?;
    let (module, kind) = tail.rsplit_once('.')?;
    let (_, hf) = LAYER_NAMES.iter().find(|(g, _)| *g == module)?;
    Some(format!("model.layers.{layer}.{hf}.{kind}"))
}

/// The GGUF name of a Hugging Face tensor name: [`hf_name`] read backwards, from the same tables
/// (`rlx export --format gguf`).
pub(crate) fn gguf_name(hf: &str) -> Option<String> {
    if let Some((g, _)) = TOP_NAMES.iter().find(|(_, h)| *h == hf) {
        return Some((*g).to_string());
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, tail) = rest.split_once('.')?;
    let (module, kind) = tail.rsplit_once('.')?;
    let (g, _) = LAYER_NAMES.iter().find(|(_, h)| *h == module)?;
    Some(format!("blk.{layer}.{g}.{kind}"))
}

/// GGUF tensor names outside the layers, with their Hugging Face names.
const TOP_NAMES: &[(&str, &str)] = &[("token_embd.weight", "model.embed_tokens.weight"), ("output_norm.weight", "model.norm.weight"), ("output.weight", "lm_head.weight")];

/// GGUF module names inside a layer (`blk.N.<module>.weight`), with their Hugging Face names
/// (`model.layers.N.<module>.weight`).
const LAYER_NAMES: &[(&str, &str)] = &[
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("attn_q_norm", "self_attn.q_norm"),
    ("attn_k_norm", "self_attn.k_norm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
    ("attn_norm", "input_layernorm"),
    ("ffn_norm", "post_attention_layernorm"),
];

/// A 2-D GGUF tensor in a format the sampler's kernels read as stored, else `None`.
fn as_stored(q: &candle_core::quantized::QTensor) -> std::result::Result<Option<QMatrix>, String> {
    use candle_core::quantized::GgmlDType;
    let ty = match q.dtype() {
        GgmlDType::Q4_0 => GgmlType::Q4_0,
        GgmlDType::Q4_1 => GgmlType::Q4_1,
        GgmlDType::Q8_0 => GgmlType::Q8_0,
        _ => return Ok(None),
    };
    let &[n, k] = q.shape().dims() else { return Ok(None) };
    let bytes = q.data().map_err(|e| crate::causes::candle_reason(&e))?;
    QMatrix::from_ggml(ty, &bytes, n, k).map(Some)
}

/// The GGUF row each Hugging Face row of a q/k projection comes from ([`unpermute_rows`] as an
/// index list, for weights kept in blocks).
fn unpermuted_order(rows: usize, n_head: usize) -> Vec<usize> {
    let hd = rows / n_head;
    let half = hd / 2;
    (0..rows).map(|r| (r / hd) * hd + 2 * (r % half) + (r % hd) / half).collect()
}

/// Undo llama.cpp's q/k row permutation (`convert_hf_to_gguf.py` `LlamaModel.permute`):
/// GGUF rows are `reshape(n_head, 2, hd/2, in).swapaxes(1, 2)` of the HF rows.
fn unpermute_rows(w: &Tensor, n_head: usize) -> Result<Tensor> {
    let (out, inp) = w.dims2()?;
    let half = out / n_head / 2;
    Ok(w.reshape((n_head, half, 2, inp))?.transpose(1, 2)?.contiguous()?.reshape((out, inp))?)
}


#[cfg(test)]
mod tests {
    use super::*;

    /// The index form of the row permutation moves rows exactly as the tensor form does.
    #[test]
    fn unpermuted_order_matches_unpermute_rows() {
        let (heads, hd, inp) = (3, 8, 2);
        let rows = heads * hd;
        let w = Tensor::arange(0f32, (rows * inp) as f32, &Device::Cpu).unwrap().reshape((rows, inp)).unwrap();
        let by_tensor = unpermute_rows(&w, heads).unwrap().to_vec2::<f32>().unwrap();
        let src = w.to_vec2::<f32>().unwrap();
        let by_index: Vec<Vec<f32>> = unpermuted_order(rows, heads).into_iter().map(|r| src[r].clone()).collect();
        assert_eq!(by_tensor, by_index);
    }

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
