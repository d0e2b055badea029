//! The `tinker_public` protobuf schema (proto3) as `prost` derive structs, without `protoc`:
//! the body of `POST /api/v1/forward_backward` ([`ForwardBackwardRequest`]) and the two results
//! `retrieve_future` answers in protobuf ([`ForwardBackwardOutput`], [`SampleResponse`]).
//!
//! Field names, numbers and types are those of the descriptor embedded in the SDK 0.38.0 wheel
//! (`tinker/proto/tinker_public_pb2.py`; SDK 0.38.0). Maps are `BTreeMap`s so that
//! what rlx encodes is byte-for-byte reproducible (protobuf allows any entry order; the SDK's
//! own order is its dict's). Numeric payloads inside `bytes` fields are little-endian arrays;
//! [`crate::tinker::convert`] packs and unpacks them.

use std::collections::BTreeMap;

/// `tinker_public.DType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum DType {
    /// Not set (invalid on the wire).
    Unspecified = 0,
    /// Little-endian `f32`.
    Float32 = 1,
    /// Little-endian `i64`.
    Int64 = 2,
    /// Little-endian `i32`.
    Int32 = 3,
    /// Upper 16 bits of an `f32`.
    Bfloat16 = 4,
}

/// `tinker_public.StopReason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum StopReason {
    /// A stop token or string ended the sequence (`"stop"`).
    Stop = 0,
    /// `max_tokens` was reached (`"length"`).
    Length = 1,
}

/// Body of `POST /api/v1/forward_backward` (also `forward()`, with `forward_only`).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ForwardBackwardRequest {
    /// `<session_id>:train:<n>`.
    #[prost(string, tag = "1")]
    pub model_id: String,
    /// Per-model ordering counter, ≥ 1.
    #[prost(int32, tag = "2")]
    pub seq_id: i32,
    /// The datums of this chunk.
    #[prost(message, repeated, tag = "3")]
    pub data: Vec<Datum>,
    /// `cross_entropy`, `importance_sampling`, `ppo`, `cispo`, `dro`, ...
    #[prost(string, tag = "4")]
    pub loss_fn: String,
    /// Legacy float-only copy of the config (the SDK writes floats to both maps).
    #[prost(btree_map = "string, double", tag = "5")]
    pub loss_fn_config: BTreeMap<String, f64>,
    /// `true` for `forward()`: no gradient is accumulated.
    #[prost(bool, tag = "6")]
    pub forward_only: bool,
    /// The config, preferred when set.
    #[prost(btree_map = "string, message", tag = "7")]
    pub loss_fn_config_v2: BTreeMap<String, LossConfigValue>,
}

/// One `loss_fn_config_v2` value.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct LossConfigValue {
    /// A number or a string.
    #[prost(oneof = "loss_config_value::Value", tags = "1, 2")]
    pub value: Option<loss_config_value::Value>,
}

/// The oneof of [`LossConfigValue`].
pub(crate) mod loss_config_value {
    /// A config value.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub(crate) enum Value {
        /// A number.
        #[prost(double, tag = "1")]
        Number(f64),
        /// A string.
        #[prost(string, tag = "2")]
        Text(String),
    }
}

/// A training datum.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Datum {
    /// The input, as chunks (text tokens, images, audio).
    #[prost(message, repeated, tag = "1")]
    pub model_input: Vec<Chunk>,
    /// Named per-token inputs (`target_tokens` INT64, `weights`/`logprobs`/`advantages` FLOAT32).
    #[prost(btree_map = "string, message", tag = "2")]
    pub loss_fn_inputs: BTreeMap<String, Tensor>,
    /// Where the input tokens came from (StableReinforce); rlx ignores them.
    #[prost(message, repeated, tag = "3")]
    pub model_input_spans: Vec<ProvenanceSpan>,
    /// Same for the loss inputs.
    #[prost(message, repeated, tag = "4")]
    pub loss_fn_input_spans: Vec<ProvenanceSpan>,
}

/// Provenance of a span of tokens.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ProvenanceSpan {
    /// Prompt or sampled tokens.
    #[prost(oneof = "provenance_span::Span", tags = "1, 2")]
    pub span: Option<provenance_span::Span>,
}

/// The oneof of [`ProvenanceSpan`].
pub(crate) mod provenance_span {
    /// A span.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub(crate) enum Span {
        /// Tokens of a prompt.
        #[prost(message, tag = "1")]
        PromptTokens(super::TokenSpan),
        /// Tokens of a sampled sequence.
        #[prost(message, tag = "2")]
        SampledTokens(super::TokenSpan),
    }
}

/// `PromptProvenanceSpan` and `SampledProvenanceSpan` (same fields).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TokenSpan {
    /// A `sample_sequence_ids` entry.
    #[prost(string, tag = "1")]
    pub sequence_id: String,
    /// First token.
    #[prost(int64, tag = "2")]
    pub offset: i64,
    /// Number of tokens.
    #[prost(int64, tag = "3")]
    pub length: i64,
}

/// One chunk of a model input.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Chunk {
    /// Which kind.
    #[prost(oneof = "chunk::Chunk", tags = "1, 2, 3")]
    pub chunk: Option<chunk::Chunk>,
}

/// The oneof of [`Chunk`].
pub(crate) mod chunk {
    /// A chunk.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub(crate) enum Chunk {
        /// Token ids.
        #[prost(message, tag = "1")]
        EncodedText(super::EncodedTextChunk),
        /// An image (not supported by rlx's models).
        #[prost(message, tag = "2")]
        Image(super::ImageChunk),
        /// Audio features (not supported by rlx's models).
        #[prost(message, tag = "3")]
        Dmel(super::DmelChunk),
    }
}

/// Token ids as `i32` little-endian bytes.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct EncodedTextChunk {
    /// `i32` LE token ids.
    #[prost(bytes = "vec", tag = "1")]
    pub tokens: Vec<u8>,
}

/// An image chunk.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ImageChunk {
    /// Encoded image bytes.
    #[prost(bytes = "vec", tag = "1")]
    pub data: Vec<u8>,
    /// `png` or `jpeg`.
    #[prost(string, tag = "2")]
    pub format: String,
    /// Tokens the image is expected to take.
    #[prost(int32, optional, tag = "3")]
    pub expected_tokens: Option<i32>,
    /// Resize target.
    #[prost(message, optional, tag = "4")]
    pub override_dimensions: Option<ImageDimensions>,
}

/// Image size.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ImageDimensions {
    /// Pixels.
    #[prost(uint32, tag = "1")]
    pub width: u32,
    /// Pixels.
    #[prost(uint32, tag = "2")]
    pub height: u32,
}

/// An audio chunk.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct DmelChunk {
    /// Serialized features.
    #[prost(bytes = "vec", tag = "1")]
    pub dmel: Vec<u8>,
}

/// A tensor: dense bytes or sparse CSR, with its dtype and shape.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Tensor {
    /// Dense or sparse.
    #[prost(oneof = "tensor::Encoding", tags = "1, 2")]
    pub encoding: Option<tensor::Encoding>,
    /// Element type.
    #[prost(enumeration = "DType", tag = "3")]
    pub dtype: i32,
    /// Shape (packed).
    #[prost(int64, repeated, tag = "4")]
    pub shape: Vec<i64>,
}

/// The oneof of [`Tensor`].
pub(crate) mod tensor {
    /// A tensor's storage.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub(crate) enum Encoding {
        /// Raw little-endian elements.
        #[prost(bytes, tag = "1")]
        Dense(Vec<u8>),
        /// Compressed sparse rows (2-D tensors only).
        #[prost(message, tag = "2")]
        SparseCsr(super::SparseCsr),
    }
}

/// A 2-D tensor in CSR form.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SparseCsr {
    /// The listed values, in the tensor's dtype.
    #[prost(bytes = "vec", tag = "1")]
    pub values: Vec<u8>,
    /// `i64` row pointers (rows + 1).
    #[prost(bytes = "vec", tag = "2")]
    pub crow_indices: Vec<u8>,
    /// `i64` column of each value.
    #[prost(bytes = "vec", tag = "3")]
    pub col_indices: Vec<u8>,
}

/// Per-datum outputs of a batch, concatenated.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct BatchedTensor {
    /// All datums' elements.
    #[prost(bytes = "vec", tag = "1")]
    pub data: Vec<u8>,
    /// `i64` **byte** offsets into `data`, `num_datums + 1` of them.
    #[prost(bytes = "vec", tag = "2")]
    pub offsets: Vec<u8>,
    /// Element type.
    #[prost(enumeration = "DType", tag = "3")]
    pub dtype: i32,
    /// Per-datum shape after the leading dimension.
    #[prost(int64, repeated, tag = "4")]
    pub trailing_shape: Vec<i64>,
}

/// A record of per-datum output fields.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ArrayRecord {
    /// Type tag (unused by the SDK).
    #[prost(string, tag = "1")]
    pub type_tag: String,
    /// Named outputs (`logprobs`).
    #[prost(btree_map = "string, message", tag = "2")]
    pub fields: BTreeMap<String, BatchedTensor>,
    /// Datums in this record.
    #[prost(int64, tag = "3")]
    pub num_datums: i64,
}

/// Result of a `forward_backward` (or `forward`) request.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ForwardBackwardOutput {
    /// `ArrayRecord` or `module:Class` (the SDK keeps what follows the last `:`).
    #[prost(string, tag = "1")]
    pub loss_fn_output_type: String,
    /// Records whose datums, concatenated, are the request's datums in order.
    #[prost(message, repeated, tag = "2")]
    pub loss_fn_outputs: Vec<ArrayRecord>,
    /// `name:reduction` → value (`loss:sum`).
    #[prost(btree_map = "string, double", tag = "3")]
    pub metrics: BTreeMap<String, f64>,
}

/// Result of an `asample` request.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SampleResponse {
    /// One per sample, in `sample_sequence_ids` order.
    #[prost(message, repeated, tag = "1")]
    pub sequences: Vec<SampledSequence>,
    /// `f32` LE per prompt position, NaN where not computed (position 0).
    #[prost(bytes = "vec", optional, tag = "2")]
    pub prompt_logprobs: Option<Vec<u8>>,
    /// Top-k prompt log-probabilities.
    #[prost(message, optional, tag = "3")]
    pub topk_prompt_logprobs: Option<TopkLogprobs>,
    /// Prompt tokens served from a prefix cache.
    #[prost(int32, tag = "4")]
    pub prompt_cache_hit_tokens: i32,
    /// Log-probabilities of requested prompt targets.
    #[prost(message, optional, tag = "5")]
    pub target_prompt_logprobs: Option<Tensor>,
    /// Alternative prompt tokens.
    #[prost(message, optional, tag = "6")]
    pub prompt_alt_tokens: Option<PromptAltTokens>,
}

/// Alternative prompt tokens and their log-probabilities.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct PromptAltTokens {
    /// Token ids.
    #[prost(message, optional, tag = "1")]
    pub tokens: Option<Tensor>,
    /// Their log-probabilities.
    #[prost(message, optional, tag = "2")]
    pub logprobs: Option<Tensor>,
}

/// One sampled sequence.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SampledSequence {
    /// Why it ended.
    #[prost(enumeration = "StopReason", tag = "1")]
    pub stop_reason: i32,
    /// `i32` LE token ids.
    #[prost(bytes = "vec", tag = "2")]
    pub tokens: Vec<u8>,
    /// `f32` LE log-probabilities, one per token.
    #[prost(bytes = "vec", optional, tag = "3")]
    pub logprobs: Option<Vec<u8>>,
    /// Top-k log-probabilities per sampled token.
    #[prost(message, optional, tag = "4")]
    pub topk_sampled_logprobs: Option<TopkLogprobs>,
}

/// A row-major `length × k` matrix of (token id, log-probability); empty cells are
/// `(0, -99999.0)`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TopkLogprobs {
    /// `i32` LE ids.
    #[prost(bytes = "vec", tag = "1")]
    pub token_ids: Vec<u8>,
    /// `f32` LE log-probabilities.
    #[prost(bytes = "vec", tag = "2")]
    pub logprobs: Vec<u8>,
    /// Columns.
    #[prost(uint32, tag = "3")]
    pub k: u32,
    /// Rows.
    #[prost(uint32, tag = "4")]
    pub length: u32,
}

/// `SamplingParams` (in the schema, unused by SDK 0.38.0, which samples over JSON).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SamplingParams {
    /// Generated-token cap.
    #[prost(int32, optional, tag = "1")]
    pub max_tokens: Option<i32>,
    /// Seed.
    #[prost(uint64, optional, tag = "2")]
    pub seed: Option<u64>,
    /// Temperature.
    #[prost(float, optional, tag = "3")]
    pub temperature: Option<f32>,
    /// Top-k (-1 off).
    #[prost(int32, optional, tag = "4")]
    pub top_k: Option<i32>,
    /// Nucleus mass.
    #[prost(float, optional, tag = "5")]
    pub top_p: Option<f32>,
    /// Stop strings or tokens.
    #[prost(oneof = "sampling_params::Stop", tags = "6, 7")]
    pub stop: Option<sampling_params::Stop>,
}

/// The oneof of [`SamplingParams`].
pub(crate) mod sampling_params {
    /// Stop conditions.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub(crate) enum Stop {
        /// Stop strings.
        #[prost(message, tag = "6")]
        StopStrs(super::StopStrings),
        /// Stop tokens.
        #[prost(message, tag = "7")]
        StopTokens(super::StopTokens),
    }
}

/// Stop strings.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct StopStrings {
    /// The strings.
    #[prost(string, repeated, tag = "1")]
    pub values: Vec<String>,
}

/// Stop tokens.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct StopTokens {
    /// The token ids.
    #[prost(int32, repeated, tag = "1")]
    pub values: Vec<i32>,
}

#[cfg(test)]
/// SDK 0.38.0golden vector 1: the 312 bytes SDK 0.38.0 sends for one `ppo` datum.
pub(crate) const GOLDEN_PPO: &str = "0a0e736573732d313a747261696e3a3010011a9c010a140a120a100100000002000000030000000400000012250a0a61
        6476616e746167657312170a1000000000000000000000803f0000803f180122010412380a0d7461726765745f746f6b
        656e7312270a200200000000000000030000000000000004000000000000000500000000000000180222010412230a08
        6c6f6770726f627312170a100000000000000000000000bf000080be1801220104220370706f2a1e0a13636c69705f68
        6967685f7468726573686f6c6411333333333333f33f2a1d0a12636c69705f6c6f775f7468726573686f6c64119a9999
        999999e93f3a200a13636c69705f686967685f7468726573686f6c64120909333333333333f33f3a1f0a12636c69705f
        6c6f775f7468726573686f6c641209099a9999999999e93f";

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

#[test]
    fn decodes_the_sdks_forward_backward_bytes() {
        let bytes = hex(GOLDEN_PPO);
        assert_eq!(bytes.len(), 312);
        let r = ForwardBackwardRequest::decode(bytes.as_slice()).unwrap();
        assert_eq!(r.model_id, "sess-1:train:0");
        assert_eq!(r.seq_id, 1);
        assert_eq!(r.loss_fn, "ppo");
        assert!(!r.forward_only);
        assert_eq!(r.loss_fn_config["clip_low_threshold"], 0.8);
        assert_eq!(r.loss_fn_config_v2["clip_high_threshold"].value, Some(loss_config_value::Value::Number(1.2)));
        let d = &r.data[0];
        let Some(chunk::Chunk::EncodedText(t)) = &d.model_input[0].chunk else { panic!("text chunk") };
        assert_eq!(t.tokens, [1i32, 2, 3, 4].iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>());
        let tt = &d.loss_fn_inputs["target_tokens"];
        assert_eq!(tt.dtype, DType::Int64 as i32);
        assert_eq!(tt.shape, vec![4]);
        // Re-encoding gives the same message (entry order may differ from the SDK's bytes).
        let again = ForwardBackwardRequest::decode(r.encode_to_vec().as_slice()).unwrap();
        assert_eq!(again, r);
        assert_eq!(r.encode_to_vec().len(), 312);
    }

    #[test]
    fn decodes_the_sdks_forward_only_bytes() {
        // Golden vector 2: the same datum, `cross_entropy`, seq_id 3, forward_only.
        let ppo = hex(GOLDEN_PPO);
        let mut bytes = ppo[..0x10].to_vec(); // model_id field (16 bytes)
        bytes.extend_from_slice(&hex("1003"));
        bytes.extend_from_slice(&ppo[0x12..0x12 + 3 + 0x9c]); // the datum, unchanged
        bytes.extend_from_slice(&hex("220d63726f73735f656e74726f70793001"));
        assert_eq!(bytes.len(), 194);
        let r = ForwardBackwardRequest::decode(bytes.as_slice()).unwrap();
        assert_eq!((r.seq_id, r.loss_fn.as_str(), r.forward_only), (3, "cross_entropy", true));
        assert!(r.loss_fn_config.is_empty() && r.loss_fn_config_v2.is_empty());
    }
}
