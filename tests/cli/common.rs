//! Test helpers: an isolated work directory and the `rlx` binary to run in it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root (tests run from anywhere; fixtures are found from here).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A file of the real problem sets in `../shared/data` (beside the repository, never copied into
/// it), or `None` when it is absent, as in a user's clone: then a `SKIPPED` line names the test
/// and the missing file, and the caller returns early. Security and isolation tests never call
/// this; their problems live in the repository (`tests/fixtures/data/lcb_rllm.json`).
#[track_caller]
#[allow(clippy::print_stderr)] // the skip notice is meant to be seen in test output
pub fn shared_data(rel: &str) -> Option<PathBuf> {
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

/// The repository's own small LiveCodeBench-shaped problems (see `tests/fixtures/data/README.md`).
pub fn fixture_problems() -> PathBuf {
    repo().join("tests/fixtures/data/lcb_rllm.json")
}

/// A temp work directory with a minimal valid experiment in it.
pub struct TestContext {
    pub dir: tempfile::TempDir,
}

/// A minimal valid spec; tests edit it or override it.
pub const MINIMAL: &str = "\
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
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("train.jsonl"), "{\"task_id\": 1, \"text\": \"Return 1.\", \"code\": \"def f():\\n    return 1\", \"test_list\": [\"assert f() == 1\"]}\n").unwrap();
        std::fs::write(dir.path().join("user.j2"), "{{ problem.statement }}\n").unwrap();
        std::fs::write(dir.path().join("spec.yaml"), MINIMAL).unwrap();
        TestContext { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&p, text).unwrap();
        p
    }

    /// `rlx` in the work directory, with a clean, colourless environment.
    pub fn rlx(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_rlx"));
        c.current_dir(self.dir.path()).env("NO_COLOR", "1").env("COLUMNS", "100").env_remove("RUST_LOG");
        for (k, _) in std::env::vars() {
            if k.starts_with("RLX_") {
                c.env_remove(k);
            }
        }
        c
    }

    pub fn run(&self, args: &[&str]) -> Run {
        Run::from(self.rlx().args(args).output().expect("rlx runs"))
    }
}

/// The outcome of one `rlx` invocation.
#[derive(Debug)]
pub struct Run {
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
    pub fn error_count(&self) -> usize {
        self.stderr.lines().filter(|l| l.starts_with("error: ") && !(l.contains(" problem") && l.ends_with("found"))).count()
    }
}
