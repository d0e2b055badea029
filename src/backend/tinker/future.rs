//! Waiting for a Tinker future (SDK 0.38.0): `retrieve_future` is polled until
//! the result is there. The server long-polls (about 30 s) and answers `try_again` while the
//! request waits or runs, so `try_again`, 408 and 5xx are re-polled at once; 429 and connection
//! errors back off through the one retry policy ([`crate::retry`], the client's
//! [`RetryPolicy`](super::http::RetryPolicy)); a bare 400 is re-polled three times; 402 holds as
//! a submission's does; 410 means the future is gone and the request must be submitted again
//! (the caller decides whether it can be).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::error::Error;
use super::http::{Body, Client, Failed};
use crate::retry;
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
/// The loop is [`retry::run`] with the client's policy: an answer that is progress (`try_again`,
/// 408, 5xx, one of three bare 400s) polls again and starts the policy's count and time budget
/// over; connection errors and 429s back off through it; a 402 holds as a submission's does.
///
/// # Errors
/// [`Error::RequestFailed`] when the request itself failed (final), [`Error::Expired`] on 410,
/// [`Error::GaveUp`] when the service cannot be reached for the policy's budget, and
/// [`Error::Status`]/[`Error::Protocol`] for answers outside the protocol.
pub(crate) async fn retrieve(client: &Client, request_id: &str, kind: RequestType, accept: Accept) -> Result<Payload, Error> {
    let poll = Poll {
        client,
        request_id,
        kind,
        accept,
        // The SDK's HTTP layer sends one on every POST, polls included.
        key: super::http::idempotency_key(),
        state: Mutex::new(PollState { iteration: 0, allow_metadata_only: true, bare_400s: 0, paused_warned: false, billing_since: None, last_answer: Instant::now() }),
    };
    let label = format!("{PATH} ({request_id})");
    let poll = &poll;
    let outcome = retry::run(&client.policy.backoff_policy(), &label, |_| async move { poll.once().await }).await;
    outcome.map_err(|g| match g.last {
        Failed::Fatal(e) => e,
        Failed::Transient(last) => Error::GaveUp { path: label.clone(), after: poll.state().last_answer.elapsed(), last },
    })
}

const PATH: &str = "/api/v1/retrieve_future";

/// One future being polled.
struct Poll<'a> {
    client: &'a Client,
    request_id: &'a str,
    kind: RequestType,
    accept: Accept,
    key: String,
    /// Locked only between awaits (a poll's future must be `Send`).
    state: Mutex<PollState>,
}

/// What the polls of one future have learned so far.
struct PollState {
    /// Polls sent (`X-Tinker-Request-Iteration`).
    iteration: u64,
    /// Cleared when the server says the result is too large to inline.
    allow_metadata_only: bool,
    bare_400s: u32,
    paused_warned: bool,
    /// When the current run of 402s began; any other answer ends it.
    billing_since: Option<Instant>,
    last_answer: Instant,
}

impl Poll<'_> {
    fn state(&self) -> std::sync::MutexGuard<'_, PollState> {
        self.state.lock().expect("never poisoned")
    }

    /// One `retrieve_future` request and what it comes to.
    async fn once(&self) -> retry::Attempt<Payload, Failed> {
        let request_id = self.request_id;
        let (iteration, allow_metadata_only) = {
            let mut s = self.state();
            s.iteration += 1;
            (s.iteration - 1, s.allow_metadata_only)
        };
        let ask = wire::FutureRetrieveRequest { request_id: request_id.to_string(), allow_metadata_only };
        let body = Body::json(&ask);
        let mut extra = vec![(header::REQUEST_ITERATION, iteration.to_string()), (header::REQUEST_TYPE, self.kind.to_string()), (header::IDEMPOTENCY_KEY, self.key.clone())];
        if self.accept == Accept::Proto {
            extra.push(("accept", content_type::PROTOBUF.to_string()));
        }
        // Above the server's ~30 s long poll, as the SDK's 45 s.
        let resp = match self.client.send_once(PATH, Some(&body), &extra, Duration::from_secs(45)).await {
            Ok(r) => r,
            Err(e) => return retry::Attempt::Retry(Failed::Transient(super::http::causes(&e)), None),
        };
        let status = resp.status().as_u16();
        {
            let mut s = self.state();
            s.last_answer = Instant::now();
            if status != 402 {
                s.billing_since = None;
            }
        }
        let fatal = |e: Error| retry::Attempt::Fail(Failed::Fatal(e));
        match status {
            200 => {
                let is_proto = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|c| c.contains("application/x-protobuf"));
                let bytes = match resp.bytes().await {
                    Ok(b) => b,
                    // Polling is idempotent: a cut-off answer is simply asked for again.
                    Err(_) => return retry::Attempt::Again(Duration::ZERO),
                };
                if is_proto {
                    return retry::Attempt::Done(Payload::Proto(bytes));
                }
                let v: Value = match super::http::parse_json(PATH, &bytes) {
                    Ok(v) => v,
                    Err(e) => return fatal(e),
                };
                match answer(v) {
                    Answer::TryAgain(t) => {
                        let mut s = self.state();
                        if t.queue_state != wire::QueueState::Active && !s.paused_warned {
                            s.paused_warned = true;
                            let why = t.queue_state_reason.unwrap_or_else(|| format!("{:?}", t.queue_state));
                            tracing::warn!(request_id, state = ?t.queue_state, "Tinker paused this request: {why}");
                        }
                        retry::Attempt::Again(Duration::ZERO)
                    }
                    Answer::MetadataOnly => {
                        self.state().allow_metadata_only = false;
                        retry::Attempt::Again(Duration::ZERO)
                    }
                    Answer::Failed { category, message } => fatal(Error::RequestFailed { request_id: request_id.to_string(), category, message }),
                    // Servers on the older wire (SkyRL, verl_tinker, TuFT) answer JSON whatever
                    // `Accept` says; the callers read either.
                    Answer::Done(v) => retry::Attempt::Done(Payload::Json(v)),
                }
            }
            // The SDK re-polls at once; a short pause keeps a failing proxy from being hammered
            // in a tight loop.
            408 | 500.. => retry::Attempt::Again(Duration::from_millis(50)),
            429 => retry::Attempt::Retry(Failed::Transient("HTTP 429".into()), None),
            402 => self.client.policy.billing(&mut self.state().billing_since, PATH),
            410 => fatal(Error::Expired { request_id: request_id.to_string() }),
            400 if self.state().bare_400s < 3 => {
                self.state().bare_400s += 1;
                retry::Attempt::Again(Duration::ZERO)
            }
            _ => {
                let text = resp.text().await.unwrap_or_default();
                fatal(Error::Status { path: format!("{PATH} ({request_id})"), status, body: super::http::detail(&text) })
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
