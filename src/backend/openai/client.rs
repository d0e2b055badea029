//! HTTP to an OpenAI-compatible server: one `reqwest` client (connection pool, per-request
//! timeout), a semaphore that caps requests in flight, and retries with exponential back-off for
//! infrastructure failures only.
//!
//! What is retried: no answer (connection refused or reset, a timeout), HTTP 429 and 5xx, and a
//! 2xx reply that does not parse or lacks what the protocol promises (garbage, a body cut off
//! mid-way). What is not: any other 4xx, which retrying cannot fix (a wrong model name, a server
//! that takes no token ids). The permit is held for one attempt, not during the back-off, so a
//! failing request does not starve the others.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Semaphore;

use super::config::Config;
use super::error::Error;
use crate::retry;

/// Longest back-off between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Reply bodies quoted in errors are cut to this many bytes.
const BODY_QUOTE: usize = 300;

/// A client for one server.
#[derive(Debug)]
pub(crate) struct Client {
    http: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    slots: Semaphore,
    max_retries: u32,
    backoff: Duration,
    /// Attempts beyond the first, over the client's life (for the run's metrics).
    retries: AtomicU64,
}

/// Why one attempt failed.
enum Attempt {
    /// Worth another try.
    Retry(Error),
    /// Final.
    Fail(Error),
}

impl Client {
    /// A client with `config`'s timeout, concurrency and retry policy.
    ///
    /// # Errors
    /// [`Error::Invalid`] when the HTTP client cannot be built (a TLS backend failure).
    pub(crate) fn new(config: &Config) -> Result<Client, Error> {
        let http = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|e| Error::Invalid(format!("cannot build the HTTP client: {e}")))?;
        Ok(Client {
            http,
            base_url: config.base_url.clone(),
            api_key: config.api_key.clone(),
            slots: Semaphore::new(config.concurrency.max(1)),
            max_retries: config.max_retries,
            backoff: config.backoff,
            retries: AtomicU64::new(0),
        })
    }

    /// Retries made so far.
    pub(crate) fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// `GET /models`: the ids and owners the server lists.
    ///
    /// # Errors
    /// As [`Client::post`].
    pub(crate) async fn models(&self) -> Result<Vec<(String, String)>, Error> {
        self.call("models", None, |v| {
            let data = v.get("data").and_then(Value::as_array).ok_or("no `data` list")?;
            Ok(data
                .iter()
                .filter_map(|m| {
                    let id = m.get("id")?.as_str()?.to_string();
                    let owner = m.get("owned_by").and_then(Value::as_str).unwrap_or_default().to_string();
                    Some((id, owner))
                })
                .collect())
        })
        .await
    }

    /// `POST {base}/{path}` with a JSON body; `parse` turns the reply into a value or says what
    /// is wrong with it (a malformed reply, retried).
    ///
    /// # Errors
    /// [`Error::Unreachable`], [`Error::Status`] or [`Error::Malformed`] once the retries are
    /// spent (or at once for a 4xx other than 429).
    pub(crate) async fn post<T>(&self, path: &str, body: &Value, parse: impl Fn(Value) -> Result<T, String>) -> Result<T, Error> {
        self.call(path, Some(body), parse).await
    }

    async fn call<T>(&self, path: &str, body: Option<&Value>, parse: impl Fn(Value) -> Result<T, String>) -> Result<T, Error> {
        let url = format!("{}/{path}", self.base_url);
        let policy = retry::Policy::counted(self.max_retries, self.backoff, MAX_BACKOFF);
        let (url, parse) = (&url, &parse);
        retry::run(&policy, url, |i| async move {
            if i > 0 {
                self.retries.fetch_add(1, Ordering::Relaxed);
            }
            let outcome = {
                let _slot = self.slots.acquire().await.expect("the semaphore is never closed");
                self.once(url, body, i + 1, parse).await
            };
            match outcome {
                Ok(v) => retry::Attempt::Done(v),
                Err(Attempt::Fail(e)) => retry::Attempt::Fail(e),
                Err(Attempt::Retry(e)) => {
                    tracing::warn!(%url, attempt = i + 1, "failed, retryable: {e}");
                    retry::Attempt::Retry(e, None)
                }
            }
        })
        .await
        .map_err(|gave_up| gave_up.last)
    }

    async fn once<T>(&self, url: &str, body: Option<&Value>, attempts: u32, parse: &impl Fn(Value) -> Result<T, String>) -> Result<T, Attempt> {
        let mut req = match body {
            Some(b) => self.http.post(url).json(b),
            None => self.http.get(url),
        };
        if let Some(key) = &self.api_key {
            req = req.bearer_auth(key);
        }
        let unreachable = |source| Attempt::Retry(Error::Unreachable { url: url.to_string(), attempts, source });
        let resp = req.send().await.map_err(unreachable)?;
        let status = resp.status();
        // Reading the body can fail too: a connection closed before `Content-Length` bytes.
        let bytes = resp.bytes().await.map_err(unreachable)?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&bytes);
            let body: String = text.chars().take(BODY_QUOTE).collect();
            let e = Error::Status { url: url.to_string(), status: status.as_u16(), attempts, body };
            return Err(if status.as_u16() == 429 || status.is_server_error() { Attempt::Retry(e) } else { Attempt::Fail(e) });
        }
        let malformed = |reason: String| Attempt::Retry(Error::Malformed { url: url.to_string(), attempts, reason });
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
            let text = String::from_utf8_lossy(&bytes);
            let start: String = text.chars().take(80).collect();
            malformed(format!("not JSON ({e}): `{start}`"))
        })?;
        parse(value).map_err(malformed)
    }
}
