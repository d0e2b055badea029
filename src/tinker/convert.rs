//! Conversions between Tinker's wire forms ([`proto`], [`wire`]) and rlx's backend types
//! ([`crate::backend`]): datums, losses, Adam and sampling parameters, sampled sequences and
//! forward/backward outputs, plus the little-endian byte arrays the protobuf messages carry.
//!
//! Both directions live here so that rlx's client and server cannot disagree: the client
//! encodes with `*_to_proto`, the server decodes with `*_from_proto`, and the unit tests run each
//! pair against bytes the SDK produced.

use std::collections::BTreeMap;

use super::proto::{self, DType};
use super::wire;
use crate::seam;
use crate::seam::{Datum, DatumOutput, LossFn, LossFnInputs, SampledSequence, Stop, StopReason, TopK};

/// A wire value rlx cannot use, with where it is.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// A datum's encoding or inputs are unusable.
    #[error("datum {index}: {reason}")]
    Datum {
        /// Position in the request.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// A field outside the datums is unusable.
    #[error("`{field}`: {reason}")]
    Field {
        /// The field (`loss_fn_config.beta`, `sampling_params.top_k`, ...).
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// The loss name or config is not one rlx knows.
    #[error(transparent)]
    Loss(#[from] crate::rl::loss::Error),
}

fn field(field: impl Into<String>, reason: impl Into<String>) -> Error {
    Error::Field { field: field.into(), reason: reason.into() }
}

// ---------------------------------------------------------------------------------------------
// Little-endian arrays

/// Token ids as `i32` LE bytes.
pub(crate) fn i32_bytes(tokens: &[u32]) -> Vec<u8> {
    tokens.iter().flat_map(|&t| (t as i32).to_le_bytes()).collect()
}

/// `f32` LE bytes.
pub(crate) fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// `i64` LE bytes.
pub(crate) fn i64_bytes(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn chunks<const N: usize>(bytes: &[u8], what: &str) -> Result<impl Iterator<Item = [u8; N]>, String> {
    if !bytes.len().is_multiple_of(N) {
        return Err(format!("{what} has {} bytes, not a multiple of {N}", bytes.len()));
    }
    Ok(bytes.chunks_exact(N).map(|c| c.try_into().expect("exact chunk")))
}

/// Token ids from `i32` LE bytes (negative ids are an error).
///
/// # Errors
/// A length that is not a multiple of 4, or a negative id.
pub(crate) fn tokens_from_i32_bytes(bytes: &[u8], what: &str) -> Result<Vec<u32>, String> {
    chunks::<4>(bytes, what)?
        .map(i32::from_le_bytes)
        .map(|t| u32::try_from(t).map_err(|_| format!("{what} contains the negative token id {t}")))
        .collect()
}

/// `f32` values from LE bytes.
///
/// # Errors
/// A length that is not a multiple of 4.
pub(crate) fn f32_from_bytes(bytes: &[u8], what: &str) -> Result<Vec<f32>, String> {
    Ok(chunks::<4>(bytes, what)?.map(f32::from_le_bytes).collect())
}

/// `i64` values from LE bytes.
///
/// # Errors
/// A length that is not a multiple of 8.
pub(crate) fn i64_from_bytes(bytes: &[u8], what: &str) -> Result<Vec<i64>, String> {
    Ok(chunks::<8>(bytes, what)?.map(i64::from_le_bytes).collect())
}

// ---------------------------------------------------------------------------------------------
// Tensors and datums

fn dense<'a>(t: &'a proto::Tensor, name: &str) -> Result<&'a [u8], String> {
    match &t.encoding {
        Some(proto::tensor::Encoding::Dense(b)) => Ok(b),
        Some(proto::tensor::Encoding::SparseCsr(_)) => Err(format!("`{name}` is sparse; rlx takes dense 1-D inputs only")),
        None => Err(format!("`{name}` has no data")),
    }
}

fn check_1d(t: &proto::Tensor, name: &str, len: usize) -> Result<(), String> {
    match t.shape.as_slice() {
        [] => Ok(()),
        [n] if *n as usize == len => Ok(()),
        other => Err(format!("`{name}` has shape {other:?} but {len} values; rlx takes 1-D inputs only (no top-K distillation targets)")),
    }
}

/// A float tensor's values (FLOAT32 or BFLOAT16).
///
/// # Errors
/// Another dtype, sparse storage, a shape that does not match.
pub(crate) fn tensor_f32(t: &proto::Tensor, name: &str) -> Result<Vec<f32>, String> {
    let bytes = dense(t, name)?;
    let v = match DType::try_from(t.dtype) {
        Ok(DType::Float32) => f32_from_bytes(bytes, name)?,
        Ok(DType::Bfloat16) => chunks::<2>(bytes, name)?.map(|b| f32::from_bits(u32::from(u16::from_le_bytes(b)) << 16)).collect(),
        _ => return Err(format!("`{name}` has dtype {} (expected FLOAT32)", t.dtype)),
    };
    check_1d(t, name, v.len())?;
    Ok(v)
}

/// An integer tensor's values as token ids (INT64 or INT32).
///
/// # Errors
/// Another dtype, sparse storage, a shape that does not match, a negative or too-large id.
pub(crate) fn tensor_tokens(t: &proto::Tensor, name: &str) -> Result<Vec<u32>, String> {
    let bytes = dense(t, name)?;
    let wide = match DType::try_from(t.dtype) {
        Ok(DType::Int64) => i64_from_bytes(bytes, name)?,
        Ok(DType::Int32) => chunks::<4>(bytes, name)?.map(|b| i64::from(i32::from_le_bytes(b))).collect(),
        _ => return Err(format!("`{name}` has dtype {} (expected INT64)", t.dtype)),
    };
    check_1d(t, name, wide.len())?;
    wide.into_iter().map(|x| u32::try_from(x).map_err(|_| format!("`{name}` contains the token id {x}"))).collect()
}

/// A dense 1-D FLOAT32 tensor.
pub(crate) fn f32_tensor(v: &[f32]) -> proto::Tensor {
    proto::Tensor { encoding: Some(proto::tensor::Encoding::Dense(f32_bytes(v))), dtype: DType::Float32 as i32, shape: vec![v.len() as i64] }
}

/// A dense 1-D INT64 tensor of token ids.
pub(crate) fn tokens_tensor(v: &[u32]) -> proto::Tensor {
    let wide: Vec<i64> = v.iter().map(|&t| i64::from(t)).collect();
    proto::Tensor { encoding: Some(proto::tensor::Encoding::Dense(i64_bytes(&wide))), dtype: DType::Int64 as i32, shape: vec![v.len() as i64] }
}

/// The `loss_fn_inputs` names rlx's backends use; any other name is refused rather than ignored
/// (a silently dropped `mask` would change the objective).
pub(crate) const INPUT_NAMES: [&str; 4] = ["target_tokens", "weights", "logprobs", "advantages"];

/// A protobuf datum as rlx's [`Datum`] (`index` is for errors).
///
/// # Errors
/// A non-text chunk, bytes of the wrong length, an unknown or malformed input.
pub(crate) fn datum_from_proto(d: &proto::Datum, index: usize) -> Result<Datum, Error> {
    let bad = |reason: String| Error::Datum { index, reason };
    let mut model_input = Vec::new();
    for (i, c) in d.model_input.iter().enumerate() {
        match &c.chunk {
            Some(proto::chunk::Chunk::EncodedText(t)) => model_input.extend(tokens_from_i32_bytes(&t.tokens, "model_input").map_err(bad)?),
            Some(proto::chunk::Chunk::Image(_)) => return Err(bad(format!("model_input chunk {i} is an image; rlx's models take text only"))),
            Some(proto::chunk::Chunk::Dmel(_)) => return Err(bad(format!("model_input chunk {i} is audio; rlx's models take text only"))),
            None => return Err(bad(format!("model_input chunk {i} is empty"))),
        }
    }
    if let Some(name) = d.loss_fn_inputs.keys().find(|k| !INPUT_NAMES.contains(&k.as_str())) {
        return Err(bad(format!("unknown loss_fn_inputs entry `{name}` (rlx takes {})", INPUT_NAMES.join(", "))));
    }
    let get = |name: &str| d.loss_fn_inputs.get(name);
    let target_tokens = match get("target_tokens") {
        Some(t) => tensor_tokens(t, "target_tokens").map_err(bad)?,
        None => return Err(bad("`target_tokens` is missing".into())),
    };
    let float = |name: &str| get(name).map(|t| tensor_f32(t, name)).transpose().map_err(bad);
    let loss_fn_inputs = LossFnInputs { target_tokens, weights: float("weights")?, logprobs: float("logprobs")?, advantages: float("advantages")? };
    Ok(Datum { model_input, loss_fn_inputs })
}

/// rlx's [`Datum`] as the protobuf the SDK would send (one text chunk; INT64 targets, FLOAT32
/// for the rest).
pub(crate) fn datum_to_proto(d: &Datum) -> proto::Datum {
    let text = proto::EncodedTextChunk { tokens: i32_bytes(&d.model_input) };
    let mut inputs = BTreeMap::new();
    let i = &d.loss_fn_inputs;
    inputs.insert("target_tokens".to_string(), tokens_tensor(&i.target_tokens));
    for (name, v) in [("weights", &i.weights), ("logprobs", &i.logprobs), ("advantages", &i.advantages)] {
        if let Some(v) = v {
            inputs.insert(name.to_string(), f32_tensor(v));
        }
    }
    proto::Datum {
        model_input: vec![proto::Chunk { chunk: Some(proto::chunk::Chunk::EncodedText(text)) }],
        loss_fn_inputs: inputs,
        model_input_spans: vec![],
        loss_fn_input_spans: vec![],
    }
}

// ---------------------------------------------------------------------------------------------
// Losses and forward/backward

/// The loss of a `ForwardBackwardRequest`: `loss_fn_config_v2` when set (the server's
/// preference), else the legacy float map.
///
/// # Errors
/// An unknown loss or key, a text value (no rlx loss takes one), an out-of-range value.
pub(crate) fn loss_from_proto(r: &proto::ForwardBackwardRequest) -> Result<(LossFn, f32), Error> {
    let mut config: BTreeMap<String, f64> = if r.loss_fn_config_v2.is_empty() {
        r.loss_fn_config.clone()
    } else {
        r.loss_fn_config_v2
            .iter()
            .map(|(k, v)| match &v.value {
                Some(proto::loss_config_value::Value::Number(x)) => Ok((k.clone(), *x)),
                Some(proto::loss_config_value::Value::Text(t)) => Err(field(format!("loss_fn_config.{k}"), format!("expected a number, found the text `{t}`"))),
                None => Err(field(format!("loss_fn_config.{k}"), "has no value")),
            })
            .collect::<Result<_, _>>()?
    };
    let temperature = learner_temperature(&mut config)?;
    Ok((LossFn::from_tinker(&r.loss_fn, &config)?, temperature))
}

/// `loss_fn_config.temperature`, an rlx extension that hosted Tinker does not take: the
/// temperature this call scores log-probabilities at (the learner's logits divided by it, as
/// verl and TRL score a policy sampled at that temperature). Taken out of `config`; absent, 1
/// (Tinker's learner).
///
/// # Errors
/// A temperature that is not a positive finite number.
pub(crate) fn learner_temperature(config: &mut BTreeMap<String, f64>) -> Result<f32, Error> {
    match config.remove("temperature") {
        None => Ok(1.0),
        Some(t) if t.is_finite() && (0.05..=10.0).contains(&t) => Ok(t as f32),
        Some(t) => Err(field("loss_fn_config.temperature", format!("must be in [0.05, 10], found {t}"))),
    }
}

/// A `ForwardBackwardRequest` as the SDK builds it: floats of the config written to both maps.
pub(crate) fn forward_backward_request(model_id: &str, seq_id: i32, data: &[Datum], loss: &LossFn, forward_only: bool) -> proto::ForwardBackwardRequest {
    let config = loss.config();
    let v2 = config.iter().map(|(k, &x)| (k.clone(), proto::LossConfigValue { value: Some(proto::loss_config_value::Value::Number(x)) })).collect();
    proto::ForwardBackwardRequest {
        model_id: model_id.to_string(),
        seq_id,
        data: data.iter().map(datum_to_proto).collect(),
        loss_fn: loss.name().to_string(),
        loss_fn_config: config,
        forward_only,
        loss_fn_config_v2: v2,
    }
}

/// The metric key of the summed loss.
pub(crate) const LOSS_SUM: &str = "loss:sum";

/// rlx's forward/backward result as the protobuf `retrieve_future` returns: one `ArrayRecord`
/// whose `logprobs` field holds every datum's learner log-probabilities, and `loss:sum`.
pub(crate) fn forward_backward_output_to_proto(out: &seam::ForwardBackwardOutput) -> proto::ForwardBackwardOutput {
    let mut data = Vec::new();
    let mut offsets = vec![0i64];
    for o in &out.outputs {
        data.extend(f32_bytes(&o.logprobs));
        offsets.push(data.len() as i64);
    }
    let logprobs = proto::BatchedTensor { data, offsets: i64_bytes(&offsets), dtype: DType::Float32 as i32, trailing_shape: vec![] };
    let record = proto::ArrayRecord { type_tag: String::new(), fields: BTreeMap::from([("logprobs".to_string(), logprobs)]), num_datums: out.outputs.len() as i64 };
    proto::ForwardBackwardOutput {
        loss_fn_output_type: "ArrayRecord".into(),
        loss_fn_outputs: vec![record],
        metrics: BTreeMap::from([(LOSS_SUM.to_string(), out.loss)]),
    }
}

/// A protobuf forward/backward result as rlx's (learner log-probabilities and `loss:sum`; the
/// diagnostics the service does not report stay at their defaults).
///
/// # Errors
/// A missing `logprobs` field, bad offsets, a missing `loss:sum`.
pub(crate) fn forward_backward_output_from_proto(p: &proto::ForwardBackwardOutput) -> Result<seam::ForwardBackwardOutput, Error> {
    let mut outputs = Vec::new();
    for (r, record) in p.loss_fn_outputs.iter().enumerate() {
        let f = |reason: String| field(format!("loss_fn_outputs[{r}]"), reason);
        let bt = record.fields.get("logprobs").ok_or_else(|| f("has no `logprobs` field".into()))?;
        let offsets = i64_from_bytes(&bt.offsets, "offsets").map_err(f)?;
        for w in offsets.windows(2) {
            let (a, b) = (w[0] as usize, w[1] as usize);
            let slice = bt.data.get(a..b).ok_or_else(|| f(format!("offsets {a}..{b} exceed the {} data bytes", bt.data.len())))?;
            let v = match DType::try_from(bt.dtype) {
                Ok(DType::Bfloat16) => chunks::<2>(slice, "logprobs").map_err(f)?.map(|b| f32::from_bits(u32::from(u16::from_le_bytes(b)) << 16)).collect(),
                _ => f32_from_bytes(slice, "logprobs").map_err(f)?,
            };
            outputs.push(DatumOutput { logprobs: v });
        }
    }
    let loss = *p.metrics.get(LOSS_SUM).ok_or_else(|| field("metrics", format!("has no `{LOSS_SUM}`")))?;
    Ok(seam::ForwardBackwardOutput { loss, outputs, stats: Default::default() })
}

/// `optim_step` metrics in Tinker's `name:reduction` form from rlx's result.
pub(crate) fn optim_metrics(out: &seam::OptimStepOutput) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::from([("clipped:mean".to_string(), if out.clipped { 1.0 } else { 0.0 }), ("step:max".to_string(), out.step as f64)]);
    if let Some(g) = out.grad_norm {
        m.insert("grad_norm:mean".to_string(), g);
    }
    m
}

// ---------------------------------------------------------------------------------------------
// Sampling

/// A JSON prompt's token ids (text chunks only).
///
/// # Errors
/// A negative or too-large id.
pub(crate) fn prompt_from_wire(m: &wire::ModelInput) -> Result<Vec<u32>, Error> {
    m.chunks
        .iter()
        .flat_map(|c| c.tokens.iter())
        .map(|&t| u32::try_from(t).map_err(|_| field("prompt", format!("contains the token id {t}"))))
        .collect()
}

/// Tokens generated when the request names no `max_tokens` (the SDK makes it optional; the
/// service's default is undocumented).
pub(crate) const DEFAULT_MAX_TOKENS: usize = 256;

/// Tinker's sampling params as rlx's. An absent `stop` means the model's EOS tokens (`eos`);
/// `[]` means no stop at all.
///
/// # Errors
/// `top_k` of 0 or below -1, out-of-range values (see [`seam::SamplingParams::validate`]).
pub(crate) fn sampling_params_from_wire(p: &wire::SamplingParams, eos: &[u32]) -> Result<seam::SamplingParams, Error> {
    let top_k = match p.top_k {
        -1 => None,
        k if k > 0 => Some(k as usize),
        k => return Err(field("sampling_params.top_k", format!("expected -1 (off) or at least 1, found {k}"))),
    };
    let stop = match &p.stop {
        None => eos.iter().map(|&t| Stop::Token(t)).collect(),
        Some(wire::StopSpec::Text(s)) => vec![Stop::Text(s.clone())],
        Some(wire::StopSpec::Texts(v)) => v.iter().map(|s| Stop::Text(s.clone())).collect(),
        Some(wire::StopSpec::Tokens(v)) => v
            .iter()
            .map(|&t| u32::try_from(t).map(Stop::Token).map_err(|_| field("sampling_params.stop", format!("contains the token id {t}"))))
            .collect::<Result<_, _>>()?,
    };
    let out = seam::SamplingParams {
        max_tokens: p.max_tokens.map_or(DEFAULT_MAX_TOKENS, |m| m as usize),
        temperature: p.temperature,
        top_p: p.top_p,
        top_k,
        stop,
        seed: p.seed,
    };
    out.validate().map_err(|e| field("sampling_params", e.to_string()))?;
    Ok(out)
}

/// rlx's sampling params as Tinker's. rlx's empty stop list ("run to `max_tokens`") is Tinker's
/// `[]`.
///
/// # Errors
/// A stop list mixing tokens and strings (Tinker takes one kind per request).
pub(crate) fn sampling_params_to_wire(p: &seam::SamplingParams) -> Result<wire::SamplingParams, Error> {
    let tokens: Vec<i64> = p.stop.iter().filter_map(|s| if let Stop::Token(t) = s { Some(i64::from(*t)) } else { None }).collect();
    let texts: Vec<String> = p.stop.iter().filter_map(|s| if let Stop::Text(t) = s { Some(t.clone()) } else { None }).collect();
    let stop = match (tokens.is_empty(), texts.is_empty()) {
        (_, true) => wire::StopSpec::Tokens(tokens),
        (true, false) => wire::StopSpec::Texts(texts),
        (false, false) => return Err(field("sampling.stop", "Tinker takes stop tokens or stop strings, not both in one request")),
    };
    Ok(wire::SamplingParams {
        max_tokens: Some(p.max_tokens as u64),
        seed: p.seed,
        stop: Some(stop),
        temperature: p.temperature,
        top_k: p.top_k.map_or(-1, |k| k as i64),
        top_p: p.top_p,
    })
}

/// Sampled sequences as the protobuf `SampleResponse` (log-probabilities always present).
pub(crate) fn sample_response_to_proto(seqs: &[SampledSequence], prompt_logprobs: Option<&[f32]>, topk: Option<&[TopK]>) -> proto::SampleResponse {
    proto::SampleResponse {
        sequences: seqs
            .iter()
            .map(|s| proto::SampledSequence {
                stop_reason: match s.stop_reason {
                    StopReason::Stop => proto::StopReason::Stop,
                    StopReason::Length => proto::StopReason::Length,
                } as i32,
                tokens: i32_bytes(&s.tokens),
                logprobs: Some(f32_bytes(&s.logprobs)),
                topk_sampled_logprobs: None,
            })
            .collect(),
        prompt_logprobs: prompt_logprobs.map(f32_bytes),
        topk_prompt_logprobs: topk.map(topk_to_proto),
        prompt_cache_hit_tokens: 0,
        target_prompt_logprobs: None,
        prompt_alt_tokens: None,
    }
}

/// Empty cells of a `TopkLogprobs` matrix (a row shorter than k, an unscored position).
pub(crate) const TOPK_EMPTY: (u32, f32) = (0, -99999.0);

/// Rows of top-k pairs as the row-major `length × k` matrix of the protobuf, `k` the longest
/// row, short rows padded with [`TOPK_EMPTY`].
fn topk_to_proto(rows: &[TopK]) -> proto::TopkLogprobs {
    let k = rows.iter().map(Vec::len).max().unwrap_or(0);
    let cells = |r: &TopK| r.iter().copied().chain(std::iter::repeat(TOPK_EMPTY)).take(k).collect::<Vec<_>>();
    let all: Vec<(u32, f32)> = rows.iter().flat_map(cells).collect();
    let ids: Vec<u32> = all.iter().map(|c| c.0).collect();
    let lps: Vec<f32> = all.iter().map(|c| c.1).collect();
    proto::TopkLogprobs { token_ids: i32_bytes(&ids), logprobs: f32_bytes(&lps), k: k as u32, length: rows.len() as u32 }
}

/// A protobuf `TopkLogprobs` as rows of pairs, [`TOPK_EMPTY`] cells dropped.
///
/// # Errors
/// Byte lengths that are not `length × k` cells.
pub(crate) fn topk_from_proto(t: &proto::TopkLogprobs) -> Result<Vec<TopK>, String> {
    let (n, k) = (t.length as usize, t.k as usize);
    let ids = tokens_from_i32_bytes(&t.token_ids, "topk token_ids")?;
    let lps = f32_from_bytes(&t.logprobs, "topk logprobs")?;
    if ids.len() != n * k || lps.len() != n * k {
        return Err(format!("`TopkLogprobs` of {n} × {k} has {} ids and {} log-probabilities", ids.len(), lps.len()));
    }
    Ok((0..n).map(|i| (i * k..(i + 1) * k).map(|j| (ids[j], lps[j])).filter(|&c| c != TOPK_EMPTY).collect()).collect())
}

/// A protobuf `SampleResponse`'s sequences as rlx's.
///
/// # Errors
/// Malformed bytes, an unknown stop reason, missing log-probabilities, lengths that differ.
pub(crate) fn sampled_sequences_from_proto(p: &proto::SampleResponse) -> Result<Vec<SampledSequence>, Error> {
    p.sequences
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let f = |reason: String| field(format!("sequences[{i}]"), reason);
            let tokens = tokens_from_i32_bytes(&s.tokens, "tokens").map_err(f)?;
            let logprobs = f32_from_bytes(s.logprobs.as_deref().ok_or_else(|| f("has no logprobs".into()))?, "logprobs").map_err(f)?;
            if logprobs.len() != tokens.len() {
                return Err(f(format!("has {} tokens but {} logprobs", tokens.len(), logprobs.len())));
            }
            let stop_reason = match proto::StopReason::try_from(s.stop_reason) {
                Ok(proto::StopReason::Stop) => StopReason::Stop,
                Ok(proto::StopReason::Length) => StopReason::Length,
                Err(_) => return Err(f(format!("has the unknown stop reason {}", s.stop_reason))),
            };
            Ok(SampledSequence { tokens, logprobs, stop_reason })
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The JSON forward/backward wire (SDKs before 0.25: SkyRL, verl_tinker, TuFT)

/// The JSON body of `forward_backward` (`forward_backward_input`) or `forward`
/// (`forward_input`) as SDKs before 0.25 sent it. Token ids go as JSON integers: servers that
/// read `TensorData.data` as `list[int] | list[float]` (pydantic) would take `2.0` for a float
/// and fail to index with it. `seq_id` is sent too; servers that order by arrival ignore it.
pub(crate) fn forward_backward_json_request(model_id: &str, seq_id: i64, data: &[Datum], loss: &LossFn, forward_only: bool) -> serde_json::Value {
    use serde_json::json;
    let floats = |v: &[f32]| json!({"data": v, "dtype": "float32", "shape": [v.len()]});
    let datums: Vec<_> = data
        .iter()
        .map(|d| {
            let i = &d.loss_fn_inputs;
            let mut inputs = serde_json::Map::new();
            inputs.insert("target_tokens".into(), json!({"data": i.target_tokens, "dtype": "int64", "shape": [i.target_tokens.len()]}));
            for (name, v) in [("weights", &i.weights), ("logprobs", &i.logprobs), ("advantages", &i.advantages)] {
                if let Some(v) = v {
                    inputs.insert(name.into(), floats(v));
                }
            }
            json!({"model_input": {"chunks": [{"type": "encoded_text", "tokens": d.model_input}]}, "loss_fn_inputs": inputs})
        })
        .collect();
    let input = json!({"data": datums, "loss_fn": loss.name(), "loss_fn_config": loss.config()});
    let key = if forward_only { "forward_input" } else { "forward_backward_input" };
    json!({"model_id": model_id, "seq_id": seq_id, key: input})
}

/// A JSON datum as rlx's (the server side of [`forward_backward_json_request`]).
///
/// # Errors
/// A chunk that is not text, a token id that is not a non-negative integer, a missing
/// `target_tokens`.
pub(crate) fn datum_from_json(d: &wire::JsonDatum, index: usize) -> Result<Datum, Error> {
    let bad = |reason: String| Error::Datum { index, reason };
    let model_input = prompt_from_wire(&d.model_input).map_err(|e| bad(e.to_string()))?;
    let floats = |name: &str| d.loss_fn_inputs.get(name).map(|t| t.data.iter().map(|&x| x as f32).collect::<Vec<f32>>());
    let targets = d.loss_fn_inputs.get("target_tokens").ok_or_else(|| bad("has no `target_tokens`".into()))?;
    let target_tokens = targets
        .data
        .iter()
        .map(|&x| if x >= 0.0 && x.fract() == 0.0 && x <= f64::from(u32::MAX) { Ok(x as u32) } else { Err(bad(format!("target token {x} is not a token id"))) })
        .collect::<Result<Vec<u32>, Error>>()?;
    Ok(Datum { model_input, loss_fn_inputs: LossFnInputs { target_tokens, weights: floats("weights"), logprobs: floats("logprobs"), advantages: floats("advantages") } })
}

/// A JSON forward/backward result as rlx's: per-datum `logprobs`, and the loss from
/// `loss:sum` or, from servers that report no metrics (SkyRL), the sum of the per-token
/// `elementwise_loss` they return instead.
///
/// # Errors
/// A datum without `logprobs`, or neither `loss:sum` nor `elementwise_loss`.
pub(crate) fn forward_backward_output_from_json(o: &wire::ForwardBackwardOutput) -> Result<seam::ForwardBackwardOutput, Error> {
    let mut outputs = Vec::with_capacity(o.loss_fn_outputs.len());
    let mut elementwise = Some(0.0);
    for (i, record) in o.loss_fn_outputs.iter().enumerate() {
        let lp = record.get("logprobs").ok_or_else(|| field(format!("loss_fn_outputs[{i}]"), "has no `logprobs`"))?;
        outputs.push(DatumOutput { logprobs: lp.data.iter().map(|&x| x as f32).collect() });
        elementwise = match (elementwise, record.get("elementwise_loss")) {
            (Some(sum), Some(t)) => Some(sum + t.data.iter().sum::<f64>()),
            _ => None,
        };
    }
    let loss = match (o.metrics.get(LOSS_SUM), elementwise) {
        (Some(&l), _) => l,
        (None, Some(l)) if !o.loss_fn_outputs.is_empty() => l,
        _ => return Err(field("metrics", format!("has no `{LOSS_SUM}` and the outputs no `elementwise_loss`"))),
    };
    Ok(seam::ForwardBackwardOutput { loss, outputs, stats: Default::default() })
}

/// The completions of a JSON sample result.
///
/// # Errors
/// An unknown stop reason, or tokens and log-probabilities of different lengths.
pub(crate) fn sampled_sequences_from_json(r: &wire::SampleResponse) -> Result<Vec<SampledSequence>, Error> {
    r.sequences
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let f = |reason: String| field(format!("sequences[{i}]"), reason);
            if s.logprobs.len() != s.tokens.len() {
                return Err(f(format!("has {} tokens but {} logprobs", s.tokens.len(), s.logprobs.len())));
            }
            let stop_reason = match s.stop_reason.as_str() {
                "stop" => StopReason::Stop,
                "length" => StopReason::Length,
                other => return Err(f(format!("has the unknown stop reason `{other}`"))),
            };
            Ok(SampledSequence { tokens: s.tokens.clone(), logprobs: s.logprobs.clone(), stop_reason })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;

    #[test]
    fn topk_rows_survive_the_protobuf_matrix_with_short_rows_padded_and_unpadded() {
        let rows: Vec<TopK> = vec![vec![], vec![(7, -0.1), (3, -2.5)], vec![(0, -0.7)]];
        let p = topk_to_proto(&rows);
        assert_eq!((p.length, p.k, p.token_ids.len(), p.logprobs.len()), (3, 2, 24, 24));
        assert_eq!(topk_from_proto(&p).unwrap(), rows, "token 0 with a real score is kept; only the sentinel is dropped");
        let cut = proto::TopkLogprobs { token_ids: p.token_ids[..20].to_vec(), ..p };
        assert!(topk_from_proto(&cut).unwrap_err().contains("3 × 2"));
    }

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    fn golden_datum() -> Datum {
        Datum {
            model_input: vec![1, 2, 3, 4],
            loss_fn_inputs: LossFnInputs {
                target_tokens: vec![2, 3, 4, 5],
                weights: None,
                logprobs: Some(vec![0.0, 0.0, -0.5, -0.25]),
                advantages: Some(vec![0.0, 0.0, 1.0, 1.0]),
            },
        }
    }

    #[test]
    fn the_sdks_bytes_decode_to_rlx_types_and_rlx_encodes_the_same_message() {
        let bytes = hex(proto::GOLDEN_PPO);
        let r = proto::ForwardBackwardRequest::decode(bytes.as_slice()).unwrap();
        assert_eq!(datum_from_proto(&r.data[0], 0).unwrap(), golden_datum());
        assert_eq!(loss_from_proto(&r).unwrap(), (LossFn::Ppo { clip_low_threshold: 0.8, clip_high_threshold: 1.2 }, 1.0));
        let ours = forward_backward_request("sess-1:train:0", 1, &[golden_datum()], &LossFn::PPO, false);
        assert_eq!(ours, r, "rlx's request is the SDK's, field for field");
    }

    #[test]
    fn bad_datums_say_what_is_wrong() {
        let mut d = datum_to_proto(&golden_datum());
        d.loss_fn_inputs.insert("mask".into(), f32_tensor(&[1.0; 4]));
        let e = datum_from_proto(&d, 3).unwrap_err().to_string();
        assert!(e.starts_with("datum 3: unknown loss_fn_inputs entry `mask`"), "{e}");
        let mut d = datum_to_proto(&golden_datum());
        d.model_input[0] = proto::Chunk { chunk: Some(proto::chunk::Chunk::EncodedText(proto::EncodedTextChunk { tokens: vec![1, 2, 3] })) };
        assert!(datum_from_proto(&d, 0).unwrap_err().to_string().contains("not a multiple of 4"));
        let mut r = forward_backward_request("m", 1, &[golden_datum()], &LossFn::PPO, false);
        r.loss_fn = "ppo2".into();
        assert!(loss_from_proto(&r).unwrap_err().to_string().contains("unknown loss function `ppo2`"));
    }

    #[test]
    fn outputs_round_trip() {
        let out = seam::ForwardBackwardOutput {
            loss: 1.5,
            outputs: vec![DatumOutput { logprobs: vec![-0.5, -1.0] }, DatumOutput { logprobs: vec![-2.0] }],
            stats: Default::default(),
        };
        let p = forward_backward_output_to_proto(&out);
        let back = forward_backward_output_from_proto(&proto::ForwardBackwardOutput::decode(p.encode_to_vec().as_slice()).unwrap()).unwrap();
        assert_eq!(back, out);
        let seqs = vec![SampledSequence { tokens: vec![5, 6], logprobs: vec![-0.1, -0.2], stop_reason: StopReason::Stop }];
        assert_eq!(sampled_sequences_from_proto(&sample_response_to_proto(&seqs, None, None)).unwrap(), seqs);
    }

    #[test]
    fn sampling_params_both_ways() {
        let w: wire::SamplingParams = serde_json::from_str(r#"{"max_tokens":16,"seed":3,"temperature":1.0,"top_k":-1,"top_p":1.0}"#).unwrap();
        let p = sampling_params_from_wire(&w, &[7]).unwrap();
        assert_eq!(p.stop, vec![Stop::Token(7)], "absent stop means the model's EOS");
        assert_eq!((p.max_tokens, p.top_k, p.seed), (16, None, Some(3)));
        let back = sampling_params_to_wire(&p).unwrap();
        assert_eq!(back.stop, Some(wire::StopSpec::Tokens(vec![7])));
        let none = sampling_params_from_wire(&wire::SamplingParams { stop: Some(wire::StopSpec::Tokens(vec![])), ..w.clone() }, &[7]).unwrap();
        assert!(none.stop.is_empty());
        let e = sampling_params_from_wire(&wire::SamplingParams { top_k: 0, ..w }, &[]).unwrap_err().to_string();
        assert!(e.contains("sampling_params.top_k"), "{e}");
    }

    #[test]
    fn json_forward_backward_round_trips_and_sums_elementwise_losses() {
        let d = Datum { model_input: vec![1, 2], loss_fn_inputs: LossFnInputs { target_tokens: vec![2, 3], weights: None, logprobs: Some(vec![-0.5, -1.0]), advantages: Some(vec![1.0, 1.0]) } };
        let body = forward_backward_json_request("m", 4, std::slice::from_ref(&d), &LossFn::PPO, false);
        // Token ids are JSON integers (a float would be read as one by pydantic servers).
        assert_eq!(body["forward_backward_input"]["data"][0]["loss_fn_inputs"]["target_tokens"]["data"], serde_json::json!([2, 3]));
        assert_eq!(body["forward_backward_input"]["loss_fn"], "ppo");
        assert_eq!(body["seq_id"], 4);
        assert!(forward_backward_json_request("m", 1, &[], &LossFn::CrossEntropy, true).get("forward_input").is_some());
        let parsed: wire::JsonForwardBackwardRequest = serde_json::from_value(body).unwrap();
        let input = parsed.forward_backward_input.unwrap();
        assert_eq!(datum_from_json(&input.data[0], 0).unwrap(), d);
        let out: wire::ForwardBackwardOutput = serde_json::from_value(serde_json::json!({"loss_fn_output_type": "scalar", "metrics": {},
            "loss_fn_outputs": [{"logprobs": {"data": [-1.0, -2.0], "dtype": "float32"}, "elementwise_loss": {"data": [0.25, 0.5], "dtype": "float32"}}]})).unwrap();
        let o = forward_backward_output_from_json(&out).unwrap();
        assert_eq!((o.loss, o.outputs[0].logprobs.clone()), (0.75, vec![-1.0, -2.0]));
        let none: wire::ForwardBackwardOutput = serde_json::from_value(serde_json::json!({"loss_fn_output_type": "scalar", "metrics": {}, "loss_fn_outputs": [{"logprobs": {"data": [-1.0], "dtype": "float32"}}]})).unwrap();
        assert!(forward_backward_output_from_json(&none).unwrap_err().to_string().contains("elementwise_loss"));
    }
}
