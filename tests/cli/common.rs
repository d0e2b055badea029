//! Test helpers: an isolated work directory and the `rlx` binary to run in it.

use std::path::{Path, PathBuf};
use std::io::BufRead as _;
use std::process::{Child, Command, Output, Stdio};

/// The repository root (tests run from anywhere; fixtures are found from here).
pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A file of the real problem sets in `../shared/data` (beside the repository, never copied into
/// it), or `None` when it is absent, as in a user's clone: then a `SKIPPED` line names the test
/// and the missing file, and the caller returns early. Security and isolation tests never call
/// this; their problems live in the repository (`tests/fixtures/data/lcb_rllm.json`).
#[track_caller]
#[allow(clippy::print_stderr)] // the skip notice is meant to be seen in test output
pub(crate) fn shared_data(rel: &str) -> Option<PathBuf> {
    let path = repo().join("../shared/data").join(rel);
    if path.exists() {
        return Some(path);
    }
    // libtest names each test's thread after the test; the call site is the fallback.
    let thread = std::thread::current();
    let test = match thread.name() {
        Some(name) if name != "main" => name.to_owned(),
        _ => std::panic::Location::caller().to_string(),
    };
    eprintln!("SKIPPED {test}: missing ../shared/data/{rel} (a user's clone has no ../shared)");
    None
}

/// Whether `python3` runs here; when it does not, a `SKIPPED` line says so and the caller
/// returns early (the sandbox and the Python reward need it).
#[allow(clippy::print_stderr)] // the skip notice is meant to be seen in test output
pub(crate) fn python_available() -> bool {
    let ok = Command::new("python3").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED: python3 is not available");
    }
    ok
}

/// The repository's own small LiveCodeBench-shaped problems (see `tests/fixtures/data/README.md`).
pub(crate) fn fixture_problems() -> PathBuf {
    repo().join("tests/fixtures/data/lcb_rllm.json")
}

/// A temp work directory with a minimal valid experiment in it.
pub(crate) struct TestContext {
    pub dir: tempfile::TempDir,
}

/// A minimal valid spec; tests edit it or override it.
pub(crate) const MINIMAL: &str = "\
name: mini
model: {base: org/model}
backend: {kind: local}
data:
  train: [{path: train.jsonl}]
prompt:
  user: user.j2
schedule: {max_steps: 3}
";

impl TestContext {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("train.jsonl"), "{\"task_id\": 1, \"text\": \"Return 1.\", \"code\": \"def f():\\n    return 1\", \"test_list\": [\"assert f() == 1\"]}\n").unwrap();
        std::fs::write(dir.path().join("user.j2"), "{{ problem.statement }}\n").unwrap();
        std::fs::write(dir.path().join("spec.yaml"), MINIMAL).unwrap();
        TestContext { dir }
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&p, text).unwrap();
        p
    }

    /// `rlx` in the work directory, with a clean, colourless environment.
    pub(crate) fn rlx(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_rlx"));
        c.current_dir(self.dir.path()).env("NO_COLOR", "1").env("COLUMNS", "100").env_remove("RUST_LOG");
        for (k, _) in std::env::vars() {
            if k.starts_with("RLX_") {
                c.env_remove(k);
            }
        }
        c
    }

    pub(crate) fn run(&self, args: &[&str]) -> Run {
        Run::from(self.rlx().args(args).output().expect("rlx runs"))
    }
}

/// The JSON lines of a run-directory file (none when it does not exist yet).
#[allow(dead_code)]
pub(crate) fn jsonl(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The one run directory under `cx`'s `runs/`.
#[allow(dead_code)]
pub(crate) fn only_run(cx: &TestContext) -> PathBuf {
    let runs: Vec<_> = std::fs::read_dir(cx.path().join("runs")).unwrap().flatten().collect();
    assert_eq!(runs.len(), 1);
    runs[0].path()
}

/// The outcome of one `rlx` invocation.
#[derive(Debug)]
pub(crate) struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Self {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Run {
    /// Number of `error:` headings on stderr, not counting the summary line.
    pub(crate) fn error_count(&self) -> usize {
        self.stderr.lines().filter(|l| l.starts_with("error: ") && !(l.contains(" problem") && l.ends_with("found"))).count()
    }
}

/// The Python interpreter of a cached virtualenv holding `requirements` (pinned pip arguments:
/// requirement strings and build options), created on first use under `~/.cache/rlx/venvs/` (or
/// `$RLX_TEST_VENVS`) so that tests and CI install each set once per machine. Returns `None`
/// after a `SKIPPED` line only when the package registry cannot be reached; any other
/// install failure fails the test, with pip's output.
///
/// Concurrent tests (and concurrent `cargo test` runs) wait on a lock file, so a set is
/// installed once. The directory name carries a hash of the requirements: changing a pin makes
/// a new virtualenv instead of mutating one another checkout may be using.
#[track_caller]
#[allow(clippy::print_stderr, dead_code)] // used by the tracker, Tinker and llama.cpp tests
pub(crate) fn python_env(name: &str, requirements: &[&str]) -> Option<PathBuf> {
    let root = std::env::var_os("RLX_TEST_VENVS").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/rlx/venvs")
    });
    python_env_in(&root, name, requirements)
}

#[track_caller]
#[allow(clippy::print_stderr)]
fn python_env_in(root: &Path, name: &str, requirements: &[&str]) -> Option<PathBuf> {
    use sha2::{Digest, Sha256};
    std::fs::create_dir_all(root).expect("venv cache directory");
    let hash = Sha256::digest(requirements.join("\n").as_bytes());
    let tag: String = hash.iter().take(4).map(|b| format!("{b:02x}")).collect();
    let dir = root.join(format!("{name}-{tag}"));
    let python = dir.join("bin/python");
    let ready = dir.join(".rlx-ready");

    let lock = std::fs::File::create(root.join(format!("{name}-{tag}.lock"))).expect("lock file");
    lock.lock().expect("lock the venv");
    if ready.exists() {
        return Some(python);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let status = Command::new("python3").args(["-m", "venv"]).arg(&dir).status().expect("python3 runs");
    assert!(status.success(), "python3 -m venv {} failed", dir.display());
    eprintln!("installing {} into {} (once per machine)", requirements.join(" "), dir.display());
    let out = Command::new(&python)
        .args(["-m", "pip", "install", "--disable-pip-version-check", "-q"])
        .args(requirements)
        .output()
        .expect("pip runs");
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&dir);
        // Is it the registry, or the requirements? A tiny, always-available package tells.
        let probe = tempfile::tempdir().unwrap();
        let reachable = Command::new("python3")
            .args(["-m", "pip", "download", "--no-deps", "-q", "--dest"])
            .arg(probe.path())
            .arg("six==1.16.0")
            .output()
            .is_ok_and(|o| o.status.success());
        if !reachable {
            let thread = std::thread::current();
            let test = thread.name().unwrap_or("test").to_owned();
            eprintln!("SKIPPED {test}: the package registry is unreachable (pip install {})", requirements.join(" "));
            return None;
        }
        panic!(
            "pip install {} failed:\n{}{}",
            requirements.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::write(&ready, requirements.join("\n")).unwrap();
    Some(python)
}

#[test]
fn python_env_installs_a_set_once_and_reuses_it() {
    let venvs = tempfile::tempdir().unwrap();
    let Some(python) = python_env_in(venvs.path(), "probe", &["six==1.16.0"]) else { return };
    let out = Command::new(&python).args(["-c", "import six; print(six.__version__)"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1.16.0");
    // The second call finds the ready marker and installs nothing.
    let again = python_env_in(venvs.path(), "probe", &["six==1.16.0"]).unwrap();
    assert_eq!(again, python);
    assert!(python.parent().unwrap().parent().unwrap().join(".rlx-ready").exists());
}

/// `rlx sandbox serve` on a free port with 2 workers: the process and its URL. Its stderr is
/// drained in a thread so that it never blocks on a full pipe.
pub(crate) fn sandbox_server() -> (Child, String) {
    sandbox_server_with(&mut Command::new(env!("CARGO_BIN_EXE_rlx")))
}

/// [`sandbox_server`] started from `cmd` (an environment of the caller's: its `TMPDIR`).
pub(crate) fn sandbox_server_with(cmd: &mut Command) -> (Child, String) {
    let mut server = cmd
        .args(["sandbox", "serve", "--bind", "127.0.0.1:0", "--concurrency", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = server.stderr.take().unwrap();
    let mut lines = std::io::BufReader::new(stderr).lines();
    let addr = lines.by_ref().map_while(Result::ok).find_map(|l| l.strip_prefix("rlx sandbox listening on ").and_then(|r| r.split_whitespace().next()).map(str::to_owned)).expect("the server prints its address");
    std::thread::spawn(move || lines.for_each(drop));
    let url = if addr.starts_with("http") { addr } else { format!("http://{addr}") };
    (server, url)
}
