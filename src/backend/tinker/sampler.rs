//! A Tinker sampling session behind the [`Sampler`] seam: one `asample` per prompt (with
//! `num_samples` completions), many in flight at once up to `backend.max_in_flight`, each polled
//! for its protobuf `SampleResponse`.
//!
//! A sample whose future expires (410) or whose submission or polling gives up is submitted
//! again as a new request with a new `seq_id`, as the SDK's sampling retry handler does
//! (§1.6.4): sampling has no side effects, so running one twice is harmless, unlike a training
//! request.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use tokio::sync::Semaphore;

use super::future::{self, Accept, Payload};
use super::http::Body;
use super::session::Session;
use super::convert;
use super::error::Error as TinkerError;
use crate::backend::error::{Error, Result};
use crate::backend::traits::{Pending, Sampler};
use crate::seam::{SampleRequest, SampledSequence, SamplingParams, Stop};
use crate::prompt::Tokenizer;
use crate::tinker::{RequestType, convert as wire_convert, wire};

/// Whole-sample resubmissions before a sample is reported failed.
const SAMPLE_ATTEMPTS: u32 = 4;

/// What every sampler of a run shares.
#[derive(Clone)]
pub struct SamplerOptions {
    /// Bounds the `asample` requests in flight across all samplers of the run.
    pub in_flight: Arc<Semaphore>,
    /// `backend.max_in_flight`.
    pub max_in_flight: usize,
    /// For stop strings: Tinker's `stop` is either token ids or strings, never both, so rlx
    /// stops on the tokens server-side and cuts at the strings here.
    pub tokenizer: Option<Arc<Tokenizer>>,
    /// The bits of a sampling seed the server takes ([`super::Profile::seed_mask`]).
    pub seed_mask: u64,
}

/// The [`Sampler`] over one sampling session.
pub struct TinkerSampler {
    session: Arc<Session>,
    id: String,
    /// `asample`'s per-client `seq_id`: 0, 1, … per submission attempt (§4).
    next_seq: Arc<AtomicI64>,
    options: SamplerOptions,
}

impl TinkerSampler {
    /// A sampler on the sampling session `id`.
    pub fn new(session: Arc<Session>, id: String, options: SamplerOptions) -> Self {
        TinkerSampler { session, id, next_seq: Arc::new(AtomicI64::new(0)), options }
    }

    /// The sampling session id (`{session}:sample:{n}`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The SDK's `compute_logprobs` request for `prompt` (§5.6): one sample of one token at
    /// temperature 1; the caller asks for the scores it wants.
    fn scoring_body(&self, prompt: Vec<u32>) -> wire::SampleRequest {
        let params = SamplingParams { max_tokens: 1, temperature: 1.0, top_p: 1.0, top_k: None, stop: vec![], seed: None };
        asample_body(&self.id, &SampleRequest { prompt, num_samples: 1, seed: None, greedy: false }, &params, self.options.seed_mask)
    }

    /// Runs one scoring request to its reply, read by `decode`.
    fn spawn<T: Send + 'static>(&self, body: wire::SampleRequest, decode: fn(Payload, usize) -> std::result::Result<T, TinkerError>) -> Pending<T> {
        let job = Job { session: self.session.clone(), next_seq: self.next_seq.clone(), body, num_samples: 1, permits: self.options.in_flight.clone(), decode };
        let handle = tokio::spawn(job.run());
        Box::pin(async move { handle.await.map_err(|e| Error::Gone { what: "Tinker sampler", reason: e.to_string() })? })
    }
}

impl Sampler for TinkerSampler {
    fn sample(&self, requests: Vec<SampleRequest>, params: &SamplingParams) -> Pending<Vec<Vec<SampledSequence>>> {
        if let Err(e) = params.validate() {
            return Box::pin(async move { Err(e.into()) });
        }
        let texts: Vec<String> = params.stop.iter().filter_map(|s| if let Stop::Text(t) = s { Some(t.clone()) } else { None }).collect();
        // Token stops go to the service; string stops are applied here (see SamplerOptions).
        let mut token_stops = params.clone();
        token_stops.stop.retain(|s| matches!(s, Stop::Token(_)));
        if !texts.is_empty() && self.options.tokenizer.is_none() {
            return Box::pin(async { Err(Error::InvalidArgument { what: "stop", reason: "stop strings need the model's tokenizer, which this Tinker sampler was opened without".into() }) });
        }
        // Spawned now, so the requests are submitted when `sample` is called, not when awaited.
        let handles: Vec<_> = requests
            .into_iter()
            .map(|r| {
                if r.num_samples == 0 {
                    // Nothing to ask for (Tinker refuses `num_samples: 0`).
                    return tokio::spawn(async { Ok(Vec::new()) });
                }
                let body = asample_body(&self.id, &r, &token_stops, self.options.seed_mask);
                let job = Job { session: self.session.clone(), next_seq: self.next_seq.clone(), body, num_samples: r.num_samples, permits: self.options.in_flight.clone(), decode: convert::sample_payload };
                tokio::spawn(job.run())
            })
            .collect();
        let tokenizer = self.options.tokenizer.clone();
        Box::pin(async move {
            let mut out = Vec::with_capacity(handles.len());
            for h in handles {
                let mut seqs = h.await.map_err(|e| Error::Gone { what: "Tinker sampler", reason: e.to_string() })??;
                if let (false, Some(tok)) = (texts.is_empty(), &tokenizer) {
                    for s in &mut seqs {
                        cut_at_stop_text(s, &texts, tok)?;
                    }
                }
                out.push(seqs);
            }
            Ok(out)
        })
    }

    fn max_in_flight(&self) -> usize {
        self.options.max_in_flight
    }

    /// The SDK's `compute_logprobs`: one sample of one token at temperature 1 with
    /// `prompt_logprobs: true` (reference/tinker-protocol.md §5.6), NaN at position 0.
    fn prompt_logprobs(&self, prompt: Vec<u32>) -> Pending<Vec<f32>> {
        let mut body = self.scoring_body(prompt);
        body.prompt_logprobs = Some(true);
        self.spawn(body, convert::prompt_logprobs_payload)
    }

    /// `compute_logprobs` with `topk_prompt_logprobs: k` instead of `prompt_logprobs`.
    fn prompt_topk_logprobs(&self, prompt: Vec<u32>, k: usize) -> Pending<Vec<crate::seam::TopK>> {
        let mut body = self.scoring_body(prompt);
        body.topk_prompt_logprobs = k as u64;
        self.spawn(body, convert::prompt_topk_payload)
    }
}

/// One `asample` request (`seq_id` is filled in per attempt). `params.stop` holds token ids
/// only, always sent as an explicit list: an absent `stop` would mean the service's idea of
/// EOS (§5.6).
fn asample_body(session: &str, r: &SampleRequest, params: &SamplingParams, seed_mask: u64) -> wire::SampleRequest {
    let mut p = r.params(params).into_owned();
    // Python ints are unbounded, but JSON readers (and the service's protobufs) stop at i64,
    // and some servers' PRNG keys at i32 (the profile's mask).
    p.seed = r.seed.or(p.seed).map(|s| s & seed_mask);
    let sampling_params = wire_convert::sampling_params_to_wire(&p).expect("token stops only");
    wire::SampleRequest {
        num_samples: r.num_samples as u64,
        prompt: wire::ModelInput::from_tokens(&r.prompt),
        sampling_params,
        base_model: None,
        model_path: None,
        sampling_session_id: Some(session.to_string()),
        seq_id: Some(0),
        prompt_logprobs: Some(false),
        topk_prompt_logprobs: 0,
        topk_sample_logprobs: 0,
        target_prompt_logprobs: None,
        prompt_alt_tokens_k: 0,
        prompt_logprobs_last_n: None,
        record_stability_info: Some(false),
        r#type: wire::literal::Sample,
    }
}

/// One prompt's sampling, with whole-sample retries; `decode` reads the reply (the sequences,
/// or the prompt's log-probabilities).
struct Job<T> {
    session: Arc<Session>,
    next_seq: Arc<AtomicI64>,
    body: wire::SampleRequest,
    num_samples: usize,
    permits: Arc<Semaphore>,
    decode: fn(Payload, usize) -> std::result::Result<T, TinkerError>,
}

impl<T> Job<T> {
    async fn run(mut self) -> Result<T> {
        let _permit = self.permits.clone().acquire_owned().await.map_err(|_| Error::Gone { what: "Tinker sampler", reason: "closed".into() })?;
        let client = self.session.client().clone();
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.body.seq_id = Some(self.next_seq.fetch_add(1, Ordering::SeqCst) as u64);
            let r = async {
                let bytes = client.submit("/api/v1/asample", &Body::json(&self.body), "SamplingClient.sample").await?;
                let s: wire::UntypedApiFuture = super::http::parse_json("/api/v1/asample", &bytes)?;
                // Servers on the older wire (SkyRL) answer no ids; the result's count is checked
                // by `decode` either way.
                if let Some(ids) = s.sample_sequence_ids.as_ref().map(Vec::len).filter(|&n| n != self.num_samples) {
                    return Err(TinkerError::Protocol { path: "/api/v1/asample".into(), reason: format!("asked for {} samples and got {ids} sample_sequence_ids", self.num_samples) });
                }
                let payload = future::retrieve(&client, &s.request_id, RequestType::Sample, Accept::Proto).await?;
                (self.decode)(payload, self.num_samples)
            }
            .await;
            match r {
                Err(e @ (TinkerError::Expired { .. } | TinkerError::GaveUp { .. })) if attempt < SAMPLE_ATTEMPTS => {
                    tracing::warn!("resubmitting a Tinker sample: {e}");
                }
                other => return other.map_err(Into::into),
            }
        }
    }
}

/// Cuts a completion after the token at which its decoded text first contains one of `stops`
/// (the token that completed the string stays, as with the local sampler).
fn cut_at_stop_text(s: &mut SampledSequence, stops: &[String], tok: &Tokenizer) -> Result<()> {
    let full = tok.decode(&s.tokens, false).map_err(|e| Error::Tokenizer(e.to_string()))?;
    if !stops.iter().any(|t| full.contains(t.as_str())) {
        return Ok(());
    }
    for end in 1..=s.tokens.len() {
        let text = tok.decode(&s.tokens[..end], false).map_err(|e| Error::Tokenizer(e.to_string()))?;
        if stops.iter().any(|t| text.contains(t.as_str())) {
            s.tokens.truncate(end);
            s.logprobs.truncate(end);
            s.stop_reason = crate::seam::StopReason::Stop;
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asample_bodies_have_the_sdk_shape() {
        let r = SampleRequest { prompt: vec![1, 2, 3], num_samples: 2, seed: Some(3), greedy: false };
        let p = SamplingParams { max_tokens: 16, temperature: 1.0, top_p: 1.0, top_k: None, stop: vec![], seed: None };
        let p = SamplingParams { stop: vec![Stop::Token(151645)], ..p };
        let b = serde_json::to_value(asample_body("sess-1:sample:1", &r, &p, i64::MAX as u64)).unwrap();
        let want = serde_json::json!({"num_samples": 2,
            "prompt": {"chunks": [{"tokens": [1, 2, 3], "type": "encoded_text"}]},
            "sampling_params": {"max_tokens": 16, "seed": 3, "stop": [151645], "temperature": 1.0, "top_k": -1, "top_p": 1.0},
            "sampling_session_id": "sess-1:sample:1", "seq_id": 0,
            "prompt_logprobs": false, "topk_prompt_logprobs": 0, "topk_sample_logprobs": 0,
            "prompt_alt_tokens_k": 0, "record_stability_info": false, "type": "sample"});
        // The example body of SDK 0.38.0, field for field.
        assert_eq!(b, want);
        // A greedy request goes out at temperature 0, the rest of its parameters unchanged.
        let g = serde_json::to_value(asample_body("sess-1:sample:1", &SampleRequest { greedy: true, ..r }, &p, i64::MAX as u64)).unwrap();
        assert_eq!(g["sampling_params"]["temperature"], 0.0);
        assert_eq!(g["sampling_params"]["seed"], 3);
    }
}
