//! Fault injection for tests of Tinker clients: added latency, HTTP 429 with `Retry-After`,
//! HTTP 5xx, dropped connections and `try_again` storms on `retrieve_future`, each drawn with a
//! rate from one seeded generator, so a run with the same seed and the same request order sees
//! the same faults.
//!
//! Half of the 5xx answers and dropped connections happen *after* the request was handled: the
//! work is done but the client does not learn it, which is exactly the case that makes a client
//! resubmit (and a server deduplicate) a request. The other half happen before.
//!
//! Spec: `--fault NAME=VALUE`, repeatable: `seed=7`, `latency=20ms` (every request), `429=0.1`,
//! `5xx=0.1`, `drop=0.05`, `try-again=0.3`. The bootstrap endpoints (`client/config`,
//! `client/dynamic_config`, `session_heartbeat`, `telemetry`) get latency only: the SDK does not
//! retry them.

use std::sync::Mutex;
use std::time::Duration;

use crate::rng::SplitMix64 as Rng;

/// The fault settings.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Faults {
    /// Seed of the generator.
    pub seed: u64,
    /// Added to every request before it is handled.
    pub latency: Duration,
    /// Share of requests answered 429 with `Retry-After` before handling.
    pub rate_429: f64,
    /// Share of requests answered 500/502/503 (half before, half after handling).
    pub rate_5xx: f64,
    /// Share of connections closed without an answer (half before, half after handling).
    pub rate_drop: f64,
    /// Share of `retrieve_future` polls answered `try_again` even when the result is ready.
    pub rate_try_again: f64,
}

/// A `--fault` value that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("invalid fault `{spec}`: {reason} (expected seed=N, latency=20ms, 429=RATE, 5xx=RATE, drop=RATE or try-again=RATE, RATE in [0, 1])")]
pub(crate) struct ParseError {
    /// The spec.
    pub spec: String,
    /// What is wrong.
    pub reason: String,
}

impl Faults {
    /// Applies one `NAME=VALUE` spec.
    ///
    /// # Errors
    /// An unknown name, a value that does not parse, a rate outside [0, 1].
    pub(crate) fn apply(&mut self, spec: &str) -> Result<(), ParseError> {
        let bad = |reason: String| ParseError { spec: spec.to_string(), reason };
        let (name, value) = spec.split_once('=').ok_or_else(|| bad("no `=`".into()))?;
        let rate = || -> Result<f64, ParseError> {
            let r: f64 = value.parse().map_err(|_| bad(format!("`{value}` is not a number")))?;
            if (0.0..=1.0).contains(&r) { Ok(r) } else { Err(bad(format!("rate {r} is outside [0, 1]"))) }
        };
        match name {
            "seed" => self.seed = value.parse().map_err(|_| bad(format!("`{value}` is not an integer")))?,
            "latency" => self.latency = humantime::parse_duration(value).map_err(|e| bad(e.to_string()))?,
            "429" => self.rate_429 = rate()?,
            "5xx" => self.rate_5xx = rate()?,
            "drop" => self.rate_drop = rate()?,
            "try-again" => self.rate_try_again = rate()?,
            other => {
                let names = ["seed", "latency", "429", "5xx", "drop", "try-again"];
                let hint = names.iter().find(|n| strsim::levenshtein(n, other) <= 2).map(|n| format!("; did you mean `{n}`?")).unwrap_or_default();
                return Err(bad(format!("unknown fault `{other}`{hint}")));
            }
        }
        Ok(())
    }

    /// Whether any fault is on.
    pub(crate) fn any(&self) -> bool {
        !self.latency.is_zero() || self.rate_429 > 0.0 || self.rate_5xx > 0.0 || self.rate_drop > 0.0 || self.rate_try_again > 0.0
    }
}

/// What to do to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Nothing.
    None,
    /// Answer 429 with `Retry-After` without handling it.
    TooMany,
    /// Answer this 5xx status; `after`: handle the request first.
    Status {
        /// 500, 502 or 503.
        code: u16,
        /// Handle first, then answer the error.
        after: bool,
    },
    /// Close the connection without an answer; `after`: handle the request first.
    Drop {
        /// Handle first, then drop.
        after: bool,
    },
}

impl Fault {
    /// The record's name for it (`None` for no fault).
    pub(crate) fn name(self) -> Option<String> {
        match self {
            Fault::None => None,
            Fault::TooMany => Some("429".into()),
            Fault::Status { code, after } => Some(format!("{code}{}", if after { " after handling" } else { "" })),
            Fault::Drop { after } => Some(format!("drop{}", if after { " after handling" } else { "" })),
        }
    }
}

/// Draws faults from the seeded generator.
#[derive(Debug)]
pub(crate) struct Injector {
    faults: Faults,
    rng: Mutex<Rng>,
}

impl Injector {
    /// An injector for `faults`.
    pub(crate) fn new(faults: Faults) -> Self {
        let rng = Mutex::new(Rng::new(faults.seed));
        Injector { faults, rng }
    }

    /// The settings.
    pub(crate) fn faults(&self) -> &Faults {
        &self.faults
    }

    fn uniform(&self) -> f64 {
        self.rng.lock().unwrap_or_else(|e| e.into_inner()).uniform()
    }

    /// The fault for a request to `path` (bootstrap endpoints are exempt).
    pub(crate) fn draw(&self, path: &str) -> Fault {
        use crate::tinker::path as p;
        let f = &self.faults;
        if [p::CLIENT_CONFIG, p::DYNAMIC_CONFIG, p::SESSION_HEARTBEAT, p::TELEMETRY, p::HEALTHZ].contains(&path) || !(f.rate_429 > 0.0 || f.rate_5xx > 0.0 || f.rate_drop > 0.0) {
            return Fault::None;
        }
        let u = self.uniform();
        if u < f.rate_429 {
            return Fault::TooMany;
        }
        if u < f.rate_429 + f.rate_5xx {
            let v = self.uniform();
            return Fault::Status { code: [500, 502, 503][(v * 3.0) as usize % 3], after: v < 0.5 };
        }
        if u < f.rate_429 + f.rate_5xx + f.rate_drop {
            return Fault::Drop { after: self.uniform() < 0.5 };
        }
        Fault::None
    }

    /// Whether this `retrieve_future` poll gets a `try_again` regardless.
    pub(crate) fn try_again(&self) -> bool {
        self.faults.rate_try_again > 0.0 && self.uniform() < self.faults.rate_try_again
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_ones_say_why() {
        let mut f = Faults::default();
        for s in ["seed=7", "latency=20ms", "429=0.1", "5xx=0.2", "drop=0.05", "try-again=0.5"] {
            f.apply(s).unwrap();
        }
        assert_eq!((f.seed, f.latency, f.rate_5xx), (7, Duration::from_millis(20), 0.2));
        assert!(f.apply("5xx=2").unwrap_err().to_string().contains("outside [0, 1]"));
        assert!(f.apply("drpo=0.1").unwrap_err().to_string().contains("did you mean `drop`?"));
    }

    #[test]
    fn the_same_seed_gives_the_same_faults() {
        let f = Faults { seed: 3, rate_429: 0.2, rate_5xx: 0.2, rate_drop: 0.2, ..Faults::default() };
        let draw = |i: &Injector| (0..200).map(|_| i.draw("/api/v1/asample")).collect::<Vec<_>>();
        let (a, b) = (draw(&Injector::new(f.clone())), draw(&Injector::new(f.clone())));
        assert_eq!(a, b);
        let hit = a.iter().filter(|x| **x != Fault::None).count();
        assert!((80..160).contains(&hit), "{hit} of 200 with a 0.6 rate");
        assert!(draw(&Injector::new(f)).iter().any(|x| matches!(x, Fault::Drop { after: true })));
        assert_eq!(Injector::new(Faults { rate_5xx: 1.0, ..Faults::default() }).draw("/api/v1/client/config"), Fault::None);
    }
}
