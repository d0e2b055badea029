//! The grading loop: code out of a completion, graded, and graded again while the sandbox fails.
//!
//! `rlx run` (through [`grade_group`]) and `rlx grade` (through [`grade_all`]) used to have a
//! loop each, and only the first retried infrastructure errors. Both now grade every
//! completion with [`grade_one`]: an `infra_error` verdict is retried up to `retries` times with
//! [`crate::retry`]'s backoff, and one that outlasts its retries stays `infra_error`, never a failed test.
//! A remote sandbox also retries each request itself (see [`super::fusion`]); these retries are
//! on top, and also cover the local sandbox (a worker that died).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::any::AnyGrader;
use super::error::Error;
use super::extract::extract_code_in;
use super::limits::GradeOptions;
use super::verdict::{Grader, Progress, Submission, Verdict, VerdictStatus};
use crate::data::Problem;
use crate::retry;

/// The first wait before grading again; it doubles per retry, up to [`MAX_BACKOFF`].
const BACKOFF: Duration = Duration::from_millis(200);
/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// One graded completion.
#[derive(Debug, Clone)]
pub struct Graded {
    /// The verdict (never `infra_error` unless retries ran out).
    pub verdict: Verdict,
    /// The code that ran, if a code block was found.
    pub code: Option<String>,
    /// Grading latency of the final attempt, milliseconds.
    pub latency_ms: f64,
    /// Infrastructure errors seen on the way, the final one included when retries ran out.
    pub infra_errors: u32,
}

/// Grades one submission, retrying infrastructure errors up to `retries` times.
pub(crate) async fn grade_one<G: Grader>(grader: &G, problem: &Problem, submission: Submission, opts: &GradeOptions, retries: u32) -> Graded {
    grade_with_backoff(grader, problem, submission, opts, retries, BACKOFF).await
}

/// [`grade_one`] with the first backoff given (the unit tests use zero rather than sleep).
async fn grade_with_backoff<G: Grader>(grader: &G, problem: &Problem, submission: Submission, opts: &GradeOptions, retries: u32, backoff: Duration) -> Graded {
    let code = match submission {
        Submission::Code(code) => code,
        Submission::Completion(text) => match extract_code_in(&text, problem.language()) {
            Some(code) => code,
            None => {
                let verdict = Verdict::format_error(&problem.id, problem.tests.len()).in_language(problem.language());
                return Graded { verdict, code: None, latency_ms: 0.0, infra_errors: 0 };
            }
        },
    };
    let policy = retry::Policy::counted(retries, backoff, MAX_BACKOFF);
    let code = &code;
    let outcome = retry::run(&policy, "grading", |i| async move {
        let t = Instant::now();
        let verdict = grader.grade(problem, code, opts).await;
        let latency_ms = t.elapsed().as_secs_f64() * 1e3;
        // A problem at fault (a checker that loops forever) fails the same way every time:
        // retrying it cost 3 × 5 s of backoff per completion for nothing.
        if verdict.status != VerdictStatus::InfraError || verdict.problem_fault {
            return retry::Attempt::Done(Graded { verdict, code: Some(code.clone()), latency_ms, infra_errors: i });
        }
        tracing::warn!(problem = %problem.id, attempt = i + 1, error = ?verdict.error, "sandbox infrastructure error");
        retry::Attempt::Retry(InfraFailure(Graded { verdict, code: Some(code.clone()), latency_ms, infra_errors: i + 1 }), None)
    })
    .await;
    // Out of retries: the last infrastructure error stands, never a failed test.
    outcome.unwrap_or_else(|gave_up| gave_up.last.0)
}

/// A grading attempt that hit an infrastructure error, as [`retry::run`] carries it.
struct InfraFailure(Graded);

impl std::fmt::Display for InfraFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0.verdict.error.as_deref().unwrap_or("infrastructure error"))
    }
}

/// Grades completions of one problem concurrently (the grader bounds concurrency itself),
/// retrying infrastructure failures up to `retries` times each. Results are in input order.
pub async fn grade_group(grader: Arc<AnyGrader>, problem: Arc<Problem>, texts: Vec<String>, opts: GradeOptions, retries: u32) -> Vec<Graded> {
    let mut handles = Vec::with_capacity(texts.len());
    for text in texts {
        let (grader, problem, opts) = (grader.clone(), problem.clone(), opts.clone());
        handles.push(tokio::spawn(async move { grade_one(grader.as_ref(), &problem, Submission::Completion(text), &opts, retries).await }));
    }
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        // A grading task that panicked graded nothing: that is the infrastructure's failure.
        out.push(h.await.unwrap_or_else(|e| Graded {
            verdict: Verdict::infra_error(&problem.id, problem.tests.len(), &Error::Task(e.to_string())),
            code: None,
            latency_ms: 0.0,
            infra_errors: 1,
        }));
    }
    out
}

/// Grades many submissions, at most `concurrency` at a time, retrying infrastructure errors up to
/// `retries` times each; results are in input order.
///
/// `problems` is looked up by id; an unknown id is an error before anything runs.
///
/// # Errors
/// [`Error::UnknownProblem`] for the first submission whose problem is unknown (before anything
/// runs); [`Error::Task`] if a grading task panicked.
pub async fn grade_all<G: Grader + 'static>(
    grader: Arc<G>,
    problems: &[Problem],
    submissions: Vec<(String, Submission)>,
    opts: &GradeOptions,
    concurrency: usize,
    retries: u32,
    progress: Arc<dyn Progress>,
) -> Result<Vec<Graded>, Error> {
    let by_id: std::collections::HashMap<&str, &Problem> = problems.iter().map(|p| (p.id.as_str(), p)).collect();
    let mut jobs = Vec::with_capacity(submissions.len());
    for (index, (id, sub)) in submissions.into_iter().enumerate() {
        let problem = by_id.get(id.as_str()).ok_or_else(|| Error::UnknownProblem { index, id: id.clone() })?;
        jobs.push(((*problem).clone(), sub));
    }
    let sem = Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
    let mut handles = Vec::with_capacity(jobs.len());
    for (problem, sub) in jobs {
        let (grader, sem, opts, progress) = (grader.clone(), sem.clone(), opts.clone(), progress.clone());
        handles.push(tokio::spawn(async move {
            // The semaphore is never closed, so acquiring cannot fail; a permit per submission
            // (held through its retries) caps the sandbox load.
            let _permit = sem.acquire_owned().await.map_err(|e| Error::Task(e.to_string()))?;
            let graded = grade_one(grader.as_ref(), &problem, sub, &opts, retries).await;
            progress.graded(&graded.verdict);
            Ok::<_, Error>(graded)
        }));
    }
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.map_err(|e| Error::Task(e.to_string()))??);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{IoCase, Tests};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Fails with an infrastructure error `failures` times, then passes.
    struct Flaky {
        failures: u32,
        calls: AtomicU32,
    }

    impl Grader for Flaky {
        async fn grade(&self, problem: &Problem, _code: &str, _opts: &GradeOptions) -> Verdict {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            if n < self.failures {
                Verdict::infra_error(&problem.id, 1, &std::io::Error::other("worker died"))
            } else {
                Verdict::from_tests(&problem.id, 1, vec![crate::sandbox::verdict::TestResult { status: crate::sandbox::verdict::TestStatus::Passed, time_ms: 1, got: None, error: None }])
            }
        }
    }

    fn problem() -> Problem {
        Problem {
            id: "p".into(),
            statement: String::new(),
            starter_code: None,
            tests: Tests::Stdin { cases: vec![IoCase { input: String::new(), output: "1".into() }] },
            metadata: Default::default(),
        }
    }

    #[tokio::test]
    async fn infra_errors_are_retried_then_reported() {
        let g = Flaky { failures: 2, calls: AtomicU32::new(0) };
        let r = grade_with_backoff(&g, &problem(), Submission::Code("print(1)".into()), &GradeOptions::default(), 2, Duration::ZERO).await;
        assert_eq!((r.verdict.status, r.infra_errors, g.calls.load(Ordering::SeqCst)), (VerdictStatus::Passed, 2, 3));

        let g = Flaky { failures: 5, calls: AtomicU32::new(0) };
        let r = grade_with_backoff(&g, &problem(), Submission::Code("print(1)".into()), &GradeOptions::default(), 2, Duration::ZERO).await;
        assert_eq!((r.verdict.status, r.infra_errors, g.calls.load(Ordering::SeqCst)), (VerdictStatus::InfraError, 3, 3));

        let g = Flaky { failures: 5, calls: AtomicU32::new(0) };
        let r = grade_one(&g, &problem(), Submission::Completion("no code here".into()), &GradeOptions::default(), 2).await;
        assert_eq!((r.verdict.status, g.calls.load(Ordering::SeqCst)), (VerdictStatus::FormatError, 0));
    }

    #[tokio::test]
    async fn grade_all_retries_too() {
        let g = Arc::new(Flaky { failures: 1, calls: AtomicU32::new(0) });
        let subs = vec![("p".to_owned(), Submission::Code("print(1)".into()))];
        let out = grade_all(g.clone(), &[problem()], subs.clone(), &GradeOptions::default(), 1, 1, Arc::new(())).await.unwrap();
        assert_eq!((out[0].verdict.status, out[0].infra_errors), (VerdictStatus::Passed, 1));
        let g = Arc::new(Flaky { failures: 1, calls: AtomicU32::new(0) });
        let out = grade_all(g, &[problem()], subs, &GradeOptions::default(), 1, 0, Arc::new(())).await.unwrap();
        assert_eq!(out[0].verdict.status, VerdictStatus::InfraError, "no retries: the first infra error stands");
    }
}
