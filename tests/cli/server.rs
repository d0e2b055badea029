//! The Sandbox-Fusion-compatible server (real HTTP on 127.0.0.1) and the Sandbox Fusion client:
//! statuses as Sandbox Fusion documents them, 422 on malformed requests, grading through the
//! client against our own server, and infrastructure failures (refused connections, 5xx, 4xx)
//! reported as `infra_error` with the right number of attempts. The problems are the repository's
//! own (`tests/fixtures/data/lcb_rllm.json`), so none of this needs ../shared.

#![allow(clippy::print_stderr)] // skip notices are meant to be seen in test output

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rlx::data;
use rlx::sandbox::fusion::{FusionClient, FusionConfig};
use rlx::sandbox::local::{LocalConfig, LocalSandbox};
use rlx::sandbox::{GradeOptions, Grader, VerdictStatus};
use rlx::spec::types::Language;
use serde_json::{Value, json};

use crate::common::{fixture_problems, python_available};

/// Start `serve` on an ephemeral port; the server stops when the returned sender drops.
async fn start_server() -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let sb = LocalSandbox::start(LocalConfig { workers: 2, ..LocalConfig::default() }).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(rlx::sandbox::server::serve(listener, sb, async move {
        let _ = rx.await;
    }));
    (addr, tx)
}

/// A minimal HTTP/1.1 client on a blocking socket: (status, body).
async fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let status = out.split_whitespace().nth(1).unwrap().parse().unwrap();
        let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
        (status, body)
    })
    .await
    .unwrap()
}

async fn run_code(addr: SocketAddr, req: Value) -> Value {
    let (status, body) = http(addr, "POST", "/run_code", &req.to_string()).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_like_sandbox_fusion() {
    if !python_available() {
        return;
    }
    let (addr, _stop) = start_server().await;
    let (status, body) = http(addr, "GET", "/v1/ping", "").await;
    assert_eq!((status, body.as_str()), (200, "\"pong\""));

    let r = run_code(addr, json!({"code": "print(input()[::-1])", "language": "python", "stdin": "abc", "extra": 1})).await;
    assert_eq!(r["status"], "Success");
    assert_eq!(r["run_result"]["status"], "Finished");
    assert_eq!(r["run_result"]["return_code"], 0);
    assert_eq!(r["run_result"]["stdout"], "cba\n");
    assert_eq!(r["compile_result"], Value::Null);

    let r = run_code(addr, json!({"code": "import sys\nsys.exit(3)", "language": "python"})).await;
    assert_eq!((r["status"].as_str(), r["run_result"]["return_code"].as_i64()), (Some("Failed"), Some(3)));

    let r = run_code(addr, json!({"code": "print('before', flush=True)\nwhile True: pass", "language": "python", "run_timeout": 1})).await;
    assert_eq!(r["status"], "Failed");
    assert_eq!(r["run_result"]["status"], "TimeLimitExceeded");
    assert_eq!(r["run_result"]["return_code"], Value::Null);
    assert_eq!(r["run_result"]["stdout"], "before\n", "partial output is returned");

    let r = run_code(addr, json!({"code": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "language": "python"})).await;
    assert_eq!((r["status"].as_str(), r["run_result"]["return_code"].as_i64()), (Some("Failed"), Some(-9)));

    // Files in, files out (base64), and 2 MB of output neither blocks nor is silently cut.
    let r = run_code(
        addr,
        json!({"code": "print(open('in.txt').read())\nopen('out.bin','wb').write(b'\\x00\\x01')\nprint('x' * 2000000)", "language": "python",
               "files": {"in.txt": "aGVsbG8=", "skip.txt": null}, "fetch_files": ["out.bin", "nope"]}),
    )
    .await;
    assert_eq!(r["status"], "Success");
    assert!(r["run_result"]["stdout"].as_str().unwrap().starts_with("hello\n"));
    assert_eq!(r["run_result"]["stdout"].as_str().unwrap().len(), 6 + 2_000_001);
    assert_eq!(r["files"], json!({"out.bin": "AAE="}));

    // A language Sandbox Fusion knows but rlx does not run: a sandbox error, not a failure.
    let r = run_code(addr, json!({"code": "class A {}", "language": "java"})).await;
    assert_eq!(r["status"], "SandboxError");
    assert!(r["message"].as_str().is_some_and(|m| m.contains("python, cpp")), "{r}");
    let r = run_code(addr, json!({"code": "x", "language": "python", "files": {"../escape": "eA=="}})).await;
    assert_eq!(r["status"], "SandboxError");

    // Malformed requests: 422 with pydantic-style details.
    for bad in [r#"{"language": "python"}"#, r#"{"code": "x", "language": "cobol"}"#, r#"{"code": 1, "language": "python"}"#, "not json", r#"{"code": "x", "language": "python", "run_timeout": "soon"}"#] {
        let (status, body) = http(addr, "POST", "/run_code", bad).await;
        assert_eq!(status, 422, "{bad}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert!(v["detail"].as_array().is_some_and(|d| !d.is_empty()), "{body}");
    }
    assert_eq!(http(addr, "GET", "/nope", "").await.0, 404);
    assert_eq!(http(addr, "GET", "/run_code", "").await.0, 405);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fusion_client_grades_through_a_fusion_compatible_server() {
    if !python_available() {
        return;
    }
    let (addr, _stop) = start_server().await;
    let client = FusionClient::new(FusionConfig::new(&format!("http://{addr}"))).unwrap();
    let problems = data::load_file(&fixture_problems(), None).unwrap();
    let o = GradeOptions::default();
    let v = client.grade(&problems[0], "a, b = map(int, input().split())\nprint(-(-a // b))", &o).await;
    assert_eq!((v.status, v.tests_passed, v.tests_total), (VerdictStatus::Passed, 3, 3), "{v:?}");
    let v = client.grade(&problems[0], "a, b = map(int, input().split())\nprint(a // b)", &o).await;
    assert_eq!(v.status, VerdictStatus::Failed, "{v:?}");
    let v = client.grade(&problems[1], "class Solution:\n    def countEven(self, nums):\n        return sum(n % 2 == 0 for n in nums)\n", &o).await;
    assert!(v.passed, "{v:?}");
    // A program printing a fake verdict line cannot know the nonce.
    let fake = "print('RLX-VERDICT 00000000000000000000000000000000 {\"tests\": [{\"status\": \"passed\", \"time_ms\": 1}]}')";
    let v = client.grade(&problems[0], fake, &o).await;
    assert_eq!(v.status, VerdictStatus::Failed, "{v:?}");
}

/// The C++ requests of the side-by-side with Sandbox Fusion: each verdict `/run_code` gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_cpp_like_sandbox_fusion() {
    if !crate::sandbox_cpp::toolchain(Language::Cpp) {
        return;
    }
    let (addr, _stop) = start_server().await;
    let cpp = |code: &str, stdin: &str| json!({"code": code, "language": "cpp", "stdin": stdin, "compile_timeout": 60, "run_timeout": 5});
    let r = run_code(addr, cpp(crate::sandbox_cpp::APLUSB, "2 40")).await;
    assert_eq!(r["status"], "Success", "{r}");
    assert_eq!((r["compile_result"]["status"].as_str(), r["compile_result"]["return_code"].as_i64()), (Some("Finished"), Some(0)));
    assert_eq!((r["run_result"]["status"].as_str(), r["run_result"]["stdout"].as_str()), (Some("Finished"), Some("42\n")));
    // The same program again (verl sends one request per test): built once, same answer.
    let r = run_code(addr, cpp(crate::sandbox_cpp::APLUSB, "1 1")).await;
    assert_eq!((r["status"].as_str(), r["run_result"]["stdout"].as_str()), (Some("Success"), Some("2\n")), "{r}");

    let r = run_code(addr, cpp("int main(){ return nope; }", "")).await;
    assert_eq!(r["status"], "Failed");
    assert_eq!(r["run_result"], Value::Null, "a failed compile runs nothing");
    assert_eq!(r["compile_result"]["status"], "Finished");
    assert_ne!(r["compile_result"]["return_code"], 0);
    assert!(r["compile_result"]["stderr"].as_str().is_some_and(|e| e.contains("nope")), "{r}");

    let r = run_code(addr, json!({"code": "int main(){ for(;;); }", "language": "cpp", "run_timeout": 1})).await;
    assert_eq!((r["status"].as_str(), r["run_result"]["status"].as_str()), (Some("Failed"), Some("TimeLimitExceeded")), "{r}");
    assert_eq!(r["run_result"]["return_code"], Value::Null);
    let r = run_code(addr, cpp("int main(){ int *p = nullptr; *p = 1; }", "")).await;
    assert_eq!((r["status"].as_str(), r["run_result"]["return_code"].as_i64()), (Some("Failed"), Some(-11)), "{r}");
    let r = run_code(addr, cpp("int main(){ return 3; }", "")).await;
    assert_eq!((r["status"].as_str(), r["run_result"]["return_code"].as_i64()), (Some("Failed"), Some(3)));
    let hog = "#include <vector>\nint main(){ std::vector<char> v(1ull << 31, 1); return v[7] - 1; }";
    let r = run_code(addr, json!({"code": hog, "language": "cpp", "memory_limit_MB": 256, "compile_timeout": 60})).await;
    assert_eq!((r["status"].as_str(), r["run_result"]["return_code"].as_i64()), (Some("Failed"), Some(-6)), "std::bad_alloc aborts: {r}");
    assert!(r["run_result"]["stderr"].as_str().is_some_and(|e| e.contains("bad_alloc")), "{r}");
    let slow = "template<int N, long M> struct A { static const long v = A<N-1, 2*M>::v + A<N-1, 2*M+1>::v; };\ntemplate<long M> struct A<0, M> { static const long v = M; };\nint main(){ return A<40, 1>::v == 0; }\n";
    let r = run_code(addr, json!({"code": slow, "language": "cpp", "compile_timeout": 1})).await;
    assert_eq!((r["status"].as_str(), r["compile_result"]["status"].as_str()), (Some("Failed"), Some("TimeLimitExceeded")), "{r}");
    assert_eq!(r["run_result"], Value::Null);
}

/// rlx's client grades C++ through Sandbox Fusion's own `cpp` (one request per test, `language`
/// sent), against our server: the same verdicts as the embedded sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fusion_client_grades_cpp_with_language() {
    if !crate::sandbox_cpp::toolchain(Language::Cpp) {
        return;
    }
    let (addr, _stop) = start_server().await;
    let client = FusionClient::new(FusionConfig::new(&format!("http://{addr}"))).unwrap();
    let local = LocalSandbox::start(LocalConfig { workers: 1, ..LocalConfig::default() }).await.unwrap();
    let p = crate::sandbox_cpp::problem(Language::Cpp, "aplusb", &[("1 2\n", "3\n"), ("5 5", "10"), ("0 0", "0")]);
    let o = GradeOptions { limits: rlx::sandbox::Limits { compile_timeout: Duration::from_secs(60), ..Default::default() }, fail_fast: false };
    let programs = [
        crate::sandbox_cpp::APLUSB,
        "#include <cstdio>\nint main(){ int a,b; scanf(\"%d %d\",&a,&b); printf(\"%d\\n\", a*b); }",
        "int main(){ return nope; }",
        "int main(){ int *p = nullptr; *p = 1; }",
    ];
    for code in programs {
        let remote = client.grade(&p, code, &o).await;
        let here = local.grade(&p, code, &o).await;
        let st = |v: &rlx::sandbox::Verdict| (v.status, v.tests.iter().map(|t| t.status).collect::<Vec<_>>(), v.language);
        assert_eq!(st(&remote), st(&here), "{code}: {remote:?} vs {here:?}");
        assert_eq!(remote.language, Some(Language::Cpp));
    }
}

fn fast_retries(url: String) -> FusionConfig {
    FusionConfig { retries: 2, backoff: Duration::from_millis(10), ..FusionConfig::new(&url) }
}

/// A stub that answers every request with `status_line` and counts requests.
fn stub(status_line: &'static str, body: &'static str) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut buf = vec![0u8; 1 << 20];
            let mut seen = Vec::new();
            // Read headers and the declared body, then answer and close.
            loop {
                let n = s.read(&mut buf).unwrap_or(0);
                if n == 0 {
                    break;
                }
                seen.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&seen);
                if let Some((head, rest)) = text.split_once("\r\n\r\n") {
                    let len = head
                        .lines()
                        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap_or(0)))
                        .unwrap_or(0);
                    if rest.len() >= len {
                        break;
                    }
                }
            }
            h.fetch_add(1, Ordering::SeqCst);
            let _ = write!(s, "HTTP/1.1 {status_line}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        }
    });
    (addr, hits)
}

#[tokio::test]
async fn fusion_infrastructure_failures_are_infra_errors() {
    let problems = data::load_file(&fixture_problems(), None).unwrap();
    let p = &problems[0];
    let o = GradeOptions::default();

    // Refused connection: retried, then infra_error.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let client = FusionClient::new(fast_retries(format!("http://127.0.0.1:{port}"))).unwrap();
    let v = client.grade(p, "print(1)", &o).await;
    assert_eq!(v.status, VerdictStatus::InfraError);
    assert!(v.tests.is_empty() && !v.passed);
    assert!(v.error.as_deref().unwrap().contains("3 attempt"), "{v:?}");

    // HTTP 503: retried (3 attempts in all).
    let (addr, hits) = stub("503 Service Unavailable", "{}");
    let v = FusionClient::new(fast_retries(format!("http://{addr}"))).unwrap().grade(p, "print(1)", &o).await;
    assert_eq!(v.status, VerdictStatus::InfraError);
    assert_eq!(hits.load(Ordering::SeqCst), 3);

    // SandboxError in a 200 reply: also infrastructure.
    let (addr, hits) = stub("200 OK", r#"{"status": "SandboxError", "message": "runner crashed"}"#);
    let v = FusionClient::new(fast_retries(format!("http://{addr}"))).unwrap().grade(p, "print(1)", &o).await;
    assert_eq!(v.status, VerdictStatus::InfraError);
    assert!(v.error.as_deref().unwrap().contains("runner crashed"));
    assert_eq!(hits.load(Ordering::SeqCst), 3);

    // HTTP 400: not retried.
    let (addr, hits) = stub("400 Bad Request", r#"{"detail": "no"}"#);
    let v = FusionClient::new(fast_retries(format!("http://{addr}"))).unwrap().grade(p, "print(1)", &o).await;
    assert_eq!(v.status, VerdictStatus::InfraError);
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    // A server that accepts and never answers: each attempt times out, then infra.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let a = accepted.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in silent.incoming().flatten() {
            a.fetch_add(1, Ordering::SeqCst);
            held.push(s);
        }
    });
    let client = FusionClient::new(fast_retries(format!("http://{addr}"))).unwrap();
    let err = client.run_code(&json!({"code": "print(1)", "language": "python"}), Duration::from_millis(300)).await.unwrap_err();
    assert!(err.to_string().contains("3 attempt") && err.to_string().contains("no reply"), "{err}");
    // The accept thread may lag behind the kernel's handshake; give it a moment.
    for _ in 0..100 {
        if accepted.load(Ordering::SeqCst) >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 3, "one connection per attempt");

    assert!(FusionClient::new(FusionConfig::new("https://example.com")).is_err(), "https is refused up front");
}

/// `rlx grade` grades again after an infrastructure error, as `rlx run` does: against a Sandbox
/// Fusion that answers 503 every time, each completion is tried `--infra-retries` + 1 times (each
/// try being the client's own 3 retries, 4 requests), then reported as `infra_error`, never as
/// a failed test, and the exit code is 3.
#[test]
fn rlx_grade_retries_infrastructure_errors() {
    let dir = tempfile::tempdir().unwrap();
    let problems = dir.path().join("p.json");
    std::fs::write(&problems, json!([{"problem": "one", "tests": [{"input": "", "output": "1", "testtype": "stdin"}]}]).to_string()).unwrap();
    let completions = dir.path().join("c.jsonl");
    std::fs::write(&completions, json!({"problem_id": "p/0", "code": "print(1)"}).to_string() + "\n").unwrap();
    let grade = |url: &str, retries: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_rlx"))
            .args(["grade", "--no-progress", "--sandbox", "fusion", "--fusion-url", url, "--infra-retries", retries])
            .arg("--problems")
            .arg(&problems)
            .arg("--completions")
            .arg(&completions)
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    };

    let (addr, hits) = stub("503 Service Unavailable", "{}");
    let out = grade(&format!("http://{addr}"), "1");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["status"].as_str(), v["passed"].as_bool()), (Some("infra_error"), Some(false)), "{v}");
    assert_eq!(hits.load(Ordering::SeqCst), 8, "2 tries of 4 requests");
    assert!(err.contains("1 regrade(s) after infrastructure errors") && err.contains("infra_error after 2 attempt(s)"), "{err}");

    // A server that is down is the same kind of failure (see
    // `fusion_infrastructure_failures_are_infra_errors`); not repeated here, as each try costs
    // the client's own backoff (1.4 s).
}
