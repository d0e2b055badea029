//! Experiment trackers (`log.sinks`, `rlx sync`) against the real thing, read back by each
//! tracker's own reader: W&B offline runs through `wandb leet inspect --json` (wandb 0.31.0),
//! TensorBoard files through `tensorboard`'s `EventAccumulator` (2.21.0), and a real
//! `mlflow server` on 127.0.0.1 through `mlflow.MlflowClient` (3.17.2). All three packages live
//! in one cached virtualenv (`common::python_env`), and each test starts at most one server.
//!
//! The runs are real: the tiny random model of `engine.rs`, the local sandbox, real steps.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::common::{TestContext, python_env};
use crate::engine::{spec_with, tiny_model};

const REQUIREMENTS: [&str; 3] = ["wandb==0.31.0", "tensorboard==2.21.0", "mlflow==3.17.2"];

fn venv() -> Option<PathBuf> {
    python_env("trackers", &REQUIREMENTS)
}

/// A metrics line without its `step`, by step.
type Lines = BTreeMap<i64, Map<String, Value>>;

fn lines(path: &Path) -> Lines {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|l| {
            let mut m: Map<String, Value> = serde_json::from_str(l).unwrap();
            let step = m.remove("step").unwrap().as_i64().unwrap();
            (step, m)
        })
        .collect()
}

/// Whether a tracker's value is the file's: equal up to f32 rounding (TensorBoard stores f32);
/// NaN (written `null` in metrics.jsonl, `"NaN"` by W&B and MLflow readers here) equals NaN.
fn same(tracker: &Value, file: &Value) -> bool {
    let t = tracker.as_f64().or_else(|| (tracker.as_str() == Some("NaN") || tracker.is_null()).then_some(f64::NAN));
    let f = file.as_f64().unwrap_or(f64::NAN);
    match t {
        Some(t) if t.is_nan() || f.is_nan() => t.is_nan() && f.is_nan(),
        Some(t) => (t - f).abs() <= 1e-6 * f.abs().max(1.0),
        None => false,
    }
}

/// Checks one tracker's view of a run: `got` maps step → metric → value. Every step of `after`
/// (the final metrics.jsonl) is there once with every metric of its line; a step the resumed
/// run redid may hold the values of `before` (what the killed attempt wrote and the tracker
/// took first), any other step holds the final values.
fn check_steps(tracker: &str, got: &Lines, after: &Lines, before: &Lines) {
    assert_eq!(got.keys().collect::<Vec<_>>(), after.keys().collect::<Vec<_>>(), "{tracker}: steps");
    for (step, want) in after {
        let have = &got[step];
        let matches = |line: &Map<String, Value>| line.len() == have.len() && line.iter().all(|(k, v)| have.get(k).is_some_and(|h| same(h, v)));
        assert!(
            matches(want) || before.get(step).is_some_and(matches),
            "{tracker}: step {step} holds {have:?}, metrics.jsonl has {want:?} (before the resume: {:?})",
            before.get(step)
        );
    }
}

/// `rlx` with W&B's own files kept inside the test directory.
fn rlx(cx: &TestContext) -> Command {
    let mut c = cx.rlx();
    for (k, sub) in [("WANDB_CONFIG_DIR", "wandb-config"), ("WANDB_CACHE_DIR", "wandb-cache"), ("WANDB_DATA_DIR", "wandb-data")] {
        c.env(k, cx.path().join(sub));
    }
    c.env_remove("WANDB_MODE").env_remove("WANDB_API_KEY").env_remove("MLFLOW_TRACKING_URI");
    c
}

fn run_ok(cx: &TestContext, args: &[&str]) -> crate::common::Run {
    let r = crate::common::Run::from(rlx(cx).args(args).output().unwrap());
    assert_eq!(r.code, 0, "rlx {args:?}\n{}\n{}", r.stdout, r.stderr);
    r
}

fn the_run(cx: &TestContext) -> PathBuf {
    let runs: Vec<_> = std::fs::read_dir(cx.path().join("runs")).unwrap().flatten().collect();
    assert_eq!(runs.len(), 1);
    runs[0].path()
}

fn cursor_step(dir: &Path, tracker: &str) -> Option<i64> {
    let v: Value = serde_json::from_slice(&std::fs::read(dir.join("sinks").join(format!("{tracker}.json"))).ok()?).ok()?;
    v["cursor"]["step"].as_i64()
}

fn python(py: &Path, script: &str, args: &[&str]) -> Value {
    let out = Command::new(py).arg("-c").arg(script).args(args).output().unwrap();
    assert!(out.status.success(), "python failed:\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

// ---- W&B ----

/// Every offline W&B run in a run directory, as `wandb leet inspect` prints it: (summary, the
/// history rows). Called after rlx exited: a helper left by a killed rlx has finished by then
/// (the next rlx waits for it).
fn wandb_runs(py: &Path, dir: &Path) -> Vec<(Value, Vec<Map<String, Value>>)> {
    let wandb = py.with_file_name("wandb");
    // A helper killed while `wandb.init` ran leaves a run directory without a `.wandb` file.
    let has_log = |p: &Path| std::fs::read_dir(p).is_ok_and(|d| d.flatten().any(|e| e.path().extension().is_some_and(|x| x == "wandb")));
    let mut runs: Vec<PathBuf> = std::fs::read_dir(dir.join("wandb"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("offline-run-") && has_log(p))
        .collect();
    runs.sort();
    runs.iter()
        .map(|run| {
            let out = Command::new(&wandb).args(["leet", "inspect", "--json"]).arg(run).output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let records: Vec<Value> = String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
            let out = Command::new(&wandb).args(["leet", "inspect", "--summary", "--json"]).arg(run).output().unwrap();
            let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
            let rows = records.iter().filter(|r| r["type"] == "history").map(|r| r["history"]["item"].as_object().unwrap().clone()).collect();
            (summary, rows)
        })
        .collect()
}

/// The rows of W&B runs by rlx step, W&B's own keys (`_step`, `_runtime`, ...) left out. A step
/// logged twice fails the test here.
fn wandb_steps(runs: &[(Value, Vec<Map<String, Value>>)]) -> Lines {
    let mut out = Lines::new();
    for (_, rows) in runs {
        for row in rows {
            let mut row = row.clone();
            let step = row.remove("step").unwrap().as_i64().unwrap();
            assert_eq!(row["_step"].as_i64(), Some(step + 1), "W&B's step is rlx's + 1");
            row.retain(|k, _| !k.starts_with('_'));
            assert!(out.insert(step, row).is_none(), "step {step} logged twice to W&B");
        }
    }
    out
}

// ---- TensorBoard ----

const TB_READER: &str = r#"
import json, math, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
ea.Reload()
out = {}
for tag in ea.Tags()["scalars"]:
    for e in ea.Scalars(tag):
        out.setdefault(str(e.step), []).append([tag, None if math.isnan(e.value) else e.value])
print(json.dumps(out))
"#;

/// TensorBoard's scalars in `dir` by step; a metric twice at a step fails the test here.
fn tb_steps(py: &Path, dir: &Path) -> Lines {
    let v = python(py, TB_READER, &[&dir.display().to_string()]);
    let mut out = Lines::new();
    for (step, values) in v.as_object().unwrap() {
        let mut m = Map::new();
        for pair in values.as_array().unwrap() {
            let tag = pair[0].as_str().unwrap().to_string();
            assert!(m.insert(tag.clone(), pair[1].clone()).is_none(), "TensorBoard has `{tag}` twice at step {step}");
        }
        out.insert(step.parse().unwrap(), m);
    }
    out
}

// ---- MLflow ----

/// A real `mlflow server` on 127.0.0.1 with a SQLite store in the test directory.
struct MlflowServer {
    child: Child,
    uri: String,
}

impl MlflowServer {
    fn start(py: &Path, dir: &Path) -> MlflowServer {
        let port = free_port();
        let store = dir.join("mlflow");
        std::fs::create_dir_all(&store).unwrap();
        let child = Command::new(py)
            .args(["-m", "mlflow", "server", "--host", "127.0.0.1", "--port", &port.to_string(), "--workers", "1"])
            .arg("--backend-store-uri")
            .arg(format!("sqlite:///{}", store.join("mlflow.db").display()))
            .arg("--default-artifact-root")
            .arg(store.join("artifacts"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("mlflow-server.log")).unwrap())
            .process_group(0)
            .spawn()
            .unwrap();
        let server = MlflowServer { child, uri: format!("http://127.0.0.1:{port}") };
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() && health(port) {
                return server;
            }
            assert!(Instant::now() < deadline, "mlflow server did not start: {}", std::fs::read_to_string(dir.join("mlflow-server.log")).unwrap_or_default());
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// `GET /health` answers 200.
fn health(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_err() {
        return false;
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf.starts_with("HTTP/1.1 200") || buf.starts_with("HTTP/1.0 200")
}

impl Drop for MlflowServer {
    fn drop(&mut self) {
        // The server forks workers into its process group: end them all.
        // SAFETY: kill(2) on the group of a child this test started.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

const MLFLOW_READER: &str = r#"
import json, math, sys
import mlflow
c = mlflow.MlflowClient(sys.argv[1])
exp = c.get_experiment_by_name(sys.argv[2])
out = []
for r in (c.search_runs([exp.experiment_id]) if exp else []):
    hist = {}
    for k in r.data.metrics:
        for m in c.get_metric_history(r.info.run_id, k):
            hist.setdefault(str(m.step), []).append([k, None if math.isnan(m.value) else m.value])
    out.append({"id": r.info.run_id, "name": r.info.run_name, "status": r.info.status, "params": r.data.params, "steps": hist})
print(json.dumps(out))
"#;

/// The MLflow runs of `experiment`, read by MLflow's own client.
fn mlflow_runs(py: &Path, uri: &str, experiment: &str) -> Vec<Value> {
    python(py, MLFLOW_READER, &[uri, experiment]).as_array().unwrap().clone()
}

/// One MLflow run's metrics by step; a metric twice at a step fails the test here.
fn mlflow_steps(run: &Value) -> Lines {
    let mut out = Lines::new();
    for (step, values) in run["steps"].as_object().unwrap() {
        let mut m = Map::new();
        for pair in values.as_array().unwrap() {
            // MLflow refuses `@` in names: rlx logs `eval/pass@1` as `eval/pass_at_1`.
            let key = pair[0].as_str().unwrap().replace("_at_", "@");
            assert!(m.insert(key.clone(), pair[1].clone()).is_none(), "MLflow has `{key}` twice at step {step}");
        }
        out.insert(step.parse().unwrap(), m);
    }
    out
}

// ---- the tests ----

#[test]
fn all_three_trackers_mirror_a_run_killed_and_resumed_with_every_step_once() {
    let Some(py) = venv() else { return };
    let cx = TestContext::new();
    tiny_model(&cx.path().join("tiny"));
    let server = MlflowServer::start(&py, cx.path());
    let sinks = format!(
        "log:\n  sinks:\n    wandb: {{mode: offline, project: rlx-tests, tags: [tiny], python: '{}'}}\n    tensorboard: {{}}\n    mlflow: {{tracking_uri: '{}', experiment: resumed}}\n",
        py.display(),
        server.uri
    );
    cx.write("spec.yaml", &spec_with(6, 2, &sinks));

    // Kill rlx hard once the trackers have mirrored step 1 (the checkpoint after it exists, so
    // the resume starts at step 2 or later). W&B's cursor moves only when its run finishes, so
    // TensorBoard's and MLflow's tell; W&B's helper finishes on its own when rlx dies.
    let mut child = rlx(&cx).args(["run", "spec.yaml"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    let dir = loop {
        let dir = std::fs::read_dir(cx.path().join("runs")).ok().and_then(|mut d| d.next()).and_then(Result::ok).map(|e| e.path());
        if let Some(d) = &dir
            && ["tensorboard", "mlflow"].iter().all(|t| cursor_step(d, t).is_some_and(|s| s >= 1))
        {
            break dir.unwrap();
        }
        assert!(Instant::now() < deadline, "the trackers never reached step 1");
        assert!(child.try_wait().unwrap().is_none(), "the run ended before it was killed");
        std::thread::sleep(Duration::from_millis(20));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    let before = lines(&dir.join("metrics.jsonl"));

    let r = run_ok(&cx, &["run", "spec.yaml"]);
    assert!(r.stderr.contains("resuming at step"), "{}", r.stderr);
    assert!(!r.stderr.contains("not mirrored"), "{}", r.stderr);
    let after = lines(&dir.join("metrics.jsonl"));
    assert_eq!(after.keys().copied().collect::<Vec<_>>(), vec![-1, 0, 1, 2, 3, 4, 5]);
    let run_id = dir.file_name().unwrap().to_str().unwrap();

    // W&B: two offline runs (the killed attempt's, the resumed one's) of one W&B run id.
    let runs = wandb_runs(&py, &dir);
    assert_eq!(runs.len(), 2, "one W&B offline run per rlx process");
    let saved: Value = serde_json::from_slice(&std::fs::read(dir.join("sinks/wandb.json")).unwrap()).unwrap();
    for (summary, _) in &runs {
        assert_eq!(summary["run_id"], saved["sink"]["id"], "a resumed rlx run continues the same W&B run");
        assert_eq!(summary["project"], "rlx-tests");
        assert_eq!(summary["name"], run_id);
        assert_eq!(summary["tags"], serde_json::json!(["tiny"]));
        assert_eq!(summary["config"]["grpo"]["group_size"], 3, "the resolved spec is the config");
        assert_eq!(summary["config"]["run_id"], run_id);
    }
    assert_eq!(runs[1].0["exit_code"], 0);
    assert_eq!(runs[1].0["summary"]["rlx/end"], "finished");
    check_steps("W&B", &wandb_steps(&runs), &after, &before);

    // TensorBoard: one event file in the run directory, read by TensorBoard itself.
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with("events.out.tfevents.")).collect();
    assert_eq!(files.len(), 1, "the resumed run appends to the same event file");
    check_steps("TensorBoard", &tb_steps(&py, &dir), &after, &before);

    // MLflow: one run, continued after the resume, with the spec as params.
    let ml = mlflow_runs(&py, &server.uri, "resumed");
    assert_eq!(ml.len(), 1, "{ml:?}");
    assert_eq!(ml[0]["status"], "FINISHED");
    assert_eq!(ml[0]["name"], run_id);
    assert_eq!(ml[0]["params"]["grpo.group_size"], "3");
    assert_eq!(ml[0]["params"]["name"], "tiny");
    assert_eq!(ml[0]["params"]["eval.k"], "[1]");
    check_steps("MLflow", &mlflow_steps(&ml[0]), &after, &before);
}

#[test]
fn rlx_sync_backfills_every_tracker_once() {
    let Some(py) = venv() else { return };
    let cx = TestContext::new();
    tiny_model(&cx.path().join("tiny"));
    cx.write("spec.yaml", &spec_with(2, 2, ""));
    run_ok(&cx, &["run", "spec.yaml"]);
    let dir = the_run(&cx);
    let d = dir.display().to_string();
    let metrics = lines(&dir.join("metrics.jsonl"));
    assert_eq!(metrics.len(), 3);
    let server = MlflowServer::start(&py, cx.path());
    let tb = cx.path().join("tb");
    let py_s = py.display().to_string();
    let tb_s = tb.display().to_string();
    let syncs: [Vec<&str>; 3] = [
        vec!["sync", "tensorboard", &d, "--dir", &tb_s],
        vec!["sync", "mlflow", &d, "--tracking-uri", &server.uri, "--experiment", "backfill"],
        vec!["sync", "wandb", &d, "--mode", "offline", "--python", &py_s],
    ];
    for args in &syncs {
        let r = run_ok(&cx, args);
        assert!(r.stderr.contains("took 3 new lines"), "{args:?}: {}", r.stderr);
    }
    // Again: nothing new, nothing twice.
    for args in &syncs {
        let r = run_ok(&cx, args);
        assert!(r.stderr.contains("took 0 new lines"), "{args:?}: {}", r.stderr);
    }
    let run_id = dir.file_name().unwrap().to_str().unwrap();
    check_steps("TensorBoard", &tb_steps(&py, &tb.join(run_id)), &metrics, &Lines::new());
    let ml = mlflow_runs(&py, &server.uri, "backfill");
    assert_eq!(ml.len(), 1);
    assert_eq!(ml[0]["status"], "FINISHED");
    check_steps("MLflow", &mlflow_steps(&ml[0]), &metrics, &Lines::new());
    // Another destination is a fresh start: it gets every step.
    let r = run_ok(&cx, &["sync", "mlflow", &d, "--tracking-uri", &server.uri, "--experiment", "elsewhere"]);
    assert!(r.stderr.contains("took 3 new lines"), "{}", r.stderr);
    check_steps("MLflow", &mlflow_steps(&mlflow_runs(&py, &server.uri, "elsewhere")[0]), &metrics, &Lines::new());
    let runs = wandb_runs(&py, &dir);
    assert_eq!(runs.len(), 1, "the second sync had nothing to send and started no W&B run");
    assert_eq!(runs[0].0["project"], "tiny", "the spec's name is the default project");
    check_steps("W&B", &wandb_steps(&runs), &metrics, &Lines::new());
}

#[test]
fn trackers_down_or_missing_never_stop_a_run_and_it_says_what_was_not_mirrored() {
    let Some(py) = venv() else { return };
    let cx = TestContext::new();
    tiny_model(&cx.path().join("tiny"));
    // Nothing listens on this port: every MLflow request is refused.
    let down = format!("http://127.0.0.1:{}", free_port());
    let sinks = format!("log:\n  sinks:\n    wandb: {{mode: offline, python: /nonexistent/python3}}\n    tensorboard: {{}}\n    mlflow: {{tracking_uri: '{down}'}}\n");
    cx.write("spec.yaml", &spec_with(2, 2, &sinks));
    let r = run_ok(&cx, &["run", "spec.yaml"]);
    let dir = the_run(&cx);
    let d = format!("runs/{}", dir.file_name().unwrap().to_str().unwrap());
    assert!(r.stderr.contains("warning: W&B: cannot run `/nonexistent/python3` (not found)"), "{}", r.stderr);
    assert!(r.stderr.contains("warning: W&B: steps -1–1 not mirrored"), "{}", r.stderr);
    assert!(r.stderr.contains(&format!("`rlx sync wandb {d}` sends them")), "{}", r.stderr);
    assert!(r.stderr.contains("warning: MLflow: steps -1–1 not mirrored to experiment `tiny`"), "{}", r.stderr);
    assert!(r.stderr.contains("failed after 3 tries"), "{}", r.stderr);
    assert!(r.stderr.contains(&format!("`rlx sync mlflow {d}` sends them")), "{}", r.stderr);
    assert!(!r.stderr.contains("TensorBoard"), "TensorBoard worked: {}", r.stderr);
    let status: Value = serde_json::from_slice(&std::fs::read(dir.join("status.json")).unwrap()).unwrap();
    assert_eq!(status["state"], "finished");
    let metrics = lines(&dir.join("metrics.jsonl"));
    check_steps("TensorBoard", &tb_steps(&py, &dir), &metrics, &Lines::new());

    // A sync while the server is still down says so and exits 3; once it is up, every step goes.
    let r = crate::common::Run::from(rlx(&cx).args(["sync", "mlflow", &d]).output().unwrap());
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stderr.contains("steps -1–1 not mirrored"), "{}", r.stderr);
    let server = MlflowServer::start(&py, cx.path());
    run_ok(&cx, &["sync", "mlflow", &d, "--tracking-uri", &server.uri]);
    let ml = mlflow_runs(&py, &server.uri, "tiny");
    check_steps("MLflow", &mlflow_steps(&ml[0]), &metrics, &Lines::new());
}

#[test]
fn a_python_without_wandb_is_a_warning_at_the_start() {
    let Some(py) = venv() else { return };
    let cx = TestContext::new();
    tiny_model(&cx.path().join("tiny"));
    // A `wandb` module that fails to import, ahead of the real one.
    cx.write("fake/wandb.py", "raise ImportError('no wandb in this test')\n");
    cx.write("spec.yaml", &spec_with(1, 1, &format!("log:\n  sinks:\n    wandb: {{mode: offline, python: '{}'}}\n", py.display())));
    let r = crate::common::Run::from(rlx(&cx).env("PYTHONPATH", cx.path().join("fake")).args(["run", "spec.yaml"]).output().unwrap());
    assert_eq!(r.code, 0, "{}", r.stderr);
    let warning = r.stderr.lines().position(|l| l.contains("cannot import `wandb` (ImportError: no wandb in this test)")).unwrap_or_else(|| panic!("{}", r.stderr));
    let baseline = r.stderr.lines().position(|l| l.starts_with("baseline")).unwrap();
    assert!(warning < baseline, "said at the start, before the baseline evaluation:\n{}", r.stderr);
    assert!(r.stderr.contains("-m pip install wandb"), "{}", r.stderr);
}

#[test]
fn a_killed_wandb_helper_leaves_the_run_going_and_sync_sends_the_rest() {
    let Some(py) = venv() else { return };
    let cx = TestContext::new();
    tiny_model(&cx.path().join("tiny"));
    cx.write("spec.yaml", &spec_with(3, 3, &format!("log:\n  sinks:\n    wandb: {{mode: offline, python: '{}'}}\n", py.display())));
    let mut child = rlx(&cx).args(["run", "spec.yaml"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    // Kill the helper once the baseline is written (whether or not it has logged it yet).
    let deadline = Instant::now() + Duration::from_secs(300);
    let (dir, helper) = loop {
        let dir = std::fs::read_dir(cx.path().join("runs")).ok().and_then(|mut d| d.next()).and_then(Result::ok).map(|e| e.path());
        if let Some(d) = dir.filter(|d| !lines(&d.join("metrics.jsonl")).is_empty())
            && let Some(pid) = helper_pid(&d)
        {
            break (d, pid);
        }
        assert!(Instant::now() < deadline && child.try_wait().unwrap().is_none(), "no helper while the run went");
        std::thread::sleep(Duration::from_millis(10));
    };
    // SAFETY: kill(2) on the helper process this test found by its command line.
    unsafe { libc::kill(helper, libc::SIGKILL) };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("warning: W&B: the W&B helper exited (signal: 9"), "{stderr}");
    // What a killed helper took never reached W&B's file: every step is missing, and said so.
    let d = format!("runs/{}", dir.file_name().unwrap().to_str().unwrap());
    assert!(stderr.contains("W&B: steps -1–2 not mirrored to W&B run"), "{stderr}");
    assert!(stderr.contains(&format!("`rlx sync wandb {d}` sends them")), "{stderr}");
    assert_eq!(cursor_step(&dir, "wandb"), None);

    let r = run_ok(&cx, &["sync", "wandb", &d]);
    assert!(r.stderr.contains("took 4 new lines"), "{}", r.stderr);
    let runs = wandb_runs(&py, &dir);
    let saved: Value = serde_json::from_slice(&std::fs::read(dir.join("sinks/wandb.json")).unwrap()).unwrap();
    let synced = runs.iter().filter(|(s, _)| s["run_id"] == saved["sink"]["id"]).count();
    assert!(synced >= 1, "the sync continued the same W&B run: {saved}");
    check_steps("W&B", &wandb_steps(&runs), &lines(&dir.join("metrics.jsonl")), &Lines::new());
    assert_eq!(cursor_step(&dir, "wandb"), Some(2));
}

/// The pid of the W&B helper working for run directory `dir`, found by its command line.
fn helper_pid(dir: &Path) -> Option<i32> {
    let needle = format!("\"run_dir\":\"{}\"", std::path::absolute(dir).unwrap().display());
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        let cmd = String::from_utf8_lossy(&cmd);
        (cmd.contains("Weights & Biases helper") && cmd.contains(&needle)).then_some(pid)
    })
}

#[test]
fn log_sinks_are_validated_like_the_rest_of_the_spec() {
    let cx = TestContext::new();
    let base = crate::common::MINIMAL;
    cx.write("bad.yaml", &format!("{base}log:\n  sinks:\n    tensorbord: {{}}\n    mlflow: {{tracking_uri: 'file:///x', experimnt: e}}\n    wandb: {{mode: online, tags: ['']}}\n"));
    let r = cx.run(&["validate", "bad.yaml"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    for want in [
        "unknown field `tensorbord` in `log.sinks`",
        "--> bad.yaml:11:5",
        "did you mean `tensorboard`?",
        "unknown field `experimnt` in `log.sinks.mlflow`",
        "did you mean `experiment`?",
        "`log.sinks.mlflow.tracking_uri` must be an http(s) URL, found `file:///x`",
        "a W&B tag has 1 to 64 characters",
    ] {
        assert!(r.stderr.contains(want), "missing `{want}` in:\n{}", r.stderr);
    }
}

#[test]
fn trackers_are_not_part_of_the_run_id() {
    // A tracker is where metrics are copied to, not part of the experiment: adding one to a
    // spec resumes its runs instead of starting new ones.
    let cx = TestContext::new();
    let id = |args: &[&str]| {
        let r = cx.run(args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stdout.lines().chain(r.stderr.lines()).find_map(|l| l.strip_prefix("run ").map(str::to_string)).unwrap_or_else(|| panic!("{}", r.stdout))
    };
    let plain = id(&["validate", "spec.yaml", "--explain"]);
    let with = id(&["validate", "spec.yaml", "log.sinks={tensorboard: {}, wandb: {project: p, mode: offline}, mlflow: {tracking_uri: 'http://127.0.0.1:5000'}}", "--explain"]);
    assert_eq!(plain, with);
    assert!(plain.starts_with("mini-"), "{plain}");
}
