//! Waiting for a Tinker future (SDK 0.38.0): `retrieve_future` is polled until
//! the result is there. The server long-polls (about 30 s) and answers `try_again` while the
//! request waits or runs, so `try_again`, 408 and 5xx are re-polled at once; 429 and connection
//! errors back off; a bare 400 is re-polled three times; 402 pauses; 410 means the future is
//! gone and the request must be submitted again (the caller decides whether it can be).

use std::time::{Duration, Instant};

use serde_json::Value;

use super::Error;
use super::http::{Body, Client};
use crate::tinker::{RequestType, content_type, header, wire};

/// The result encoding a request type returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Accept {
    /// A JSON document (create_model, optim_step, saves, loads).
    Json,
    /// A protobuf message (`ForwardBackwardOutput`, `SampleResponse`).
    Proto,
}

/// A finished future's result.
#[derive(Debug)]
pub(crate) enum Payload {
    /// A JSON result.
    Json(Value),
    /// A protobuf result, undecoded.
    Proto(bytes::Bytes),
}

/// Polls until the future `request_id` finishes. `kind` is the SDK's request type name
/// (`ForwardBackward`, `Sample`, ...), sent as `X-Tinker-Request-Type`.
///
/// # Errors
/// [`Error::RequestFailed`] when the request itself failed (final), [`Error::Expired`] on 410,
/// [`Error::GaveUp`] when the service cannot be reached for the policy's budget, and
/// [`Error::Status`]/[`Error::Protocol`] for answers outside the protocol.
pub(crate) async fn retrieve(client: &Client, request_id: &str, kind: RequestType, accept: Accept) -> Result<Payload, Error> {
    const PATH: &str = "/api/v1/retrieve_future";
    let policy = &client.policy;
    let mut allow_metadata_only = true;
    let mut iteration = 0u64;
    // Backs off connection errors and 429s; reset by any other HTTP answer, as the SDK does.
    let mut backoff = 0u32;
    let mut bare_400s = 0;
    let mut last_answer = Instant::now();
    let mut billing_since: Option<Instant> = None;
    let mut paused_warned = false;
    // The SDK's HTTP layer sends one on every POST, polls included.
    let key = super::http::idempotency_key();
    loop {
        let ask = wire::FutureRetrieveRequest { request_id: request_id.to_string(), allow_metadata_only };
        let body = Body::json(&ask);
        let mut extra = vec![(header::REQUEST_ITERATION, iteration.to_string()), (header::REQUEST_TYPE, kind.to_string()), (header::IDEMPOTENCY_KEY, key.clone())];
        if accept == Accept::Proto {
            extra.push(("accept", content_type::PROTOBUF.to_string()));
        }
        iteration += 1;
        // Above the server's ~30 s long poll, as the SDK's 45 s.
        let resp = match client.send_once(PATH, Some(&body), &extra, Duration::from_secs(45)).await {
            Ok(r) => r,
            Err(e) => {
                let reason = super::causes(&e);
                wait(policy.backoff(backoff), last_answer, policy.budget, request_id, &reason).await?;
                backoff += 1;
                continue;
            }
        };
        last_answer = Instant::now();
        let status = resp.status().as_u16();
        if status != 429 {
            backoff = 0;
        }
        if status != 402 {
            billing_since = None;
        }
        match status {
            200 => {
                let is_proto = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|c| c.contains("application/x-protobuf"));
                let bytes = match resp.bytes().await {
                    Ok(b) => b,
                    // Polling is idempotent: a cut-off answer is simply asked for again.
                    Err(_) => continue,
                };
                if is_proto {
                    return Ok(Payload::Proto(bytes));
                }
                let v: Value = super::http::parse_json(PATH, &bytes)?;
                match answer(v) {
                    Answer::TryAgain(t) => {
                        if t.queue_state != wire::QueueState::Active && !paused_warned {
                            paused_warned = true;
                            let why = t.queue_state_reason.unwrap_or_else(|| format!("{:?}", t.queue_state));
                            tracing::warn!(request_id, state = ?t.queue_state, "Tinker paused this request: {why}");
                        }
                    }
                    Answer::MetadataOnly => allow_metadata_only = false,
                    Answer::Failed { category, message } => return Err(Error::RequestFailed { request_id: request_id.to_string(), category, message }),
                    // Servers on the older wire (SkyRL, verl_tinker, TuFT) answer JSON whatever
                    // `Accept` says; the callers read either.
                    Answer::Done(v) => return Ok(Payload::Json(v)),
                }
            }
            408 | 500.. => {
                // The SDK re-polls at once; a short pause keeps a failing proxy from being
                // hammered in a tight loop.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            429 => {
                let d = Duration::from_secs(1u64 << backoff.min(5)).min(Duration::from_secs(30));
                tokio::time::sleep(d).await;
                backoff += 1;
            }
            402 => {
                let since = *billing_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= policy.billing_budget {
                    return Err(Error::Billing { path: PATH.into(), waited: since.elapsed() });
                }
                tokio::time::sleep(policy.billing_pause).await;
            }
            410 => return Err(Error::Expired { request_id: request_id.to_string() }),
            400 if bare_400s < 3 => {
                bare_400s += 1;
            }
            _ => {
                let text = resp.text().await.unwrap_or_default();
                return Err(Error::Status { path: format!("{PATH} ({request_id})"), status, body: super::http::detail(&text) });
            }
        }
    }
}

/// What a JSON answer of `retrieve_future` says.
enum Answer {
    /// Not done: poll again.
    TryAgain(wire::TryAgainResponse),
    /// Done, but too large to inline: poll again without `allow_metadata_only`.
    MetadataOnly,
    /// The request failed (final).
    Failed { category: String, message: String },
    /// The result.
    Done(Value),
}

/// Reads an answer by the shapes of [`wire`]; a failure whose fields are not the documented
/// types (a server of another version) is still a failure, with its text as sent.
fn answer(v: Value) -> Answer {
    if v.get("type").and_then(Value::as_str) == Some(wire::literal::TryAgain::VALUE) {
        let t = serde_json::from_value(v.clone()).unwrap_or(wire::TryAgainResponse {
            r#type: wire::literal::TryAgain,
            request_id: String::new(),
            queue_state: wire::QueueState::Active,
            queue_state_reason: None,
        });
        return Answer::TryAgain(t);
    }
    if serde_json::from_value::<wire::CompleteMetadataResponse>(v.clone()).is_ok_and(|m| m.status == wire::CompleteMetadataResponse::STATUS) {
        return Answer::MetadataOnly;
    }
    if let Ok(f) = serde_json::from_value::<wire::RequestFailedResponse>(v.clone()) {
        let category = serde_json::to_value(f.category).ok().and_then(|c| c.as_str().map(str::to_string)).unwrap_or_default();
        return Answer::Failed { category, message: f.error };
    }
    if let Some(err) = v.get("error") {
        let message = err.as_str().map(str::to_string).unwrap_or_else(|| err.to_string());
        let category = v.get("category").and_then(Value::as_str).unwrap_or("unknown").to_string();
        return Answer::Failed { category, message };
    }
    Answer::Done(v)
}

/// Sleeps `delay` unless that would pass `budget` since the last HTTP answer.
async fn wait(delay: Duration, last_answer: Instant, budget: Duration, request_id: &str, reason: &str) -> Result<(), Error> {
    if last_answer.elapsed() + delay > budget {
        return Err(Error::GaveUp { path: format!("/api/v1/retrieve_future ({request_id})"), after: last_answer.elapsed(), last: reason.to_string() });
    }
    tracing::debug!(request_id, ?delay, reason, "Tinker unreachable while polling; retrying");
    tokio::time::sleep(delay).await;
    Ok(())
}

/// Polls a future whose result is JSON and parses it as `T`.
///
/// # Errors
/// As [`retrieve`], and [`Error::Protocol`] for a result that is not a `T`.
pub(crate) async fn retrieve_json<T: serde::de::DeserializeOwned>(client: &Client, request_id: &str, kind: RequestType) -> Result<T, Error> {
    match retrieve(client, request_id, kind, Accept::Json).await? {
        Payload::Json(v) => serde_json::from_value(v.clone()).map_err(|e| Error::Protocol { path: format!("retrieve_future ({kind})"), reason: format!("{e}: {}", super::http::detail(&v.to_string())) }),
        Payload::Proto(_) => Err(Error::Protocol { path: format!("retrieve_future ({kind})"), reason: "a protobuf result where JSON was asked for".into() }),
    }
}
