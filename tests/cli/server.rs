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
use rlx::sandbox::server::ServerConfig;
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
    // A memory limit above the server's default reaches the program (it was a runtime error:
    // the harness ran under the default as a hard limit and could not raise it).
    let mut big = GradeOptions::default();
    big.limits.memory_mb = 2048;
    let v = client.grade(&problems[0], "a, b = map(int, input().split())\nprint(-(-a // b))", &big).await;
    assert_eq!((v.status, v.tests_passed), (VerdictStatus::Passed, 3), "{v:?}");
    // A program printing a fake verdict line cannot know the nonce.
    let fake = "print('RLX-VERDICT 00000000000000000000000000000000 {\"tests\": [{\"status\": \"passed\", \"time_ms\": 1}]}')";
    let v = client.grade(&problems[0], fake, &o).await;
    assert_eq!(v.status, VerdictStatus::Failed, "{v:?}");
}

/// Start `serve_with(config)` on an ephemeral port; the server stops when the sender drops.
async fn start_server_with(config: ServerConfig) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let sb = LocalSandbox::start(LocalConfig { workers: 1, ..LocalConfig::default() }).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(rlx::sandbox::server::serve_with(listener, sb, config, async move {
        let _ = rx.await;
    }));
    (addr, tx)
}

/// Sends `head` (request line and headers, without the blank line) and `body` as they are, and
/// returns the status and body of the answer. The answer must come within a minute: a server
/// that waits for a body it was only promised never answers (a hang guard, not a timing check).
async fn raw(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, String) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("{head}\r\nHost: {addr}\r\n\r\n").as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let answer = async {
        loop {
            let n = s.read(&mut buf).await.unwrap_or(0);
            out.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&out).into_owned();
            // One answer, whole: its body is as long as its content-length says.
            if let Some((h, b)) = text.split_once("\r\n\r\n") {
                let len = h.lines().find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap()));
                if n == 0 || len.is_some_and(|l| b.len() >= l) {
                    break text;
                }
            } else if n == 0 {
                break text;
            }
        }
    };
    let text = tokio::time::timeout(Duration::from_secs(60), answer).await.expect("the server answers without waiting for the body");
    let status = text.split_whitespace().nth(1).unwrap_or("0").parse().unwrap_or(0);
    (status, text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default())
}

/// A `/run_code` request with `extra` headers: (status, body).
async fn post(addr: SocketAddr, extra: &str, req: &Value) -> (u16, String) {
    let body = req.to_string();
    let extra = if extra.is_empty() { String::new() } else { format!("\r\n{extra}") };
    raw(addr, &format!("POST /run_code HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close{extra}", body.len()), body.as_bytes()).await
}

/// What a client may ask for is capped (issue 51): a memory limit of 10⁶ MiB touched 3 GiB, and
/// 9.3e15 overflowed into a `SandboxError` that clients retry. Past a cap is HTTP 422 naming the
/// field; within the caps the request runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_server_caps_get_422() {
    if !python_available() {
        return;
    }
    let config = ServerConfig { max_memory_mb: 2048, max_files: 2, ..ServerConfig::default() };
    let (addr, _stop) = start_server_with(config).await;
    let code = |extra: Value| {
        let mut r = json!({"code": "print('hi')", "language": "python"});
        r.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        r
    };
    for (extra, field) in [
        (json!({"memory_limit_MB": 9.3e15}), "memory_limit_MB"),
        (json!({"memory_limit_MB": 1_000_000}), "memory_limit_MB"),
        (json!({"run_timeout": 1e9}), "run_timeout"),
        (json!({"compile_timeout": 86_400}), "compile_timeout"),
        (json!({"files": {"a": "", "b": "", "c": ""}}), "files"),
        (json!({"fetch_files": ["a", "b", "c"]}), "fetch_files"),
    ] {
        let (status, body) = post(addr, "", &code(extra.clone())).await;
        assert_eq!(status, 422, "{extra}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["detail"][0]["loc"], json!(["body", field]), "{body}");
        assert!(v["detail"][0]["msg"].as_str().unwrap().contains("cap"), "{body}");
    }
    let (status, body) = post(addr, "", &code(json!({"memory_limit_MB": 2048, "run_timeout": 5, "files": {"a": "", "b": ""}}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["run_result"]["stdout"], "hi\n", "{body}");
}

/// A keyed server (issue 51): no key, a wrong one or an empty header is 401, and that answer
/// comes before the body is read (a request promising 60 MiB and sending none is answered at
/// once); with the key, a body past the cap is refused from its `Content-Length` (413), and
/// rlx's own client grades through it with `api_key`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_server_checks_the_key_before_the_body() {
    if !python_available() {
        return;
    }
    let (addr, _stop) = start_server_with(ServerConfig { api_key: Some("k-51".into()), ..ServerConfig::default() }).await;
    let hello = json!({"code": "print('hi')", "language": "python"});
    for header in ["", "X-API-Key: ", "X-API-Key: k-5", "Authorization: Bearer ", "Authorization: k-51"] {
        let (status, body) = post(addr, header, &hello).await;
        assert_eq!(status, 401, "`{header}`: {body}");
    }
    for header in ["X-API-Key: k-51", "Authorization: Bearer k-51"] {
        let (status, body) = post(addr, header, &hello).await;
        assert_eq!(status, 200, "`{header}`: {body}");
    }
    let (status, _) = raw(addr, "POST /run_code HTTP/1.1\r\nContent-Length: 62914560", b"").await;
    assert_eq!(status, 401, "the key before the body");
    let (status, body) = raw(addr, "POST /run_code HTTP/1.1\r\nX-API-Key: k-51\r\nContent-Length: 104857600", b"").await;
    assert_eq!(status, 413, "the size before the body: {body}");
    let config = FusionConfig { api_key: Some("k-51".into()), ..FusionConfig::new(&format!("http://{addr}")) };
    let problems = data::load_file(&fixture_problems(), None).unwrap();
    let v = FusionClient::new(config).unwrap().grade(&problems[0], "a, b = map(int, input().split())\nprint(-(-a // b))", &GradeOptions::default()).await;
    assert!(v.passed, "{v:?}");
}

/// An empty key is no key: the server refuses to start with one rather than serve everyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_key_is_refused() {
    if !python_available() {
        return;
    }
    let sb = LocalSandbox::start(LocalConfig { workers: 1, ..LocalConfig::default() }).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let r = rlx::sandbox::server::serve_with(listener, sb, ServerConfig { api_key: Some(String::new()), ..ServerConfig::default() }, async {}).await;
    assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::InvalidInput);
}

/// `rlx sandbox serve` (both protocols) applies `rlx serve`'s rule: an address beyond this
/// machine needs a key, and an empty key is no key. (It used to bind 0.0.0.0 silently.)
#[test]
fn rlx_sandbox_serve_needs_a_key_for_a_public_bind() {
    for args in [
        &["sandbox", "serve", "--bind", "0.0.0.0:0"][..],
        &["sandbox", "serve", "--bind", "0.0.0.0:0", "--protocol", "cwsandbox"],
        &["sandbox", "serve", "--bind", "127.0.0.1:0", "--api-key", ""],
    ] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_rlx"))
            .args(args)
            .env_remove("RLX_SANDBOX_API_KEY")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // A hang guard: the old server started serving instead of exiting.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("`rlx {}` started serving", args.join(" "));
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let mut stderr = String::new();
        child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
        assert_eq!(status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("without authentication") || stderr.contains("empty"), "{stderr}");
    }
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
