//! The check before a run's first sample: one trivial program graded end to end by the sandbox
//! the run will use (Sandbox Fusion after its `/v1/ping`). Why before sampling: a sandbox that
//! is down used to cost a whole step of samples (on Tinker, paid ones), each group retried and
//! then dropped with a warning of its own, before anything said the sandbox was the problem.

use std::time::Duration;

use super::any::AnyGrader;
use super::error::Error;
use super::limits::{GradeOptions, Limits};
use super::verdict::{Grader, VerdictStatus};
use crate::data::{IoCase, Problem, Tests};

/// How long the whole check may take: a cold Python start plus one test, with margin.
const BUDGET: Duration = Duration::from_secs(30);

/// Grades `print(int(input()) + 1)` on `1` through `grader`, after pinging Sandbox Fusion.
///
/// # Errors
/// [`Error::Preflight`] naming the sandbox, what failed and what to do.
pub async fn preflight(grader: &AnyGrader) -> Result<(), Error> {
    let (what, hint) = match grader {
        AnyGrader::Local(_) => ("the local sandbox".to_owned(), "see logs.log for the workers' stderr; `rlx sandbox check` shows which isolation layers this machine offers"),
        AnyGrader::Fusion(f) => (
            format!("Sandbox Fusion at {} (sandbox.url)", f.base_url()),
            "start the server (docker run -p 8080:8080 volcengine/sandbox-fusion:server-20250609, or `rlx sandbox serve`), fix `sandbox.url`, or use `sandbox.kind: local`",
        ),
        AnyGrader::Remote(r) => (
            format!("{} (sandbox.cwsandbox)", crate::sandbox::remote::RemoteSandboxes::describe(r.backend())),
            "check the service's status and credentials, or use `sandbox.kind: local`",
        ),
    };
    let fail = |reason: String| Error::Preflight { sandbox: what.clone(), reason, hint: hint.into() };
    if let AnyGrader::Fusion(f) = grader {
        f.ping().await.map_err(|reason| fail(format!("GET /v1/ping failed: {reason}")))?;
    }
    let problem = Problem {
        id: "rlx-preflight".into(),
        statement: String::new(),
        starter_code: None,
        tests: Tests::Stdin { cases: vec![IoCase { input: "1\n".into(), output: "2\n".into() }] },
        metadata: serde_json::Map::new(),
    };
    let opts = GradeOptions { limits: Limits { timeout: Duration::from_secs(10), ..Limits::default() }, fail_fast: true };
    let verdict = tokio::time::timeout(BUDGET, grader.grade(&problem, "print(int(input()) + 1)\n", &opts)).await;
    if !matches!(&verdict, Ok(v) if v.status == VerdictStatus::Passed) {
        // The run stops here: a sandbox kept for reuse would outlive it.
        grader.close().await;
    }
    let verdict = verdict.map_err(|_| fail(format!("a trivial program got no verdict within {}s", BUDGET.as_secs())))?;
    match verdict.status {
        VerdictStatus::Passed => Ok(()),
        VerdictStatus::InfraError => Err(fail(verdict.error.unwrap_or_else(|| "infrastructure error".into()))),
        _ => {
            let test = verdict.tests.first();
            let detail = test.map(|t| format!("{:?}{}", t.status, t.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default())).unwrap_or_else(|| format!("{:?}", verdict.status));
            Err(fail(format!("a trivial program (`print(int(input()) + 1)` on `1`) was judged wrong: {detail}")))
        }
    }
}
