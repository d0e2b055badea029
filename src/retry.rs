//! The one retry policy: capped exponential backoff with jitter, within a budget of retries and
//! of time, for whatever the caller says is retryable. Every remote call rlx makes (Tinker's
//! submissions and the polling of its futures, OpenAI-compatible servers, Sandbox Fusion,
//! MLflow), sandbox infrastructure errors and the Python reward's sandbox retry through [`run`],
//! so they back off the same way and a change to how rlx retries is made once. A poll answered
//! "not yet" is progress, not a failure ([`Attempt::Again`]): only failures in a row count.
//!
//! What is retryable stays with each caller (an HTTP 429 or 5xx, a refused connection after the
//! first contact, a sandbox infrastructure error): only it knows its protocol. Jitter takes up to
//! a quarter off each wait, so that many clients retrying at once spread out rather than return
//! together.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often and how long to retry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Policy {
    /// Retries after the first attempt; `None`: as many as the time budget allows.
    pub(crate) retries: Option<u32>,
    /// No wait may end later than this after the first attempt; `None`: no time budget.
    pub(crate) budget: Option<Duration>,
    /// The wait before the first retry; each further retry doubles it, up to `max_delay`.
    pub(crate) base_delay: Duration,
    /// The longest wait.
    pub(crate) max_delay: Duration,
}

impl Policy {
    /// Up to `retries` retries, waiting `base_delay` · 2^i (at most `max_delay`) before retry i.
    pub(crate) const fn counted(retries: u32, base_delay: Duration, max_delay: Duration) -> Policy {
        Policy { retries: Some(retries), budget: None, base_delay, max_delay }
    }

    /// The wait before retry `i` (0: the first): `min(base · 2^i, max)`, less up to 25 % jitter.
    pub(crate) fn delay(&self, i: u32) -> Duration {
        let exp = self.base_delay.saturating_mul(1u32 << i.min(16));
        exp.min(self.max_delay).mul_f64(1.0 - 0.25 * jitter())
    }

    /// Whether retry `i`, after waiting `wait`, is within the budget of a call that started at
    /// `start`.
    fn allows(&self, i: u32, start: Instant, wait: Duration) -> bool {
        self.retries.is_none_or(|n| i < n) && self.budget.is_none_or(|b| start.elapsed() + wait <= b)
    }
}

/// What one attempt came to.
#[derive(Debug)]
pub(crate) enum Attempt<T, E> {
    /// It worked.
    Done(T),
    /// It failed in a way worth trying again (after the policy's wait, or the one given: a
    /// server's `Retry-After`).
    Retry(E, Option<Duration>),
    /// It failed for good.
    Fail(E),
    /// It was told to wait (Tinker's 402, billing): try again after this pause, which counts
    /// neither as a retry nor against the time budget; the caller bounds how long it holds.
    Hold(E, Duration),
    /// It made progress without a value yet (a long poll answered "not done yet"): try again
    /// after this pause, with the count of retries and the time budget started over, since only
    /// failures in a row spend them.
    Again(Duration),
}

/// Why [`run`] stopped without a value.
#[derive(Debug)]
pub(crate) struct GaveUp<E> {
    /// The last attempt's error.
    pub(crate) last: E,
    /// Attempts made since the last progress ([`Attempt::Again`]), the first included.
    pub(crate) attempts: u32,
    /// Whether the error was retryable and the budget ran out (rather than a [`Attempt::Fail`]).
    pub(crate) exhausted: bool,
}

/// Calls `attempt(i)` (i = 0 first) until it is done, fails for good, or `policy` allows no
/// more retries; `label` names the call in the log.
///
/// # Errors
/// [`GaveUp`] with the last error.
pub(crate) async fn run<T, E, F, Fut>(policy: &Policy, label: &str, mut attempt: F) -> Result<T, GaveUp<E>>
where
    E: std::fmt::Display,
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Attempt<T, E>>,
{
    let mut start = Instant::now();
    let mut i = 0u32;
    loop {
        match attempt(i).await {
            Attempt::Done(v) => return Ok(v),
            Attempt::Fail(last) => return Err(GaveUp { last, attempts: i + 1, exhausted: false }),
            Attempt::Retry(last, after) => {
                let wait = after.unwrap_or_else(|| policy.delay(i));
                if !policy.allows(i, start, wait) {
                    return Err(GaveUp { last, attempts: i + 1, exhausted: true });
                }
                tracing::debug!(call = label, retry = i + 1, ?wait, "retrying: {last}");
                tokio::time::sleep(wait).await;
                i += 1;
            }
            Attempt::Hold(last, pause) => {
                tracing::debug!(call = label, ?pause, "holding: {last}");
                tokio::time::sleep(pause).await;
                // Not spent: a failure after the hold ends gets the whole budget.
                start += pause;
            }
            Attempt::Again(pause) => {
                i = 0;
                start = Instant::now();
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }
}

/// A number in [0, 1) that differs between calls; enough for jitter, not for secrets.
pub(crate) fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    const FAST: Policy = Policy::counted(3, Duration::ZERO, Duration::ZERO);

    #[test]
    fn delays_double_up_to_the_cap_less_at_most_a_quarter() {
        let p = Policy::counted(10, Duration::from_millis(100), Duration::from_millis(500));
        for (i, nominal) in [(0, 100), (1, 200), (2, 400), (3, 500), (9, 500)] {
            let d = p.delay(i).as_secs_f64() * 1e3;
            assert!(d <= f64::from(nominal) && d >= 0.75 * f64::from(nominal), "retry {i}: {d} ms");
        }
    }

    #[tokio::test]
    async fn retries_what_is_retryable_until_the_count_runs_out() {
        let calls = Cell::new(0);
        let r: Result<(), _> = run(&FAST, "t", |_| {
            calls.set(calls.get() + 1);
            async { Attempt::Retry("busy", None) }
        })
        .await;
        let e = r.unwrap_err();
        assert_eq!((calls.get(), e.attempts, e.exhausted, e.last), (4, 4, true, "busy"));
        let ok = run(&FAST, "t", |i| async move { if i < 2 { Attempt::Retry("busy", None) } else { Attempt::Done(i) } }).await;
        assert_eq!(ok.unwrap(), 2);
    }

    #[tokio::test]
    async fn a_failure_is_not_retried_and_a_time_budget_stops_early() {
        let e = run(&FAST, "t", |_| async { Attempt::<(), _>::Fail("bad request") }).await.unwrap_err();
        assert_eq!((e.attempts, e.exhausted), (1, false));
        let timed = Policy { retries: None, budget: Some(Duration::from_millis(50)), base_delay: Duration::from_millis(40), max_delay: Duration::from_millis(40) };
        let e = run(&timed, "t", |_| async { Attempt::<(), _>::Retry("down", None) }).await.unwrap_err();
        assert!(e.attempts <= 3 && e.exhausted, "{} attempts", e.attempts);
        // A server's own wait is taken as given, and counts against the budget.
        let e = run(&timed, "t", |_| async { Attempt::<(), _>::Retry("429", Some(Duration::from_secs(60))) }).await.unwrap_err();
        assert_eq!(e.attempts, 1);
    }

    #[tokio::test]
    async fn a_hold_is_neither_a_retry_nor_budget_spent() {
        let once = Policy::counted(1, Duration::ZERO, Duration::ZERO);
        let calls = Cell::new(0u32);
        let seen = std::cell::RefCell::new(Vec::new());
        let e = run(&once, "t", |i| {
            calls.set(calls.get() + 1);
            seen.borrow_mut().push(i);
            let n = calls.get();
            async move { if n <= 3 { Attempt::<(), _>::Hold("402", Duration::ZERO) } else { Attempt::Retry("503", None) } }
        })
        .await
        .unwrap_err();
        // Three holds at attempt 0, then one attempt and its one retry.
        assert_eq!((seen.borrow().clone(), e.attempts, e.exhausted), (vec![0, 0, 0, 0, 1], 2, true));
        // Holding longer than the time budget leaves the budget whole for what follows.
        let timed = Policy { retries: None, budget: Some(Duration::from_millis(50)), base_delay: Duration::from_millis(10), max_delay: Duration::from_millis(10) };
        let n = Cell::new(0u32);
        let ok = run(&timed, "t", |_| {
            n.set(n.get() + 1);
            let k = n.get();
            async move {
                match k {
                    1..=3 => Attempt::Hold("402", Duration::from_millis(30)),
                    4 => Attempt::Retry("503", None),
                    _ => Attempt::Done(k),
                }
            }
        })
        .await;
        assert_eq!(ok.unwrap(), 5, "the retry after 90 ms of holds is within a 50 ms budget");
    }

    #[tokio::test]
    async fn progress_starts_the_count_of_retries_over() {
        // Two retries allowed: three failures in a row give up, but a progress between them
        // (a poll answered "not done yet") starts the count again.
        let twice = Policy::counted(2, Duration::ZERO, Duration::ZERO);
        let script = ["down", "down", "progress", "down", "down", "done"];
        let n = Cell::new(0usize);
        let ok = run(&twice, "t", |_| {
            let k = n.get();
            n.set(k + 1);
            async move {
                match script[k] {
                    "progress" => Attempt::Again(Duration::ZERO),
                    "done" => Attempt::Done(k),
                    e => Attempt::Retry(e, None),
                }
            }
        })
        .await;
        assert_eq!(ok.unwrap(), 5);
        let e = run(&twice, "t", |_| async { Attempt::<(), _>::Retry("down", None) }).await.unwrap_err();
        assert_eq!((e.attempts, e.exhausted), (3, true));
    }
}
