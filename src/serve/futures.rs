//! The futures store: every accepted request gets a `request_id` whose result `retrieve_future`
//! returns, as often as it is polled.
//!
//! Duplicates are normal in Tinker's protocol (§12): the SDK resubmits after 408/409/429/5xx and
//! dropped connections, reusing the training `seq_id` and the `asample` `seq_id`. A submission
//! carrying a dedup key that was seen before gets the original request id back, and no new work
//! is started. Results are kept for the life of the server (a test server's lifetime; the hosted
//! service expires them with 410).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::seam::{ForwardBackwardOutput, SampledSequence};
use crate::tinker::RequestType;
use crate::tinker::wire::ErrorCategory;

/// A finished request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FutureResult {
    /// A JSON result (`create_model`, `optim_step`, saves, loads).
    Json(serde_json::Value),
    /// A forward/backward result (protobuf or legacy JSON, by the poll's `Accept`).
    ForwardBackward(ForwardBackwardOutput),
    /// Sampled sequences (protobuf or legacy JSON, by the poll's `Accept`).
    Sample {
        /// One per sample.
        sequences: Vec<SampledSequence>,
        /// Per prompt token, NaN where not scored (position 0), when asked for.
        prompt_logprobs: Option<Vec<f32>>,
        /// Per prompt token, the top-k tokens (empty where not scored), when asked for.
        topk_prompt_logprobs: Option<Vec<crate::seam::TopK>>,
    },
    /// A failure, reported as HTTP 200 `{"error", "category"}`.
    Failed {
        /// What went wrong.
        error: String,
        /// Whose fault.
        category: ErrorCategory,
    },
}

impl FutureResult {
    /// A JSON result from its `tinker::wire` type, so the client and the server read and write
    /// one definition of each reply.
    pub(crate) fn json<T: serde::Serialize>(reply: &T) -> Self {
        FutureResult::Json(serde_json::to_value(reply).expect("wire types serialise"))
    }
}

type Slot = watch::Sender<Option<Arc<FutureResult>>>;

/// The sending half of one request's result.
#[derive(Debug)]
pub(crate) struct Completion {
    slot: Slot,
}

impl Completion {
    /// Stores the result; pollers waiting on it wake up.
    pub(crate) fn finish(self, outcome: FutureResult) {
        self.slot.send_replace(Some(Arc::new(outcome)));
    }

    /// Stores a failure.
    pub(crate) fn fail(self, category: ErrorCategory, error: impl Into<String>) {
        self.finish(FutureResult::Failed { error: error.into(), category });
    }
}

impl Drop for Completion {
    /// A completion dropped without a result (a task that died) fails the request instead of
    /// leaving its pollers waiting forever.
    fn drop(&mut self) {
        if self.slot.borrow().is_none() {
            self.slot.send_replace(Some(Arc::new(FutureResult::Failed { error: "the server dropped this request before finishing it".into(), category: ErrorCategory::Server })));
        }
    }
}

/// What [`Store::submit`] decided.
#[derive(Debug)]
pub(crate) enum Submitted {
    /// A new request: run it and finish the completion.
    New {
        /// Its id.
        request_id: String,
        /// Where its result goes.
        completion: Completion,
    },
    /// A resubmission of an accepted request: answer its id, do nothing else.
    Duplicate {
        /// The original id.
        request_id: String,
    },
}

impl Submitted {
    /// The request id to answer.
    pub(crate) fn request_id(&self) -> &str {
        match self {
            Submitted::New { request_id, .. } | Submitted::Duplicate { request_id } => request_id,
        }
    }
}

struct Entry {
    kind: RequestType,
    rx: watch::Receiver<Option<Arc<FutureResult>>>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    entries: HashMap<String, Entry>,
    by_key: HashMap<(String, u64), String>,
}

/// All requests of the server.
pub(crate) struct Store {
    /// Distinguishes this server's ids from an earlier instance's (a restarted server answers
    /// 404, not another request's result).
    prefix: String,
    /// Never held across an `.await` (a std mutex, as in mini-redis's `Db`).
    inner: Mutex<Inner>,
}

/// `retrieve_future` of an id the store never issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnknownRequest;

impl Store {
    /// An empty store whose ids start with `prefix`.
    pub(crate) fn new(prefix: &str) -> Self {
        Store { prefix: prefix.to_string(), inner: Mutex::new(Inner::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a request of `kind`; `key` (`(model_id, seq_id)` or `(sampling_session_id,
    /// seq_id)`) makes a resubmission answer the original id.
    pub(crate) fn submit(&self, kind: RequestType, key: Option<(String, u64)>) -> Submitted {
        let mut inner = self.lock();
        if let Some(k) = &key
            && let Some(id) = inner.by_key.get(k)
        {
            return Submitted::Duplicate { request_id: id.clone() };
        }
        inner.next += 1;
        let request_id = format!("{}-{}", self.prefix, inner.next);
        let (slot, rx) = watch::channel(None);
        inner.entries.insert(request_id.clone(), Entry { kind, rx });
        if let Some(k) = key {
            inner.by_key.insert(k, request_id.clone());
        }
        Submitted::New { request_id, completion: Completion { slot } }
    }

    /// The kind of a request.
    pub(crate) fn kind(&self, request_id: &str) -> Option<RequestType> {
        self.lock().entries.get(request_id).map(|e| e.kind)
    }

    /// Waits up to `timeout` for the result (`Ok(None)`: not finished yet).
    ///
    /// # Errors
    /// [`UnknownRequest`] for an id this store never issued.
    ///
    /// # Cancel safety
    /// Cancel-safe: waiting changes nothing.
    pub(crate) async fn wait(&self, request_id: &str, timeout: Duration) -> Result<Option<Arc<FutureResult>>, UnknownRequest> {
        let mut rx = self.lock().entries.get(request_id).map(|e| e.rx.clone()).ok_or(UnknownRequest)?;
        let done = tokio::time::timeout(timeout, rx.wait_for(Option::is_some)).await;
        Ok(match done {
            Ok(Ok(v)) => v.clone(),
            // The sender cannot close without a value ([`Completion`]'s drop stores one), and
            // the timeout means "not yet".
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn duplicates_get_the_original_id_and_polls_see_one_result() {
        let store = Store::new("t");
        let Submitted::New { request_id, completion } = store.submit(RequestType::OptimStep, Some(("m".into(), 2))) else { panic!("new") };
        let Submitted::Duplicate { request_id: again } = store.submit(RequestType::OptimStep, Some(("m".into(), 2))) else { panic!("duplicate") };
        assert_eq!(again, request_id);
        assert!(matches!(store.submit(RequestType::OptimStep, Some(("m".into(), 3))), Submitted::New { .. }));
        assert_eq!(store.wait(&request_id, Duration::from_millis(10)).await.unwrap(), None);
        completion.finish(FutureResult::json(&crate::tinker::wire::OptimStepResponse::default()));
        for _ in 0..3 {
            assert!(matches!(*store.wait(&request_id, Duration::from_secs(5)).await.unwrap().unwrap(), FutureResult::Json(_)));
        }
        assert_eq!(store.wait("nope", Duration::ZERO).await, Err(UnknownRequest));
    }

    #[tokio::test]
    async fn a_dropped_completion_fails_the_request() {
        let store = Store::new("t");
        let Submitted::New { request_id, completion } = store.submit(RequestType::Sample, None) else { panic!() };
        drop(completion);
        let out = store.wait(&request_id, Duration::from_secs(5)).await.unwrap().unwrap();
        assert!(matches!(&*out, FutureResult::Failed { category: ErrorCategory::Server, .. }));
    }
}
