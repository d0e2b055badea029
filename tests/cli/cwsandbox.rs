//! CoreWeave Sandbox (Aviato): `rlx sandbox serve --protocol cwsandbox` driven by the official
//! Python client (`cwsandbox==1.22.0`, installed by the test into a cached virtualenv) over real
//! gRPC on 127.0.0.1, and rlx's own client (`sandbox.kind: cwsandbox`) against the same server:
//! verdicts per rollout and per worker, reuse without shared files, sandboxes slow to start or
//! never starting, and `rlx run` on the shipped multi-attempt experiment killed with SIGKILL or
//! losing its sandbox server mid-run, then resumed.

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
        CwServer::start_with("127.0.0.1:0", &[])
    }

    /// A server on `bind` with `env` (the test-only `RLX_CWSANDBOX_PENDING_S`).
    pub(crate) fn start_with(bind: &str, env: &[(&str, &str)]) -> CwServer {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rlx"))
            .args(["sandbox", "serve", "--protocol", "cwsandbox", "--bind", bind, "--concurrency", "2"])
            .envs(env.iter().copied())
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

/// Runs `tests/fixtures/cwsandbox/SCRIPT` with the official client against `server`; the JSON
/// line it printed last.
fn run_script(python: &Path, server: &CwServer, script: &str) -> serde_json::Value {
    let out = Command::new(python)
        .arg(repo().join("tests/fixtures/cwsandbox").join(script))
        .env("CWSANDBOX_BASE_URL", &server.url)
        .env("CWSANDBOX_API_KEY", "rlx-test-key")
        .env_remove("WANDB_API_KEY")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the client script failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

/// The official client: create (`Sandbox.run` with an image and tags), exec a program (exit
/// codes, stdout, stderr), write files and run a program reading them, read back a file the
/// program wrote, a command past its timeout (`SandboxTimeoutError`, the sandbox still usable),
/// list by tag, stop, and the list empty after. The script raises on any deviation.
#[test]
fn the_official_client_drives_rlx_sandbox_serve() {
    let Some(python) = sdk_python() else { return };
    let server = CwServer::start();
    let seen = run_script(&python, &server, "drive.py");
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
        // The reader thread may not have taken the last line yet.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let lines = self.lines.lock().unwrap();
            if let Some(l) = lines.iter().find(|l| l.contains("rlx sandbox stopped")) {
                return l.clone();
            }
            assert!(std::time::Instant::now() < deadline, "no closing line in {lines:?}");
            drop(lines);
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// Sandboxes of `server` carrying the tag `rlx` and not ended, through rlx's own client.
pub(crate) fn listed(rt: &tokio::runtime::Runtime, url: &str) -> Vec<String> {
    use rlx::sandbox::remote::RemoteSandboxes as _;
    let auth = rlx::sandbox::cwsandbox::client::credentials(|k| (k == "CWSANDBOX_API_KEY").then(|| "rlx-test-key".to_owned())).unwrap();
    let client = rlx::sandbox::cwsandbox::client::CwClient::new(url, auth).unwrap();
    rt.block_on(client.list_tagged("rlx")).unwrap()
}

fn rlx_grade(cwd: &Path, sandbox: &[&str], completions: &Path, env: &[(&str, &str)]) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rlx"));
    c.current_dir(cwd).env("NO_COLOR", "1");
    for k in ["CWSANDBOX_API_KEY", "AVIATO_API_KEY", "WANDB_API_KEY", "WANDB_ENTITY_NAME", "CWSANDBOX_BASE_URL"] {
        c.env_remove(k);
    }
    c.envs(env.iter().copied()).args(["grade", "--no-progress", "--timeout", "2"]);
    if !sandbox.contains(&"--concurrency") {
        c.args(["--concurrency", "2"]);
    }
    c.arg("--problems")
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
    // Reused per worker: two sandboxes (the completions graded at once) for the four programs.
    let server = CwServer::start();
    let url = server.url.clone();
    let reused = verdicts(&rlx_grade(dir.path(), &["--sandbox", "cwsandbox", "--cwsandbox-url", &url, "--cwsandbox-reuse", "per-worker"], &completions, &[("CWSANDBOX_API_KEY", "rlx-test-key")]));
    let reused_closing = server.stop();
    assert!(reused_closing.contains("2 sandboxes created, 0 alive"), "{reused_closing}");
    assert_eq!(local.iter().map(outcome).collect::<Vec<_>>(), reused.iter().map(outcome).collect::<Vec<_>>(), "local:\n{local:?}\nreused:\n{reused:?}");
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

/// Reused per worker, one sandbox grades every completion, and no completion sees another's
/// files: each program looks for the marker files the other writes (in its working directory
/// and the one above) before writing its own, and answers wrongly if it finds one.
#[test]
fn a_reused_sandbox_shows_no_completion_the_files_of_the_one_before() {
    let dir = tempfile::tempdir().unwrap();
    let completions = dir.path().join("c.jsonl");
    let program = |mine: &str, theirs: &str| {
        format!(
            "import os\nseen = [p for p in ('{theirs}', '../{theirs}') if os.path.exists(p)]\nfor p in ('{mine}', '../{mine}'):\n    open(p, 'w').write('x')\na, b = map(int, input().split())\nprint(seen if seen else -(-a // b))\n"
        )
    };
    let rows = [json!({"problem_id": "lcb_rllm/0", "code": program("a.mark", "b.mark")}), json!({"problem_id": "lcb_rllm/0", "code": program("b.mark", "a.mark")})];
    std::fs::write(&completions, rows.iter().map(|r| r.to_string() + "\n").collect::<String>()).unwrap();
    let server = CwServer::start();
    let url = server.url.clone();
    let out = rlx_grade(dir.path(), &["--sandbox", "cwsandbox", "--cwsandbox-url", &url, "--cwsandbox-reuse", "per-worker", "--concurrency", "1"], &completions, &[("CWSANDBOX_API_KEY", "rlx-test-key")]);
    let closing = server.stop();
    let v = verdicts(&out);
    assert!(v.iter().all(|v| v["status"] == "passed"), "a program saw the other's files: {v:?}");
    assert!(closing.contains("1 sandboxes created, 0 alive"), "one sandbox, reused, stopped at the end: {closing}");
}

/// A sandbox that stays PENDING (the server's test-only `RLX_CWSANDBOX_PENDING_S`) past
/// `--cwsandbox-ready-timeout` is an infrastructure error naming the timeout, never a failed
/// test (exit code 3), and the client deletes it; one that starts within the timeout grades.
#[test]
fn a_sandbox_that_never_becomes_running_is_an_infrastructure_error_with_a_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let completions = dir.path().join("c.jsonl");
    std::fs::write(&completions, "{\"problem_id\": \"lcb_rllm/0\", \"code\": \"a, b = map(int, input().split())\\nprint(-(-a // b))\"}\n").unwrap();
    let key = [("CWSANDBOX_API_KEY", "rlx-test-key")];
    let never = CwServer::start_with("127.0.0.1:0", &[("RLX_CWSANDBOX_PENDING_S", "inf")]);
    let url = never.url.clone();
    let out = rlx_grade(dir.path(), &["--sandbox", "cwsandbox", "--cwsandbox-url", &url, "--cwsandbox-ready-timeout", "1", "--infra-retries", "1"], &completions, &key);
    let closing = never.stop();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let v: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(v[0]["status"], "infra_error", "{v:?}");
    let error = v[0]["error"].as_str().unwrap();
    assert!(error.contains("did not become RUNNING within 1s") && error.contains(&url), "{error}");
    // Graded twice (one retry), each time in a sandbox that was then deleted.
    assert!(closing.contains("2 sandboxes created, 0 alive"), "{closing}");

    let slow = CwServer::start_with("127.0.0.1:0", &[("RLX_CWSANDBOX_PENDING_S", "1.5")]);
    let url = slow.url.clone();
    let v = verdicts(&rlx_grade(dir.path(), &["--sandbox", "cwsandbox", "--cwsandbox-url", &url, "--cwsandbox-ready-timeout", "60"], &completions, &key));
    let closing = slow.stop();
    assert_eq!(v[0]["status"], "passed", "{v:?}");
    assert!(closing.contains("1 sandboxes created, 0 alive"), "{closing}");
}

/// The multi-attempt experiment as shipped (`experiments/mbpp-multistep-offline.yaml`), graded
/// through `sandbox.kind: cwsandbox`, sampled from an OpenAI-compatible server written here (a
/// dry run: that backend samples only). The server answers each problem with its reference
/// solution, except a first attempt on every other problem that prints instead (wrong, so it
/// gets the feedback turn); with `slow` set, every answer sleeps past the test timeout first.
struct MultistepRun {
    cx: crate::common::TestContext,
    rt: tokio::runtime::Runtime,
    _sampler: crate::openai::Server,
    slow: Arc<std::sync::atomic::AtomicBool>,
    args: Vec<String>,
}

impl MultistepRun {
    fn new(sandbox_url: &str, max_steps: u32, reuse: &str) -> MultistepRun {
        use crate::openai::{completion, models, serve, tokenizer};
        let cx = crate::common::TestContext::new();
        crate::engine::tiny_model(&cx.path().join("tiny"));
        let mut problems: Vec<(String, String)> = vec![];
        for line in std::fs::read_to_string(repo().join("experiments/data/easy_python_train.jsonl")).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            problems.push((v["text"].as_str().unwrap().to_owned(), v["code"].as_str().unwrap().to_owned()));
        }
        let slow = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let rt = tokio::runtime::Runtime::new().unwrap();
        let (tok, is_slow) = (tokenizer(), slow.clone());
        let sampler = rt.block_on(serve(Arc::new(move |path: &str, body: &serde_json::Value| {
            if path == "/v1/models" {
                return models("llamacpp");
            }
            let ids: Vec<u32> = body["prompt"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
            let prompt = tok.decode(&ids, false).unwrap();
            let text = match problems.iter().enumerate().find(|(_, (text, _))| prompt.contains(text.as_str())) {
                _ if is_slow.load(std::sync::atomic::Ordering::SeqCst) => "```python\nimport time\ntime.sleep(30)\n```".to_owned(),
                Some((i, _)) if i % 2 == 1 && !prompt.contains("did not pass the tests") => "```python\nprint('not yet')\n```".to_owned(),
                Some((_, (_, code))) => format!("```python\n{code}\n```"),
                None => "I cannot tell which problem this is.".to_owned(),
            };
            completion(&tok, &text, ids.len(), "stop")
        })));
        let backend = format!("backend={{kind: openai, base_url: \"{}\", served_model: m, max_retries: 1}}", sampler.url());
        let spec = repo().join("experiments/mbpp-multistep-offline.yaml").display().to_string();
        let args = vec![
            "run".to_owned(),
            spec,
            "--dry-run".to_owned(),
            format!("model.base={}", cx.path().join("tiny").display()),
            backend,
            "sandbox.kind=cwsandbox".to_owned(),
            format!("sandbox.cwsandbox.base_url={sandbox_url}"),
            format!("sandbox.cwsandbox.reuse={reuse}"),
            format!("schedule.max_steps={max_steps}"),
            "grpo.group_size=2".to_owned(),
            "sampling.max_tokens=400".to_owned(),
            "data.eval=[]".to_owned(),
        ];
        MultistepRun { cx, rt, _sampler: sampler, slow, args }
    }

    fn command(&self) -> Command {
        let mut c = self.cx.rlx();
        c.env("CWSANDBOX_API_KEY", "rlx-test-key").env_remove("CWSANDBOX_BASE_URL");
        c
    }

    fn spawn(&self) -> Child {
        self.command().args(&self.args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap()
    }

    fn resume(&self) -> crate::common::Run {
        let dir = crate::common::only_run(&self.cx);
        crate::common::Run::from(self.command().args(["run", "--resume", dir.to_str().unwrap()]).output().unwrap())
    }

    /// Rollout records so far.
    fn rollouts(&self) -> Vec<serde_json::Value> {
        std::fs::read_dir(self.cx.path().join("runs")).ok().and_then(|mut d| d.next()).and_then(|e| e.ok()).map(|e| crate::common::jsonl(&e.path().join("rollouts.jsonl"))).unwrap_or_default()
    }

    fn wait_for(&self, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "gave up waiting for {what}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The finished run: every step once, four problems each, every rollout graded (none an
    /// infrastructure error), and the multi-attempt feedback taken.
    fn assert_finished(&self, steps: u32) {
        let dir = crate::common::only_run(&self.cx);
        let status: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("status.json")).unwrap()).unwrap();
        assert_eq!((status["state"].as_str(), status["steps_done"].as_u64()), (Some("finished"), Some(u64::from(steps))), "{status}");
        let rollouts = crate::common::jsonl(&dir.join("rollouts.jsonl"));
        let per_step: std::collections::BTreeMap<i64, usize> = rollouts.iter().fold(Default::default(), |mut m, r| {
            *m.entry(r["step"].as_i64().unwrap()).or_default() += 1;
            m
        });
        assert_eq!(per_step.into_iter().collect::<Vec<_>>(), (0..i64::from(steps)).map(|s| (s, 8)).collect::<Vec<_>>(), "4 problems x 2 samples per step");
        assert!(rollouts.iter().all(|r| r["status"] == "passed"), "every answer is right by its second attempt: {rollouts:?}");
        assert!(rollouts.iter().any(|r| r["attempts"] == 2), "the wrong first attempts got feedback");
    }
}

/// `rlx run` killed with SIGKILL while its sandboxes grade: they are left on the server (the run
/// had no chance to stop them); `rlx run --resume` finds them by the run's tag and stops them,
/// runs to the end, and the server ends with none alive.
#[test]
#[allow(clippy::print_stderr)] // the lifecycle counts docs/sandbox.md quotes, shown with --nocapture
fn a_killed_run_leaves_sandboxes_that_the_resume_stops() {
    let server = CwServer::start();
    let run = MultistepRun::new(&server.url, 3, "per_rollout");
    let mut child = run.spawn();
    run.wait_for("step 0's rollouts", || !run.rollouts().is_empty());
    // From now on every answer runs past the 2 s test timeout: sandboxes stay alive a while.
    run.slow.store(true, std::sync::atomic::Ordering::SeqCst);
    run.wait_for("a sandbox alive mid-step", || !listed(&run.rt, &server.url).is_empty());
    child.kill().unwrap();
    child.wait().unwrap();
    let leftovers = listed(&run.rt, &server.url);
    assert!(!leftovers.is_empty(), "the killed run left its sandboxes");
    run.slow.store(false, std::sync::atomic::Ordering::SeqCst);
    let r = run.resume();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains(&format!("stopped {} sandbox(es) tagged `rlx-job-", leftovers.len())), "{}", r.stderr);
    run.assert_finished(3);
    assert!(listed(&run.rt, &server.url).is_empty());
    let closing = server.stop();
    // Per rollout, a sandbox per attempt with code: the count per step, for docs/sandbox.md.
    let mut per_step = std::collections::BTreeMap::<i64, u64>::new();
    for r in run.rollouts() {
        *per_step.entry(r["step"].as_i64().unwrap()).or_default() += r["attempts"].as_u64().unwrap();
    }
    eprintln!("lifecycle (kill and resume, per rollout): {} left by the kill; attempts per step {per_step:?}; {closing}", leftovers.len());
    assert!(closing.contains(" 0 alive,"), "{closing}");
}

/// The sandbox server goes away mid-run: the run stops (exit code 3) naming its URL, no rollout
/// is recorded as failed for it, and the resume against the restarted server finishes. Reused
/// per worker: the kept sandboxes are stopped at the end.
#[test]
#[allow(clippy::print_stderr)] // the lifecycle counts docs/sandbox.md quotes, shown with --nocapture
fn a_server_that_goes_away_stops_the_run_naming_it_and_the_resume_finishes() {
    let server = CwServer::start();
    let bind = server.url.strip_prefix("http://").unwrap().to_owned();
    let run = MultistepRun::new(&server.url, 4, "per_worker");
    let child = run.spawn();
    run.wait_for("step 0's rollouts", || !run.rollouts().is_empty());
    drop(server);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains(&format!("http://{bind}")) && stderr.contains("infrastructure"), "{stderr}");
    let recorded = run.rollouts();
    assert!(!recorded.is_empty() && recorded.iter().all(|r| r["status"] == "passed"), "nothing scored for the outage: {recorded:?}");

    let server = CwServer::start_with(&bind, &[]);
    let r = run.resume();
    assert_eq!(r.code, 0, "{}", r.stderr);
    run.assert_finished(4);
    let closing = server.stop();
    eprintln!("lifecycle (outage and resume, per worker): {closing}");
    assert!(closing.contains(" 0 alive,"), "{closing}");
}

/// The official client, on a sandbox that must behave like a container: a file written at
/// `/tmp/data.txt` is read there by a Python program, which writes `/work/out.txt`; a shell
/// reads both and writes `/tmp/both.txt` and `/tmp/x.txt` (on 44267e1: `FileNotFoundError`, then
/// "Read-only file system"); `read_file` returns what they wrote; the system directories stay
/// read-only; an image other than the server's Python is refused at creation, naming it.
#[test]
fn the_official_client_sees_one_filesystem_across_programs_shells_and_files() {
    let Some(python) = sdk_python() else { return };
    let server = CwServer::start();
    let seen = run_script(&python, &server, "container.py");
    assert_eq!(seen["program"], json!([0, "['data.txt']\n", ""]), "{seen}");
    assert_eq!(seen["shell"], json!([0, "HELLO\n", ""]), "{seen}");
    assert_eq!(seen["both"], "HELLOhello");
    assert_eq!(seen["x"], "hi\n");
    assert_ne!(seen["read_only"][0], 0, "{seen}");
    assert!(seen["read_only"][1].as_str().unwrap().contains("Read-only file system"), "{seen}");
    let node = seen["node"].as_str().unwrap();
    assert!(node.contains("node:20") && node.contains("cannot be provided") && node.contains("python:3.11"), "{node}");
    let closing = server.stop();
    assert!(closing.contains("1 sandboxes created, 0 alive"), "{closing}");
}

/// An in-process server over a sandbox with persistent roots, with `options`; dropped, it stops.
struct InProcess {
    rt: tokio::runtime::Runtime,
    url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    roots: PathBuf,
}

impl InProcess {
    fn start(options: rlx::sandbox::cwsandbox::server::ServeOptions) -> InProcess {
        use rlx::sandbox::local::{LocalConfig, LocalSandbox};
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (url, roots) = rt.block_on(async {
            let sandbox = LocalSandbox::start(LocalConfig { workers: 1, persistent_roots: true, ..LocalConfig::default() }).await.expect("sandbox starts");
            let roots = sandbox.roots_dir().expect("persistent roots need the mount namespace").to_path_buf();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}", listener.local_addr().unwrap());
            tokio::spawn(rlx::sandbox::cwsandbox::server::serve(listener, sandbox, options, async {
                let _ = stopped.await;
            }));
            (url, roots)
        });
        InProcess { rt, url, stop: Some(stop), roots }
    }

    fn client(&self, key: &str) -> rlx::sandbox::cwsandbox::client::CwClient {
        let auth = rlx::sandbox::cwsandbox::client::credentials(|k| (k == "CWSANDBOX_API_KEY").then(|| key.to_owned())).unwrap();
        rlx::sandbox::cwsandbox::client::CwClient::new(&self.url, auth).unwrap()
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        let _ = self.stop.take().map(|s| s.send(()));
    }
}

fn create_spec(image: &str) -> rlx::sandbox::remote::CreateSpec {
    use std::time::Duration;
    rlx::sandbox::remote::CreateSpec {
        image: image.into(),
        tags: vec!["rlx".into()],
        cpu: None,
        memory_mb: 512,
        max_lifetime: Duration::from_secs(600),
        ready_timeout: Duration::from_secs(10),
    }
}

/// Two clients of one server, with different keys: the second cannot get, list, exec in, read,
/// write or delete the first's sandbox (each `NOT_FOUND`, as for a sandbox that does not exist;
/// on 44267e1 it read the victim's `expected.json`); ids are random, not a sequence.
#[test]
fn a_client_cannot_reach_another_clients_sandbox() {
    use rlx::sandbox::remote::RemoteSandboxes as _;
    let server = InProcess::start(Default::default());
    let (victim, attacker) = (server.client("victim-key"), server.client("attacker-key"));
    let rt = &server.rt;
    let id = rt.block_on(victim.create(&create_spec("python:3.11"))).unwrap();
    let other = rt.block_on(victim.create(&create_spec("python:3.11"))).unwrap();
    for i in [&id, &other] {
        assert!(i.len() == 20 && i.starts_with("rlx-") && i[4..].chars().all(|c| c.is_ascii_hexdigit()), "{i}");
    }
    assert_ne!(id[..12], other[..12], "ids share a prefix: {id} {other}");
    rt.block_on(victim.write_file(&id, "/tmp/expected.json", b"[42]".to_vec())).unwrap();
    let argv = |s: &str| vec!["python".to_owned(), "-c".to_owned(), s.to_owned()];
    let timeout = std::time::Duration::from_secs(20);
    let not_found = |r: Result<String, rlx::sandbox::Error>| {
        let e = r.expect_err("the attacker reached the victim's sandbox").to_string();
        assert!(e.contains("NOT_FOUND"), "{e}");
    };
    not_found(rt.block_on(attacker.read_file(&id, "/tmp/expected.json")).map(|b| String::from_utf8_lossy(&b).into_owned()));
    not_found(rt.block_on(attacker.exec(&id, &argv("print(open('/tmp/expected.json').read())"), timeout)).map(|e| String::from_utf8_lossy(&e.stdout).into_owned()));
    not_found(rt.block_on(attacker.write_file(&id, "/tmp/expected.json", b"[0]".to_vec())).map(|()| String::new()));
    assert_eq!(rt.block_on(attacker.list_tagged("rlx")).unwrap(), Vec::<String>::new());
    // `stop` takes a missing sandbox as stopped; the victim's must still be there, untouched.
    rt.block_on(attacker.stop(&id)).unwrap();
    let mut mine = rt.block_on(victim.list_tagged("rlx")).unwrap();
    mine.sort();
    let mut want = vec![id.clone(), other.clone()];
    want.sort();
    assert_eq!(mine, want);
    let out = rt.block_on(victim.exec(&id, &argv("print(open('/tmp/expected.json').read())"), timeout)).unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "[42]\n", "{}", String::from_utf8_lossy(&out.stderr));
    // The files are on disk under the sandbox's root, and go with it.
    assert_eq!(std::fs::read(server.roots.join(&id).join("tmp/expected.json")).unwrap(), b"[42]");
    rt.block_on(victim.stop(&id)).unwrap();
    assert!(!server.roots.join(&id).exists(), "the stopped sandbox's files are still on disk");
}

/// With a server key, a request without it (or with another) is `UNAUTHENTICATED`; the caps on
/// live sandboxes per key, on a sandbox's files (written, or left by a command, which ends the
/// sandbox) and the image refusal each answer with a status naming the limit.
#[test]
fn the_server_key_and_the_caps_hold() {
    use rlx::sandbox::cwsandbox::server::{ServeOptions, ServerLimits};
    use rlx::sandbox::remote::RemoteSandboxes as _;
    let limits = ServerLimits { per_key: 2, disk_bytes: 1 << 20, files: 50, ..ServerLimits::default() };
    let key = rlx::sandbox::cwsandbox::access::ApiKey::new("server-key").unwrap();
    let server = InProcess::start(ServeOptions { api_key: Some(key), limits, ..Default::default() });
    let rt = &server.rt;
    let e = rt.block_on(server.client("wrong-key").create(&create_spec("python:3.11"))).unwrap_err().to_string();
    assert!(e.contains("UNAUTHENTICATED"), "{e}");
    let client = server.client("server-key");
    let e = rt.block_on(client.create(&create_spec("rust:1.80"))).unwrap_err().to_string();
    assert!(e.contains("INVALID_ARGUMENT") && e.contains("rust:1.80") && e.contains("cannot be provided"), "{e}");
    let a = rt.block_on(client.create(&create_spec("python:3.11"))).unwrap();
    let _b = rt.block_on(client.create(&create_spec("python"))).unwrap();
    let e = rt.block_on(client.create(&create_spec("python:3.11"))).unwrap_err().to_string();
    assert!(e.contains("RESOURCE_EXHAUSTED") && e.contains("per key"), "{e}");
    let e = rt.block_on(client.write_file(&a, "/tmp/big", vec![b'x'; 2 << 20])).unwrap_err().to_string();
    assert!(e.contains("RESOURCE_EXHAUSTED") && e.contains("1048576 bytes"), "{e}");
    rt.block_on(client.write_file(&a, "/tmp/small", vec![b'x'; 1000])).unwrap();
    let fill = "for i in range(3):\n    open(f'/tmp/f{i}', 'wb').write(b'x' * 600_000)\n";
    let e = rt.block_on(client.exec(&a, &["python".to_owned(), "-c".to_owned(), fill.to_owned()], std::time::Duration::from_secs(20))).unwrap_err().to_string();
    assert!(e.contains("RESOURCE_EXHAUSTED") && e.contains("was ended"), "{e}");
    assert!(!server.roots.join(&a).exists(), "the ended sandbox's files are still on disk");
    assert_eq!(rt.block_on(client.list_tagged("rlx")).unwrap().len(), 1);
}

/// The cap on live sandboxes in all holds across credentials (each under its own per-key cap),
/// and a stopped sandbox frees its place.
#[test]
fn the_servers_total_cap_holds_across_clients() {
    use rlx::sandbox::cwsandbox::server::{ServeOptions, ServerLimits};
    use rlx::sandbox::remote::RemoteSandboxes as _;
    let server = InProcess::start(ServeOptions { limits: ServerLimits { per_key: 2, total: 3, ..ServerLimits::default() }, ..Default::default() });
    let rt = &server.rt;
    let (a, b, c) = (server.client("a-key"), server.client("b-key"), server.client("c-key"));
    let first = rt.block_on(a.create(&create_spec("python"))).unwrap();
    rt.block_on(a.create(&create_spec("python"))).unwrap();
    rt.block_on(b.create(&create_spec("python"))).unwrap();
    let e = rt.block_on(c.create(&create_spec("python"))).unwrap_err().to_string();
    assert!(e.contains("RESOURCE_EXHAUSTED") && !e.contains("per key"), "a fourth sandbox on a server capped at three: {e}");
    rt.block_on(a.stop(&first)).unwrap();
    rt.block_on(c.create(&create_spec("python"))).expect("a stopped sandbox frees its place");
}
