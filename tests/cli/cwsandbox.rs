//! CoreWeave Sandbox (Aviato): `rlx sandbox serve --protocol cwsandbox` driven by the official
//! Python client (`cwsandbox==1.22.0`, installed by the test into a cached virtualenv) over real
//! gRPC on 127.0.0.1, and rlx's own client (`sandbox.kind: cwsandbox`) against the same server.

use std::io::BufRead as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use crate::common::{python_env, repo};

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
        std::thread::spawn(move || lines.for_each(drop));
        CwServer { child, url }
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
