//! CoreWeave Sandbox (Aviato): `rlx sandbox serve --protocol cwsandbox` driven by the official
//! Python client (`cwsandbox==1.22.0`, installed by the test into a cached virtualenv) over real
//! gRPC on 127.0.0.1, and rlx's own client (`sandbox.kind: cwsandbox`) against the same server.

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::json;

use crate::common::{fixture_problems, python_env, repo};

/// The pinned client set (one cached virtualenv).
pub(crate) const SDK_REQUIREMENTS: &[&str] =
    &["cwsandbox==1.22.0", "grpcio==1.85.3", "protobuf==6.33.6", "googleapis-common-protos==1.76.0", "cryptography==50.0.2"];

/// Python with the cwsandbox client, or `None` (after a SKIPPED line) without a package registry.
#[track_caller]
fn sdk_python() -> Option<PathBuf> {
    python_env("cwsandbox", SDK_REQUIREMENTS)
}

/// A running `rlx sandbox serve --protocol cwsandbox` on a free port; killed on drop.
pub(crate) struct CwServer {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub(crate) url: String,
    /// Its stderr lines after the address.
    lines: Arc<Mutex<Vec<String>>>,
}

impl CwServer {
    pub(crate) fn start() -> CwServer {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rlx"))
            .args(["sandbox", "serve", "--protocol", "cwsandbox", "--bind", "127.0.0.1:0", "--concurrency", "2"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rlx sandbox serve starts");
        let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let url = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|l| l.strip_prefix("rlx sandbox listening on ").and_then(|r| r.split_whitespace().next()).map(str::to_owned))
            .expect("the server prints its address");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| sink.lock().unwrap().push(l)));
        CwServer { child, url, lines: seen }
    }
}

impl Drop for CwServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The official client: create (`Sandbox.run` with an image and tags), exec a program (exit
/// codes, stdout, stderr), write files and run a program reading them, read back a file the
/// program wrote, a command past its timeout (`SandboxTimeoutError`, the sandbox still usable),
/// list by tag, stop, and the list empty after. The script raises on any deviation.
#[test]
fn the_official_client_drives_rlx_sandbox_serve() {
    let Some(python) = sdk_python() else { return };
    let server = CwServer::start();
    let out = Command::new(&python)
        .arg(repo().join("tests/fixtures/cwsandbox/drive.py"))
        .env("CWSANDBOX_BASE_URL", &server.url)
        .env("CWSANDBOX_API_KEY", "rlx-test-key")
        .env_remove("WANDB_API_KEY")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the client script failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let seen: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert!(seen["id"].as_str().unwrap().starts_with("rlx-"), "{seen}");
    assert_eq!(seen["read"], "written by the program");
    assert_eq!(seen["timeout"], "SandboxTimeoutError");
    assert_eq!(seen["after_stop"], serde_json::json!([]));
}

impl CwServer {
    /// Stops the server with SIGINT and returns its closing line (`N sandboxes created, M alive`).
    pub(crate) fn stop(mut self) -> String {
        // SAFETY: kill(2) on the child we spawned.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGINT);
        }
        let _ = self.child.wait();
        let lines = self.lines.lock().unwrap();
        lines.iter().find(|l| l.contains("rlx sandbox stopped")).cloned().unwrap_or_else(|| panic!("no closing line in {lines:?}"))
    }
}

fn rlx_grade(cwd: &Path, sandbox: &[&str], completions: &Path, env: &[(&str, &str)]) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rlx"));
    c.current_dir(cwd).env("NO_COLOR", "1");
    for k in ["CWSANDBOX_API_KEY", "AVIATO_API_KEY", "WANDB_API_KEY", "WANDB_ENTITY_NAME", "CWSANDBOX_BASE_URL"] {
        c.env_remove(k);
    }
    c.envs(env.iter().copied())
        .args(["grade", "--no-progress", "--concurrency", "2", "--timeout", "2", "--problems"])
        .arg(fixture_problems())
        .arg("--completions")
        .arg(completions)
        .args(sandbox)
        .output()
        .unwrap()
}

fn verdicts(out: &std::process::Output) -> Vec<serde_json::Value> {
    assert!(out.status.success(), "rlx grade failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// What must agree between two sandboxes: everything but the timings.
fn outcome(v: &serde_json::Value) -> serde_json::Value {
    let tests: Vec<serde_json::Value> = v["tests"].as_array().map(|t| t.iter().map(|t| json!([t["status"], t["got"]])).collect()).unwrap_or_default();
    json!({"status": v["status"], "passed": v["tests_passed"], "total": v["tests_total"], "tests": tests})
}

/// `rlx grade --sandbox cwsandbox` against the local server gives the embedded sandbox's
/// verdicts on the same completions (passing, wrong, crashing, too slow, no code), and every
/// sandbox it created is deleted: the server ends with none alive.
#[test]
fn grading_through_cwsandbox_gives_the_embedded_sandboxs_verdicts() {
    let dir = tempfile::tempdir().unwrap();
    let completions = dir.path().join("c.jsonl");
    let rows = [
        json!({"problem_id": "lcb_rllm/0", "code": "a, b = map(int, input().split())\nprint(-(-a // b))"}),
        json!({"problem_id": "lcb_rllm/0", "code": "print(4)"}),
        json!({"problem_id": "lcb_rllm/0", "code": "raise ValueError('no')"}),
        json!({"problem_id": "lcb_rllm/0", "code": "while True:\n    pass"}),
        json!({"problem_id": "lcb_rllm/0", "completion": "no code here"}),
    ];
    std::fs::write(&completions, rows.iter().map(|r| r.to_string() + "\n").collect::<String>()).unwrap();
    let local = verdicts(&rlx_grade(dir.path(), &["--sandbox", "local"], &completions, &[("RLX_SANDBOX_NAMESPACES", "0")]));
    let server = CwServer::start();
    let remote = verdicts(&rlx_grade(dir.path(), &["--sandbox", "cwsandbox", "--cwsandbox-url", server.url.as_str()], &completions, &[("CWSANDBOX_API_KEY", "rlx-test-key")]));
    let closing = server.stop();
    let statuses: Vec<&str> = local.iter().map(|v| v["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["passed", "failed", "failed", "failed", "format_error"]);
    assert_eq!(local[3]["tests"][0]["status"], "timeout");
    assert_eq!(local.iter().map(outcome).collect::<Vec<_>>(), remote.iter().map(outcome).collect::<Vec<_>>(), "local:\n{local:?}\nremote:\n{remote:?}");
    // Four programs graded, one sandbox each; the format error never reached a sandbox.
    assert!(closing.contains("4 sandboxes created, 0 alive"), "{closing}");
}

/// No credentials: exit code 2, naming every variable that would do.
#[test]
fn a_missing_key_exits_2_naming_the_variables() {
    let dir = tempfile::tempdir().unwrap();
    let completions = dir.path().join("c.jsonl");
    std::fs::write(&completions, "{\"problem_id\": \"lcb_rllm/0\", \"code\": \"print(1)\"}\n").unwrap();
    let out = rlx_grade(dir.path(), &["--sandbox", "cwsandbox", "--cwsandbox-url", "http://127.0.0.1:9"], &completions, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for v in ["CWSANDBOX_API_KEY", "AVIATO_API_KEY", "WANDB_API_KEY"] {
        assert!(stderr.contains(v), "{v} not named: {stderr}");
    }
}

/// An endpoint where nothing listens fails at once (before any grading), naming the URL; the key
/// never appears in the output.
#[test]
fn an_unreachable_endpoint_fails_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let completions = dir.path().join("c.jsonl");
    std::fs::write(&completions, "{\"problem_id\": \"lcb_rllm/0\", \"code\": \"print(1)\"}\n").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}");
    let out = rlx_grade(dir.path(), &["--sandbox", "cwsandbox", "--cwsandbox-url", url.as_str()], &completions, &[("CWSANDBOX_API_KEY", "secret-key-123")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&url), "{stderr}");
    assert!(!stderr.contains("secret-key-123") && !String::from_utf8_lossy(&out.stdout).contains("secret-key-123"));
}
