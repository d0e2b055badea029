//! The run's sandbox and grading options, from the plan. Starting the sandbox and the grading
//! loop (with infrastructure retries) are the sandbox module's, shared with `rlx grade`:
//! [`crate::sandbox::start()`] and [`crate::sandbox::grade_loop`].
//! The Python reward, which runs after grading, is [`super::pyreward`]'s.

use std::time::Duration;

use crate::plan::Plan;
use crate::sandbox::{AnyGrader, GradeOptions, Limits};

use super::error::Error;
use super::event::{Event, EventSink};

pub(crate) use crate::sandbox::grade_loop::{Graded, grade_group};

/// Starts the spec's sandbox and derives grading options.
pub(crate) struct Sandboxes;

impl Sandboxes {
    /// Starts the spec's sandbox and returns it with the protection in force (for
    /// `provenance.json`). Isolation missing under `sandbox.strict: false` is reported to `sink`
    /// as an [`Event::Warning`] (and logged), never passed over in silence.
    ///
    /// # Errors
    /// [`Error::Sandbox`]: a strict sandbox missing isolation layers, no Python, a bad Fusion URL.
    pub(crate) async fn start(plan: &Plan, sink: &dyn EventSink) -> Result<(AnyGrader, serde_json::Value), Error> {
        let started = crate::sandbox::start_for(&plan.sandbox, Some(&plan.run_id)).await.map_err(Error::Sandbox)?;
        for w in started.warnings {
            tracing::warn!("{w}");
            sink.event(Event::Warning(format!("{w} (set `sandbox.strict: true` to refuse to run instead)")));
        }
        crate::sandbox::preflight(&started.grader).await.map_err(Error::Sandbox)?;
        Ok((started.grader, started.protection))
    }

    /// Grading options from the spec.
    pub(crate) fn options(plan: &Plan) -> GradeOptions {
        GradeOptions {
            limits: Limits { timeout: Duration::from_secs_f64(plan.reward.test_timeout_s), memory_mb: u64::from(plan.sandbox.memory_mb), ..Limits::default() },
            fail_fast: false,
        }
    }
}
