//! The `bash` tool (`rollout.tools: [bash]`, issue 52) on rlx's own CoreWeave-protocol server
//! (`rlx sandbox serve --protocol cwsandbox` on 127.0.0.1, with an API key): a scripted model
//! whose trajectories write a file in one call and read it in the next, each in its own sandbox
//! (neither sees the other's file); a command that hangs is a tool error the model sees, and the
//! sandbox stays usable; a trajectory's sandbox is deleted when it ends, while others still run;
//! the server killed inside a command is an infrastructure error (the group dropped, nothing
//! scored); validation refuses `bash` without a remote sandbox.
//!
//! The runs are child processes (`bash_tool::child`, ignored on its own), so that the client's
//! credentials are in their environment from the start rather than set in this shared process.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rlx::backend::Policy;
use rlx::engine::{self, PolicySource};
use rlx::seam::StopReason;
use serde_json::{Value, json};

use crate::common::{TestContext, jsonl};
use crate::cwsandbox::{CwServer, listed};
use crate::fakes::{Call, Problems, Recorder, Scripted};
use crate::tools::path;

/// The key the server requires and the runs send.
const KEY: &str = "rlx-test-key";

/// The environment variables that make [`child`] run: its directory and its script.
const DIR_VAR: &str = "RLX_BASH_TOOL_DIR";
const SCRIPT_VAR: &str = "RLX_BASH_TOOL_SCRIPT";

/// A `bash` call in the Hermes format.
fn bash(command: &str) -> String {
    format!("<tool_call>\n{}\n</tool_call>", json!({"name": "bash", "arguments": {"command": command}}))
}

/// A server on 127.0.0.1 that requires [`KEY`].
fn server() -> CwServer {
    CwServer::start_with("127.0.0.1:0", &[("RLX_SANDBOX_API_KEY", KEY)])
}

/// The tool tests' spec (one problem × 2 samples, one step, `limits`) with `bash` alone, on the
/// server at `url`, one infrastructure retry.
fn spec(cx: &TestContext, url: &str, limits: &str) {
    let text = std::fs::read_to_string(crate::tools::spec(cx, 2, limits)).unwrap();
    let text = text
        .replace("sandbox: {kind: local, strict: false}", &format!("sandbox: {{kind: cwsandbox, cwsandbox: {{base_url: \"{url}\"}}}}"))
        .replace("  tools: [check_solution, python]", "  infra_retries: 1\n  tools: [bash]");
    assert!(text.contains("tools: [bash]") && text.contains("kind: cwsandbox"), "{text}");
    cx.write("spec.yaml", &text);
}

/// Starts [`child`] on `cx`'s spec with `script`.
fn spawn_child(cx: &TestContext, script: &str) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "bash_tool::child", "--ignored", "--test-threads", "1", "--nocapture"])
        .env(DIR_VAR, cx.path())
        .env(SCRIPT_VAR, script)
        .env("CWSANDBOX_API_KEY", KEY)
        .env_remove("CWSANDBOX_BASE_URL")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Sandboxes alive on the server at `url`, asked from a thread of its own (the sampler calling
/// this runs on the engine's runtime, which must not block on another).
fn alive(url: &str) -> usize {
    let url = url.to_owned();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        listed(&rt, &url).len()
    })
    .join()
    .unwrap()
}

/// Both trajectories write `f.txt` (their own content) and a marker, then read them back; path 0
/// answers; path 1 runs a command that hangs, reads its file again (the sandbox survived the
/// timeout) after recording how many sandboxes are alive (path 0's has ended), then answers.
fn files(dir: &Path) -> impl Fn(&Problems, &Call) -> (String, StopReason) + Send + Sync + 'static {
    let (url, seen) = (std::fs::read_to_string(dir.join("url")).unwrap(), dir.join("alive_at_path_1_turn_4"));
    move |p, c| {
        let answer = format!("```python\n{}\n```", p.rows[c.problem].solution);
        let text = match path(c) {
            (k, 1) => format!("PATH={k}\n{}", bash(&format!("echo hi{k} > f.txt && touch /mark{k}"))),
            (_, 2) => bash("cat f.txt; ls / | grep mark"),
            (0, _) | (_, 5) => answer,
            (_, 3) => bash("sleep 60"),
            _ => {
                std::fs::write(&seen, alive(&url).to_string()).unwrap();
                bash("cat f.txt")
            }
        };
        (text, StopReason::Stop)
    }
}

/// Every trajectory runs a long command; the sampler writes `in_tool` as it hands the first one
/// over, for the parent to kill the server inside it.
fn outage(dir: &Path) -> impl Fn(&Problems, &Call) -> (String, StopReason) + Send + Sync + 'static {
    let marker = dir.join("in_tool");
    move |p, c| {
        if c.prompt.contains("<tool_response>") {
            return (format!("```python\n{}\n```", p.rows[c.problem].solution), StopReason::Stop);
        }
        let _ = std::fs::write(&marker, "");
        (bash("sleep 20 && echo done"), StopReason::Stop)
    }
}

/// The run [`bash_keeps_a_trajectorys_files_in_its_own_sandbox_until_it_ends`] and
/// [`a_server_killed_inside_a_command_is_an_infrastructure_error`] start as a process of their
/// own; writes the outcome to `outcome`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of the bash tool tests"]
async fn child() {
    let Some(dir) = std::env::var_os(DIR_VAR).map(PathBuf::from) else { return };
    let plan = rlx::plan::plan(&dir.join("spec.yaml"), &[]).unwrap();
    let scripted = match std::env::var(SCRIPT_VAR).unwrap().as_str() {
        "files" => Scripted::new_in(&dir, false, files(&dir)),
        _ => Scripted::new_in(&dir, false, outage(&dir)),
    };
    let trainer = Arc::new(Recorder::new(Arc::new(scripted)));
    let outcome = engine::run(&plan, PolicySource::Given(Policy::Trainable(trainer)), &engine::StopSignal::default(), &|_| {}).await;
    let said = match outcome {
        Ok(o) => format!("{o:?}"),
        Err(e) => format!("error: {e}"),
    };
    std::fs::write(dir.join("outcome"), said).unwrap();
}

/// The finished child's outcome line, its output shown if it failed.
fn outcome(cx: &TestContext, child: std::process::Child) -> String {
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the child run failed:\n{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    std::fs::read_to_string(cx.path().join("outcome")).unwrap()
}

/// The one output of a turn's one call.
fn output(r: &Value, turn: usize) -> &str {
    r["turns"][turn]["calls"][0]["output"].as_str().unwrap_or_else(|| panic!("turn {turn} ran no call: {r}"))
}

#[test]
fn bash_keeps_a_trajectorys_files_in_its_own_sandbox_until_it_ends() {
    let cx = TestContext::new();
    let server = server();
    spec(&cx, &server.url, "{max_turns: 5, tool_timeout_s: 2}");
    cx.write("url", &server.url);
    let said = outcome(&cx, spawn_child(&cx, "files"));
    assert_eq!(said, "Finished { steps: 1 }");
    let dir = crate::common::only_run(&cx);
    let rollouts = jsonl(&dir.join("rollouts.jsonl"));
    let by_path = |k: usize| rollouts.iter().find(|r| r["turns"][0]["text"].as_str().unwrap().starts_with(&format!("PATH={k}"))).unwrap();
    for k in 0..2 {
        let r = by_path(k);
        assert_eq!((r["stop"].as_str(), r["status"].as_str()), (Some("completed"), Some("passed")), "{r}");
        assert_eq!(r["turns"][0]["calls"][0]["name"], "bash");
        assert_eq!(output(r, 0), "exit code: 0\nstdout:\n\nstderr:\n", "{r}");
        // Its own file and marker, and not the other trajectory's: one sandbox each.
        assert_eq!(output(r, 1), format!("exit code: 0\nstdout:\nhi{k}\nmark{k}\n\nstderr:\n"), "{r}");
    }
    let hung = by_path(1);
    assert_eq!(hung["turns"][2]["calls"][0]["error"], true, "{hung}");
    assert!(output(hung, 2).starts_with("status: timed out"), "the model sees the timeout: {hung}");
    assert_eq!(output(hung, 3), "exit code: 0\nstdout:\nhi1\n\nstderr:\n", "the sandbox outlived the timeout, files and all: {hung}");
    // While path 1 ran on, path 0's trajectory had ended and its sandbox was gone.
    assert_eq!(std::fs::read_to_string(cx.path().join("alive_at_path_1_turn_4")).unwrap(), "1");
    let m = &jsonl(&dir.join("metrics.jsonl"))[0];
    assert!((m["train/tool_error_rate"].as_f64().unwrap() - 1.0 / 6.0).abs() < 1e-9, "one of six calls timed out: {m}");
    // The preflight's, a sandbox per trajectory (not per call) and one per graded answer; none
    // left.
    let closing = server.stop();
    assert!(closing.contains("5 sandboxes created, 0 alive"), "{closing}");
}

#[test]
fn a_server_killed_inside_a_command_is_an_infrastructure_error() {
    use std::time::{Duration, Instant};
    let cx = TestContext::new();
    let server = server();
    spec(&cx, &server.url, "{max_turns: 2, tool_timeout_s: 30}");
    let child = spawn_child(&cx, "outage");
    let deadline = Instant::now() + Duration::from_secs(300);
    while !cx.path().join("in_tool").exists() || alive(&server.url) < 2 {
        assert!(Instant::now() < deadline, "no bash call reached its sandbox");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Both trajectories' sandboxes exist; their commands have 20 s to run and start within a
    // second.
    std::thread::sleep(Duration::from_secs(1));
    drop(server);
    let said = outcome(&cx, child);
    assert!(said.contains("all 1 groups were dropped after sandbox infrastructure errors") && said.contains("Exec at"), "{said}");
    let dir = crate::common::only_run(&cx);
    assert!(!dir.join("rollouts.jsonl").exists() || jsonl(&dir.join("rollouts.jsonl")).is_empty(), "nothing was scored for the outage");
}

#[test]
fn bash_without_a_remote_sandbox_is_refused_at_validate() {
    let cx = TestContext::new();
    spec(&cx, "http://127.0.0.1:9", "{max_turns: 2}");
    for kind in ["local", "fusion"] {
        let r = cx.run(&["validate", "spec.yaml", &format!("sandbox.kind={kind}")]);
        assert_eq!(r.code, 2, "{}\n{}", r.stdout, r.stderr);
        assert!(r.stderr.contains(&format!("`rollout.tools` lists `bash`, which needs a remote sandbox, but `sandbox.kind` is `{kind}`")), "{}", r.stderr);
        assert!(r.stderr.contains("spec.yaml:") && r.stderr.contains("help: set `sandbox.kind: cwsandbox`"), "located, with a hint: {}", r.stderr);
    }
    let r = cx.run(&["validate", "spec.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}
