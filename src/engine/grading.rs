//! Starting the run's sandbox (embedded or Sandbox Fusion) and grading groups with infrastructure
//! retries: an infra-failed completion is graded again, never scored as a failure.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::data::Problem;
use crate::sandbox::fusion::{FusionClient, FusionConfig};
use crate::sandbox::AnyGrader;
use crate::sandbox::local::{LocalConfig, LocalSandbox};
use crate::sandbox::{GradeOptions, Grader, Limits, Verdict, VerdictStatus, extract_code};
use crate::spec::types::{SandboxKind, Spec};

use super::Error;

/// Starts the spec's sandbox and derives grading options.
pub struct Sandboxes;

impl Sandboxes {
    /// Starts the spec's sandbox.
    ///
    /// # Errors
    /// A strict sandbox missing isolation layers, no Python, a bad Fusion URL.
    pub async fn start(spec: &Spec) -> Result<(AnyGrader, serde_json::Value), Error> {
        let s = &spec.sandbox;
        match s.kind {
            SandboxKind::Local => {
                let mut cfg = LocalConfig { strict: s.strict, ..LocalConfig::default() };
                if let Some(c) = s.concurrency {
                    cfg.workers = c as usize;
                }
                let sb = LocalSandbox::start(cfg).await.map_err(Error::Sandbox)?;
                let protection = serde_json::to_value(sb.protection()).unwrap_or_default();
                Ok((AnyGrader::Local(sb), protection))
            }
            SandboxKind::Fusion => {
                let mut cfg = FusionConfig::new(&s.url);
                cfg.concurrency = s.concurrency.unwrap_or(32) as usize;
                let client = FusionClient::new(cfg).map_err(Error::Sandbox)?;
                Ok((AnyGrader::Fusion(Box::new(client)), serde_json::json!({"kind": "fusion", "url": s.url})))
            }
        }
    }

    /// Grading options from the spec.
    pub fn options(spec: &Spec) -> GradeOptions {
        GradeOptions {
            limits: Limits { timeout: Duration::from_secs_f64(spec.reward.test_timeout_s), memory_mb: u64::from(spec.sandbox.memory_mb), ..Limits::default() },
            fail_fast: false,
        }
    }
}

/// One graded completion.
#[derive(Debug, Clone)]
pub struct Graded {
    /// The verdict (never `infra_error` unless retries ran out).
    pub verdict: Verdict,
    /// The code that ran, if a code block was found.
    pub code: Option<String>,
    /// Grading latency of the final attempt, milliseconds.
    pub latency_ms: f64,
    /// Infra errors seen (and retried) on the way.
    pub infra_errors: u32,
}

/// Grades completions of one problem concurrently (the grader bounds concurrency itself),
/// retrying infrastructure failures up to `retries` times each.
pub async fn grade_group(grader: Arc<AnyGrader>, problem: Arc<Problem>, texts: Vec<String>, opts: GradeOptions, retries: u32) -> Vec<Graded> {
    let mut handles = Vec::with_capacity(texts.len());
    for text in texts {
        let (grader, problem, opts) = (grader.clone(), problem.clone(), opts.clone());
        handles.push(tokio::spawn(async move {
            let Some(code) = extract_code(&text) else {
                return Graded { verdict: Verdict::format_error(&problem.id, problem.tests.len()), code: None, latency_ms: 0.0, infra_errors: 0 };
            };
            let mut infra_errors = 0;
            loop {
                let t = Instant::now();
                let verdict = grader.grade(&problem, &code, &opts).await;
                let latency_ms = t.elapsed().as_secs_f64() * 1e3;
                if verdict.status == VerdictStatus::InfraError && infra_errors < retries {
                    infra_errors += 1;
                    tracing::warn!(problem = %problem.id, error = ?verdict.error, "sandbox infrastructure error; retrying");
                    tokio::time::sleep(Duration::from_millis(200 * u64::from(infra_errors))).await;
                    continue;
                }
                if verdict.status == VerdictStatus::InfraError {
                    infra_errors += 1;
                }
                return Graded { verdict, code: Some(code), latency_ms, infra_errors };
            }
        }));
    }
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.unwrap_or_else(|e| Graded {
            verdict: Verdict::infra_error(&problem.id, problem.tests.len(), &std::io::Error::other(e.to_string())),
            code: None,
            latency_ms: 0.0,
            infra_errors: 1,
        }));
    }
    out
}
