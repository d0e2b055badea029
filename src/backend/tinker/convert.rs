//! Client-side glue over [`crate::tinker::convert`] (the one place both rlx's client and
//! `rlx serve` convert wire forms): request bodies as bytes, results checked against what was
//! asked, and the diagnostics the service does not report computed from what it does.

use std::collections::BTreeMap;

use prost::Message;

use super::error::Error;
use super::future::Payload;
use crate::seam;
use crate::backend::error as backend;
use crate::seam::{Datum, ForwardBackwardOutput, LossFn, OptimStepOutput, SampledSequence};
use crate::tinker::{convert, proto, wire};

fn protocol(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Protocol { path: format!("retrieve_future ({what})"), reason: e.to_string() }
}

/// The protobuf body of `forward_backward` for one chunk. Tinker's `cross_entropy` requires
/// `weights` (rlx's datums may leave them out to mean all ones), so they are filled in.
pub(crate) fn forward_backward_body(model_id: &str, seq_id: i64, data: &[Datum], loss: &LossFn, forward_only: bool) -> Vec<u8> {
    let filled;
    let data = if *loss == LossFn::CrossEntropy && data.iter().any(|d| d.loss_fn_inputs.weights.is_none()) {
        filled = data
            .iter()
            .map(|d| {
                let mut d = d.clone();
                d.loss_fn_inputs.weights.get_or_insert_with(|| vec![1.0; d.model_input.len()]);
                d
            })
            .collect::<Vec<_>>();
        &filled[..]
    } else {
        data
    };
    convert::forward_backward_request(model_id, seq_id as i32, data, loss, forward_only).encode_to_vec()
}

/// The JSON `forward_backward` body of the older wire (SkyRL, verl_tinker, TuFT), with
/// `weights` filled in as in [`forward_backward_body`].
pub(crate) fn forward_backward_json_body(model_id: &str, seq_id: i64, data: &[Datum], loss: &LossFn, forward_only: bool) -> serde_json::Value {
    let filled: Vec<Datum>;
    let data = if *loss == LossFn::CrossEntropy && data.iter().any(|d| d.loss_fn_inputs.weights.is_none()) {
        filled = data.iter().map(|d| {
            let mut d = d.clone();
            d.loss_fn_inputs.weights.get_or_insert_with(|| vec![1.0; d.model_input.len()]);
            d
        }).collect();
        &filled[..]
    } else {
        data
    };
    convert::forward_backward_json_request(model_id, seq_id, data, loss, forward_only)
}

/// Per-datum log-probabilities and the summed loss of a chunk of `n` datums, from a protobuf
/// or a JSON result (servers on the older wire answer JSON whatever `Accept` says).
///
/// # Errors
/// [`Error::Protocol`] for a result that does not decode or another number of datums.
pub(crate) fn forward_backward_payload(p: Payload, n: usize) -> Result<(Vec<Vec<f32>>, f64), Error> {
    match p {
        Payload::Proto(b) => forward_backward_output(&b, n),
        Payload::Json(v) => {
            let o: wire::ForwardBackwardOutput = serde_json::from_value(v).map_err(|e| protocol("ForwardBackwardOutput", e))?;
            let out = convert::forward_backward_output_from_json(&o).map_err(|e| protocol("ForwardBackwardOutput", e))?;
            if out.outputs.len() != n {
                return Err(protocol("ForwardBackwardOutput", format!("{n} datums sent, {} outputs returned", out.outputs.len())));
            }
            Ok((out.outputs.into_iter().map(|o| o.logprobs).collect(), out.loss))
        }
    }
}

/// The completions of a sample result (protobuf or JSON) with exactly `n` sequences.
///
/// # Errors
/// As [`sample_response`].
pub(crate) fn sample_payload(p: Payload, n: usize) -> Result<Vec<SampledSequence>, Error> {
    match p {
        Payload::Proto(b) => sample_response(&b, n),
        Payload::Json(v) => {
            let r: wire::SampleResponse = serde_json::from_value(v).map_err(|e| protocol("SampleResponse", e))?;
            let seqs = convert::sampled_sequences_from_json(&r).map_err(|e| protocol("SampleResponse", e))?;
            if seqs.len() != n {
                return Err(protocol("SampleResponse", format!("asked for {n} samples, got {}", seqs.len())));
            }
            Ok(seqs)
        }
    }
}

/// The prompt log-probabilities of a `compute_logprobs` result (protobuf or JSON; NaN where
/// unscored).
///
/// # Errors
/// As [`prompt_logprobs_response`].
pub(crate) fn prompt_logprobs_payload(p: Payload, _n: usize) -> Result<Vec<f32>, Error> {
    match p {
        Payload::Proto(b) => prompt_logprobs_response(&b),
        Payload::Json(v) => {
            let r: wire::SampleResponse = serde_json::from_value(v).map_err(|e| protocol("SampleResponse", e))?;
            let lp = r.prompt_logprobs.ok_or_else(|| protocol("SampleResponse", "no `prompt_logprobs` in a reply to `prompt_logprobs: true`"))?;
            Ok(lp.into_iter().map(|x| x.unwrap_or(f32::NAN)).collect())
        }
    }
}

/// The top-k prompt log-probabilities of a reply to `topk_prompt_logprobs: k` (protobuf or
/// JSON), empty rows where unscored.
///
/// # Errors
/// A body that is not a `SampleResponse`, or one without them.
pub(crate) fn prompt_topk_payload(p: Payload, _n: usize) -> Result<Vec<crate::seam::TopK>, Error> {
    let missing = || protocol("SampleResponse", "no `topk_prompt_logprobs` in a reply that asked for them");
    match p {
        Payload::Proto(b) => {
            let p = proto::SampleResponse::decode(&b[..]).map_err(|e| protocol("SampleResponse", e))?;
            convert::topk_from_proto(p.topk_prompt_logprobs.as_ref().ok_or_else(missing)?).map_err(|e| protocol("SampleResponse", e))
        }
        Payload::Json(v) => {
            let r: wire::SampleResponse = serde_json::from_value(v).map_err(|e| protocol("SampleResponse", e))?;
            Ok(r.topk_prompt_logprobs.ok_or_else(missing)?.into_iter().map(Option::unwrap_or_default).collect())
        }
    }
}

/// Per-datum learner log-probabilities and `loss:sum` of a chunk of `n` datums.
///
/// # Errors
/// [`Error::Protocol`] for a message that does not decode or another number of datums.
pub(crate) fn forward_backward_output(bytes: &[u8], n: usize) -> Result<(Vec<Vec<f32>>, f64), Error> {
    let p = proto::ForwardBackwardOutput::decode(bytes).map_err(|e| protocol("ForwardBackwardOutput", e))?;
    let out = convert::forward_backward_output_from_proto(&p).map_err(|e| protocol("ForwardBackwardOutput", e))?;
    if out.outputs.len() != n {
        return Err(protocol("ForwardBackwardOutput", format!("{n} datums sent, {} outputs returned", out.outputs.len())));
    }
    Ok((out.outputs.into_iter().map(|o| o.logprobs).collect(), out.loss))
}

/// The [`ForwardBackwardOutput`] of a batch from the service's per-datum log-probabilities:
/// the loss is the service's `loss:sum`; the ratio and clipping statistics are computed here
/// from the same numbers the service used, so they mean what they mean on the local backend.
///
/// # Errors
/// Log-probabilities whose count differs from a datum's tokens.
pub(crate) fn fb_output(data: &[Datum], loss: &LossFn, logprobs: Vec<Vec<f32>>, loss_sum: f64) -> backend::Result<ForwardBackwardOutput> {
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
    Ok(ForwardBackwardOutput { loss: loss_sum, outputs: logprobs.into_iter().map(|logprobs| seam::DatumOutput { logprobs }).collect(), stats })
}

/// An [`OptimStepOutput`] from `optim_step`'s metrics; the gradient norm is the service's when
/// it reports one (`grad_norm:…`), `None` otherwise.
pub(crate) fn optim_output(r: wire::OptimStepResponse, step: u64) -> OptimStepOutput {
    let metrics: BTreeMap<String, f64> = r.metrics.unwrap_or_default();
    let named = |name: &str| metrics.iter().find(|(k, _)| k.split(':').next() == Some(name)).map(|(_, &v)| v);
    OptimStepOutput { grad_norm: named("grad_norm"), clipped: named("clipped").is_some_and(|v| v > 0.0), step, metrics }
}

/// The completions of a protobuf `SampleResponse` with exactly `n` sequences.
///
/// # Errors
/// [`Error::Protocol`] for a message that does not decode, another number of sequences, or
/// missing log-probabilities (rlx trains on them).
pub(crate) fn sample_response(bytes: &[u8], n: usize) -> Result<Vec<SampledSequence>, Error> {
    let p = proto::SampleResponse::decode(bytes).map_err(|e| protocol("SampleResponse", e))?;
    let seqs = convert::sampled_sequences_from_proto(&p).map_err(|e| protocol("SampleResponse", e))?;
    if seqs.len() != n {
        return Err(protocol("SampleResponse", format!("asked for {n} samples, got {}", seqs.len())));
    }
    Ok(seqs)
}

/// The `prompt_logprobs` of a `compute_logprobs` reply (NaN at unscored positions, position 0
/// always).
///
/// # Errors
/// A body that is not a `SampleResponse`, or one without prompt log-probabilities.
pub(crate) fn prompt_logprobs_response(bytes: &[u8]) -> Result<Vec<f32>, Error> {
    let p = proto::SampleResponse::decode(bytes).map_err(|e| protocol("SampleResponse", e))?;
    let raw = p.prompt_logprobs.ok_or_else(|| protocol("SampleResponse", "no `prompt_logprobs` in a reply to `prompt_logprobs: true`"))?;
    convert::f32_from_bytes(&raw, "prompt_logprobs").map_err(|e| protocol("SampleResponse", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seam::{LossFnInputs, StopReason};

    fn unhex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// Golden vector 1 of SDK 0.38.0: the bytes SDK 0.38.0 sends for one ppo datum.
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
        let datum = Datum {
            model_input: vec![1, 2, 3, 4],
            loss_fn_inputs: LossFnInputs { target_tokens: vec![2, 3, 4, 5], weights: None, logprobs: Some(vec![0.0, 0.0, -0.5, -0.25]), advantages: Some(vec![0.0, 0.0, 1.0, 1.0]) },
        };
        let ours = forward_backward_body("sess-1:train:0", 1, &[datum], &LossFn::PPO, false);
        // Map entries may come in any order on the wire: compare decoded messages.
        assert_eq!(proto::ForwardBackwardRequest::decode(&ours[..]).unwrap(), proto::ForwardBackwardRequest::decode(&golden[..]).unwrap());
    }

    #[test]
    fn cross_entropy_bodies_carry_weights() {
        let datum = Datum { model_input: vec![1, 2], loss_fn_inputs: LossFnInputs { target_tokens: vec![2, 3], ..Default::default() } };
        let body = proto::ForwardBackwardRequest::decode(&forward_backward_body("m", 1, &[datum], &LossFn::CrossEntropy, false)[..]).unwrap();
        let w = convert::tensor_f32(&body.data[0].loss_fn_inputs["weights"], "weights").unwrap();
        assert_eq!(w, [1.0, 1.0]);
    }

    #[test]
    fn results_must_match_what_was_asked() {
        let out = seam::ForwardBackwardOutput {
            loss: 1.5,
            outputs: vec![seam::DatumOutput { logprobs: vec![-1.0, -2.0] }, seam::DatumOutput { logprobs: vec![-3.0] }],
            stats: Default::default(),
        };
        let bytes = convert::forward_backward_output_to_proto(&out).encode_to_vec();
        let (lp, loss) = forward_backward_output(&bytes, 2).unwrap();
        assert_eq!((lp, loss), (vec![vec![-1.0, -2.0], vec![-3.0]], 1.5));
        assert!(forward_backward_output(&bytes, 3).unwrap_err().to_string().contains("3 datums sent, 2 outputs"));
        let seq = SampledSequence { tokens: vec![7, 8], logprobs: vec![-0.5, -0.25], stop_reason: StopReason::Length };
        let bytes = convert::sample_response_to_proto(std::slice::from_ref(&seq), None, None).encode_to_vec();
        assert_eq!(sample_response(&bytes, 1).unwrap(), vec![seq]);
        assert!(sample_response(&bytes, 2).is_err());
    }

    #[test]
    fn optim_metrics_give_the_gradient_norm_when_reported() {
        let r = wire::OptimStepResponse { metrics: Some([("grad_norm:mean".to_string(), 2.5), ("clipped:mean".to_string(), 1.0)].into()) };
        let o = optim_output(r, 3);
        assert_eq!((o.grad_norm, o.clipped, o.step), (Some(2.5), true, 3));
        assert_eq!(optim_output(wire::OptimStepResponse { metrics: None }, 1).grad_norm, None);
    }
}
