//! Bounded input through the binary: an alias bomb and an oversized spec fail fast (exit 2,
//! located, within a memory bound) in every command that reads a spec; templates that do not
//! finish or write too much fail `validate`, `render` and `run`; SIGTERM stops `rlx run`
//! mid-render and `rlx sandbox serve` as SIGINT does, leaving no sandbox directory behind.

use std::io::BufRead as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{TestContext, only_run};

/// The memory a refused spec may cost the process (peak resident size).
const MAX_RSS_KB: i64 = 200 * 1024;

/// A spec of nested anchors under 400 bytes (the report's was 359): nine aliases of the level
/// above on each of seven levels (9⁷ leaves expanded), under a key the schema does not know:
/// aliases expand before the schema check, so the unknown key must not save it.
fn alias_bomb() -> String {
    let mut text = String::from("_x:\n  a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for (prev, name) in ["a", "b", "c", "d", "e", "f"].iter().zip(["b", "c", "d", "e", "f", "g"]) {
        text.push_str(&format!("  {name}: &{name} [{}]\n", vec![format!("*{prev}"); 9].join(",")));
    }
    text
}

/// Starts `cmd`'s program from a small Python parent that caps its address space at 2 GiB (so a
/// regression fails here instead of taking the machine's memory) and reports its peak resident
/// size: exit code, stderr and peak resident size in KiB.
///
/// Why not `wait4(2)` on a child of the test process itself: Linux carries a process's peak
/// resident size across `exec` (`signal->maxrss`), and a child forked from the test binary
/// starts with the binary's peak, hundreds of MB when the whole suite runs in it. A child forked
/// from a fresh Python starts with Python's few MB.
fn run_bounded(cmd: &mut Command) -> (i32, String, i64) {
    const PARENT: &str = r#"
import os, resource, sys
pid = os.fork()
if pid == 0:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
code = os.waitstatus_to_exitcode(status)
print(code if code >= 0 else 128 - code, usage.ru_maxrss)
"#;
    let mut parent = Command::new("python3");
    parent.args(["-c", PARENT]).arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => parent.env(k, v),
            None => parent.env_remove(k),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        parent.current_dir(dir);
    }
    let out = parent.stdin(Stdio::null()).output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let mut fields = report.split_whitespace().map(|f| f.parse::<i64>().unwrap_or_else(|_| panic!("the parent's report `{report}`: {stderr}")));
    let (code, rss) = (fields.next().expect("an exit code"), fields.next().expect("a peak RSS"));
    (code as i32, stderr, rss)
}

#[test]
fn an_alias_bomb_fails_fast_and_located_in_every_command_that_reads_a_spec() {
    let cx = TestContext::new();
    let bomb = alias_bomb();
    assert!(bomb.len() < 400, "{} bytes", bomb.len());
    cx.write("bomb.yaml", &format!("{}{bomb}", crate::common::MINIMAL));
    for args in [&["validate", "bomb.yaml"][..], &["run", "bomb.yaml"], &["sweep", "bomb.yaml", "seed=1,2"], &["render", "bomb.yaml"]] {
        let (code, stderr, rss) = run_bounded(cx.rlx().args(args));
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains("this alias expands the spec past 100000 values"), "{args:?}: {stderr}");
        // At the first alias of `e` on `f`'s line, the one that crosses the limit.
        assert!(stderr.contains("--> bomb.yaml:15:"), "{args:?}: {stderr}");
        assert!(rss < MAX_RSS_KB, "{args:?}: peak RSS {rss} KiB");
    }
}

#[test]
fn an_oversized_spec_is_refused_before_it_is_read() {
    let cx = TestContext::new();
    // A stop list of 10⁷ entries, 40 MB: refused on its size.
    let big = cx.path().join("big.yaml");
    let mut text = String::from("sampling:\n  stop: [");
    text.push_str(&"st, ".repeat(10_000_000));
    text.push_str("s]\n");
    std::fs::write(&big, format!("{}{text}", crate::common::MINIMAL)).unwrap();
    for args in [&["validate", "big.yaml"][..], &["run", "big.yaml"], &["sweep", "big.yaml", "seed=1,2"], &["render", "big.yaml"]] {
        let (code, stderr, rss) = run_bounded(cx.rlx().args(args));
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains("big.yaml") && stderr.contains("a spec may hold at most 4194304 bytes (4 MiB)"), "{args:?}: {stderr}");
        assert!(rss < MAX_RSS_KB, "{args:?}: peak RSS {rss} KiB");
    }
    // Just under the size cap, the values are too many: refused where the limit is reached.
    let entries = (4 << 20) / 4 - 100;
    let text = format!("{}sampling:\n  stop: [{}]\n", crate::common::MINIMAL, vec!["ab"; entries].join(", "));
    assert!(text.len() < 4 << 20);
    cx.write("many.yaml", &text);
    let (code, stderr, rss) = run_bounded(cx.rlx().args(["validate", "many.yaml"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("the spec holds more than 100000 values") && stderr.contains("--> many.yaml:10:"), "{stderr}");
    assert!(rss < MAX_RSS_KB, "peak RSS {rss} KiB");
}

/// A template that loops 10¹⁰ times, and one that writes 10 GB.
const ENDLESS: &str = "{% for i in range(100000) %}{% for j in range(100000) %}{{ i }}{% endfor %}{% endfor %}\n";
const OUTPUT_BOMB: &str = "{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}\n";

#[test]
fn templates_that_do_not_finish_or_write_too_much_fail_validate_and_render() {
    let cx = TestContext::new();
    for (template, limit) in [(ENDLESS, "ran 5000000 instructions without finishing"), (OUTPUT_BOMB, "wrote more than 1048576 bytes (1 MiB)")] {
        cx.write("user.j2", template);
        let (code, stderr, rss) = run_bounded(cx.rlx().args(["validate", "spec.yaml"]));
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains(&format!("the user template `{}` {limit}", cx.path().join("user.j2").display())), "{stderr}");
        assert!(stderr.contains("`rlx validate` renders each template once, on problem `1`"), "{stderr}");
        assert!(!stderr.contains("is valid"), "{stderr}");
        assert!(rss < MAX_RSS_KB, "peak RSS {rss} KiB");
    }
    // `render` meets the limit on its first problem (it needs the model's tokenizer first).
    crate::engine::tiny_model(&cx.path().join("tiny"));
    let spec = crate::common::MINIMAL.replace("model: {base: org/model}", "model: {base: ./tiny, finetune: full}");
    cx.write("spec.yaml", &spec);
    for (template, limit) in [(ENDLESS, "ran 5000000 instructions"), (OUTPUT_BOMB, "wrote more than 1048576 bytes")] {
        cx.write("user.j2", template);
        let (code, stderr, rss) = run_bounded(cx.rlx().args(["render", "spec.yaml"]));
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains("cannot render problem `1`") && stderr.contains(limit), "{stderr}");
        assert!(rss < MAX_RSS_KB, "peak RSS {rss} KiB");
    }
    // A template within the limits still validates.
    cx.write("user.j2", "{% for i in range(1000) %}{% endfor %}{{ problem.statement }}\n");
    let (code, stderr, _) = run_bounded(cx.rlx().args(["validate", "spec.yaml"]));
    assert_eq!(code, 0, "{stderr}");
}

/// The engine tests' spec on the tiny model with the user template `user` and `problems`
/// training problems of its own.
fn tiny_run(cx: &TestContext, user: &str, problems: usize) -> String {
    crate::engine::tiny_model(&cx.path().join("tiny"));
    let row = "{\"task_id\": 1, \"text\": \"Return 1.\", \"code\": \"def f():\\n    return 1\", \"test_list\": [\"assert f() == 1\"]}";
    let rows: String = (0..problems).map(|i| format!("{}\n", row.replace("\"task_id\": 1", &format!("\"task_id\": {i}")))).collect();
    cx.write("many.jsonl", &rows);
    cx.write("user.j2", user);
    let spec = crate::engine::spec_with(2, 1, "");
    let train_start = spec.find("  train: ").unwrap();
    let train_end = train_start + spec[train_start..].find('\n').unwrap();
    let spec = format!("{}  train: [{{path: many.jsonl, format: mbpp}}]{}", &spec[..train_start], &spec[train_end..]);
    let user_start = spec.find("prompt: {user: ").unwrap();
    let user_end = user_start + spec[user_start..].find('\n').unwrap();
    format!("{}prompt: {{user: user.j2}}{}", &spec[..user_start], &spec[user_end..])
}

#[test]
fn a_run_whose_template_does_not_finish_fails_with_the_limit_named() {
    if !crate::common::python_available() {
        return;
    }
    let cx = TestContext::new();
    let spec = tiny_run(&cx, ENDLESS, 3);
    cx.write("spec.yaml", &spec);
    let (code, stderr, _) = run_bounded(cx.rlx().args(["run", "spec.yaml"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("ran 5000000 instructions without finishing"), "{stderr}");
    let status: Value = serde_json::from_slice(&std::fs::read(only_run(&cx).join("status.json")).unwrap()).unwrap();
    assert_eq!(status["state"], "failed");
}

/// `rlx` in `cx` with a temp directory of the test's own (the sandbox's directories go there).
fn rlx_with_tmp(cx: &TestContext, tmp: &Path) -> Command {
    let mut c = cx.rlx();
    c.env("TMPDIR", tmp);
    c
}

fn sandbox_dirs(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp).unwrap().flatten().filter_map(|e| e.file_name().to_str().map(str::to_owned)).filter(|n| n.starts_with("rlx-sandbox-")).collect()
}

fn sigterm(child: &Child) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
}

/// Waits up to `limit` for `child` to exit; kills it and fails past that.
fn exit_within(child: &mut Child, limit: Duration, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not stop within {limit:?} of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A template of a million loop iterations (under the fuel limit, about 0.1 s a render): setup
/// renders every training problem to count its tokens, for minutes over 2,000 problems unless
/// it heeds the stop request between renders.
const SLOW: &str = "{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}{{ problem.statement }}\n";

/// The status file of the one run under `cx`'s `runs/`, once it exists.
fn status_file(cx: &TestContext) -> Option<std::path::PathBuf> {
    std::fs::read_dir(cx.path().join("runs")).ok()?.flatten().map(|e| e.path().join("status.json")).find(|p| p.exists())
}

/// Starts `rlx ARGS` in `cx` with a temp directory of its own, sends it SIGTERM once a run has
/// written its status and had three seconds to get into its rendering, and waits (at most a
/// minute) for it to exit: its exit code and stderr.
fn sigterm_once_a_run_started(cx: &TestContext, tmp: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut child = rlx_with_tmp(cx, tmp).args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let lines = std::thread::spawn(move || std::io::BufReader::new(stderr).lines().map_while(Result::ok).collect::<Vec<_>>());
    let deadline = Instant::now() + Duration::from_secs(120);
    while status_file(cx).is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_secs(3));
    sigterm(&child);
    let status = exit_within(&mut child, Duration::from_secs(60), args[0]);
    (status.code(), lines.join().unwrap().join("\n"))
}

#[test]
fn sigterm_stops_a_sweep_and_its_running_member_at_a_checkpoint() {
    if !crate::common::python_available() {
        return;
    }
    let cx = TestContext::new();
    let tmp = tempfile::tempdir().unwrap();
    cx.write("spec.yaml", &tiny_run(&cx, SLOW, 2000));
    let (code, lines) = sigterm_once_a_run_started(&cx, tmp.path(), &["sweep", "spec.yaml", "seed=1,2"]);
    assert_eq!(code, Some(130), "{lines}");
    assert!(lines.contains("interrupted"), "{lines}");
    // The member got the request (it did not run on alone) and stopped as a run does; the second
    // never started.
    let runs: Vec<_> = std::fs::read_dir(cx.path().join("runs")).unwrap().flatten().filter(|e| e.path().join("status.json").exists()).collect();
    assert_eq!(runs.len(), 1, "{lines}");
    let recorded: Value = serde_json::from_slice(&std::fs::read(runs[0].path().join("status.json")).unwrap()).unwrap();
    assert_eq!(recorded["state"], "interrupted", "{lines}");
    assert!(sandbox_dirs(tmp.path()).is_empty(), "{:?}", sandbox_dirs(tmp.path()));
}

#[test]
fn sigterm_mid_render_stops_a_run_as_interrupted() {
    if !crate::common::python_available() {
        return;
    }
    let cx = TestContext::new();
    let tmp = tempfile::tempdir().unwrap();
    cx.write("spec.yaml", &tiny_run(&cx, SLOW, 2000));
    let (code, lines) = sigterm_once_a_run_started(&cx, tmp.path(), &["run", "spec.yaml"]);
    assert_eq!(code, Some(130), "{lines}");
    let dir = only_run(&cx);
    let recorded: Value = serde_json::from_slice(&std::fs::read(dir.join("status.json")).unwrap()).unwrap();
    assert_eq!(recorded["state"], "interrupted", "{lines}");
    assert_eq!(recorded["steps_done"], 0);
    assert!(sandbox_dirs(tmp.path()).is_empty(), "{:?}", sandbox_dirs(tmp.path()));
}

#[test]
fn sigterm_stops_the_sandbox_server_and_removes_its_directories() {
    if !crate::common::python_available() {
        return;
    }
    let cx = TestContext::new();
    let tmp = tempfile::tempdir().unwrap();
    let (mut server, _url) = crate::common::sandbox_server_with(&mut rlx_with_tmp(&cx, tmp.path()));
    assert_eq!(sandbox_dirs(tmp.path()).len(), 1, "the server's sandbox directory");
    sigterm(&server);
    let status = exit_within(&mut server, Duration::from_secs(60), "rlx sandbox serve");
    assert_eq!(status.code(), Some(0), "a clean stop, as on SIGINT");
    assert!(sandbox_dirs(tmp.path()).is_empty(), "{:?}", sandbox_dirs(tmp.path()));
}
