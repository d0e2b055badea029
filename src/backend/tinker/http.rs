//! One HTTP exchange with Tinker, and the retry policy around *submissions*
//! (SDK 0.38.0): connection errors, timeouts, 408, 409, 429 and 5xx are retried
//! with capped exponential back-off (or the server's `Retry-After`) for up to five minutes; 402
//! (billing) pauses 5 s at a time for up to an hour, without spending the five minutes (a
//! failure after the hold gets them whole); the server's `x-should-retry` overrides the
//! decision. Polling a future ([`super::future`]) goes through the same policy and the same 402
//! hold ([`RetryPolicy::billing`]), with its own reading of the answers.
//!
//! Every retry of one submission reuses its `X-Idempotency-Key` and its body — a training
//! request keeps its `seq_id` — so a request that reached the server before the connection
//! dropped is deduplicated there instead of running twice (§12).
//!
//! Rejected alternative: the SDK's two layers (10 quick HTTP retries inside five minutes of
//! slower re-submissions). One loop with one deadline retries the same conditions with the same
//! delays and is one place to read.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, HeaderValue};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::Error;
use crate::retry;
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
        // `RLX_TINKER_RETRY_S` shortens it for tests that stop a server mid-run.
        let budget = crate::switches::TINKER_RETRY_S.var().and_then(|s| s.trim().parse::<f64>().ok()).filter(|s| s.is_finite() && *s > 0.0);
        RetryPolicy {
            budget: budget.map_or(Duration::from_secs(300), Duration::from_secs_f64),
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            billing_pause: Duration::from_secs(5),
            billing_budget: Duration::from_secs(3600),
        }
    }
}

impl RetryPolicy {
    /// The back-off of [`crate::retry`]: from `base_delay`, doubling, up to `max_delay`, within
    /// `budget`.
    pub(super) fn backoff_policy(&self) -> retry::Policy {
        retry::Policy { retries: None, budget: Some(self.budget), base_delay: self.base_delay, max_delay: self.max_delay }
    }

    /// The wait before retry `attempt`: `min(base · 2^attempt, max)`, less up to 25 % jitter.
    pub fn backoff(&self, attempt: u32) -> Duration {
        self.backoff_policy().delay(attempt)
    }

    /// The one 402 (billing) rule of submissions and polls: pause `billing_pause` and try
    /// again, until 402s in a row (the first at `*since`, which any other answer clears) have
    /// lasted `billing_budget`; then [`Error::Billing`] for `path`.
    pub(super) fn billing<T>(&self, since: &mut Option<Instant>, path: &str) -> retry::Attempt<T, Failed> {
        let first = *since.get_or_insert_with(Instant::now);
        if first.elapsed() >= self.billing_budget {
            return retry::Attempt::Fail(Failed::Fatal(Error::Billing { path: path.to_string(), waited: first.elapsed() }));
        }
        tracing::warn!(path, "Tinker answered 402 (billing); pausing before retrying");
        retry::Attempt::Hold(Failed::Transient("HTTP 402 (billing)".into()), self.billing_pause)
    }
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

/// An HTTP method with its body.
#[derive(Clone, Copy)]
pub enum Verb<'a> {
    /// `GET`.
    Get,
    /// `POST` with a body.
    Post(&'a Body),
    /// `PUT` with a body.
    Put(&'a Body),
    /// `DELETE`.
    Delete,
}

/// The connection to one Tinker service: base URL, credential, HTTP client and retry policy.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    /// Sent as `X-API-Key` on every request to the service, never to a signed download URL
    /// (which may point at another host, such as a storage bucket: the URL is the credential).
    key: HeaderValue,
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
        let mut key = HeaderValue::from_str(api_key).map_err(|_| Error::BadKey { reason: "it contains characters that cannot go into an HTTP header".into() })?;
        key.set_sensitive(true);
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .connect_timeout(Duration::from_secs(5))
            // Above the 30 s long-poll of `retrieve_future` and the SDK's 60 s default; a
            // download sets a longer total and relies on the read timeout to notice a stall.
            .timeout(Duration::from_secs(60))
            .read_timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| Error::Connect { url: base_url.to_string(), reason: causes(&e) })?;
        Ok(Client { http, base: base_url.trim_end_matches('/').to_string(), key, api_key: api_key.to_string(), policy })
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

    /// One request to the service, with the API key.
    fn request(&self, path: &str, verb: Verb<'_>, extra: &[(&'static str, String)], timeout: Duration) -> reqwest::RequestBuilder {
        let url = self.url(path);
        let (req, body) = match verb {
            Verb::Get => (self.http.get(url), None),
            Verb::Post(b) => (self.http.post(url), Some(b)),
            Verb::Put(b) => (self.http.put(url), Some(b)),
            Verb::Delete => (self.http.delete(url), None),
        };
        let mut req = match body {
            None => req,
            Some(Body::Json(v)) => req.json(v),
            Some(Body::Proto(b)) => req.header("content-type", "application/x-protobuf").body(b.clone()),
        };
        req = req.header(header::API_KEY, self.key.clone());
        for (k, v) in extra {
            req = req.header(*k, v);
        }
        req.timeout(timeout)
    }

    /// Sends one request, once: the building block of [`Client::submit`] and of polling.
    pub async fn send_once(&self, path: &str, body: Option<&Body>, extra: &[(&'static str, String)], timeout: Duration) -> reqwest::Result<reqwest::Response> {
        let verb = body.map_or(Verb::Get, Verb::Post);
        self.request(path, verb, extra, timeout).send().await
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
        let bytes = self.retrying_from(path, Verb::Post(&body), method, Contact::First).await?;
        parse_json(path, &bytes)
    }

    /// GETs `path` as the first request of a session (see [`Client::first_contact`]); the
    /// reply body, unparsed.
    ///
    /// # Errors
    /// As [`Client::first_contact`].
    pub async fn first_contact_get(&self, path: &str, method: &'static str) -> Result<bytes::Bytes, Error> {
        self.retrying_from(path, Verb::Get, method, Contact::First).await
    }

    /// GETs a JSON document, retrying as [`Client::post_json`].
    ///
    /// # Errors
    /// As [`Client::post_json`].
    pub async fn get_json<T: DeserializeOwned>(&self, path: &str, method: &'static str) -> Result<T, Error> {
        let bytes = self.retrying(path, Verb::Get, method).await?;
        parse_json(path, &bytes)
    }

    /// Sends `verb` to `path`, retrying as [`Client::post_json`]; the reply body, unparsed
    /// (`PUT …/ttl` and `DELETE` answer `null` or nothing).
    ///
    /// # Errors
    /// As [`Client::post_json`].
    pub async fn call(&self, path: &str, verb: Verb<'_>, method: &'static str) -> Result<bytes::Bytes, Error> {
        self.retrying(path, verb, method).await
    }

    /// POSTs `body` until the server accepts it or the policy gives up; returns the reply body.
    ///
    /// # Errors
    /// As [`Client::post_json`].
    pub async fn submit(&self, path: &str, body: &Body, method: &'static str) -> Result<bytes::Bytes, Error> {
        self.retrying(path, Verb::Post(body), method).await
    }

    /// GETs a signed download URL into the file `dest` (created or truncated on each attempt),
    /// retrying as submissions are; returns the bytes written. The URL is the credential: it
    /// goes without the API key, and `label` (the file's name) stands for it in errors, which
    /// end up in logs. A 4xx is not retried: an expired or revoked URL needs signing again,
    /// which is the caller's to ask for.
    ///
    /// # Errors
    /// [`Error::Status`] for a status that is not retried, [`Error::GaveUp`], and
    /// [`Error::Protocol`] when the file cannot be written or is shorter than `Content-Length`.
    pub async fn download(&self, url: &str, label: &str, dest: &Path) -> Result<u64, Error> {
        // Far above any read: a large file takes long, and a stall is caught by the read timeout.
        const TOTAL: Duration = Duration::from_secs(6 * 3600);
        let send = |_attempt: u32| self.http.get(url).timeout(TOTAL);
        let take = |resp: reqwest::Response| stream_to(resp, dest.to_path_buf(), label.to_string());
        self.retry_loop(label, Contact::Established, send, take).await?
    }

    async fn retrying(&self, path: &str, verb: Verb<'_>, method: &'static str) -> Result<bytes::Bytes, Error> {
        self.retrying_from(path, verb, method, Contact::Established).await
    }

    async fn retrying_from(&self, path: &str, verb: Verb<'_>, method: &'static str, contact: Contact) -> Result<bytes::Bytes, Error> {
        let key = idempotency_key();
        let has_body = matches!(verb, Verb::Post(_) | Verb::Put(_));
        let send = |attempt: u32| {
            let mut extra = vec![(header::RETRY_COUNT, attempt.to_string()), (header::SDK_METHOD, method.to_string()), (header::SDK_VERSION, SDK_VERSION.to_string())];
            if has_body {
                extra.push((header::IDEMPOTENCY_KEY, key.clone()));
            }
            self.request(path, verb, &extra, Duration::from_secs(60))
        };
        // The body was cut off: the request may have run; resending with the same key is what
        // makes that safe.
        let take = |resp: reqwest::Response| async move { resp.bytes().await.map_err(|e| format!("reply cut off: {}", causes(&e))) };
        self.retry_loop(path, contact, send, take).await
    }

    /// The one retry loop of a submission, through [`retry::run`]: sends `send(attempt)` until
    /// `take` has the reply or the policy gives up. `take` reads a successful reply (`Err`: it
    /// was cut off, retry).
    async fn retry_loop<T, F>(&self, label: &str, contact: Contact, send: impl Fn(u32) -> reqwest::RequestBuilder, take: impl Fn(reqwest::Response) -> F) -> Result<T, Error>
    where
        F: Future<Output = Result<T, String>>,
    {
        let start = Instant::now();
        // When the current run of 402s began; any other answer ends it.
        let billing_since = std::sync::Mutex::new(None::<Instant>);
        let (send, take, billing_since) = (&send, &take, &billing_since);
        let outcome = retry::run(&self.policy.backoff_policy(), label, |attempt| async move {
            let verdict = match send(attempt).send().await {
                Ok(resp) => match classify(&resp) {
                    Verdict::Success => match take(resp).await {
                        Ok(v) => return retry::Attempt::Done(v),
                        Err(reason) => Verdict::Retry { after: None, reason },
                    },
                    Verdict::Fatal { status } => {
                        let text = resp.text().await.unwrap_or_default();
                        return retry::Attempt::Fail(Failed::Fatal(Error::Status { path: label.to_string(), status, body: detail(&text) }));
                    }
                    v => v,
                },
                // A refused connection or a failed lookup at the first request is a setting to fix;
                // a timeout may be an outage and is retried.
                Err(e) if contact == Contact::First && attempt == 0 && e.is_connect() && !e.is_timeout() => {
                    return retry::Attempt::Fail(Failed::Fatal(Error::Unreachable { url: self.base.clone(), reason: causes(&e) }));
                }
                Err(e) => Verdict::Retry { after: None, reason: causes(&e) },
            };
            match verdict {
                Verdict::Billing => self.policy.billing(&mut billing_since.lock().expect("never poisoned"), label),
                Verdict::Retry { after, reason } => {
                    *billing_since.lock().expect("never poisoned") = None;
                    retry::Attempt::Retry(Failed::Transient(reason), after)
                }
                Verdict::Success | Verdict::Fatal { .. } => unreachable!("handled above"),
            }
        })
        .await;
        outcome.map_err(|g| match g.last {
            Failed::Fatal(e) => e,
            Failed::Transient(last) => Error::GaveUp { path: label.to_string(), after: start.elapsed(), last },
        })
    }
}

/// Why an attempt of [`Client::retry_loop`] or of a poll failed: for good, or in a way worth
/// retrying.
pub(super) enum Failed {
    Fatal(Error),
    Transient(String),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Fatal(e) => write!(f, "{e}"),
            Failed::Transient(reason) => f.write_str(reason),
        }
    }
}

/// Streams a reply into `dest`: `Ok(Err(..))` is a failure to report (the file cannot be
/// written, the reply is shorter than it said), `Err(reason)` one to retry (the connection broke).
async fn stream_to(mut resp: reqwest::Response, dest: PathBuf, label: String) -> Result<Result<u64, Error>, String> {
    use tokio::io::AsyncWriteExt as _;
    let declared = resp.content_length();
    let fail = |reason: String| Error::Protocol { path: label.clone(), reason };
    let mut file = match tokio::fs::File::create(&dest).await {
        Ok(f) => f,
        Err(e) => return Ok(Err(fail(format!("cannot create `{}`: {e}", dest.display())))),
    };
    let mut written = 0u64;
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                if let Err(e) = file.write_all(&chunk).await {
                    return Ok(Err(fail(format!("cannot write `{}`: {e}", dest.display()))));
                }
                written += chunk.len() as u64;
            }
            Ok(None) => break,
            Err(e) => return Err(format!("download cut off after {written} bytes: {}", causes(&e))),
        }
    }
    if let Err(e) = file.flush().await {
        return Ok(Err(fail(format!("cannot write `{}`: {e}", dest.display()))));
    }
    Ok(match declared {
        Some(n) if n != written => Err(fail(format!("the server announced {n} bytes and sent {written}"))),
        _ => Ok(written),
    })
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

/// The cause chain of an HTTP client error in one line (reqwest hides the useful part, such as
/// "connection refused", in its sources).
pub(crate) fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    crate::causes::causes(e).join(": ")
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
