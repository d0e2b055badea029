//! The Slurm commands rlx calls, and what their output means: `sbatch` submits, `squeue` says
//! what is pending or running, `sacct` what ended and how (where the cluster keeps accounting).
//!
//! They are found on `PATH` and read the cluster's configuration as they always do (`SLURM_CONF`
//! included). Each task is named as Slurm names array tasks, `<job>_<index>`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Why a Slurm command gave no answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The command is not installed here (not a Slurm login node).
    #[error("`{program}` is not on PATH (is this a Slurm login node?)")]
    NotFound {
        /// The command.
        program: &'static str,
    },
    /// It could not be started.
    #[error("cannot start `{program}`")]
    Spawn {
        /// The command.
        program: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It ran and failed; its own message.
    #[error("`{program}` failed: {message}")]
    Failed {
        /// The command.
        program: &'static str,
        /// Its stderr (or exit status), trimmed.
        message: String,
    },
    /// It answered something rlx cannot read.
    #[error("`{program}` answered `{output}`, which is not what rlx expects")]
    Unexpected {
        /// The command.
        program: &'static str,
        /// What it printed.
        output: String,
    },
}

impl Error {
    /// Whether the user can fix it (install Slurm, log in to the cluster, fix an option that
    /// sbatch refused), as opposed to a broken installation.
    pub(crate) fn is_user_error(&self) -> bool {
        matches!(self, Error::NotFound { .. } | Error::Failed { .. })
    }
}

fn run(program: &'static str, args: &[&str]) -> Result<Output, Error> {
    let out = Command::new(program).args(args).stdin(Stdio::null()).output().map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound { Error::NotFound { program } } else { Error::Spawn { program, source } }
    })?;
    Ok(out)
}

fn failed(program: &'static str, out: &Output) -> Error {
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let message = if stderr.is_empty() { format!("exit status {}", out.status) } else { stderr };
    Error::Failed { program, message }
}

/// Submits a batch script; the job id.
///
/// # Errors
/// [`Error::NotFound`] without `sbatch`; [`Error::Failed`] with sbatch's message when it refuses
/// the job (an unknown partition, a time limit above the partition's).
pub(crate) fn submit(script: &Path) -> Result<String, Error> {
    let path = script.display().to_string();
    let out = run("sbatch", &["--parsable", &path])?;
    if !out.status.success() {
        return Err(failed("sbatch", &out));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    parse_sbatch(&text).ok_or_else(|| Error::Unexpected { program: "sbatch", output: text.trim().to_string() })
}

/// The job id in `sbatch --parsable`'s answer (`12` or `12;cluster`).
pub(crate) fn parse_sbatch(text: &str) -> Option<String> {
    let id = text.trim().lines().last()?.split(';').next()?.trim();
    (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())).then(|| id.to_string())
}

/// A task as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskState {
    /// Slurm's state: `PENDING`, `RUNNING`, `COMPLETED`, `FAILED`, `CANCELLED`, `TIMEOUT`, ...
    pub state: String,
    /// `squeue`'s reason for a pending task (`Priority`, `BeginTime`), or `sacct`'s exit code
    /// (`0:0`, `130:0`) for an ended one.
    pub detail: Option<String>,
}

/// The pending and running tasks of `jobs` (`squeue`), by task id. A job that has left the
/// queue is simply absent.
///
/// # Errors
/// [`Error::NotFound`] without `squeue`; [`Error::Failed`] when it fails otherwise.
pub(crate) fn queue(jobs: &[String]) -> Result<BTreeMap<String, TaskState>, Error> {
    if jobs.is_empty() {
        return Ok(BTreeMap::new());
    }
    let list = jobs.join(",");
    let out = run("squeue", &["--noheader", "--array", "--jobs", &list, "--format", "%i|%T|%r"])?;
    if !out.status.success() {
        // squeue refuses a list of jobs that have all left the queue.
        if String::from_utf8_lossy(&out.stderr).contains("Invalid job id") {
            return Ok(BTreeMap::new());
        }
        return Err(failed("squeue", &out));
    }
    Ok(parse_squeue(&String::from_utf8_lossy(&out.stdout)))
}

/// `squeue --format %i|%T|%r` lines.
pub(crate) fn parse_squeue(text: &str) -> BTreeMap<String, TaskState> {
    let mut out = BTreeMap::new();
    for l in text.lines() {
        let f: Vec<&str> = l.trim().split('|').collect();
        if f.len() < 3 || f[0].is_empty() {
            continue;
        }
        let reason = f[2].trim();
        let detail = (!reason.is_empty() && reason != "None").then(|| reason.to_string());
        for id in expand_task_ids(f[0]) {
            out.insert(id, TaskState { state: f[1].trim().to_string(), detail: detail.clone() });
        }
    }
    out
}

/// How the tasks of `jobs` ended or stand (`sacct`), by task id.
///
/// # Errors
/// [`Error::NotFound`] without `sacct`; [`Error::Failed`] when the cluster keeps no accounting
/// (`Slurm accounting storage is disabled`) or it fails otherwise.
pub(crate) fn accounting(jobs: &[String]) -> Result<BTreeMap<String, TaskState>, Error> {
    if jobs.is_empty() {
        return Ok(BTreeMap::new());
    }
    let list = jobs.join(",");
    let out = run("sacct", &["--noheader", "--parsable2", "--allocations", "--jobs", &list, "--format", "JobID,State,ExitCode"])?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    // sacct exits 0 even when it only says that accounting is off.
    if !out.status.success() || (stdout.trim().is_empty() && !out.stderr.is_empty()) {
        return Err(failed("sacct", &out));
    }
    Ok(parse_sacct(&stdout))
}

/// `sacct --parsable2 --format JobID,State,ExitCode` lines. A task requeued since keeps its
/// last line.
pub(crate) fn parse_sacct(text: &str) -> BTreeMap<String, TaskState> {
    let mut out = BTreeMap::new();
    for l in text.lines() {
        let f: Vec<&str> = l.trim().split('|').collect();
        if f.len() < 3 || f[0].is_empty() {
            continue;
        }
        // `CANCELLED by 0` → `CANCELLED`.
        let state = f[1].split_whitespace().next().unwrap_or("").to_string();
        for id in expand_task_ids(f[0]) {
            out.insert(id, TaskState { state: state.clone(), detail: Some(f[2].trim().to_string()) });
        }
    }
    out
}

/// `12_3` → `[12_3]`; a pending array's `12_[0-2,5%2]` → `[12_0, 12_1, 12_2, 12_5]`; `12` → `[12]`.
pub(crate) fn expand_task_ids(id: &str) -> Vec<String> {
    let id = id.trim();
    let Some((job, rest)) = id.split_once('_') else { return vec![id.to_string()] };
    let Some(inner) = rest.strip_prefix('[').and_then(|r| r.strip_suffix(']')) else { return vec![id.to_string()] };
    let inner = inner.split('%').next().unwrap_or("");
    let mut out = vec![];
    for part in inner.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
            out.extend((a..=b.min(a + 100_000)).map(|i| format!("{job}_{i}")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sbatch_answers() {
        assert_eq!(parse_sbatch("12\n").as_deref(), Some("12"));
        assert_eq!(parse_sbatch("345;cluster\n").as_deref(), Some("345"));
        assert_eq!(parse_sbatch("Submitted batch job 12"), None);
        assert_eq!(parse_sbatch(""), None);
    }

    #[test]
    fn squeue_lines() {
        let q = parse_squeue("12_1|PENDING|BeginTime\n12_0|RUNNING|None\n12_[2-3%2]|PENDING|JobArrayTaskLimit\n");
        assert_eq!(q["12_0"], TaskState { state: "RUNNING".into(), detail: None });
        assert_eq!(q["12_1"].detail.as_deref(), Some("BeginTime"));
        assert_eq!(q["12_3"].detail.as_deref(), Some("JobArrayTaskLimit"));
        assert_eq!(q.len(), 4);
    }

    #[test]
    fn sacct_lines() {
        let a = parse_sacct("12_0|COMPLETED|0:0\n12_1|CANCELLED by 0|0:15\n12_1|FAILED|130:0\n13_[0,2]|PENDING|0:0\n");
        assert_eq!(a["12_0"], TaskState { state: "COMPLETED".into(), detail: Some("0:0".into()) });
        assert_eq!(a["12_1"].state, "FAILED", "the last line of a requeued task wins");
        assert!(a.contains_key("13_2") && !a.contains_key("13_1"));
    }

    #[test]
    fn task_ids() {
        assert_eq!(expand_task_ids("12_3"), vec!["12_3"]);
        assert_eq!(expand_task_ids("12"), vec!["12"]);
        assert_eq!(expand_task_ids("12_[0-1,4]"), vec!["12_0", "12_1", "12_4"]);
    }
}
