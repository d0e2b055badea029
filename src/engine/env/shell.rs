//! The `bash` tool: a shell command in the trajectory's own remote sandbox, a container that
//! lives as long as the trajectory.
//!
//! The sandbox is opened at the trajectory's first `bash` call and travels with the trajectory:
//! the turn that opened it keeps the handle ([`super::TurnTools::shell`]), and every later
//! [`super::Step`] of that trajectory carries it back, so the environment itself holds nothing
//! per trajectory (a registry keyed by trajectory would need an identity the loop does not
//! give, and would outlive an abandoned phase). Another trajectory never gets the handle, so it
//! never sees the sandbox. The tool environment closes it when the trajectory ends on its step;
//! a trajectory the loop ends (a context overflow, its last turn, a lost group, a stop, an
//! error) drops its turns, and the last handle dropped stops the sandbox in the background;
//! the grader's close at the run's end stops any still held; a killed run's are found by its tag
//! on resume.
//!
//! Each command is `bash -c COMMAND`, a process of its own in the sandbox: files persist between
//! commands, the working directory and variables do not (each starts in the container's
//! working directory, `/`). A command past `limits.tool_timeout_s` is ended by the service and
//! the model sees `status: timed out`; the sandbox stays usable. A service that fails (down, 5xx,
//! the sandbox gone) is an infrastructure error, retried like grading, then the group is dropped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::data::Problem;
use crate::retry::GaveUp;
use crate::sandbox::remote::Executed;
use crate::sandbox::{AnyGrader, Error, RemoteSession, Verdict};

use super::calls::clip;
use super::run_tool::{OUTPUT_CHARS, Ran};
use crate::engine::grading::Graded;

/// The first wait before running a failed command's call again; it doubles per retry.
const BACKOFF: Duration = Duration::from_millis(200);

/// A trajectory's sandbox, shared by the turns that carry it; `None` inside once closed.
#[derive(Clone)]
pub(crate) struct Shell(Arc<tokio::sync::Mutex<Option<RemoteSession>>>);

impl std::fmt::Debug for Shell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.try_lock() {
            Ok(s) => write!(f, "Shell({})", s.as_ref().map_or("closed", |s| s.id())),
            Err(_) => write!(f, "Shell(in use)"),
        }
    }
}

impl PartialEq for Shell {
    /// The same sandbox handle.
    fn eq(&self, other: &Shell) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Shell {
    /// Opens a sandbox for a trajectory.
    ///
    /// # Errors
    /// The service failing to create one; a grader that is not a remote service (validation
    /// refuses `bash` without `sandbox.kind: cwsandbox`).
    pub(crate) async fn open(grader: &AnyGrader) -> Result<Shell, Error> {
        let session = grader.session().await.ok_or_else(|| Error::Remote { attempts: 0, reason: "the `bash` tool needs `sandbox.kind: cwsandbox`".into() })??;
        Ok(Shell(Arc::new(tokio::sync::Mutex::new(Some(session)))))
    }

    /// Stops the sandbox (now, awaited); later commands find it closed.
    pub(crate) async fn close(&self) {
        let session = self.0.lock().await.take();
        if let Some(s) = session {
            s.close().await;
        }
    }

    /// Runs `command` with `bash -c`, ended after `timeout`; a call that fails is made again up
    /// to `retries` times (a command whose reply was lost may then run twice: the service gives
    /// no way to tell).
    async fn exec(&self, command: &str, timeout: Duration, retries: u32) -> Result<Executed, GaveUp<Error>> {
        let guard = self.0.lock().await;
        let Some(session) = guard.as_ref() else {
            return Err(GaveUp { last: Error::Remote { attempts: 0, reason: "the trajectory's sandbox was already closed".into() }, attempts: 1, exhausted: false });
        };
        let argv = ["bash".to_owned(), "-c".to_owned(), command.to_owned()];
        let policy = crate::retry::Policy::counted(retries, BACKOFF, Duration::from_secs(5));
        let argv = &argv;
        crate::retry::run(&policy, "bash", |_| async move {
            match session.exec(argv, timeout).await {
                Ok(out) => crate::retry::Attempt::Done(out),
                Err(e) => crate::retry::Attempt::Retry(e, None),
            }
        })
        .await
    }

    /// Runs a `bash` call for `problem`'s trajectory: what the model sees (exit code, stdout,
    /// stderr, clipped; a command that fails or times out is a tool error), or the
    /// infrastructure error that drops the group.
    pub(crate) async fn run(&self, command: &str, problem: &Problem, timeout: Duration, retries: u32) -> Ran {
        let t = Instant::now();
        match self.exec(command, timeout, retries).await {
            Ok(out) => {
                let (text, error) = shown(&out, timeout);
                Ran::Output { text: clip(&text, OUTPUT_CHARS), error }
            }
            Err(g) => Ran::Infra(infra(problem, &g.last, t, g.attempts)),
        }
    }
}

/// A `bash` call of a trajectory: in its sandbox (`had`, from an earlier turn, or `opened` by an
/// earlier call of this turn), else in one opened now and left in `opened` for the turn to keep.
pub(crate) async fn call(grader: &AnyGrader, (had, opened): (Option<&Shell>, &mut Option<Shell>), command: &str, problem: &Problem, timeout: Duration, retries: u32) -> Ran {
    let shell = match had.or(opened.as_ref()) {
        Some(s) => s.clone(),
        None => {
            let t = Instant::now();
            match Shell::open(grader).await {
                Ok(s) => opened.insert(s).clone(),
                Err(e) => return Ran::Infra(infra(problem, &e, t, 1)),
            }
        }
    };
    shell.run(command, problem, timeout, retries).await
}

/// What the model is shown of a command, and whether it is a tool error.
fn shown(out: &Executed, timeout: Duration) -> (String, bool) {
    if out.timed_out {
        return (format!("status: timed out (the command ran past {}s and was ended)", timeout.as_secs_f64()), true);
    }
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (format!("exit code: {}\nstdout:\n{stdout}\nstderr:\n{stderr}", out.exit_code), out.exit_code != 0)
}

/// The grade that drops a trajectory's group: the sandbox failed, not the model.
pub(crate) fn infra(problem: &Problem, e: &Error, started: Instant, attempts: u32) -> Graded {
    Graded { verdict: Verdict::infra_error(&problem.id, problem.tests.len(), e), code: None, latency_ms: started.elapsed().as_secs_f64() * 1e3, infra_errors: attempts }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_sees_the_exit_code_and_both_streams_or_the_timeout() {
        let ok = Executed { stdout: b"hi\n".to_vec(), stderr: vec![], exit_code: 0, timed_out: false };
        assert_eq!(shown(&ok, Duration::from_secs(1)), ("exit code: 0\nstdout:\nhi\n\nstderr:\n".to_owned(), false));
        let failed = Executed { stdout: vec![], stderr: b"cat: f.txt: No such file or directory\n".to_vec(), exit_code: 1, timed_out: false };
        let (text, error) = shown(&failed, Duration::from_secs(1));
        assert!(error && text.starts_with("exit code: 1\n") && text.contains("No such file"), "{text}");
        let hung = Executed { timed_out: true, ..Executed::default() };
        assert_eq!(shown(&hung, Duration::from_millis(1500)), ("status: timed out (the command ran past 1.5s and was ended)".to_owned(), true));
    }
}
