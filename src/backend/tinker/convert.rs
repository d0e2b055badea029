//! rlx's backend types to Tinker's wire messages and back, client side: datums into a
//! protobuf `ForwardBackwardRequest`, protobuf results into outputs, `optim_step` metrics into an
//! [`OptimStepOutput`].

use std::collections::BTreeMap;

use prost::Message;

use super::Error;
use crate::backend::{self, Datum, DatumOutput, ForwardBackwardOutput, LossFn, OptimStepOutput, SampledSequence, StopReason};
use crate::tinker::proto;

fn le_i32(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|&t| (t as i32).to_le_bytes()).collect()
}
fn le_i64(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|&t| i64::from(t).to_le_bytes()).collect()
}
fn le_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn dense(bytes: Vec<u8>, dtype: proto::DType, n: usize) -> proto::Tensor {
    proto::Tensor { encoding: Some(proto::tensor::Encoding::Dense(bytes)), dtype: dtype as i32, shape: vec![n as i64] }
}

/// The protobuf body of `forward_backward` for one chunk of datums (§5.3): tokens as i32,
/// `target_tokens` as i64, float inputs as f32, all little-endian; config floats written to
/// both the legacy and the v2 map, as the SDK does.
pub fn forward_backward_request(model_id: &str, seq_id: i64, data: &[Datum], loss: &LossFn, forward_only: bool) -> Vec<u8> {
    let data = data
        .iter()
        .map(|d| {
            let n = d.model_input.len();
            let i = &d.loss_fn_inputs;
            let mut inputs = BTreeMap::new();
            inputs.insert("target_tokens".to_string(), dense(le_i64(&i.target_tokens), proto::DType::Int64, n));
            // Tinker's losses read only the inputs they define; cross_entropy needs its weights.
            let weights = match (loss, &i.weights) {
                (_, Some(w)) => Some(w.clone()),
                (LossFn::CrossEntropy, None) => Some(vec![1.0; n]),
                _ => None,
            };
            for (name, v) in [("weights", &weights), ("logprobs", &i.logprobs), ("advantages", &i.advantages)] {
                if let Some(v) = v {
                    inputs.insert(name.to_string(), dense(le_f32(v), proto::DType::Float32, n));
                }
            }
            proto::Datum {
                model_input: vec![proto::Chunk { chunk: Some(proto::chunk::Chunk::EncodedText(proto::EncodedTextChunk { tokens: le_i32(&d.model_input) })) }],
                loss_fn_inputs: inputs,
                model_input_spans: vec![],
                loss_fn_input_spans: vec![],
            }
        })
        .collect();
    let config = loss.config();
    let v2 = config.iter().map(|(k, &v)| (k.clone(), proto::LossConfigValue { value: Some(proto::loss_config_value::Value::Number(v)) })).collect();
    proto::ForwardBackwardRequest {
        model_id: model_id.to_string(),
        seq_id: seq_id as i32,
        data,
        loss_fn: loss.name().to_string(),
        loss_fn_config: config,
        forward_only,
        loss_fn_config_v2: v2,
    }
    .encode_to_vec()
}

/// Per-datum learner log-probabilities and the metrics of a protobuf `ForwardBackwardOutput`
/// for a chunk of `n` datums.
///
/// # Errors
/// [`Error::Protocol`] for a message that does not decode, lacks `logprobs`, or has another
/// number of datums.
pub fn forward_backward_output(bytes: &[u8], n: usize) -> Result<(Vec<Vec<f32>>, BTreeMap<String, f64>), Error> {
    let bad = |reason: String| Error::Protocol { path: "retrieve_future (ForwardBackwardOutput)".into(), reason };
    let out = proto::ForwardBackwardOutput::decode(bytes).map_err(|e| bad(e.to_string()))?;
    let mut logprobs = Vec::with_capacity(n);
    for rec in &out.loss_fn_outputs {
        let t = rec.fields.get("logprobs").ok_or_else(|| bad(format!("no `logprobs` field (fields: {:?})", rec.fields.keys().collect::<Vec<_>>())))?;
        logprobs.extend(batched_f32(t).map_err(bad)?);
    }
    if logprobs.len() != n {
        return Err(bad(format!("{} datums sent, {} outputs returned", n, logprobs.len())));
    }
    Ok((logprobs, out.metrics))
}

/// Splits a `BatchedTensor` of f32 (or bf16) values into its datums by its byte offsets.
fn batched_f32(t: &proto::BatchedTensor) -> Result<Vec<Vec<f32>>, String> {
    let offsets: Vec<usize> = t.offsets.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")) as usize).collect();
    let decode = |b: &[u8]| -> Result<Vec<f32>, String> {
        match proto::DType::try_from(t.dtype) {
            Ok(proto::DType::Float32) => Ok(b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect()),
            Ok(proto::DType::Bfloat16) => Ok(b.chunks_exact(2).map(|c| f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16)).collect()),
            other => Err(format!("logprobs of dtype {other:?}")),
        }
    };
    offsets
        .windows(2)
        .map(|w| {
            let (a, b) = (w[0], w[1]);
            if a > b || b > t.data.len() {
                return Err(format!("offsets {a}..{b} outside {} bytes of data", t.data.len()));
            }
            decode(&t.data[a..b])
        })
        .collect()
}

/// The [`ForwardBackwardOutput`] of a batch from the service's per-datum log-probabilities:
/// the loss is the service's `loss:sum`; the ratio and clipping statistics are computed here
/// from the same numbers the service used, so they mean what they mean on the local backend.
pub fn fb_output(data: &[Datum], loss: &LossFn, logprobs: Vec<Vec<f32>>, loss_sum: f64) -> backend::Result<ForwardBackwardOutput> {
    let (mut lp, mut q, mut adv, mut w) = (vec![], vec![], vec![], vec![]);
    for (d, l) in data.iter().zip(&logprobs) {
        let i = &d.loss_fn_inputs;
        if l.len() != d.model_input.len() {
            return Err(backend::Error::InvalidArgument { what: "Tinker forward_backward output", reason: format!("{} log-probabilities for {} tokens", l.len(), d.model_input.len()) });
        }
        lp.extend_from_slice(l);
        q.extend(i.logprobs.clone().unwrap_or_else(|| vec![0.0; l.len()]));
        adv.extend(i.advantages.clone().unwrap_or_else(|| vec![0.0; l.len()]));
        w.extend(i.weights.clone().unwrap_or_else(|| vec![1.0; l.len()]));
    }
    let stats = crate::rl::loss::stats(loss, &lp, &q, &adv, &w);
    Ok(ForwardBackwardOutput { loss: loss_sum, outputs: logprobs.into_iter().map(|logprobs| DatumOutput { logprobs }).collect(), stats })
}

/// An [`OptimStepOutput`] from `optim_step`'s `{"metrics": {...}}`; the gradient norm is the
/// service's when it reports one (`grad_norm:…`), NaN otherwise.
pub fn optim_output(v: &serde_json::Value, step: u64) -> OptimStepOutput {
    let metrics: BTreeMap<String, f64> = v.get("metrics").and_then(|m| m.as_object()).map(|m| m.iter().filter_map(|(k, v)| v.as_f64().map(|x| (k.clone(), x))).collect()).unwrap_or_default();
    let grad_norm = metrics.iter().find(|(k, _)| k.split(':').next() == Some("grad_norm")).map_or(f64::NAN, |(_, &v)| v);
    let clipped = metrics.iter().find(|(k, _)| k.split(':').next() == Some("clipped")).is_some_and(|(_, &v)| v > 0.0);
    OptimStepOutput { grad_norm, clipped, step, metrics }
}

/// The completions of a protobuf `SampleResponse`.
///
/// # Errors
/// [`Error::Protocol`] for a message that does not decode, another number of sequences than
/// asked for, or missing log-probabilities (rlx trains on them).
pub fn sample_response(bytes: &[u8], n: usize) -> Result<Vec<SampledSequence>, Error> {
    let bad = |reason: String| Error::Protocol { path: "retrieve_future (SampleResponse)".into(), reason };
    let r = proto::SampleResponse::decode(bytes).map_err(|e| bad(e.to_string()))?;
    if r.sequences.len() != n {
        return Err(bad(format!("asked for {n} samples, got {}", r.sequences.len())));
    }
    r.sequences
        .into_iter()
        .map(|s| {
            let tokens: Vec<u32> = s.tokens.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes")) as u32).collect();
            let logprobs: Vec<f32> = s.logprobs.as_deref().ok_or_else(|| bad("a sequence without log-probabilities".into()))?.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect();
            if logprobs.len() != tokens.len() {
                return Err(bad(format!("{} tokens with {} log-probabilities", tokens.len(), logprobs.len())));
            }
            let stop_reason = if s.stop_reason == proto::StopReason::Length as i32 { StopReason::Length } else { StopReason::Stop };
            Ok(SampledSequence { tokens, logprobs, stop_reason })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::LossFnInputs;

    fn unhex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// Golden vector 1 of tinker-protocol.md §5.3: the bytes SDK 0.38.0 sends for one ppo datum.
    #[test]
    fn forward_backward_body_decodes_like_the_sdks_golden_vector() {
        let golden = unhex(
            "0a0e736573732d313a747261696e3a3010011a9c010a140a120a100100000002000000030000000400000012250a0a61
             6476616e746167657312170a1000000000000000000000803f0000803f180122010412380a0d7461726765745f746f6b
             656e7312270a200200000000000000030000000000000004000000000000000500000000000000180222010412230a08
             6c6f6770726f627312170a100000000000000000000000bf000080be1801220104220370706f2a1e0a13636c69705f68
             6967685f7468726573686f6c6411333333333333f33f2a1d0a12636c69705f6c6f775f7468726573686f6c64119a9999
             999999e93f3a200a13636c69705f686967685f7468726573686f6c64120909333333333333f33f3a1f0a12636c69705f
             6c6f775f7468726573686f6c641209099a9999999999e93f",
        );
        assert_eq!(golden.len(), 312);
        let datum = Datum {
            model_input: vec![1, 2, 3, 4],
            loss_fn_inputs: LossFnInputs { target_tokens: vec![2, 3, 4, 5], weights: None, logprobs: Some(vec![0.0, 0.0, -0.5, -0.25]), advantages: Some(vec![0.0, 0.0, 1.0, 1.0]) },
        };
        let loss = LossFn::Ppo { clip_low_threshold: 0.8, clip_high_threshold: 1.2 };
        let ours = forward_backward_request("sess-1:train:0", 1, &[datum], &loss, false);
        // Map entries may come in any order on the wire: compare decoded messages.
        assert_eq!(proto::ForwardBackwardRequest::decode(&ours[..]).unwrap(), proto::ForwardBackwardRequest::decode(&golden[..]).unwrap());
        assert_eq!(ours.len(), golden.len());
    }

    #[test]
    fn outputs_split_by_byte_offsets() {
        let data = le_f32(&[-1.0, -2.0, -3.0, -4.0, -5.0]);
        let offsets: Vec<u8> = [0i64, 8, 20].iter().flat_map(|o| o.to_le_bytes()).collect();
        let rec = proto::ArrayRecord {
            type_tag: "ArrayRecord".into(),
            fields: [("logprobs".to_string(), proto::BatchedTensor { data, offsets, dtype: proto::DType::Float32 as i32, trailing_shape: vec![] })].into(),
            num_datums: 2,
        };
        let msg = proto::ForwardBackwardOutput { loss_fn_output_type: "ArrayRecord".into(), loss_fn_outputs: vec![rec], metrics: [("loss:sum".to_string(), 1.5)].into() };
        let (lp, m) = forward_backward_output(&msg.encode_to_vec(), 2).unwrap();
        assert_eq!(lp, vec![vec![-1.0, -2.0], vec![-3.0, -4.0, -5.0]]);
        assert_eq!(m["loss:sum"], 1.5);
        assert!(forward_backward_output(&msg.encode_to_vec(), 3).unwrap_err().to_string().contains("3 datums sent, 2 outputs"));
    }

    #[test]
    fn sample_responses_need_logprobs_for_every_token() {
        let seq = |lp: Option<Vec<f32>>| proto::SampledSequence { stop_reason: proto::StopReason::Length as i32, tokens: le_i32(&[7, 8]), logprobs: lp.map(|l| le_f32(&l)), topk_sampled_logprobs: None };
        let ok = proto::SampleResponse { sequences: vec![seq(Some(vec![-0.5, -0.25]))], ..Default::default() };
        let s = sample_response(&ok.encode_to_vec(), 1).unwrap();
        assert_eq!(s[0].tokens, [7, 8]);
        assert_eq!(s[0].logprobs, [-0.5, -0.25]);
        assert_eq!(s[0].stop_reason, StopReason::Length);
        let none = proto::SampleResponse { sequences: vec![seq(None)], ..Default::default() };
        assert!(sample_response(&none.encode_to_vec(), 1).unwrap_err().to_string().contains("without log-probabilities"));
        assert!(sample_response(&ok.encode_to_vec(), 2).is_err());
    }

    #[test]
    fn optim_metrics_give_the_gradient_norm_when_reported() {
        let o = optim_output(&serde_json::json!({"metrics": {"grad_norm:mean": 2.5, "clipped:mean": 1.0}}), 3);
        assert_eq!((o.grad_norm, o.clipped, o.step), (2.5, true, 3));
        assert!(optim_output(&serde_json::json!({"metrics": null}), 1).grad_norm.is_nan());
    }
}
