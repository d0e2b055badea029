//! C++ (and C) in the embedded sandbox with the real compilers: every verdict (passed, wrong
//! answer, compile error, timeout, runtime error, memory limit, checkers), the compile step's
//! own limits, the cache of built programs, and the adversarial programs of `sandbox.rs` written
//! in C++: each checks its verdict, that nothing is left running, and that the host is unharmed.
//! Each test says SKIPPED when g++ (gcc) is not installed.

#![allow(clippy::print_stderr)] // skip notices are meant to be seen in test output

use std::time::Duration;

use rlx::data::{IoCase, Problem, Tests};
use rlx::sandbox::local::{LocalConfig, LocalSandbox};
use rlx::sandbox::{ExecRequest, ExecStatus, GradeOptions, Grader, Limits, Sandbox, TestStatus, Verdict, VerdictStatus};
use rlx::spec::types::Language;

/// Skip (loudly) when the language's compiler or Python (the workers) is missing.
pub(crate) fn toolchain(language: Language) -> bool {
    if let Err(e) = rlx::sandbox::lang::compiler(language) {
        eprintln!("SKIPPED: {e}");
        return false;
    }
    crate::common::python_available()
}

async fn sandbox(workers: usize) -> LocalSandbox {
    LocalSandbox::start(LocalConfig { workers, ..LocalConfig::default() }).await.expect("sandbox starts")
}

fn opts(timeout_s: f64) -> GradeOptions {
    // Generous compile limit: g++ at -O2 takes a few seconds on a loaded 2-core machine.
    GradeOptions { limits: Limits { timeout: Duration::from_secs_f64(timeout_s), compile_timeout: Duration::from_secs(60), ..Limits::default() }, fail_fast: false }
}

pub(crate) fn problem(language: Language, id: &str, cases: &[(&str, &str)]) -> Problem {
    Problem {
        id: id.into(),
        statement: String::new(),
        starter_code: None,
        tests: Tests::Stdin { cases: cases.iter().map(|(i, o)| IoCase { input: (*i).into(), output: (*o).into() }).collect() },
        metadata: Default::default(),
    }
    .in_language(language)
}

fn statuses(v: &Verdict) -> Vec<TestStatus> {
    v.tests.iter().map(|t| t.status).collect()
}

/// Processes still alive under the sandbox's uids (root only).
fn assert_nothing_left(sb: &LocalSandbox) {
    if !sb.protection().unprivileged_uid {
        eprintln!("note: not root, the per-uid process check is skipped");
        return;
    }
    let uids = sb.uid_range();
    let n = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
            status.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<u32>().ok()).is_some_and(|u| uids.contains(&u))
        })
        .count();
    assert_eq!(n, 0, "processes left running under the sandbox uids");
}

pub(crate) const APLUSB: &str = "#include <bits/stdc++.h>\nint main(){long long a,b; std::cin>>a>>b; std::cout<<a+b<<\"\\n\";}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpp_verdicts() {
    if !toolchain(Language::Cpp) {
        return;
    }
    let sb = sandbox(1).await;
    let p = problem(Language::Cpp, "aplusb", &[("1 2\n", "3\n"), ("0 0\n", "0\n"), ("1000000000000 1\n", "1000000000001\n")]);
    let v = sb.grade(&p, APLUSB, &opts(5.0)).await;
    assert!(v.passed, "{v:?}");
    assert_eq!(v.language, Some(Language::Cpp));
    let c = v.compile.as_ref().expect("the compile step is reported");
    assert!(c.ok() && !c.cached, "{c:?}");
    // The same source again: the program comes from the cache, the verdict is the same.
    let again = sb.grade(&p, APLUSB, &opts(5.0)).await;
    assert!(again.passed && again.compile.as_ref().is_some_and(|c| c.cached), "{again:?}");

    let wrong = "#include <cstdio>\nint main(){long long a,b; scanf(\"%lld %lld\",&a,&b); printf(\"%lld\\n\", a-b);}\n";
    let v = sb.grade(&p, wrong, &opts(5.0)).await;
    assert_eq!(statuses(&v), [TestStatus::WrongAnswer, TestStatus::Passed, TestStatus::WrongAnswer], "{v:?}");
    assert_eq!(v.tests[0].got.as_deref(), Some("-1\n"));

    let broken = "#include <cstdio>\nint main(){ printf(\"%d\\n\", undeclared_thing); }\n";
    let v = sb.grade(&p, broken, &opts(5.0)).await;
    assert_eq!(v.status, VerdictStatus::Failed);
    assert_eq!(statuses(&v), [TestStatus::CompileError; 3]);
    let c = v.compile.as_ref().unwrap();
    assert_eq!(c.status, "error");
    assert!(c.output.contains("undeclared_thing") && c.output.contains("error"), "{c:?}");
    assert!(v.tests[0].error.as_deref().is_some_and(|e| e.contains("undeclared_thing")), "the feedback carries the compiler's output");

    let one = problem(Language::Cpp, "one", &[("", "1\n")]);
    let v = sb.grade(&one, "int main(){ for(;;); }", &opts(1.0)).await;
    assert_eq!(statuses(&v), [TestStatus::Timeout], "{v:?}");
    let v = sb.grade(&one, "int main(){ int *p = nullptr; *p = 1; return 0; }", &opts(5.0)).await;
    assert_eq!(statuses(&v), [TestStatus::RuntimeError], "{v:?}");
    let v = sb.grade(&one, "#include <cstdio>\nint main(){ puts(\"1\"); return 3; }", &opts(5.0)).await;
    assert_eq!(statuses(&v), [TestStatus::RuntimeError], "a non-zero exit fails the test: {v:?}");
    let v = sb.grade(&one, "#include <stdexcept>\nint main(){ throw std::runtime_error(\"boom\"); }", &opts(5.0)).await;
    assert_eq!(statuses(&v), [TestStatus::RuntimeError]);
    assert!(v.tests[0].error.as_deref().is_some_and(|e| e.contains("boom")), "{v:?}");

    let mut small = opts(10.0);
    small.limits.memory_mb = 256;
    let hog = "#include <vector>\n#include <cstdio>\nint main(){ std::vector<char> v(1ull << 31, 1); printf(\"%d\\n\", v[12345]); }\n";
    let v = sb.grade(&one, hog, &small).await;
    assert_eq!(statuses(&v), [TestStatus::MemoryLimit], "{v:?}");
    // Static arrays past the limit (volatile, so the compiler cannot drop the array): the
    // program cannot even be loaded.
    let statics = "#include <cstdio>\nstatic volatile char big[1ull << 30];\nint main(){ int i; if (scanf(\"%d\", &i) != 1) i = 7; big[i] = 1; printf(\"%d\\n\", big[i]); }\n";
    let v = sb.grade(&one, statics, &small).await;
    assert!(matches!(statuses(&v)[..], [TestStatus::MemoryLimit | TestStatus::RuntimeError]), "{v:?}");
    // Within the limit, the same program passes: the limit is the program's, not the interpreter's.
    let fits = "#include <vector>\n#include <cstdio>\nint main(){ std::vector<char> v(150u << 20, 1); printf(\"%d\\n\", v[12345]); }\n";
    let v = sb.grade(&one, fits, &small).await;
    assert!(v.passed, "{v:?}");
    assert_nothing_left(&sb);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpp_checkers_flags_and_compile_limits() {
    if !toolchain(Language::Cpp) {
        return;
    }
    let sb = sandbox(1).await;
    let pi = "#include <cstdio>\nint main(){ printf(\"%.7f %d\\n\", 3.14159265, 2); }\n";
    let mut p = problem(Language::Cpp, "pi", &[("", "3.141592 2")]);
    p.metadata.insert("checker".into(), "float".into());
    assert!(sb.grade(&p, pi, &opts(5.0)).await.passed, "within 1e-6");
    p.metadata.insert("checker".into(), "tokens".into());
    assert_eq!(statuses(&sb.grade(&p, pi, &opts(5.0)).await), [TestStatus::WrongAnswer]);
    p.metadata.insert("checker".into(), "exact".into());
    let spaced = "#include <cstdio>\nint main(){ printf(\"3.141592  2\\n\"); }\n";
    assert_eq!(statuses(&sb.grade(&p, spaced, &opts(5.0)).await), [TestStatus::WrongAnswer]);
    p.metadata.insert("checker".into(), "tokens".into());
    assert!(sb.grade(&p, spaced, &opts(5.0)).await.passed);

    // Flags replace the defaults: C++20 designated initialisers fail under -std=c++11.
    let cxx20 = "#include <cstdio>\nstruct P{int x; int y;};\nint main(){ P p{.x=1,.y=2}; printf(\"%d\\n\", p.x+p.y); }\n";
    let mut p = problem(Language::Cpp, "flags", &[("", "3")]);
    p.metadata.insert("compile_flags".into(), serde_json::json!(["-std=c++11", "-pedantic-errors"]));
    let v = sb.grade(&p, cxx20, &opts(5.0)).await;
    assert_eq!(statuses(&v), [TestStatus::CompileError], "{v:?}");
    p.metadata.insert("compile_flags".into(), serde_json::json!(["-O0", "-std=c++20"]));
    assert!(sb.grade(&p, cxx20, &opts(5.0)).await.passed);

    // A compile that runs past its own limit (templates instantiated without end) is a compile
    // error with status `timeout`, not a hang and not an infrastructure error.
    // 2^40 distinct instantiations: it never finishes.
    let explode = "template<int N, long M> struct A { static const long v = A<N-1, 2*M>::v + A<N-1, 2*M+1>::v; };\ntemplate<long M> struct A<0, M> { static const long v = M; };\nint main(){ return A<40, 1>::v == 0; }\n";
    let mut o = opts(5.0);
    o.limits.compile_timeout = Duration::from_secs(1);
    let v = sb.grade(&problem(Language::Cpp, "slow_compile", &[("", "")]), explode, &o).await;
    assert_eq!(v.status, VerdictStatus::Failed, "{v:?}");
    assert_eq!(statuses(&v), [TestStatus::CompileError]);
    assert_eq!(v.compile.as_ref().unwrap().status, "timeout", "{v:?}");
    assert_nothing_left(&sb);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpp_adversarial() {
    if !toolchain(Language::Cpp) {
        return;
    }
    let sb = sandbox(1).await;
    let prot = sb.protection().clone();
    let one = |name: &str, out: &str| problem(Language::Cpp, name, &[("", out)]);

    let bomb = "#include <unistd.h>\nint main(){ for(;;) fork(); }\n";
    let v = sb.grade(&one("fork_bomb", "1"), bomb, &opts(2.0)).await;
    assert!(matches!(statuses(&v)[..], [TestStatus::Timeout | TestStatus::RuntimeError]), "{v:?}");
    assert_nothing_left(&sb);

    let memory = "#include <cstring>\nint main(){ for(;;){ char *p = new char[16 << 20]; memset(p, 1, 16 << 20);} }\n";
    let mut small = opts(20.0);
    small.limits.memory_mb = 256;
    let v = sb.grade(&one("memory_bomb", "1"), memory, &small).await;
    assert_eq!(statuses(&v), [TestStatus::MemoryLimit], "{v:?}");
    let malloc = "#include <cstdlib>\n#include <cstring>\nint main(){ for(;;){ char *p = (char*)malloc(16 << 20); if(!p) return 9; memset(p, 1, 16 << 20);} }\n";
    let v = sb.grade(&one("malloc_bomb", "1"), malloc, &small).await;
    assert_eq!(statuses(&v), [TestStatus::RuntimeError], "malloc fails under the limit and the program exits 9: {v:?}");

    // Daemonised, signal-ignoring children die with the submission; the output still counts.
    let daemon = "#include <unistd.h>\n#include <csignal>\n#include <cstdio>\nint main(){ signal(SIGTERM, SIG_IGN); if(fork()==0){ setsid(); if(fork()==0){ sleep(1000);} _exit(0);} puts(\"1\"); }\n";
    let v = sb.grade(&one("daemon", "1"), daemon, &opts(10.0)).await;
    assert!(v.passed, "{v:?}");
    assert_nothing_left(&sb);

    // Network: a server on the host's loopback is unreachable.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!(
        "#include <sys/socket.h>\n#include <netinet/in.h>\n#include <arpa/inet.h>\n#include <cstdio>\nint main(){{ int s = socket(AF_INET, SOCK_STREAM, 0); sockaddr_in a{{}}; a.sin_family = AF_INET; a.sin_port = htons({port}); inet_pton(AF_INET, \"127.0.0.1\", &a.sin_addr); puts(connect(s, (sockaddr*)&a, sizeof a) == 0 ? \"connected\" : \"blocked\"); }}\n"
    );
    let v = sb.grade(&one("connect", "blocked"), &connect, &opts(5.0)).await;
    if prot.network_namespace {
        assert!(v.passed, "{v:?}");
        assert_eq!(listener.accept().unwrap_err().kind(), std::io::ErrorKind::WouldBlock, "nothing connected");
    }

    // Writing outside the working directory fails and leaves the host untouched.
    let marker = std::env::temp_dir().join(format!("rlx-cpp-escape-{}", std::process::id()));
    let write = format!(
        "#include <cstdio>\nint main(){{ int ok = 0; const char *ps[] = {{\"{}\", \"/etc/rlx-escape\", \"/usr/rlx-escape\", \"/tmp/rlx-escape\"}}; for (auto p : ps) {{ FILE *f = fopen(p, \"w\"); if (f) {{ ok++; fclose(f); }} }} FILE *in = fopen(\"inside.txt\", \"w\"); if (!in) return 5; fclose(in); printf(\"%d\\n\", ok); }}\n",
        marker.display()
    );
    let v = sb.grade(&one("write_outside", "0"), &write, &opts(5.0)).await;
    if prot.mount_namespace {
        assert!(v.passed, "{v:?}");
    }
    assert!(!marker.exists(), "the host was written to");

    // The compiler runs inside the sandbox too: a file of the host outside the read-only system
    // directories cannot be included, nor the environment through /proc.
    let secret = std::env::temp_dir().join(format!("rlx-cpp-secret-{}.h", std::process::id()));
    std::fs::write(&secret, "#define SECRET 42\n").unwrap();
    let include = format!("#include \"{}\"\n#include <cstdio>\nint main(){{ printf(\"%d\\n\", SECRET); }}\n", secret.display());
    let v = sb.grade(&one("include_host_file", "42"), &include, &opts(5.0)).await;
    std::fs::remove_file(&secret).unwrap();
    if prot.mount_namespace {
        assert_eq!(statuses(&v), [TestStatus::CompileError], "{v:?}");
    }
    let environ = "#include \"/proc/self/environ\"\nint main(){}\n";
    let v = sb.grade(&one("include_environ", ""), environ, &opts(5.0)).await;
    if prot.mount_namespace {
        assert_eq!(statuses(&v), [TestStatus::CompileError], "{v:?}");
    }

    // Killing its parent, init and everything it can see: grading goes on.
    let kill = "#include <csignal>\n#include <unistd.h>\n#include <cstdio>\nint main(){ kill(getppid(), SIGKILL); kill(1, SIGKILL); kill(-1, SIGKILL); puts(\"7\"); }\n";
    let v = sb.grade(&one("kill_parent", "7"), kill, &opts(10.0)).await;
    assert_ne!(v.status, VerdictStatus::InfraError, "{v:?}");
    let v = sb.grade(&one("after_kill", "8"), "#include <cstdio>\nint main(){ puts(\"8\"); }\n", &opts(10.0)).await;
    assert!(v.passed, "the worker survives: {v:?}");

    // Exit codes and printed markers decide nothing; the control pipes are closed before exec.
    let forge = "#include <unistd.h>\nint main(){ const char f[] = \"\\0\\0\\0\\x0b{\\\"exit\\\": 0}\"; write(3, f, sizeof f - 1); write(1, \"PASSED\\n\", 7); _exit(0); }\n";
    let v = sb.grade(&one("forge", "42"), forge, &opts(5.0)).await;
    assert_eq!(statuses(&v), [TestStatus::WrongAnswer], "{v:?}");
    assert_nothing_left(&sb);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_programs_and_plain_runs() {
    if !toolchain(Language::C) {
        return;
    }
    let sb = sandbox(1).await;
    let sum = "#include <stdio.h>\n#include <math.h>\nint main(void){ double x; scanf(\"%lf\", &x); printf(\"%.0f\\n\", sqrt(x)); return 0; }\n";
    let v = sb.grade(&problem(Language::C, "sqrt", &[("49\n", "7\n"), ("81", "9")]), sum, &opts(5.0)).await;
    assert!(v.passed && v.language == Some(Language::C), "{v:?}");

    // `run` (what `/run_code` uses): output, exit codes, signals, the compile step.
    let run = |code: &str, stdin: Option<&str>| ExecRequest {
        code: code.into(),
        stdin: stdin.map(str::to_owned),
        language: Language::C,
        limits: Limits { timeout: Duration::from_secs(3), compile_timeout: Duration::from_secs(60), ..Limits::default() },
        ..Default::default()
    };
    let out = sb.run(run("#include <stdio.h>\nint main(void){ int x; scanf(\"%d\", &x); printf(\"%d\\n\", x * 2); return 4; }", Some("21"))).await.unwrap();
    assert_eq!((out.status, String::from_utf8_lossy(&out.stdout).into_owned()), (ExecStatus::Exited(4), "42\n".to_owned()));
    assert!(out.compile.as_ref().is_some_and(rlx::sandbox::lang::Compiled::ok));
    let out = sb.run(run("#include <signal.h>\nint main(void){ raise(SIGSEGV); }", None)).await.unwrap();
    assert_eq!(out.status, ExecStatus::Signaled(libc::SIGSEGV));
    let out = sb.run(run("int main(void){ return nope; }", None)).await.unwrap();
    let c = out.compile.unwrap();
    assert!(!c.ok() && c.output.contains("nope"), "{c:?}");
    assert!(out.stdout.is_empty());
}

/// A testlib-style checker written here (no testlib): any proper divisor of n is accepted.
const DIVISOR_CHECKER: &str = r#"#include <cstdio>
int main(int argc, char** argv) {
    if (argc != 4) return 3;
    FILE* in = fopen(argv[1], "r"); FILE* out = fopen(argv[2], "r"); FILE* ans = fopen(argv[3], "r");
    long long n, x, a;
    if (!in || !ans || fscanf(in, "%lld", &n) != 1 || fscanf(ans, "%lld", &a) != 1) return 3;
    if (!out || fscanf(out, "%lld", &x) != 1) { fprintf(stderr, "wrong answer: no number\n"); return 2; }
    if (x > 1 && x < n && n % x == 0) return 0;
    fprintf(stderr, "wrong answer: %lld does not divide %lld\n", x, n);
    return 1;
}
"#;

/// A problem that ships a checker program: it is built once per worker and run per test in the
/// sandbox, and accepts an answer the exact checker refuses; its refusal is a wrong answer with
/// its message; a checker that does not build is the problem's fault (an infrastructure error),
/// never the submission's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpp_checker_programs() {
    if !toolchain(Language::Cpp) {
        return;
    }
    let sb = sandbox(1).await;
    let three = "#include <cstdio>\nint main(){ long long n; scanf(\"%lld\", &n); printf(\"%lld\\n\", n % 3 == 0 ? 3LL : 2LL); }\n";
    let mut p = problem(Language::Cpp, "divisor", &[("12\n", "2\n"), ("9\n", "3\n")]);
    p.metadata.insert("checker".into(), "exact".into());
    let v = sb.grade(&p, three, &opts(5.0)).await;
    assert_eq!(statuses(&v), [TestStatus::WrongAnswer, TestStatus::Passed], "the exact checker refuses 3 for 12: {v:?}");
    p.metadata.insert("checker_program".into(), DIVISOR_CHECKER.into());
    for _ in 0..2 {
        let v = sb.grade(&p, three, &opts(5.0)).await;
        assert!(v.passed, "the checker program accepts any divisor: {v:?}");
    }
    let five = "#include <cstdio>\nint main(){ printf(\"5\\n\"); }\n";
    let v = sb.grade(&p, five, &opts(5.0)).await;
    assert_eq!(statuses(&v), [TestStatus::WrongAnswer, TestStatus::WrongAnswer], "{v:?}");
    let said = v.tests[0].error.as_deref().unwrap_or_default();
    assert!(said.contains("checker: wrong answer: 5 does not divide 12") && v.tests[0].got.as_deref() == Some("5\n"), "{v:?}");
    // A submission that leaves a process behind to swap the checker for `exit 0` once its
    // directory appears: the submission's processes are dead before the checker's directory is
    // made, so the checker still refuses.
    let swap = r##"#include <bits/stdc++.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
int main() {
    if (fork() == 0) {
        setsid();
        for (int k = 0; k < 500; k++) {
            if (DIR* d = opendir(".")) {
                while (dirent* e = readdir(d)) {
                    std::string n = e->d_name;
                    if (n.rfind(".rlx-check-", 0) != 0) continue;
                    std::string p = n + "/rlx_checker";
                    unlink(p.c_str());
                    if (FILE* f = fopen(p.c_str(), "w")) { fputs("#!/bin/sh\nexit 0\n", f); fclose(f); chmod(p.c_str(), 0755); }
                }
                closedir(d);
            }
            usleep(10000);
        }
        _exit(0);
    }
    printf("5\n");
}
"##;
    let v = sb.grade(&p, swap, &opts(5.0)).await;
    assert_eq!(statuses(&v), [TestStatus::WrongAnswer, TestStatus::WrongAnswer], "the checker was not replaced: {v:?}");
    // Fail-fast stops at the checker's first refusal.
    let v = sb.grade(&p, five, &GradeOptions { fail_fast: true, ..opts(5.0) }).await;
    assert_eq!(statuses(&v), [TestStatus::WrongAnswer], "{v:?}");
    // A submission that does not compile is still a compile error; sent again, its compile
    // error comes from the cache (the compiler is not run again).
    for cached in [false, true] {
        let v = sb.grade(&p, "int main(){ return nope; }", &opts(5.0)).await;
        assert_eq!(statuses(&v), [TestStatus::CompileError, TestStatus::CompileError], "{v:?}");
        let c = v.compile.as_ref().unwrap();
        assert!(c.cached == cached && c.output.contains("nope"), "{v:?}");
    }
    // A Python submission is judged by the same checker.
    let py = problem(Language::Python, "divisor", &[("12\n", "2\n")]);
    let mut py = py;
    py.metadata.insert("checker_program".into(), DIVISOR_CHECKER.into());
    assert!(sb.grade(&py, "n = int(input())\nprint(4)\n", &opts(5.0)).await.passed);
    // The checker's own failures are not the submission's.
    p.metadata.insert("checker_program".into(), "int main(){ return nope; }".into());
    let v = sb.grade(&p, three, &opts(5.0)).await;
    assert_eq!(v.status, VerdictStatus::InfraError, "{v:?}");
    assert!(v.error.as_deref().unwrap_or_default().contains("checker program did not build"), "{v:?}");
    p.metadata.insert("checker_program".into(), "int main(){ return 3; }".into());
    let v = sb.grade(&p, three, &opts(5.0)).await;
    assert_eq!(v.status, VerdictStatus::InfraError, "{v:?}");
    assert!(v.error.as_deref().unwrap_or_default().contains("checker program failed on test 1 (exit 3)"), "{v:?}");
    assert_nothing_left(&sb);
}

/// A checker program that loops forever is the problem's fault (issue 51): the verdict says so
/// (`problem_fault`, the checker's time limit named) and the grading loop does not retry it as
/// it retries the sandbox's failures (it used to, three times, with backoff).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_checker_is_the_problems_fault_and_not_retried() {
    if !toolchain(Language::Cpp) {
        return;
    }
    let sb = std::sync::Arc::new(sandbox(1).await);
    let mut p = problem(Language::Python, "looping-checker", &[("12\n", "2\n")]);
    p.metadata.insert("checker_program".into(), "int main(){ for (volatile int i = 0;; i = i + 1) {} }".into());
    let subs = vec![(p.id.clone(), rlx::sandbox::Submission::Code("print(2)".into()))];
    let graded = rlx::sandbox::grade_all(sb.clone(), std::slice::from_ref(&p), subs, &opts(5.0), 1, 3, std::sync::Arc::new(())).await.unwrap();
    let g = &graded[0];
    assert_eq!(g.verdict.status, VerdictStatus::InfraError, "the code was not judged: {:?}", g.verdict);
    assert!(g.verdict.problem_fault, "{:?}", g.verdict);
    assert!(g.verdict.error.as_deref().unwrap_or_default().contains("checker program failed on test 1 (timeout)"), "{:?}", g.verdict);
    assert_eq!(g.infra_errors, 0, "graded once: not retried, not counted as the sandbox failing");
    let line = serde_json::to_value(&g.verdict).unwrap();
    assert_eq!(line["problem_fault"], true, "{line}");
    assert_nothing_left(&sb);
}

/// Rows that carry their own time and memory limits (Codeforces, CodeContests) are graded
/// under them, and `data.*.row_limits` scales, caps or ignores them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpp_per_row_limits() {
    if !toolchain(Language::Cpp) {
        return;
    }
    use rlx::data::source::{Options, load_source};
    use rlx::spec::types::{DataFormat, RowLimits, Source};
    let dir = tempfile::tempdir().unwrap();
    let rows = [
        serde_json::json!({"id": "slow", "problem": "p", "tests": [{"input": "sleep\n", "output": "ok\n"}], "time_limit": "0.5 seconds", "memory_limit": "64 megabytes"}),
        serde_json::json!({"id": "big", "problem": "p", "tests": [{"input": "alloc\n", "output": "ok\n"}], "time_limit": {"seconds": 0, "nanos": 500000000}, "memory_limit_bytes": 64000000}),
        serde_json::json!({"id": "plain", "problem": "p", "tests": [{"input": "sleep\n", "output": "ok\n"}], "checker": DIVISOR_CHECKER}),
    ];
    let path = dir.path().join("cf.jsonl");
    std::fs::write(&path, rows.iter().map(|r| format!("{r}\n")).collect::<String>()).unwrap();
    let hub = Options { hf: rlx::data::hf::Options { cache_dir: dir.path().join("hf"), offline: true, endpoint: None, token: None } };
    let load = |rl: Option<RowLimits>| {
        let s = Source { language: Some(Language::Cpp), format: DataFormat::Codeforces, row_limits: rl, ..Source::new(path.display().to_string()) };
        load_source(&s, &hub).unwrap().problems
    };
    let ps = load(None);
    assert_eq!((ps[0].time_limit_s(), ps[0].memory_limit_mb()), (Some(0.5), Some(64)));
    assert_eq!((ps[1].time_limit_s(), ps[1].memory_limit_mb()), (Some(0.5), Some(64)));
    assert_eq!((ps[2].time_limit_s(), ps[2].memory_limit_mb(), ps[2].checker_program().is_some()), (None, None, true));

    let sb = sandbox(1).await;
    let code = "#include <bits/stdc++.h>\nint main(){ std::string m; std::cin >> m; if (m == \"sleep\") std::this_thread::sleep_for(std::chrono::milliseconds(1500)); else { std::vector<char> v(200 << 20, 1); if (v[12345] != 1) return 1; } std::cout << \"ok\\n\"; }\n";
    // The spec-wide limits (6 s, 1 GiB) pass both; the rows' (0.5 s, 64 MB) fail both.
    async fn first_statuses(sb: &LocalSandbox, ps: Vec<Problem>, code: &str) -> Vec<Option<TestStatus>> {
        let mut out = vec![];
        for p in &ps[..2] {
            out.push(sb.grade(p, code, &opts(6.0)).await.tests.first().map(|t| t.status));
        }
        out
    }
    let grade = |ps| first_statuses(&sb, ps, code);
    assert_eq!(grade(load(None)).await, [Some(TestStatus::Timeout), Some(TestStatus::MemoryLimit)]);
    assert_eq!(grade(load(Some(RowLimits { ignore: true, ..Default::default() }))).await, [Some(TestStatus::Passed), Some(TestStatus::Passed)]);
    let scaled = RowLimits { time_scale: Some(10.0), memory_max_mb: Some(32), ..Default::default() };
    assert_eq!(grade(load(Some(scaled))).await, [Some(TestStatus::Passed), Some(TestStatus::MemoryLimit)], "5 s; 32 MB");
    let capped = RowLimits { time_scale: Some(10.0), time_max_s: Some(1.0), ..Default::default() };
    assert_eq!(grade(load(Some(capped))).await, [Some(TestStatus::Timeout), Some(TestStatus::MemoryLimit)], "1 s");
    assert_nothing_left(&sb);
}

/// The precompiled `<bits/stdc++.h>` (`rlx::sandbox::pch`): built once, put on the compile's
/// include path, used by g++ inside the sandbox (its `-H` marks it with `!`), without changing
/// a verdict or the line a compile error names; a program that includes other code first, or
/// the header twice, compiles as before; and no submission can write to or replace it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpp_precompiled_header() {
    if !toolchain(Language::Cpp) {
        return;
    }
    let Some(root) = rlx::sandbox::pch::root() else {
        eprintln!("SKIPPED: precompiled headers are off (RLX_PCH)");
        return;
    };
    // Without the mount namespace a program could reach the directory writable: no header.
    let degraded = LocalSandbox::start(LocalConfig { workers: 1, namespaces: false, ..LocalConfig::default() }).await.expect("sandbox starts");
    let argv = degraded.compile_argv(Language::Cpp, None).unwrap().unwrap();
    assert!(!argv.iter().any(|a| a == "-I"), "{argv:?}");
    drop(degraded);
    let sb = sandbox(2).await;
    if !sb.protection().mount_namespace {
        eprintln!("SKIPPED: no mount namespace, so no precompiled header (the programs could reach its directory)");
        return;
    }
    let argv = sb.compile_argv(Language::Cpp, None).unwrap().unwrap();
    let i = argv.iter().position(|a| a == "-I").expect("the header's directory is on the include path");
    let dir = std::path::PathBuf::from(&argv[i + 1]);
    assert!(dir.starts_with(&root) && argv[1..i] == ["-O2", "-std=c++17"], "after the flags it was built with: {argv:?}");
    // The first compile may run before the header is built: the verdict is the same.
    let p = problem(Language::Cpp, "aplusb", &[("1 2\n", "3\n"), ("1000000000000 1\n", "1000000000001\n")]);
    assert!(sb.grade(&p, APLUSB, &opts(5.0)).await.passed);
    assert!(rlx::sandbox::pch::wait(&dir, Duration::from_secs(600)), "the header builds");
    let gch = dir.join("bits/stdc++.h.gch");
    let before = std::fs::metadata(&gch).expect("the header is where the compile looks");

    // g++ inside the sandbox, as the programs' user, uses it (`!` in `-H`) for a program that
    // starts with the header, and does not for one that includes other code first.
    let prefix: Vec<String> = argv[..argv.iter().position(|a| a == "-o").unwrap()].to_vec();
    let probe = format!(
        "import subprocess\nfor src in [{:?}, '#include <vector>\\n' + {:?}]:\n    open('p.cpp', 'w').write(src)\n    r = subprocess.run({prefix:?} + ['-H', '-fsyntax-only', 'p.cpp'], capture_output=True, text=True)\n    print(r.returncode, any(l.startswith('! ') and l.endswith('bits/stdc++.h.gch') for l in r.stderr.splitlines()))\n",
        APLUSB, APLUSB
    );
    let limits = Limits { timeout: Duration::from_secs(60), memory_mb: 2048, ..Limits::default() };
    let out = sb.run(ExecRequest { code: probe, limits, ..Default::default() }).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "0 True\n0 False\n", "{}", String::from_utf8_lossy(&out.stderr));

    // Verdicts with the header: passes, wrong answers, and a program that includes other
    // headers first, the header twice, or defines a macro it depends on (g++ then skips it).
    let distinct = format!("// another program\n{APLUSB}");
    let v = sb.grade(&p, &distinct, &opts(5.0)).await;
    assert!(v.passed && v.compile.as_ref().is_some_and(|c| c.ok() && !c.cached), "{v:?}");
    let minus = "#include <bits/stdc++.h>\nint main(){long long a,b; std::cin>>a>>b; std::cout<<a-b<<\"\\n\";}\n";
    assert_eq!(statuses(&sb.grade(&p, minus, &opts(5.0)).await), [TestStatus::WrongAnswer; 2]);
    let body = "using namespace std;\nint main(){ long long a, b; cin >> a >> b; vector<long long> v{a, b}; cout << accumulate(v.begin(), v.end(), 0LL) << endl; }\n";
    for head in ["#include <vector>\n#include <bits/stdc++.h>\n", "#include <bits/stdc++.h>\n#include <bits/stdc++.h>\n", "#include \"bits/stdc++.h\"\n#include <bits/stdc++.h>\n", "#define _GLIBCXX_DEBUG\n#include <bits/stdc++.h>\n"] {
        let v = sb.grade(&p, &format!("{head}{body}"), &opts(5.0)).await;
        assert!(v.passed, "{head}: {v:?}");
    }

    // A compile error: the same verdict, and the same first error naming the user's line, as
    // g++ gives without the header.
    let broken = "#include <bits/stdc++.h>\nusing namespace std;\nint main(){\n  vector<int> v;\n  v.push_back(\"x\");\n}\n";
    let v = sb.grade(&p, broken, &opts(5.0)).await;
    assert_eq!(statuses(&v), [TestStatus::CompileError; 2], "{v:?}");
    let first_error = |text: &str| text.lines().find(|l| l.contains("error:")).map(str::to_owned);
    let with = first_error(&v.compile.as_ref().unwrap().output);
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("main.cpp"), broken).unwrap();
    let host = std::process::Command::new(&argv[0]).args(["-O2", "-std=c++17", "-o", "main", "main.cpp"]).current_dir(tmp.path()).output().unwrap();
    let without = first_error(&String::from_utf8_lossy(&host.stderr));
    assert!(with.as_deref().is_some_and(|l| l.starts_with("main.cpp:5:")), "{with:?}");
    assert_eq!(with, without, "the first error is g++'s own, with the header or without");

    // A submission can read the header but not write, replace, remove or add to it.
    let gch_s = gch.display().to_string();
    let bits_s = dir.join("bits").display().to_string();
    let attack = format!(
        "#include <cstdio>\n#include <unistd.h>\n#include <fcntl.h>\n#include <sys/stat.h>\nint main(){{ int ok = 0; const char *g = \"{gch_s}\";\n\
         FILE *r = fopen(g, \"r\"); if (!r) return 7; fclose(r);\n\
         FILE *w = fopen(g, \"r+\"); if (w) {{ ok++; fclose(w); }}\n\
         if (open(g, O_WRONLY | O_TRUNC) >= 0) ok++;\n\
         if (unlink(g) == 0) ok++;\n\
         FILE *n = fopen(\"fake.gch\", \"w\"); if (n) {{ fputs(\"x\", n); fclose(n); if (rename(\"fake.gch\", g) == 0) ok++; }}\n\
         if (open(\"{bits_s}/new.gch\", O_CREAT | O_WRONLY, 0644) >= 0) ok++;\n\
         if (chmod(g, 0666) == 0) ok++;\n\
         if (symlink(\"/tmp/work/fake.gch\", \"{bits_s}/x.h.gch\") == 0) ok++;\n\
         printf(\"%d\\n\", ok); }}\n"
    );
    let v = sb.grade(&problem(Language::Cpp, "replace_pch", &[("", "0")]), &attack, &opts(5.0)).await;
    assert!(v.passed, "{v:?}");
    let after = std::fs::metadata(&gch).unwrap();
    assert_eq!((after.len(), after.modified().unwrap()), (before.len(), before.modified().unwrap()), "the header is untouched");
    assert!(std::fs::read_dir(dir.join("bits")).unwrap().count() == 2, "nothing was added beside it");
    assert_nothing_left(&sb);
}
