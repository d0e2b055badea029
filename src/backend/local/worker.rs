//! A thread that owns a value and runs requests against it, one at a time, in submission order:
//! how the local backend serves the async seams without blocking the async executor: candle's
//! forward and backward run on a dedicated `std::thread` that owns the model.
//!
//! Rejected alternative: moving the trainer in and out of `spawn_blocking` for every call (what
//! the engine did before): it needs `&mut` ownership at every call site, so two requests can
//! never be queued at once, and every site repeats the join-error mapping.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;

use crate::backend::error::{Error, Result};
use crate::backend::traits::Pending;

type Job<S> = Box<dyn FnOnce(&mut S) + Send>;

/// The sending half; the thread exits when the last clone is dropped (after finishing what was
/// already queued).
pub(crate) struct Worker<S> {
    what: &'static str,
    jobs: mpsc::Sender<Job<S>>,
}

impl<S> Clone for Worker<S> {
    fn clone(&self) -> Self {
        Worker { what: self.what, jobs: self.jobs.clone() }
    }
}

impl<S: 'static> Worker<S> {
    /// Starts the thread; `init` builds the owned value on it (loading weights is blocking
    /// work too). The reply says whether `init` succeeded.
    pub(crate) fn spawn(what: &'static str, init: impl FnOnce() -> Result<S> + Send + 'static) -> Pending<Worker<S>> {
        let (jobs, rx) = mpsc::channel::<Job<S>>();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<Result<()>>();
        let spawned = std::thread::Builder::new().name(format!("rlx {what}")).spawn(move || {
            let mut state = match std::panic::catch_unwind(AssertUnwindSafe(init)) {
                Ok(Ok(s)) => {
                    let _ = ready_tx.send(Ok(()));
                    s
                }
                Ok(Err(e)) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
                Err(panic) => {
                    let _ = ready_tx.send(Err(Error::Gone { what, reason: panic_message(&panic) }));
                    return;
                }
            };
            while let Ok(job) = rx.recv() {
                job(&mut state);
            }
        });
        let worker = Worker { what, jobs };
        Box::pin(async move {
            spawned.map_err(|e| Error::Gone { what, reason: format!("cannot start its thread: {e}") })?;
            ready_rx.await.map_err(|_| Error::Gone { what, reason: "its thread exited while starting".into() })??;
            Ok(worker)
        })
    }

    /// Queues `f`; the reply is its result. A panic inside `f` becomes [`Error::Gone`] for this
    /// request only: the thread keeps serving (the state may be mid-update, so the engine treats
    /// the error as fatal for the run, but other holders get clean errors instead of a hang).
    pub(crate) fn submit<T: Send + 'static>(&self, f: impl FnOnce(&mut S) -> Result<T> + Send + 'static) -> Pending<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let what = self.what;
        let job: Job<S> = Box::new(move |state: &mut S| {
            let r = std::panic::catch_unwind(AssertUnwindSafe(|| f(state))).unwrap_or_else(|p| Err(Error::Gone { what, reason: panic_message(&p) }));
            let _ = tx.send(r);
        });
        let sent = self.jobs.send(job).is_ok();
        Box::pin(async move {
            if !sent {
                return Err(Error::Gone { what, reason: "its thread has exited".into() });
            }
            rx.await.map_err(|_| Error::Gone { what, reason: "its thread exited before replying".into() })?
        })
    }
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>().map(|s| (*s).to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_else(|| "it panicked".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_in_submission_order_and_survives_a_panic() {
        let w: Worker<Vec<u32>> = Worker::spawn("test worker", || Ok(vec![])).await.unwrap();
        let a = w.submit(|v| {
            v.push(1);
            Ok(v.len())
        });
        let b = w.submit(|_| -> Result<usize> { panic!("boom") });
        let c = w.submit(|v| {
            v.push(2);
            Ok(v.clone())
        });
        // Awaited out of order: the queue order decides.
        assert_eq!(c.await.unwrap(), vec![1, 2]);
        assert_eq!(a.await.unwrap(), 1);
        let err = b.await.unwrap_err().to_string();
        assert!(err.contains("boom"), "{err}");
    }

    #[tokio::test]
    async fn a_failed_start_is_an_error() {
        let r = Worker::<()>::spawn("test worker", || Err(Error::Tokenizer("no".into()))).await;
        assert!(matches!(r, Err(Error::Tokenizer(_))));
    }
}
