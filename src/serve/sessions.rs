//! Client sessions and sampling sessions.
//!
//! A session is what `create_session` opens and `sessions/{id}/finish` closes; heartbeats only
//! refresh it (an unheartbeated session is not expired: a local server has no one to reclaim
//! capacity for). A sampling session (`<session_id>:sample:<n>`) is a sampler over fixed
//! weights, made by `save_weights_for_sampler` (unnamed) or `create_sampling_session`; creating
//! one twice under the same number answers the first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::backend::Sampler;
use crate::tinker::wire::FinishStatus;

/// One client session.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    /// When the last request or heartbeat named it.
    pub last_seen: SystemTime,
    /// The first finish reason, once finished.
    pub finished: Option<FinishStatus>,
}

/// A sampler over fixed weights.
#[derive(Clone)]
pub(crate) struct SamplingSession {
    /// The sampler.
    pub sampler: Arc<dyn Sampler>,
    /// The base model's name.
    pub base_model: String,
    /// The `tinker://` path it samples, if not the base model or a live snapshot.
    pub model_path: Option<String>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    sessions: HashMap<String, Session>,
    samplers: HashMap<String, SamplingSession>,
}

/// Why a session cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Error {
    /// Never created here.
    #[error("unknown session `{0}` (sessions do not survive a restart of `rlx serve`)")]
    Unknown(String),
    /// Finished with `sessions/{id}/finish`.
    #[error("session `{0}` has finished")]
    Finished(String),
}

/// All sessions of the server.
pub(crate) struct Sessions {
    prefix: String,
    /// Never held across an `.await`.
    inner: Mutex<Inner>,
}

impl Sessions {
    /// No sessions; ids start with `prefix` (unique per server start, so checkpoints of an
    /// earlier instance are never overwritten by a new session's models).
    pub(crate) fn new(prefix: &str) -> Self {
        Sessions { prefix: prefix.to_string(), inner: Mutex::new(Inner::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a session.
    pub(crate) fn create(&self) -> String {
        let mut inner = self.lock();
        inner.next += 1;
        let id = format!("{}-{}", self.prefix, inner.next);
        inner.sessions.insert(id.clone(), Session { last_seen: SystemTime::now(), finished: None });
        id
    }

    /// Refreshes a live session.
    ///
    /// # Errors
    /// An unknown or finished session.
    pub(crate) fn touch(&self, id: &str) -> Result<(), Error> {
        let mut inner = self.lock();
        let s = inner.sessions.get_mut(id).ok_or_else(|| Error::Unknown(id.to_string()))?;
        if s.finished.is_some() {
            return Err(Error::Finished(id.to_string()));
        }
        s.last_seen = SystemTime::now();
        Ok(())
    }

    /// Finishes a session (the first reason wins; finishing again is not an error).
    ///
    /// # Errors
    /// An unknown session.
    pub(crate) fn finish(&self, id: &str, status: FinishStatus) -> Result<(), Error> {
        let mut inner = self.lock();
        let s = inner.sessions.get_mut(id).ok_or_else(|| Error::Unknown(id.to_string()))?;
        s.finished.get_or_insert(status);
        Ok(())
    }

    /// Registers a sampling session under `id`, unless one exists (then that one is kept).
    pub(crate) fn add_sampler(&self, id: &str, s: SamplingSession) {
        self.lock().samplers.entry(id.to_string()).or_insert(s);
    }

    /// A sampling session.
    pub(crate) fn sampler(&self, id: &str) -> Option<SamplingSession> {
        self.lock().samplers.get(id).cloned()
    }

    /// Whether a sampling session exists.
    pub(crate) fn has_sampler(&self, id: &str) -> bool {
        self.lock().samplers.contains_key(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Sessions {
        fn get(&self, id: &str) -> Option<Session> {
            self.lock().sessions.get(id).cloned()
        }
    }

    #[test]
    fn finish_is_first_wins_and_blocks_further_use() {
        let s = Sessions::new("x");
        let id = s.create();
        assert!(s.touch(&id).is_ok());
        s.finish(&id, FinishStatus::Success).unwrap();
        s.finish(&id, FinishStatus::Errored).unwrap();
        assert_eq!(s.get(&id).unwrap().finished, Some(FinishStatus::Success));
        assert_eq!(s.touch(&id), Err(Error::Finished(id.clone())));
        assert!(matches!(s.touch("x-99"), Err(Error::Unknown(_))));
        assert_ne!(s.create(), id);
    }
}
