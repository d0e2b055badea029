//! Test helpers: an isolated work directory and the `rlx` binary to run in it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root (tests run from anywhere; fixtures are found from here).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
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
