//! One HTTP exchange with Tinker, and the retry policy around *submissions*
//! (SDK 0.38.0): connection errors, timeouts, 408, 409, 429 and 5xx are retried
//! with capped exponential back-off (or the server's `Retry-After`) for up to five minutes; 402
//! (billing) pauses 5 s at a time for up to an hour; the server's `x-should-retry` overrides the
//! decision. Polling a future has its own policy ([`super::future`]).
//!
//! Every retry of one submission reuses its `X-Idempotency-Key` and its body — a training
//! request keeps its `seq_id` — so a request that reached the server before the connection
//! dropped is deduplicated there instead of running twice (§12).
//!
//! Rejected alternative: the SDK's two layers (10 quick HTTP retries inside five minutes of
//! slower re-submissions). One loop with one deadline retries the same conditions with the same
//! delays and is one place to read.

use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, HeaderValue};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Error;
use crate::tinker::{SDK_VERSION, header};

/// How long to keep retrying, and how fast.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Give up on a submission after this long without success (SDK: 300 s).
    pub budget: Duration,
    /// First back-off delay, doubled per attempt (SDK: 0.5 s).
    pub base_delay: Duration,
    /// Longest back-off delay (SDK: 10 s at the HTTP layer, 30 s above it).
    pub max_delay: Duration,
    /// Pause after a 402 (SDK: 5 s).
    pub billing_pause: Duration,
    /// Give up on 402s after this long (SDK: the server's `billing_exception_max_pause_duration_sec`, 3600 s).
    pub billing_budget: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            budget: Duration::from_secs(300),
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            billing_pause: Duration::from_secs(5),
            billing_budget: Duration::from_secs(3600),
        }
    }
}

impl RetryPolicy {
    /// `min(base · 2^attempt, max)`, less up to 25 % jitter so that many clients retrying at
    /// once spread out.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self.base_delay.saturating_mul(1u32 << attempt.min(16));
        exp.min(self.max_delay).mul_f64(1.0 - 0.25 * jitter())
    }
}

/// A number in [0, 1) that differs between calls; enough for jitter, not for secrets.
pub(super) fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// A key unique to one logical submission (`X-Idempotency-Key`).
pub(super) fn idempotency_key() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    let a = h.finish();
    h.write_u64(a);
    format!("rlx-retry-{a:016x}{:016x}", h.finish())
}

/// A request body.
pub enum Body {
    /// JSON (`Content-Type: application/json`).
    Json(serde_json::Value),
    /// A serialized protobuf message (`Content-Type: application/x-protobuf`).
    Proto(Vec<u8>),
}

impl Body {
    /// A JSON body from one of [`crate::tinker::wire`]'s request types.
    pub fn json(v: &impl Serialize) -> Body {
        Body::Json(serde_json::to_value(v).expect("wire types serialize"))
    }
}

/// The connection to one Tinker service: base URL, credential, HTTP client and retry policy.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    api_key: String,
    /// The retry policy of submissions and polls.
    pub policy: RetryPolicy,
}

impl Client {
    /// A client for `base_url` (a trailing `/` is ignored) with the API key `api_key`.
    ///
    /// # Errors
    /// The HTTP client cannot be built (TLS set-up).
    pub fn new(base_url: &str, api_key: &str, policy: RetryPolicy) -> Result<Self, Error> {
        let mut headers = HeaderMap::new();
        headers.insert("accept", HeaderValue::from_static("application/json"));
        headers.insert("user-agent", HeaderValue::from_str(&format!("rlx/{} (tinker protocol {SDK_VERSION})", env!("CARGO_PKG_VERSION"))).expect("ascii"));
        let key = HeaderValue::from_str(api_key).map_err(|_| Error::BadKey { reason: "it contains characters that cannot go into an HTTP header".into() })?;
        let mut key = key;
        key.set_sensitive(true);
        headers.insert(header::API_KEY, key);
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .connect_timeout(Duration::from_secs(5))
            // Above the 30 s long-poll of `retrieve_future` and the SDK's 60 s default.
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| Error::Connect { url: base_url.to_string(), reason: super::causes(&e) })?;
        Ok(Client { http, base: base_url.trim_end_matches('/').to_string(), api_key: api_key.to_string(), policy })
    }

    /// The service URL this client talks to.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// `base + path` by concatenation: a base URL may carry a path prefix
    /// (`…/services/tinker-prod`), and ids with colons must not be parsed as URL schemes (§1.1).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Whether `api_key` is the key this client sends (for tests of environment handling).
    pub fn has_key(&self, api_key: &str) -> bool {
        self.api_key == api_key
    }

    /// Sends one request, once: the building block of [`Client::submit`] and of polling.
    pub async fn send_once(&self, path: &str, body: Option<&Body>, extra: &[(&'static str, String)], timeout: Duration) -> reqwest::Result<reqwest::Response> {
        let url = self.url(path);
        let mut req = match body {
            None => self.http.get(url),
            Some(Body::Json(v)) => self.http.post(url).json(v),
            Some(Body::Proto(b)) => self.http.post(url).header("content-type", "application/x-protobuf").body(b.clone()),
        };
        for (k, v) in extra {
            req = req.header(*k, v);
        }
        req.timeout(timeout).send().await
    }

    /// POSTs a JSON body and parses the JSON reply, retrying as the module docs say.
    ///
    /// # Errors
    /// The budget ran out, a status that is not retried, a reply that does not parse.
    pub async fn post_json<T: DeserializeOwned>(&self, path: &str, body: &impl Serialize, method: &'static str) -> Result<T, Error> {
        let body = Body::Json(serde_json::to_value(body).map_err(|e| Error::Protocol { path: path.to_string(), reason: e.to_string() })?);
        let bytes = self.submit(path, &body, method).await?;
        parse_json(path, &bytes)
    }

    /// [`Client::post_json`] for a session's first request: a refused connection or an unknown
    /// host fails at once with [`Error::Unreachable`] (a mistyped `TINKER_BASE_URL` used to be
    /// retried for the whole budget, minutes); anything else is retried as usual.
    ///
    /// # Errors
    /// As [`Client::post_json`], and [`Error::Unreachable`].
    pub async fn first_contact<T: DeserializeOwned>(&self, path: &str, body: &impl Serialize, method: &'static str) -> Result<T, Error> {
        let body = Body::Json(serde_json::to_value(body).map_err(|e| Error::Protocol { path: path.to_string(), reason: e.to_string() })?);
        let bytes = self.retrying_from(path, Some(&body), method, Contact::First).await?;
        parse_json(path, &bytes)
    }

    /// GETs a JSON document, retrying as [`Client::post_json`].
    ///
    /// # Errors
    /// As [`Client::post_json`].
    pub async fn get_json<T: DeserializeOwned>(&self, path: &str, method: &'static str) -> Result<T, Error> {
        let bytes = self.retrying(path, None, method).await?;
        parse_json(path, &bytes)
    }

    /// POSTs `body` until the server accepts it or the policy gives up; returns the reply body.
    ///
    /// # Errors
    /// As [`Client::post_json`].
    pub async fn submit(&self, path: &str, body: &Body, method: &'static str) -> Result<bytes::Bytes, Error> {
        self.retrying(path, Some(body), method).await
    }

    async fn retrying(&self, path: &str, body: Option<&Body>, method: &'static str) -> Result<bytes::Bytes, Error> {
        self.retrying_from(path, body, method, Contact::Established).await
    }

    async fn retrying_from(&self, path: &str, body: Option<&Body>, method: &'static str, contact: Contact) -> Result<bytes::Bytes, Error> {
        let key = idempotency_key();
        let start = Instant::now();
        let mut billing_since: Option<Instant> = None;
        let mut attempt = 0u32;
        loop {
            let mut extra = vec![(header::RETRY_COUNT, attempt.to_string()), (header::SDK_METHOD, method.to_string()), (header::SDK_VERSION, SDK_VERSION.to_string())];
            if body.is_some() {
                extra.push((header::IDEMPOTENCY_KEY, key.clone()));
            }
            let verdict = match self.send_once(path, body, &extra, Duration::from_secs(60)).await {
                Ok(resp) => match classify(&resp) {
                    Verdict::Success => match resp.bytes().await {
                        Ok(b) => return Ok(b),
                        // The body was cut off: the request may have run; resending with the
                        // same key is what makes that safe.
                        Err(e) => Verdict::Retry { after: None, reason: format!("reply cut off: {}", super::causes(&e)) },
                    },
                    Verdict::Fatal { status } => {
                        let text = resp.text().await.unwrap_or_default();
                        return Err(Error::Status { path: path.to_string(), status, body: detail(&text) });
                    }
                    v => v,
                },
                // A refused connection or a failed lookup at the first request is a setting to fix;
                // a timeout may be an outage and is retried.
                Err(e) if contact == Contact::First && attempt == 0 && e.is_connect() && !e.is_timeout() => {
                    return Err(Error::Unreachable { url: self.base.clone(), reason: super::causes(&e) });
                }
                Err(e) => Verdict::Retry { after: None, reason: super::causes(&e) },
            };
            match verdict {
                Verdict::Billing => {
                    let since = *billing_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= self.policy.billing_budget {
                        return Err(Error::Billing { path: path.to_string(), waited: since.elapsed() });
                    }
                    tracing::warn!(path, "Tinker answered 402 (billing); pausing before retrying");
                    tokio::time::sleep(self.policy.billing_pause).await;
                }
                Verdict::Retry { after, reason } => {
                    billing_since = None;
                    let delay = after.unwrap_or_else(|| self.policy.backoff(attempt));
                    if start.elapsed() + delay > self.policy.budget {
                        return Err(Error::GaveUp { path: path.to_string(), after: start.elapsed(), last: reason });
                    }
                    tracing::debug!(path, attempt, ?delay, %reason, "retrying Tinker request");
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                Verdict::Success | Verdict::Fatal { .. } => unreachable!("handled above"),
            }
        }
    }
}

/// Whether a request opens the conversation with the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contact {
    /// The session's first request: nothing listening means a wrong URL.
    First,
    /// Later requests: a refused connection is an outage to wait out.
    Established,
}

/// What to do with a reply.
#[derive(Debug, PartialEq)]
pub(super) enum Verdict {
    Success,
    Retry { after: Option<Duration>, reason: String },
    Billing,
    Fatal { status: u16 },
}

/// The SDK's classification of a status (§1.5–1.6), with the server's `x-should-retry` and
/// `retry-after[-ms]` hints.
pub(super) fn classify(resp: &reqwest::Response) -> Verdict {
    let status = resp.status().as_u16();
    let h = resp.headers();
    let should_retry = h.get(header::SHOULD_RETRY).and_then(|v| v.to_str().ok()).map(|v| v == "true");
    let after = retry_after(h);
    let retry = || Verdict::Retry { after, reason: format!("HTTP {status}") };
    match (status, should_retry) {
        (200..=299, _) => Verdict::Success,
        (402, _) => Verdict::Billing,
        (_, Some(true)) => retry(),
        (_, Some(false)) => Verdict::Fatal { status },
        (408 | 409 | 429 | 500.., None) => retry(),
        // A bare 400 with no body is how a proxy rejects a connection (§1.5): a connection
        // error, not an answer.
        (400, None) if resp.content_length() == Some(0) => Verdict::Retry { after, reason: "HTTP 400 with an empty body (connection rejected)".into() },
        _ => Verdict::Fatal { status },
    }
}

/// `retry-after-ms`, else `retry-after` in seconds, when within (0, 60] s (the SDK ignores
/// anything longer).
fn retry_after(h: &HeaderMap) -> Option<Duration> {
    let get = |k: &str| h.get(k).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<f64>().ok());
    let d = get(header::RETRY_AFTER_MS).map(|ms| ms / 1000.0).or_else(|| get(header::RETRY_AFTER))?;
    (d > 0.0 && d <= 60.0).then(|| Duration::from_secs_f64(d))
}

/// The useful part of an error body: FastAPI's `detail`, else the text, shortened.
pub(super) fn detail(text: &str) -> String {
    let d = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v.get("detail").or_else(|| v.get("error")).map(|d| d.as_str().map(str::to_string).unwrap_or_else(|| d.to_string())))
        .unwrap_or_else(|| text.trim().to_string());
    let mut d: String = d.chars().take(500).collect();
    if d.is_empty() {
        d = "(empty body)".into();
    }
    d
}

pub(super) fn parse_json<T: DeserializeOwned>(path: &str, bytes: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(bytes).map_err(|e| Error::Protocol { path: path.to_string(), reason: format!("{e}; body: {}", String::from_utf8_lossy(&bytes[..bytes.len().min(300)])) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_with_at_most_a_quarter_of_jitter() {
        let p = RetryPolicy { base_delay: Duration::from_millis(100), max_delay: Duration::from_secs(1), ..RetryPolicy::default() };
        for (attempt, full) in [(0, 100), (1, 200), (2, 400), (3, 800), (4, 1000), (30, 1000)] {
            let d = p.backoff(attempt).as_secs_f64() * 1000.0;
            assert!(d <= full as f64 + 1e-6 && d >= 0.75 * full as f64 - 1e-6, "attempt {attempt}: {d} ms");
        }
    }

    #[test]
    fn idempotency_keys_differ() {
        let keys: std::collections::HashSet<String> = (0..1000).map(|_| idempotency_key()).collect();
        assert_eq!(keys.len(), 1000);
    }

    #[test]
    fn retry_after_honours_ms_then_seconds_within_a_minute() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(250)));
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("120"));
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn error_details_come_from_fastapi_bodies_or_text() {
        assert_eq!(detail(r#"{"detail": "model not found"}"#), "model not found");
        assert_eq!(detail(r#"{"error": "bad", "category": "user"}"#), "bad");
        assert_eq!(detail("upstream timeout\n"), "upstream timeout");
        assert_eq!(detail(""), "(empty body)");
    }
}
