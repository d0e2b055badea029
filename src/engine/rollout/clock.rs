//! The wall-clock split of a rollout phase ([`Timing`]) and the [`Clock`] that charges the
//! rollout loop's time to it: sampling, waiting on environment steps between turns, and the
//! grading left at the end.
//!
//! The loop samples and steps at once, so its time is split by what the sampler was doing, not
//! by what ran: a second with a sampler call in flight is sampling (grading and tool calls under
//! it are hidden); a second with none in flight while some trajectory's step is out is a wait,
//! charged once its kind is known: to `tool_wait_s` when another call followed it (the sampler
//! sat idle until an environment step let a trajectory take its next turn), to `grade_s` when
//! none did (the tail, grading not hidden by sampling). The three add up to the phase's time.

use std::time::Instant;

/// Wall-clock split of a rollout phase, and the groups it lost.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Timing {
    /// Seconds with a sampler call in flight (and the loop's own work between calls).
    pub sample_s: f64,
    /// Seconds waiting for grades after the last sampler call (grading not hidden by sampling).
    pub grade_s: f64,
    /// Seconds with no sampler call in flight while trajectories waited on their environment
    /// step (tool calls, a feedback turn's grading) before their next turn: the sampler idle
    /// between turns. 0 for a single-turn phase.
    pub tool_wait_s: f64,
    /// Groups dropped because sampling failed with an infrastructure error that survived the
    /// sampler's retries (a server down or answering garbage): left out, never scored.
    pub sampler_dropped: usize,
}

impl Timing {
    /// Adds `other`'s seconds and drops to these.
    pub(crate) fn add(&mut self, other: Timing) {
        self.sample_s += other.sample_s;
        self.grade_s += other.grade_s;
        self.tool_wait_s += other.tool_wait_s;
        self.sampler_dropped += other.sampler_dropped;
    }
}

/// Charges the loop's time to a [`Timing`] (see the module docs).
#[derive(Debug)]
pub(crate) struct Clock {
    /// When time was last charged.
    mark: Instant,
    /// Seconds of the current idle stretch (no call in flight, a step out), not yet charged.
    idle: f64,
}

impl Clock {
    /// A clock starting now.
    pub(crate) fn new() -> Clock {
        Clock { mark: Instant::now(), idle: 0.0 }
    }

    /// Charges the time since the last charge, spent with a call in flight (`sampling`) or not,
    /// and with a step out (`stepping`) or not. Neither: the loop's own work (rendering,
    /// decoding), which sampling always included.
    pub(crate) fn tick(&mut self, t: &mut Timing, sampling: bool, stepping: bool) {
        let now = Instant::now();
        let dt = now.duration_since(self.mark).as_secs_f64();
        self.mark = now;
        if !sampling && stepping {
            self.idle += dt;
        } else {
            t.sample_s += dt;
        }
    }

    /// A call is being submitted: the idle stretch before it was a wait on the environment.
    pub(crate) fn submitted(&mut self, t: &mut Timing) {
        t.tool_wait_s += std::mem::take(&mut self.idle);
    }

    /// The loop is over: the idle stretch since the last call was grading left to wait for.
    pub(crate) fn ended(&mut self, t: &mut Timing) {
        t.grade_s += std::mem::take(&mut self.idle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_stretch_is_a_tool_wait_when_a_call_follows_and_grading_when_none_does() {
        let mut t = Timing::default();
        let mut c = Clock::new();
        std::thread::sleep(std::time::Duration::from_millis(2));
        c.tick(&mut t, false, true);
        let idle = c.idle;
        assert!(idle > 0.0 && t.sample_s == 0.0);
        c.submitted(&mut t);
        assert_eq!((t.tool_wait_s, c.idle), (idle, 0.0));
        std::thread::sleep(std::time::Duration::from_millis(2));
        c.tick(&mut t, true, true);
        assert!(t.sample_s > 0.0, "a call in flight hides the steps under it");
        c.tick(&mut t, false, true);
        let tail = c.idle;
        c.ended(&mut t);
        assert_eq!((t.grade_s, t.tool_wait_s), (tail, idle));
    }
}
