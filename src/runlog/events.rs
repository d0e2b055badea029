//! `events.jsonl`: the lifecycle of a run, one [`EventRecord`] per start, resume and stop. A run
//! that was resumed twice has three `start`/`restart`/`resume` lines, each followed by how that
//! attempt ended (unless it was killed outright, which leaves no line).

use serde::{Deserialize, Serialize};

use super::now;

/// One line of `events.jsonl`, tagged by its `event` key: `{"event": "finished", "steps": 3,
/// "time": "..."}`. Every variant ends with `time` (RFC 3339), the moment it was written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventRecord {
    /// A run began at step 0 with nothing to drop.
    Start {
        /// Always 0; kept so every beginning has the same keys.
        dropped_records: usize,
        /// When.
        time: String,
    },
    /// A run began again at step 0 after a crashed attempt that saved no checkpoint; that
    /// attempt's records were dropped.
    Restart {
        /// Records dropped from metrics, rollouts and eval results together.
        dropped_records: usize,
        /// When.
        time: String,
    },
    /// A run continued from its last checkpoint.
    Resume {
        /// The checkpoint's name (`step-000009`).
        from_checkpoint: String,
        /// The first step this attempt runs.
        next_step: u32,
        /// Records of steps after the checkpoint, dropped so no step appears twice.
        dropped_records: usize,
        /// When.
        time: String,
    },
    /// Every step ran.
    Finished {
        /// Steps completed.
        steps: u32,
        /// When.
        time: String,
    },
    /// Stopped by a signal; resumable.
    Interrupted {
        /// Steps completed.
        steps: u32,
        /// When.
        time: String,
    },
    /// Stopped by an error.
    Failed {
        /// The error's message (its `Display`, without its causes).
        error: String,
        /// The error's sources, outermost first, one message each; absent on disk when empty
        /// (and in runs written before it existed).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        causes: Vec<String>,
        /// When.
        time: String,
    },
    /// A diagnostic signal fired after a step or an eval (the `diagnostics:` section of the
    /// spec; `rlx doctor` reads these back).
    Diagnostic {
        /// The signal's name (`reward_flat_zero`, `sandbox_timeouts`, ...).
        signal: String,
        /// The step it fired at (−1 for the baseline eval).
        step: i64,
        /// What was seen, with its numbers.
        evidence: String,
        /// What to do about it.
        remedy: String,
        /// `warn`, or `stop` when the run ended because of it.
        action: String,
        /// Where to look: problems and rollouts (`step 7, problem abc, group 2`), when the
        /// signal names some; absent on disk when empty.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        leads: Vec<String>,
        /// When.
        time: String,
    },
    /// An event this rlx does not know, written by a newer one. Reading it is not an error:
    /// adding an event kind does not change the meaning of the others. Never written.
    #[serde(other)]
    Unknown,
}

impl EventRecord {
    /// The beginning of a run at step 0: [`EventRecord::Start`], or [`EventRecord::Restart`] when
    /// `dropped_records` of a crashed attempt had to go.
    pub fn start(dropped_records: usize) -> EventRecord {
        match dropped_records {
            0 => EventRecord::Start { dropped_records, time: now() },
            _ => EventRecord::Restart { dropped_records, time: now() },
        }
    }

    /// A resume from checkpoint `from_checkpoint` at `next_step`.
    pub fn resume(from_checkpoint: impl Into<String>, next_step: u32, dropped_records: usize) -> EventRecord {
        EventRecord::Resume { from_checkpoint: from_checkpoint.into(), next_step, dropped_records, time: now() }
    }

    /// A run that completed `steps` steps.
    pub fn finished(steps: u32) -> EventRecord {
        EventRecord::Finished { steps, time: now() }
    }

    /// A run stopped by a signal after `steps` steps.
    pub fn interrupted(steps: u32) -> EventRecord {
        EventRecord::Interrupted { steps, time: now() }
    }

    /// A run stopped by `error`; its source chain becomes `causes`.
    pub fn failed(error: &(dyn std::error::Error + 'static)) -> EventRecord {
        let mut causes = crate::causes::causes(error);
        let error = causes.remove(0);
        EventRecord::Failed { error, causes, time: now() }
    }

    /// When it was written; `None` for [`EventRecord::Unknown`].
    pub fn time(&self) -> Option<&str> {
        match self {
            EventRecord::Start { time, .. }
            | EventRecord::Restart { time, .. }
            | EventRecord::Resume { time, .. }
            | EventRecord::Finished { time, .. }
            | EventRecord::Interrupted { time, .. }
            | EventRecord::Failed { time, .. }
            | EventRecord::Diagnostic { time, .. } => Some(time),
            EventRecord::Unknown => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T: &str = "2025-01-01T00:00:00Z";

    fn at(mut e: EventRecord) -> EventRecord {
        match &mut e {
            EventRecord::Start { time, .. }
            | EventRecord::Restart { time, .. }
            | EventRecord::Resume { time, .. }
            | EventRecord::Finished { time, .. }
            | EventRecord::Interrupted { time, .. }
            | EventRecord::Failed { time, .. }
            | EventRecord::Diagnostic { time, .. } => *time = T.into(),
            EventRecord::Unknown => {}
        }
        e
    }

    #[test]
    fn the_json_is_what_the_engine_wrote_before() {
        // The `json!` calls of src/engine/mod.rs, key for key and in the same order.
        let cases = [
            (EventRecord::start(0), json!({"event": "start", "dropped_records": 0, "time": T})),
            (EventRecord::start(4), json!({"event": "restart", "dropped_records": 4, "time": T})),
            (EventRecord::resume("step-000001", 2, 7), json!({"event": "resume", "from_checkpoint": "step-000001", "next_step": 2, "dropped_records": 7, "time": T})),
            (EventRecord::finished(3), json!({"event": "finished", "steps": 3, "time": T})),
            (EventRecord::interrupted(2), json!({"event": "interrupted", "steps": 2, "time": T})),
            (EventRecord::Failed { error: "boom".into(), causes: vec![], time: T.into() }, json!({"event": "failed", "error": "boom", "time": T})),
        ];
        for (record, old) in cases {
            let record = at(record);
            assert_eq!(serde_json::to_string(&record).unwrap(), serde_json::to_string(&old).unwrap());
            assert_eq!(serde_json::from_value::<EventRecord>(old).unwrap(), record);
        }
    }

    #[test]
    fn failed_keeps_the_cause_chain() {
        let io = std::io::Error::other("disk full");
        let err = crate::runlog::Error::Io { op: "cannot write", path: "/r/status.json".into(), source: io };
        let e = at(EventRecord::failed(&err));
        assert_eq!(e, EventRecord::Failed { error: "cannot write `/r/status.json`".into(), causes: vec!["disk full".into()], time: T.into() });
        let text = serde_json::to_string(&e).unwrap();
        assert_eq!(text, r#"{"event":"failed","error":"cannot write `/r/status.json`","causes":["disk full"],"time":"2025-01-01T00:00:00Z"}"#);
        assert_eq!(serde_json::from_str::<EventRecord>(&text).unwrap(), e);
    }

    #[test]
    fn unknown_events_read_as_unknown() {
        let e: EventRecord = serde_json::from_value(json!({"event": "paused", "why": "x", "time": T})).unwrap();
        assert_eq!(e, EventRecord::Unknown);
        assert_eq!(e.time(), None);
        assert_eq!(at(EventRecord::finished(1)).time(), Some(T));
    }
}
