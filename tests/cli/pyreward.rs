//! Python rewards (`reward.kind: python`) with real reward files, the real local sandbox and the
//! real binary: components computed from the arguments rlx passes, a reward that raises (file:line),
//! one that never returns (the per-call timer, and the driver's kill behind it), one that
//! reads outside its directory or opens a socket (denied as submissions are), completions that
//! try to forge or shift scores through a reward that runs their code, the numbers a reward may
//! return (huge ints, numpy scalars), `rlx validate`'s sample call, and runs that log
//! components, drop groups and stop after `reward.max_failures`.
//! The isolation cases use only files the test writes (never ../shared).

#![allow(clippy::print_stderr)] // skip notices and the measurement are meant to be seen

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rlx::sandbox::local::{LocalConfig, LocalSandbox};
use rlx::sandbox::reward::{Call, CallResult, Custom, FailureKind, RewardFn};
use serde_json::{Value, json};

use crate::common::{TestContext, jsonl, only_run, python_available};

async fn sandbox() -> LocalSandbox {
    LocalSandbox::start(LocalConfig { workers: 1, ..LocalConfig::default() }).await.expect("sandbox starts")
}

/// Writes `files` into a fresh directory; returns it (kept alive by the `TempDir`).
fn reward_dir(files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let path = dir.path().join(files[0].0);
    (dir, path)
}

fn load(path: &Path, function: &str, timeout_s: f64) -> RewardFn {
    RewardFn::load(path, "rewards/r.py", function, Duration::from_secs_f64(timeout_s), 1024).unwrap()
}

fn verdict(passed: usize, total: usize) -> Value {
    let tests: Vec<Value> = (0..total).map(|i| if i < passed { json!({"status": "passed", "time_ms": 3}) } else { json!({"status": "wrong_answer", "time_ms": 5, "got": "7"}) }).collect();
    json!({"problem_id": "p1", "status": if passed == total { "passed" } else { "failed" }, "passed": passed == total, "tests_passed": passed, "tests_total": total, "tests": tests})
}

fn call(completion: &str, code: Option<&str>, v: Value) -> Call {
    Call { completion: completion.into(), code: code.map(str::to_string), verdict: v }
}

/// Calls with a hang guard (the sandbox's own deadline plus a minute), not a timing check.
async fn score(f: &RewardFn, sb: &LocalSandbox, problem: &Value, calls: &[Call]) -> Vec<CallResult> {
    tokio::time::timeout(Duration::from_secs(120), f.call(sb, problem, calls)).await.expect("the reward call returned (hang guard)").expect("no sandbox failure")
}

fn components(r: &CallResult) -> std::collections::BTreeMap<String, f64> {
    match r {
        Ok(Custom::Components(m)) => m.clone(),
        other => panic!("expected components, got {other:?}"),
    }
}

const COMPONENTS: &str = r#"
import helper  # a sibling module: the reward's directory is importable

def reward(problem, completion, code, verdict):
    print("this goes to stderr, not into the results")
    slow = max(t["time_ms"] for t in verdict["tests"])
    return {
        "tests": verdict["tests_passed"] / verdict["tests_total"],
        "has_code": 0.0 if code is None else 1.0,
        "chars": float(len(completion)),
        "statement": float(len(problem["statement"])),
        "slowest_ms": float(slow),
        "got_seven": float(sum(t.get("got") == "7" for t in verdict["tests"])),
        "weight": helper.WEIGHT * float(open("weights.txt").read()),
    }

def number(problem, completion, code, verdict):
    verdict["tests_passed"] = -100  # mutating an argument reaches no other call
    return 2

def scratch(problem, completion, code, verdict):
    import os
    seen = open("weights.txt").read() != "3\n" or os.path.exists("../scratch.txt")
    with open("weights.txt", "w") as f:  # a data file rewritten by a call: back before the next
        f.write(completion)
    with open("../scratch.txt", "w") as f:  # a file a call leaves: gone before the next
        f.write(completion)
    return {"seen": float(seen), "driver": float(os.getppid())}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reward_file_returns_components_computed_from_its_arguments() {
    if !python_available() {
        return;
    }
    let (_dir, path) = reward_dir(&[("r.py", COMPONENTS), ("helper.py", "WEIGHT = 0.5\n"), ("weights.txt", "3\n")]);
    let sb = sandbox().await;
    let problem = json!({"id": "p1", "statement": "Add two numbers.", "metadata": {}});
    let calls = [call("```python\nprint(1)\n```", Some("print(1)\n"), verdict(3, 4)), call("no code", None, verdict(0, 4))];
    let r = score(&load(&path, "reward", 5.0), &sb, &problem, &calls).await;
    assert_eq!(r.len(), 2);
    let a = components(&r[0]);
    assert_eq!(a["tests"], 0.75);
    assert_eq!(a["has_code"], 1.0);
    assert_eq!(a["chars"], 22.0, "len of the completion text");
    assert_eq!(a["statement"], 16.0);
    assert_eq!(a["slowest_ms"], 5.0);
    assert_eq!(a["got_seven"], 1.0);
    assert_eq!(a["weight"], 1.5, "0.5 from helper.py × 3 from weights.txt");
    // The sum is the reward: 0.75 + 1 + 22 + 16 + 5 + 1 + 1.5.
    assert_eq!(r[0].as_ref().unwrap().total(), Some(47.25));
    let b = components(&r[1]);
    assert_eq!((b["tests"], b["has_code"], b["chars"], b["got_seven"]), (0.0, 0.0, 7.0, 4.0));

    let r = score(&load(&path, "number", 5.0), &sb, &problem, &calls).await;
    assert_eq!(r, vec![Ok(Custom::Value(2.0)), Ok(Custom::Value(2.0))]);

    // Each call runs in its own process and finds the directory as the load left it; all of a
    // group's calls run under one driver, in one sandbox run (a driver that could not clean up
    // after a call would hand the rest to a fresh run, with another pid).
    let r = score(&load(&path, "scratch", 5.0), &sb, &problem, &[calls[0].clone(), calls[1].clone(), calls[0].clone()]).await;
    let c: Vec<_> = r.iter().map(components).collect();
    assert!(c.iter().all(|c| c["seen"] == 0.0), "{c:?}");
    assert!(c.iter().all(|x| x["driver"] == c[0]["driver"]), "{c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raising_reward_is_a_failure_naming_file_and_line() {
    if !python_available() {
        return;
    }
    let text = "def helper(v):\n    return v['nope']\n\ndef reward(problem, completion, code, verdict):\n    if code is None:\n        return helper(verdict)\n    return 1.0\n\ndef bad(problem, completion, code, verdict):\n    return [1]\n";
    let (_dir, path) = reward_dir(&[("r.py", text)]);
    let sb = sandbox().await;
    let calls = [call("x", None, verdict(0, 1)), call("y", Some("pass"), verdict(1, 1))];
    let r = score(&load(&path, "reward", 5.0), &sb, &json!({"id": "p"}), &calls).await;
    let f = r[0].clone().unwrap_err();
    assert_eq!(f.kind, FailureKind::Raised);
    assert_eq!(f.location.as_deref(), Some("rewards/r.py:2"), "the innermost line of the user's file");
    assert_eq!(f.message, "KeyError: 'nope'");
    assert!(f.traceback.contains("File \"rewards/r.py\", line 6, in reward") && f.traceback.contains("return v['nope']"), "{}", f.traceback);
    assert!(!f.traceback.contains("main.py"), "the driver's frames are left out: {}", f.traceback);
    assert_eq!(r[1], Ok(Custom::Value(1.0)), "one failing call does not take the batch with it");

    let r = score(&load(&path, "bad", 5.0), &sb, &json!({"id": "p"}), &calls[..1]).await;
    let f = r[0].clone().unwrap_err();
    assert_eq!((f.kind, f.location.as_deref()), (FailureKind::Returned, Some("rewards/r.py:9")));

    let (_dir, syntax) = reward_dir(&[("r.py", "def reward(p, c, code, v):\n    return 1 +\n")]);
    let r = score(&load(&syntax, "reward", 5.0), &sb, &json!({"id": "p"}), &calls).await;
    for x in &r {
        let f = x.clone().unwrap_err();
        assert_eq!((f.kind, f.location.as_deref()), (FailureKind::Load, Some("rewards/r.py:2")), "{f:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reward_that_never_returns_times_out() {
    if !python_available() {
        return;
    }
    let text = "import signal, time\n\ndef spin(problem, completion, code, verdict):\n    if completion == 'hang':\n        while True:\n            pass\n    return 1.0\n\ndef deaf(problem, completion, code, verdict):\n    if completion == 'hang':\n        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])\n        while True:\n            time.sleep(0.05)\n    return 1.0\n";
    let (_dir, path) = reward_dir(&[("r.py", text)]);
    let sb = sandbox().await;
    let calls = [call("fine", None, verdict(0, 1)), call("hang", None, verdict(0, 1)), call("after", None, verdict(0, 1))];
    // The per-call timer stops the hang at its line; the batch goes on.
    let r = score(&load(&path, "spin", 1.0), &sb, &json!({"id": "p"}), &calls).await;
    assert_eq!(r[0], Ok(Custom::Value(1.0)));
    let f = r[1].clone().unwrap_err();
    assert_eq!((f.kind, f.location.as_deref()), (FailureKind::Timeout, Some("rewards/r.py:5")), "{f:?}");
    assert_eq!(r[2], Ok(Custom::Value(1.0)));
    // A reward that blocks the timer: the driver kills the call's process past its timeout;
    // the call is a timeout, the calls before and after it stand.
    let r = score(&load(&path, "deaf", 1.0), &sb, &json!({"id": "p"}), &calls).await;
    assert_eq!(r[0], Ok(Custom::Value(1.0)));
    let f = r[1].clone().unwrap_err();
    assert_eq!(f.kind, FailureKind::Timeout);
    assert!(f.message.contains("its process was killed"), "{f:?}");
    assert_eq!(r[2], Ok(Custom::Value(1.0)));
    // The worker survives for the next batch.
    let r = score(&load(&path, "spin", 1.0), &sb, &json!({"id": "p"}), &calls[..1]).await;
    assert_eq!(r[0], Ok(Custom::Value(1.0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reward_cannot_read_outside_its_directory_nor_open_a_socket() {
    if !python_available() {
        return;
    }
    // A file beside the reward's directory, a file written by this test elsewhere on the host,
    // and a server on the host's loopback.
    let host = tempfile::tempdir().unwrap();
    let secret = host.path().join("secret.txt");
    std::fs::write(&secret, "host secret").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let written = host.path().join("written-by-reward");
    let text = format!(
        r#"import os, socket

def tries(f):
    try:
        f()
        return 1.0
    except OSError:
        return 0.0

def reward(problem, completion, code, verdict):
    return {{
        "inside": tries(lambda: open("data.txt").read()),
        "secret": tries(lambda: open({secret:?}).read()),
        "parent": tries(lambda: os.listdir("..") and open(os.path.join("..", os.listdir("..")[0])).read()),
        "write": tries(lambda: open({written:?}, "w").write("x")),
        "socket": tries(lambda: socket.create_connection(("127.0.0.1", {port}), timeout=1).sendall(b"hi")),
    }}
"#,
        secret = secret.display().to_string(),
        written = written.display().to_string(),
    );
    let (_dir, path) = reward_dir(&[("r.py", &text), ("data.txt", "mine")]);
    let sb = sandbox().await;
    let prot = sb.protection().clone();
    let r = score(&load(&path, "reward", 5.0), &sb, &json!({"id": "p"}), &[call("x", None, verdict(0, 1))]).await;
    let c = components(&r[0]);
    assert_eq!(c["inside"], 1.0, "its own directory is readable: {c:?}");
    if prot.mount_namespace {
        assert_eq!(c["secret"], 0.0, "the host's files are not there: {c:?}");
        assert_eq!(c["write"], 0.0, "{c:?}");
    } else {
        eprintln!("note: no mount namespace here; the read-outside case is not enforced (docs/sandbox.md)");
    }
    assert!(!written.exists(), "the host was written to");
    if prot.network_namespace {
        assert_eq!(c["socket"], 0.0, "{c:?}");
        assert_eq!(listener.accept().unwrap_err().kind(), std::io::ErrorKind::WouldBlock, "nothing connected");
    }
}

/// A code reward as naive code rewards are written: it runs the model's code in its own process.
/// What a call is worth is computed before that code runs, so the honest result of every call
/// is known: `{"tests": k, "base": 1}` for the completion with `k` tests passed.
const EXEC_REWARD: &str = r#"
import helper

def reward(problem, completion, code, verdict):
    value = {"tests": float(verdict["tests_passed"]), "base": float(open("weights.txt").read()) * helper.SCALE}
    if code:
        exec(code, {"__name__": "model"})
    return value
"#;

/// (a) Forged result lines on stdout and stderr, in the driver's old and new shapes.
const PRINTS: &str = r#"
import sys
for k in range(40):
    print('{"ok": 100.0}')
    print('{"call": %d, "ok": 100.0}' % k)
    sys.stderr.write('{"call": %d, "ok": {"tests": 100.0}}\n{"loaded": true}\n' % k)
"#;

/// (b) The same written to every descriptor it has, through /proc/self/fd, and to the driver's
/// descriptors and memory through /proc/<parent> (where there is a /proc).
const ALL_FDS: &str = r#"
import os
try:
    with open("/proc/%d/mem" % os.getppid(), "r+b") as f:
        f.write(b"x")
    os._exit(3)  # reached the driver's memory: not a forged call, a test failure
except OSError:
    pass
line = b'{"call": 4, "ok": 100.0}\n{"ok": 100.0}\n'
for d in ("/proc/%d/fd" % os.getppid(), "/proc/self/fd"):
    try:
        names = os.listdir(d)
    except OSError:
        continue
    for n in names:
        try:
            with open(os.path.join(d, n), "wb") as f:
                f.write(line)
        except OSError:
            pass
for fd in range(1024):
    try:
        os.write(fd, line)
    except OSError:
        pass
"#;

/// (c) Patches json, the driver's functions, the reward module, its sibling module and data
/// file, and plants a replacement for the sibling module.
const PATCHES: &str = r#"
import json, sys
json.dumps = lambda *a, **k: '{"ok": 100.0}'
json.JSONEncoder.encode = lambda self, o: '{"ok": 100.0}'
driver = sys.modules["rlx_reward_driver"]
for name in ("emit", "check_value", "failure", "timed", "judge", "valid_result", "run_call", "main", "ENCODE"):
    setattr(driver, name, lambda *a, **k: {"ok": 100.0})
sys.modules["r"].reward = lambda *a: 100.0
sys.modules["helper"].SCALE = 100.0
open("weights.txt", "w").write("100")
open("helper.py", "w").write("SCALE = 100.0\n")
del sys.modules["helper"]
"#;

/// (d) Ends its own process, kills itself, kills the driver, signals the driver.
const EXITS: &str = "import os\nos._exit(0)\n";
const KILLS_ITSELF: &str = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n";
const KILLS_THE_DRIVER: &str = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nimport time\ntime.sleep(30)\n";
const SIGNALS_THE_DRIVER: &str = r#"
import os, signal
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM, signal.SIGUSR1, signal.SIGPIPE, signal.SIGHUP, signal.SIGXCPU):
    os.kill(os.getppid(), s)
"#;

/// Leaves a process behind that ignores signals and, for seconds, forges lines on the output it
/// inherited and rewrites the reward's files, to reach the calls after it.
const LEAVES_A_PROCESS: &str = r#"
import os, signal, time
if os.fork() == 0:
    os.closerange(3, 1 << 16)
    for s in range(1, 32):
        try:
            signal.signal(s, signal.SIG_IGN)
        except (OSError, ValueError):
            pass
    for _ in range(500):
        for fd in (1, 2):
            try:
                os.write(fd, b'{"ok": 100.0}\n')
            except OSError:
                pass
        try:
            open("weights.txt", "w").write("100")
        except OSError:
            pass
        time.sleep(0.01)
    os._exit(0)
time.sleep(0.05)
"#;

/// Replaces a builtin the reward uses and starts a thread that keeps forging lines on stdout.
const BUILTINS_AND_A_THREAD: &str = r#"
import builtins, io, os, threading, time
builtins.open = lambda *a, **k: io.StringIO("100")
def forge():
    while True:
        os.write(1, b'{"ok": 100.0}\n')
        time.sleep(0.001)
threading.Thread(target=forge, daemon=True).start()
time.sleep(0.05)
"#;

/// The attacks, by the index of the completion that carries them; every other completion is
/// honest.
const ATTACKS: &[(usize, &str)] = &[(1, PRINTS), (3, ALL_FDS), (5, PATCHES), (7, EXITS), (9, KILLS_ITSELF), (11, KILLS_THE_DRIVER), (13, SIGNALS_THE_DRIVER), (15, LEAVES_A_PROCESS), (17, BUILTINS_AND_A_THREAD)];

fn honest(k: usize) -> CallResult {
    Ok(Custom::Components([("base".to_string(), 1.0), ("tests".to_string(), k as f64)].into()))
}

/// Issue #38 item 4: completions whose code a reward runs try to forge or shift scores. No other
/// call's score changes, and each attacked call is recorded as what it is: its honest value
/// where the attack could not touch it, otherwise a failed call, never a forged score.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_code_a_reward_runs_cannot_forge_or_shift_any_score() {
    if !python_available() {
        return;
    }
    let (_dir, path) = reward_dir(&[("r.py", EXEC_REWARD), ("helper.py", "SCALE = 1.0\n"), ("weights.txt", "1\n")]);
    let f = RewardFn::load(&path, "rewards/r.py", "reward", Duration::from_secs(10), 1024).unwrap();
    let calls: Vec<Call> = (0..19)
        .map(|k| {
            let code = ATTACKS.iter().find(|(i, _)| *i == k).map(|(_, c)| *c);
            call(&format!("completion {k}"), code, verdict(k, 20))
        })
        .collect();
    for namespaces in [true, false] {
        let sb = LocalSandbox::start(LocalConfig { workers: 1, namespaces, ..LocalConfig::default() }).await.expect("sandbox starts");
        let r = score(&f, &sb, &json!({"id": "p"}), &calls).await;
        let mode = if namespaces { "with namespaces" } else { "without namespaces" };
        assert_eq!(r.len(), calls.len());
        for (k, got) in r.iter().enumerate() {
            let expected = match k {
                3 => Some(FailureKind::Forged),
                7 | 9 | 11 => Some(FailureKind::Crashed),
                _ => None,
            };
            match expected {
                None => assert_eq!(got, &honest(k), "{mode}: completion {k}"),
                Some(kind) => assert_eq!(got.as_ref().map_err(|e| e.kind), Err(kind), "{mode}: completion {k}: {got:?}"),
            }
        }
        let e = r[3].clone().unwrap_err();
        assert!(e.message.contains("the call is void"), "{e:?}");
        assert!(r[7].clone().unwrap_err().message.contains("exited with code 0 before the function returned"), "{:?}", r[7]);
        assert!(r[9].clone().unwrap_err().message.contains("signal 9"), "{:?}", r[9]);
    }
}

/// (d) A completion that stops the driver: the sandbox's deadline ends the run, that call is
/// a timeout and the calls after it are run again, not lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_that_stops_the_driver_costs_only_its_own_call() {
    if !python_available() {
        return;
    }
    let (_dir, path) = reward_dir(&[("r.py", EXEC_REWARD), ("helper.py", "SCALE = 1.0\n"), ("weights.txt", "1\n")]);
    let f = load(&path, "reward", 1.0);
    let stop = "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n";
    let calls = [call("a", None, verdict(0, 3)), call("b", Some(stop), verdict(1, 3)), call("c", None, verdict(2, 3))];
    let r = score(&f, &sandbox().await, &json!({"id": "p"}), &calls).await;
    assert_eq!(r[0], honest(0));
    assert_eq!(r[1].clone().unwrap_err().kind, FailureKind::Timeout, "{:?}", r[1]);
    assert_eq!(r[2], honest(2));
}

/// Issue #38 item 7: numbers a reward may return. A Python int of any size is a number or,
/// past a float's range, that call's failure with a clear message; the calls after it are
/// scored (before, the overflow crashed the rest of the group).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_ints_fail_only_their_own_call_with_a_clear_message() {
    if !python_available() {
        return;
    }
    let text = "VALUES = {'huge': 10**400, 'huger': 10**5000, 'big': 2**1000, 'true': True, 'in_dict': {'a': 1, 'b': 10**400}, 'nan': float('nan'), 'fine': 0.5}\n\ndef reward(problem, completion, code, verdict):\n    return VALUES[completion]\n";
    let (_dir, path) = reward_dir(&[("r.py", text)]);
    let names = ["huge", "huger", "big", "true", "in_dict", "nan", "fine"];
    let calls: Vec<Call> = names.iter().map(|n| call(n, None, verdict(0, 1))).collect();
    let r = score(&load(&path, "reward", 5.0), &sandbox().await, &json!({"id": "p"}), &calls).await;
    let failed = |k: usize| r[k].clone().unwrap_err();
    assert_eq!((failed(0).kind, failed(0).location.as_deref()), (FailureKind::Returned, Some("rewards/r.py:3")));
    assert!(failed(0).message.contains("reward() returned an int of 1329 bits, too large for a float"), "{:?}", failed(0));
    assert!(failed(1).message.contains("an int of 16610 bits"), "{:?}", failed(1));
    // 2**1000 as a float (the JSON between the driver and rlx keeps 16 significant digits).
    assert!(matches!(r[2], Ok(Custom::Value(v)) if (v / 2f64.powi(1000) - 1.0).abs() < 1e-14), "{:?}", r[2]);
    assert_eq!(r[3], Ok(Custom::Value(1.0)));
    assert!(failed(4).message.contains("a dict whose 'b' is an int of 1329 bits"), "{:?}", failed(4));
    assert!(failed(5).message.contains("returned nan"), "{:?}", failed(5));
    assert_eq!(r[6], Ok(Custom::Value(0.5)), "the call after the failures is scored");
}

/// Issue #38 item 7: numpy's integer, floating and bool scalars are numbers, alone and as
/// components; other numpy values are that call's failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numpy_scalars_are_numbers() {
    if !python_available() {
        return;
    }
    let Some(python) = crate::common::python_env("numpy", &[crate::sandbox_warm::NUMPY]) else { return };
    let text = "import numpy as np\n\nVALUES = {'int64': np.int64(3), 'float32': np.float32(0.5), 'bool': np.bool_(True), 'uint8': np.uint8(200), 'components': {'a': np.float64(1.25), 'b': np.int8(-2), 'c': np.False_}, 'inf': np.float64('inf'), 'complex': np.complex128(1), 'array': np.array([1.0, 2.0])}\n\ndef reward(problem, completion, code, verdict):\n    return VALUES[completion]\n";
    let (_dir, path) = reward_dir(&[("r.py", text)]);
    let names = ["int64", "float32", "bool", "uint8", "components", "inf", "complex", "array"];
    let calls: Vec<Call> = names.iter().map(|n| call(n, None, verdict(0, 1))).collect();
    let sb = LocalSandbox::start(LocalConfig { workers: 1, python: Some(python), ..LocalConfig::default() }).await.expect("sandbox starts");
    let r = score(&load(&path, "reward", 5.0), &sb, &json!({"id": "p"}), &calls).await;
    assert_eq!(r[..4], [Ok(Custom::Value(3.0)), Ok(Custom::Value(0.5)), Ok(Custom::Value(1.0)), Ok(Custom::Value(200.0))]);
    assert_eq!(r[4], Ok(Custom::Components([("a".to_string(), 1.25), ("b".to_string(), -2.0), ("c".to_string(), 0.0)].into())));
    let failed = |k: usize| r[k].clone().unwrap_err();
    assert!(failed(5).message.contains("returned inf"), "{:?}", failed(5));
    assert!(failed(6).message.contains("a value of type complex128"), "{:?}", failed(6));
    assert!(failed(7).message.contains("a value of type ndarray"), "{:?}", failed(7));
}

/// One sandbox run per group against one per completion, for the docs (not a timing
/// assertion). `cargo test --release --test cli pyreward::batching -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn batching() {
    if !python_available() {
        return;
    }
    let (_dir, path) = reward_dir(&[("r.py", COMPONENTS), ("helper.py", "WEIGHT = 0.5\n"), ("weights.txt", "3\n")]);
    let sb = sandbox().await;
    let f = load(&path, "reward", 5.0);
    let problem = json!({"id": "p1", "statement": "Add two numbers.", "metadata": {}});
    let calls: Vec<Call> = (0..8).map(|_| call("```python\nprint(1)\n```", Some("print(1)\n"), verdict(3, 4))).collect();
    score(&f, &sb, &problem, &calls).await;
    let rounds = 30;
    let t = Instant::now();
    for _ in 0..rounds {
        score(&f, &sb, &problem, &calls).await;
    }
    let group = t.elapsed().as_secs_f64() * 1e3 / f64::from(rounds);
    let t = Instant::now();
    for _ in 0..rounds {
        for c in &calls {
            score(&f, &sb, &problem, std::slice::from_ref(c)).await;
        }
    }
    let single = t.elapsed().as_secs_f64() * 1e3 / f64::from(rounds);
    eprintln!("group of 8: one run {group:.1} ms, one run per completion {single:.1} ms ({:.1}×)", single / group);
}

/// A tiny-model spec with a Python reward at `r/rew.py` (relative to the spec).
fn run_spec(steps: u32, reward: &str) -> String {
    crate::engine::spec_with(steps, steps, "").replace("reward: {test_timeout_s: 2}", reward).replace("eval_every: 2", "eval_every: 100")
}

const RUN_REWARD: &str = "def reward(problem, completion, code, verdict):\n    return {'chars': float(len(completion)), 'tests': float(verdict['tests_passed'])}\n\ndef fails(problem, completion, code, verdict):\n    raise RuntimeError('my bug')\n";

#[test]
fn a_run_logs_each_component_and_the_reward_is_their_sum() {
    if !python_available() {
        return;
    }
    let cx = TestContext::new();
    crate::engine::tiny_model(&cx.path().join("tiny"));
    cx.write("r/rew.py", RUN_REWARD);
    cx.write("spec.yaml", &run_spec(1, "reward: {kind: python, path: r/rew.py, test_timeout_s: 2}"));
    let r = cx.run(&["run", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let dir = only_run(&cx);
    let step = jsonl(&dir.join("metrics.jsonl")).into_iter().find(|m| m["step"] == 0).expect("step 0");
    let rollouts = jsonl(&dir.join("rollouts.jsonl"));
    assert_eq!(rollouts.len(), 6);
    // Each rollout's reward is its completion's length plus its tests passed; the components'
    // means are the metrics.
    let mut chars = 0.0;
    for x in &rollouts {
        let len = x["text"].as_str().unwrap().chars().count() as f64;
        assert_eq!(x["reward"].as_f64().unwrap(), len + x["tests_passed"].as_f64().unwrap(), "{x}");
        chars += len;
    }
    assert!((step["reward/chars"].as_f64().unwrap() - chars / 6.0).abs() < 1e-9, "{step}");
    assert!(step["reward/tests"].is_number());
    assert_eq!(step["train/reward_failures"], 0.0);
    assert_eq!(step["train/groups_reward_dropped"], 0.0);
}

#[test]
fn failing_rewards_drop_their_groups_and_stop_the_run_after_the_threshold() {
    if !python_available() {
        return;
    }
    let cx = TestContext::new();
    crate::engine::tiny_model(&cx.path().join("tiny"));
    cx.write("r/rew.py", RUN_REWARD);
    // Tolerated: 12 failed calls (2 steps × 2 groups × 3) under a threshold of 100; every group
    // is dropped, none scored, nothing trained.
    cx.write("spec.yaml", &run_spec(2, "reward: {kind: python, path: r/rew.py, function: fails, max_failures: 100, test_timeout_s: 2}"));
    let r = cx.run(&["run", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("the Python reward raised at r/rew.py:5: RuntimeError: my bug"), "{}", r.stderr);
    let dir = only_run(&cx);
    for m in jsonl(&dir.join("metrics.jsonl")).iter().filter(|m| m["step"].as_i64() >= Some(0)) {
        assert_eq!(m["train/reward_failures"], 6.0, "{m}");
        assert_eq!(m["train/groups_reward_dropped"], 2.0);
        assert_eq!(m["train/groups_infra_dropped"], 0.0, "the user's bug is not an infrastructure error");
        assert_eq!(m["train/datums"], 0.0);
    }
    assert!(jsonl(&dir.join("rollouts.jsonl")).is_empty(), "nothing scored");

    // Over the threshold: the run stops at the first step, exit 2, with the traceback.
    cx.write("spec.yaml", &run_spec(2, "reward: {kind: python, path: r/rew.py, function: fails, max_failures: 2, test_timeout_s: 2}"));
    let r = cx.run(&["run", "spec.yaml"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("failed 6 time(s), more than `reward.max_failures` (2) allows"), "{}", r.stderr);
    assert!(r.stderr.contains("File \"r/rew.py\", line 5, in fails"), "{}", r.stderr);
}

/// A `weighted` term naming a component the function does not return: each call failed (the
/// user's function does not do what the spec says), counted as the reward's failure, never as a
/// sandbox infrastructure error (which would stop the run as "sandbox down").
#[test]
fn a_missing_weighted_component_is_a_failed_call_not_an_infrastructure_error() {
    if !python_available() {
        return;
    }
    let cx = TestContext::new();
    crate::engine::tiny_model(&cx.path().join("tiny"));
    cx.write("r/rew.py", RUN_REWARD);
    let reward = "reward: {kind: weighted, terms: [{kind: python, component: style, weight: 1.0}], path: r/rew.py, max_failures: 100, test_timeout_s: 2}";
    cx.write("spec.yaml", &run_spec(2, reward));
    let r = cx.run(&["run", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("reward() returned the components `chars`, `tests`, without `style`, which `reward.terms` weighs"), "{}", r.stderr);
    let dir = only_run(&cx);
    for m in jsonl(&dir.join("metrics.jsonl")).iter().filter(|m| m["step"].as_i64() >= Some(0)) {
        assert_eq!(m["train/reward_failures"], 6.0, "{m}");
        assert_eq!(m["train/groups_reward_dropped"], 2.0, "{m}");
        assert_eq!(m["train/groups_infra_dropped"], 0.0, "not the sandbox's: {m}");
    }
}

#[test]
fn validate_calls_the_reward_once_and_shows_its_traceback() {
    if !python_available() {
        return;
    }
    let cx = TestContext::new();
    cx.write("r/rew.py", RUN_REWARD);
    let spec = crate::common::MINIMAL.to_string() + "reward: {kind: python, path: r/rew.py}\n";
    cx.write("spec.yaml", &spec);
    let r = cx.run(&["validate", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("the Python reward `reward` in `r/rew.py` returned components chars = 18, tests = 0 on problem `1`"), "{}", r.stderr);
    let r = cx.run(&["validate", "spec.yaml", "reward.function=fails"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("error: the Python reward `fails` in `r/rew.py` raised at r/rew.py:5: RuntimeError: my bug"), "{}", r.stderr);
    assert!(r.stderr.contains("File \"r/rew.py\", line 5, in fails") && r.stderr.contains("raise RuntimeError('my bug')"), "{}", r.stderr);
    // A term weighing a component the function does not return.
    let weighted = crate::common::MINIMAL.to_string() + "reward: {kind: weighted, path: r/rew.py, terms: [{kind: python, component: style, weight: 1}]}\n";
    cx.write("spec.yaml", &weighted);
    let r = cx.run(&["validate", "spec.yaml"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("without the component(s) `style`"), "{}", r.stderr);
}

#[test]
fn spec_errors_of_python_rewards() {
    let cx = TestContext::new();
    let cases = [
        ("reward: {kind: python}", "reward.kind", "a Python reward needs `reward.path`"),
        ("reward: {kind: python, path: nothing.py}", "reward.path", "reward file `nothing.py` does not exist"),
        ("reward: {kind: python, path: user.j2}", "reward.path", "must be a Python file"),
        ("reward: {kind: tests_all_pass, path: r.py}", "reward.path", "`reward.path` is only used by a Python reward"),
        ("reward: {kind: python, path: r.py, function: 'not a name'}", "reward.function", "must be a Python function name"),
        ("reward: {kind: python, path: r.py, call_timeout_s: 0}", "reward.call_timeout_s", "must be > 0"),
        ("reward: {kind: weighted, terms: [{kind: format, weight: 1, component: x}]}", "reward.terms.0.component", "only used in a `python` term"),
    ];
    cx.write("r.py", "def reward(p, c, code, v):\n    return 1.0\n");
    for (reward, key, message) in cases {
        cx.write("spec.yaml", &(crate::common::MINIMAL.to_string() + reward + "\n"));
        let r = cx.run(&["validate", "spec.yaml"]);
        assert_eq!(r.code, 2, "{reward}: {}", r.stderr);
        assert!(r.stderr.contains(message) && r.stderr.contains(&format!("key: `{key}`")), "{reward}: {}", r.stderr);
    }
}
