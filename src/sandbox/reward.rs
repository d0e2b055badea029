//! Python rewards: the user's reward function run in the sandbox, isolated like submissions.
//!
//! A [`RewardFn`] is the user's file, read once with the other files of its directory, and the
//! function to call. [`RewardFn::call`] scores a batch (one problem and the completions of its
//! group) in one sandbox run: the program is our driver (`reward.py`, embedded here), which
//! loads the user's file and calls the function once per completion under a per-call timer. It
//! runs where submissions run ([`Sandbox::run`]: a fork of a warm worker, chrooted, no network,
//! an unprivileged uid, the sandbox's limits), so the user's code can read its own directory
//! (shipped as the run's working directory) and nothing else of the host.
//!
//! One run per group rather than per completion: the driver loads the file once and the batch
//! costs one fork. A call that fails is a [`Failure`] (the user's bug: it raised, did not return
//! in time, returned something else), never the model's; only the sandbox failing is an
//! [`Error`].

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};

use super::error::Error;
use super::exec::{ExecOutput, ExecRequest, ExecStatus, Sandbox};
use super::limits::Limits;
pub use crate::rl::reward::Custom;

/// The driver's Python source.
pub(crate) const DRIVER: &str = include_str!("reward.py");

/// The driver ships as this file, beside `reward/`, and the program only imports it: a file
/// that every batch ships is compiled once by the sandbox's worker and its bytecode cached (see
/// docs/sandbox.md), where the program's own source is compiled on every run (~10 ms for the
/// driver on the development machine).
const DRIVER_FILE: &str = "rlx_reward_driver.py";
const DRIVER_STUB: &str = "import rlx_reward_driver\n";

/// The most bytes of the reward's directory shipped with every batch: its regular files
/// (not subdirectories), the reward file included.
pub(crate) const MAX_DIR_BYTES: u64 = 4 << 20;

/// Where the reward's directory goes in the run's working directory (the driver's own
/// `main.py` sits beside it, so a reward file may have any name).
const DIR: &str = "reward";

/// The user's reward function, ready to call.
#[derive(Debug, Clone)]
pub struct RewardFn {
    /// The file as messages and tracebacks name it.
    display: String,
    /// Its file name inside its directory.
    module: String,
    /// The function to call.
    function: String,
    /// The directory's files, under [`DIR`].
    files: BTreeMap<String, Vec<u8>>,
    /// Per call.
    timeout: Duration,
    /// Address-space limit of the run, MiB.
    memory_mb: u64,
}

/// One completion to score.
#[derive(Debug, Clone, Serialize)]
pub struct Call {
    /// The model's text.
    pub completion: String,
    /// The code graded (`None`: no code block).
    pub code: Option<String>,
    /// The verdict as `rlx grade` prints it.
    pub verdict: Value,
}

/// How a call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The file could not be loaded (a syntax error, an exception at import, no such function).
    Load,
    /// The function raised.
    Raised,
    /// The function did not return within the timeout.
    Timeout,
    /// It returned something other than a number or a dict of numbers.
    Returned,
    /// Its process died (`os._exit`, a signal, the memory limit).
    Crashed,
    /// Its result channel held something the driver did not write: code the function ran (the
    /// model's, in a reward that executes it) wrote there. The call is void, never scored.
    Forged,
}

/// A failed call: the user's error, with what to show them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failure {
    /// How it failed.
    pub kind: FailureKind,
    /// One line: the exception, or what was wrong.
    pub message: String,
    /// `file:line` in the user's file, when known (where it raised, hung, or is defined).
    #[serde(rename = "where")]
    pub location: Option<String>,
    /// The traceback (frames of the user's file only), or the end of the process's stderr.
    pub traceback: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            FailureKind::Load => "could not be loaded",
            FailureKind::Raised => "raised",
            FailureKind::Timeout => "timed out",
            FailureKind::Returned => "returned a bad value",
            FailureKind::Crashed => "crashed",
            FailureKind::Forged => "had its result forged",
        };
        write!(f, "{kind}")?;
        if let Some(at) = &self.location {
            write!(f, " at {at}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// What one call gave: the function's value, or why there is none.
pub type CallResult = Result<Custom, Failure>;

impl RewardFn {
    /// Reads `path` and the other regular files of its directory (at most [`MAX_DIR_BYTES`]).
    /// `display` names the file in messages and tracebacks.
    ///
    /// # Errors
    /// [`Error::Io`] when the file or its directory cannot be read; [`Error::Rejected`] when the
    /// directory holds more than [`MAX_DIR_BYTES`].
    pub fn load(path: &Path, display: &str, function: &str, timeout: Duration, memory_mb: u64) -> Result<RewardFn, Error> {
        let io = |p: &Path| {
            let p = p.display().to_string();
            move |source| Error::Io { path: p, source }
        };
        let module = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut files = BTreeMap::new();
        // The reward file itself first: an unreadable one is the error to report.
        files.insert(format!("{DIR}/{module}"), std::fs::read(path).map_err(io(path))?);
        let mut total = files.values().map(|f| f.len() as u64).sum::<u64>();
        for entry in std::fs::read_dir(dir).map_err(io(dir))? {
            let entry = entry.map_err(io(dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            // Regular files only; caches are rebuilt in the sandbox.
            if name == module || !entry.file_type().map_err(io(&entry.path()))?.is_file() || name.ends_with(".pyc") {
                continue;
            }
            total += entry.metadata().map_err(io(&entry.path()))?.len();
            if total > MAX_DIR_BYTES {
                return Err(Error::Rejected(format!(
                    "the directory of the reward file `{display}` holds more than {} MiB; keep the reward in a directory of its own",
                    MAX_DIR_BYTES >> 20
                )));
            }
            files.insert(format!("{DIR}/{name}"), std::fs::read(entry.path()).map_err(io(&entry.path()))?);
        }
        files.insert(DRIVER_FILE.to_owned(), DRIVER.as_bytes().to_vec());
        Ok(RewardFn { display: display.to_owned(), module, function: function.to_owned(), files, timeout, memory_mb })
    }

    /// The file as messages name it.
    pub(crate) fn display(&self) -> &str {
        &self.display
    }

    /// The function's name.
    pub(crate) fn function(&self) -> &str {
        &self.function
    }

    /// Scores `calls` (completions of `problem`), normally in one sandbox run; one result per
    /// call, in order. Each call runs in a process of its own, forked by the driver, and the
    /// results are matched to calls by id, never by position. A run that ends before answering
    /// every call (code a call ran killed or stopped the driver) charges the call it was on and
    /// runs the rest again, so no call can take the others' results with it.
    ///
    /// # Errors
    /// Only the sandbox failing ([`Sandbox::run`]'s errors); whatever the user's code does is a
    /// [`Failure`] in the results.
    pub async fn call<S: Sandbox>(&self, sandbox: &S, problem: &Value, calls: &[Call]) -> Result<Vec<CallResult>, Error> {
        let mut results: Vec<Option<CallResult>> = vec![None; calls.len()];
        loop {
            let pending: Vec<usize> = (0..calls.len()).filter(|&k| results[k].is_none()).collect();
            if pending.is_empty() {
                break;
            }
            let out = self.run_batch(sandbox, problem, calls, &pending).await?;
            for (k, r) in parse_results(&out.stdout, &out.stderr, out.status, &pending, self.timeout.as_secs_f64()) {
                results[k] = Some(r);
            }
        }
        Ok(results.into_iter().flatten().collect())
    }

    /// One sandbox run of the driver over the calls `ids` of `calls`.
    async fn run_batch<S: Sandbox>(&self, sandbox: &S, problem: &Value, calls: &[Call], ids: &[usize]) -> Result<ExecOutput, Error> {
        let t = self.timeout.as_secs_f64();
        let batch: Vec<Value> = ids.iter().map(|&k| json!({"id": k, "completion": calls[k].completion, "code": calls[k].code, "verdict": calls[k].verdict})).collect();
        let stdin = json!({
            "display": self.display,
            "module": self.module,
            "function": self.function,
            "timeout_s": t,
            "problem": problem,
            "calls": batch,
        });
        // The load and every call may take their whole timeout (a call, the driver's grace on top
        // for a process that blocks its timer); the sandbox's deadline is the backstop for a
        // driver that cannot go on (a load that hangs in C code, a driver a call stopped).
        let n = ids.len() as f64;
        let limits = Limits { timeout: Duration::from_secs_f64(t * (n + 1.0) + CALL_GRACE_S * n + 2.0), memory_mb: self.memory_mb, ..Limits::default() };
        let req = ExecRequest { code: DRIVER_STUB.to_owned(), stdin: Some(stdin.to_string()), files: self.files.clone(), fetch_files: vec![], limits, ..ExecRequest::default() };
        sandbox.run(req).await
    }
}

/// What the driver waits past a call's timeout before it kills a call's process that blocked
/// its timer (`GRACE_S` in reward.py).
const CALL_GRACE_S: f64 = 1.0;

/// The results the driver's lines give for the calls `pending` (ids into the batch), as
/// `(id, result)`. Lines are matched by the id they carry; a line for a call not asked for, or
/// a second line for one, is ignored. When the run ended without answering every call: before
/// the file loaded, each gets the run's failure; after, the first unanswered call (the one the
/// driver was on) gets it and the others are left out, to be run again. Each run therefore
/// settles at least one call.
fn parse_results(stdout: &[u8], stderr: &[u8], status: ExecStatus, pending: &[usize], timeout_s: f64) -> Vec<(usize, CallResult)> {
    let text = String::from_utf8_lossy(stdout);
    let mut got: BTreeMap<usize, CallResult> = BTreeMap::new();
    let (mut loaded, mut restart) = (false, false);
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else { continue };
        loaded |= v.get("loaded").is_some();
        restart |= v.get("restart").is_some();
        let id = v.get("call").and_then(Value::as_u64).and_then(|k| usize::try_from(k).ok());
        if let Some(k) = id.filter(|k| pending.contains(k)) {
            got.entry(k).or_insert_with(|| parse_line(&v));
        }
    }
    let missing: Vec<usize> = pending.iter().copied().filter(|k| !got.contains_key(k)).collect();
    let err = String::from_utf8_lossy(stderr);
    let tail: String = err.chars().rev().take(4000).collect::<Vec<_>>().into_iter().rev().collect();
    if missing.is_empty() || (restart && !got.is_empty()) {
        if !missing.is_empty() {
            // Costs a sandbox run per restart: worth seeing if it happens without an attack.
            tracing::warn!(calls = missing.len(), "the Python reward's driver stopped after a call it could not clean up after; the rest run again: {}", tail.trim());
        }
        return got.into_iter().collect();
    }
    let (kind, message) = match status {
        ExecStatus::TimedOut => (FailureKind::Timeout, format!("did not return within {timeout_s} s (the sandbox stopped its process)")),
        ExecStatus::Signaled(sig) => (FailureKind::Crashed, format!("its process was killed by signal {sig}")),
        ExecStatus::Exited(code) => (FailureKind::Crashed, format!("its process exited with code {code}")),
        ExecStatus::OutputLimit => (FailureKind::Crashed, "its process wrote past the output limit".to_string()),
    };
    let failure = Failure { kind, message, location: None, traceback: tail };
    let charged = if loaded { &missing[..1] } else { &missing[..] };
    got.extend(charged.iter().map(|&k| (k, Err(failure.clone()))));
    got.into_iter().collect()
}

fn parse_line(v: &Value) -> CallResult {
    let bad = || Failure { kind: FailureKind::Crashed, message: "the reward driver wrote an unreadable result".into(), location: None, traceback: v.to_string().chars().take(600).collect() };
    if let Some(ok) = v.get("ok") {
        return match ok {
            Value::Number(n) => n.as_f64().map(Custom::Value).ok_or_else(bad),
            Value::Object(m) => m.iter().map(|(k, v)| Some((k.clone(), v.as_f64()?))).collect::<Option<BTreeMap<_, _>>>().map(Custom::Components).ok_or_else(bad),
            _ => Err(bad()),
        };
    }
    let kind = match v["failed"].as_str() {
        Some("load") => FailureKind::Load,
        Some("raised") => FailureKind::Raised,
        Some("timeout") => FailureKind::Timeout,
        Some("returned") => FailureKind::Returned,
        Some("crashed") => FailureKind::Crashed,
        Some("forged") => FailureKind::Forged,
        _ => return Err(bad()),
    };
    let text = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
    Err(Failure { kind, message: text("message"), location: v["where"].as_str().map(str::to_owned), traceback: text("traceback") })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_by_call_id_and_from_a_dead_process() {
        // Lines in any order, matched by id; a line for a call not asked for and a second line
        // for a call are ignored.
        let stdout = b"{\"loaded\": true}\n{\"call\": 5, \"ok\": {\"a\": 1, \"b\": -0.25}}\n{\"call\": 2, \"ok\": 0.5}\n{\"call\": 9, \"ok\": 7}\n{\"call\": 2, \"ok\": 1}\n{\"call\": 3, \"failed\": \"raised\", \"message\": \"ValueError: x\", \"where\": \"r.py:3\", \"traceback\": \"T\"}\n";
        let r: BTreeMap<usize, CallResult> = parse_results(stdout, b"boom", ExecStatus::TimedOut, &[2, 3, 5, 6, 7], 2.0).into_iter().collect();
        assert_eq!(r[&2], Ok(Custom::Value(0.5)));
        assert_eq!(r[&5], Ok(Custom::Components([("a".to_string(), 1.0), ("b".to_string(), -0.25)].into())));
        let e = r[&3].clone().unwrap_err();
        assert_eq!((e.kind, e.location.as_deref()), (FailureKind::Raised, Some("r.py:3")));
        assert_eq!(e.to_string(), "raised at r.py:3: ValueError: x");
        // The driver was on call 6 when the sandbox's deadline stopped it: 6 is charged, 7 is
        // left out to be run again.
        let e = r[&6].clone().unwrap_err();
        assert_eq!((e.kind, e.traceback.as_str()), (FailureKind::Timeout, "boom"));
        assert!(!r.contains_key(&7) && !r.contains_key(&9), "{r:?}");
        // Before the load finished, every call gets the run's failure.
        let r = parse_results(b"not json\n", b"", ExecStatus::Exited(3), &[0, 1], 2.0);
        assert_eq!(r.len(), 2);
        assert_eq!(r[1].1.clone().unwrap_err().message, "its process exited with code 3");
        // A restart after a call: the others are run again, nobody is charged.
        let r = parse_results(b"{\"loaded\": true}\n{\"call\": 0, \"failed\": \"forged\", \"message\": \"m\", \"where\": null, \"traceback\": \"\"}\n{\"restart\": true}\n", b"", ExecStatus::Exited(0), &[0, 1, 2], 2.0);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].1.clone().unwrap_err().kind, FailureKind::Forged);
    }
}
