//! The local sandbox with real Python and real processes: grading of every dataset format with
//! known-good and known-bad solutions, the LiveCodeBench conformance cases (with rlx's deliberate
//! differences), and the adversarial list of issue 3. Each adversarial case checks the verdict,
//! that nothing of the submission is left running, and that the host is unharmed. The only time
//! bound is a hang guard (deadline plus 60 s), not a performance check. The dataset tests need
//! ../shared/data and are skipped without it (a user's clone); the security and isolation tests
//! use only programs and problems in the repository.

#![allow(clippy::print_stderr)] // skip notices are meant to be seen in test output

use std::time::Duration;

use rlx::data::{self, IoCase, Problem, Tests};
use rlx::sandbox::local::{LocalConfig, LocalSandbox};
use rlx::sandbox::{ExecRequest, ExecStatus, GradeOptions, Grader, Limits, Sandbox, TestStatus, Verdict, VerdictStatus};

use crate::common::{fixture_problems, python_available, shared_data};

async fn sandbox(workers: usize) -> LocalSandbox {
    LocalSandbox::start(LocalConfig { workers, ..LocalConfig::default() }).await.expect("sandbox starts")
}

fn opts(timeout_s: f64) -> GradeOptions {
    GradeOptions { limits: Limits { timeout: Duration::from_secs_f64(timeout_s), ..Limits::default() }, fail_fast: false }
}

fn stdin_problem(id: &str, cases: &[(&str, &str)]) -> Problem {
    Problem {
        id: id.into(),
        statement: String::new(),
        starter_code: None,
        tests: Tests::Stdin { cases: cases.iter().map(|(i, o)| IoCase { input: (*i).into(), output: (*o).into() }).collect() },
        metadata: Default::default(),
    }
}

fn functional_problem(fn_name: &str, cases: &[(&str, &str)]) -> Problem {
    Problem {
        id: format!("fn/{fn_name}"),
        statement: String::new(),
        starter_code: None,
        tests: Tests::Functional {
            fn_name: fn_name.into(),
            cases: cases.iter().map(|(i, o)| IoCase { input: (*i).into(), output: (*o).into() }).collect(),
        },
        metadata: Default::default(),
    }
}

/// Processes still alive under the sandbox's uids (only meaningful when rlx is root and
/// programs run under their own uids; otherwise `None`).
fn left_behind(sb: &LocalSandbox) -> Option<usize> {
    if !sb.protection().unprivileged_uid {
        return None;
    }
    let uids = sb.uid_range();
    let mut n = 0;
    for e in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Ok(status) = std::fs::read_to_string(e.path().join("status")) else { continue };
        let uid = status.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<u32>().ok());
        if uid.is_some_and(|u| uids.contains(&u)) {
            n += 1;
        }
    }
    Some(n)
}

fn assert_nothing_left(sb: &LocalSandbox) {
    match left_behind(sb) {
        Some(n) => assert_eq!(n, 0, "processes left running under the sandbox uids"),
        None => eprintln!("note: not root, the per-uid process check is skipped"),
    }
}

/// Grade with a hang guard.
async fn grade(sb: &LocalSandbox, p: &Problem, code: &str, o: &GradeOptions) -> Verdict {
    let guard = Duration::from_secs_f64(rlx::sandbox::harness::deadline_s(o.limits.timeout.as_secs_f64(), p.tests.len()) + 60.0);
    tokio::time::timeout(guard, sb.grade(p, code, o)).await.expect("grading returned (hang guard)")
}

fn statuses(v: &Verdict) -> Vec<TestStatus> {
    v.tests.iter().map(|t| t.status).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn livecodebench_stdin_and_functional_from_shared_data() {
    if !python_available() {
        return;
    }
    let Some(lcb) = shared_data("lcb/lcb_train_580.json") else { return };
    let problems = data::load_file(&lcb, None).unwrap();
    let sb = sandbox(2).await;
    let o = opts(6.0);
    // 187: ceil(A / B), stdin.
    let ceil = &problems[187];
    let v = grade(&sb, ceil, "a, b = map(int, input().split())\nprint(-(-a // b))", &o).await;
    assert_eq!(v.status, VerdictStatus::Passed, "{v:?}");
    assert_eq!((v.tests_passed, v.tests_total), (3, 3));
    let v = grade(&sb, ceil, "a, b = map(int, input().split())\nprint(a // b)", &o).await;
    assert_eq!(v.status, VerdictStatus::Failed);
    assert!(v.tests.iter().any(|t| t.status == TestStatus::WrongAnswer));
    // 181: who won the series, stdin.
    let v = grade(&sb, &problems[181], "n=int(input())\ns=input()\nt=s.count('T'); a=s.count('A')\nprint('T' if t>a else 'A' if a>t else ('A' if s[-1]=='T' else 'T'))", &o).await;
    assert!(v.passed, "{v:?}");
    // 0: countSeniors, functional through `class Solution`.
    let seniors = "class Solution:\n    def countSeniors(self, details: List[str]) -> int:\n        return sum(int(d[11:13]) > 60 for d in details)\n";
    let v = grade(&sb, &problems[0], seniors, &o).await;
    assert!(v.passed, "{v:?}");
    let v = grade(&sb, &problems[0], &seniors.replace("> 60", "> 50"), &o).await;
    assert_eq!(v.status, VerdictStatus::Failed);
    // 22: removeTrailingZeros, functional with JSON string arguments.
    let v = grade(&sb, &problems[22], "class Solution:\n    def removeTrailingZeros(self, num: str) -> str:\n        return num.rstrip('0')\n", &o).await;
    assert!(v.passed, "{v:?}");
    let v = grade(&sb, &problems[22], "class Solution:\n    def removeTrailingZeros(self, num):\n        return num\n", &o).await;
    assert_eq!((v.status, v.tests_passed, v.tests_total), (VerdictStatus::Failed, 1, 2));
    assert_nothing_left(&sb);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_contests_and_mbpp_from_shared_data() {
    if !python_available() {
        return;
    }
    let (Some(cc_path), Some(mbpp_path), Some(sanitized_path)) =
        (shared_data("lcb/code_contests_test_165.json"), shared_data("mbpp/mbpp.jsonl"), shared_data("mbpp/sanitized-mbpp.json"))
    else {
        return;
    };
    let sb = sandbox(2).await;
    let o = opts(6.0);
    let cc = data::load_file(&cc_path, None).unwrap();
    let square = "t=int(input())\nfor _ in range(t):\n    s=input().strip(); n=len(s)\n    print('YES' if n%2==0 and s[:n//2]==s[n//2:] else 'NO')\n";
    let v = grade(&sb, &cc[139], square, &o).await;
    assert_eq!((v.passed, v.tests_total), (true, 4), "{v:?}");
    let v = grade(&sb, &cc[139], &square.replace("'YES'", "'yes'"), &o).await;
    assert!(!v.passed, "comparison is case-sensitive");

    let mbpp = data::load_file(&mbpp_path, None).unwrap();
    let raw: Vec<serde_json::Value> =
        std::fs::read_to_string(&mbpp_path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    // The reference solutions pass, including task 367 whose setup code uses the solution's class.
    for idx in [1usize, 2, 3, 366] {
        let code = raw[idx]["code"].as_str().unwrap();
        let v = grade(&sb, &mbpp[idx], code, &o).await;
        assert!(v.passed, "task {}: {v:?}", mbpp[idx].id);
    }
    // A wrong solution fails its asserts as wrong answers; a crashing one as runtime errors.
    let v = grade(&sb, &mbpp[1], "def similar_elements(a, b):\n    return (1,)\n", &o).await;
    assert_eq!(statuses(&v), vec![TestStatus::WrongAnswer; 3]);
    let v = grade(&sb, &mbpp[1], "def similar_elements(a, b):\n    return 1/0\n", &o).await;
    assert_eq!(statuses(&v), vec![TestStatus::RuntimeError; 3]);

    let sanitized = data::load_file(&sanitized_path, None).unwrap();
    let raw: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&sanitized_path).unwrap()).unwrap();
    let with_imports = raw.iter().position(|r| !r["test_imports"].as_array().unwrap().is_empty()).unwrap();
    for idx in [0usize, with_imports] {
        let v = grade(&sb, &sanitized[idx], raw[idx]["code"].as_str().unwrap(), &o).await;
        assert!(v.passed, "sanitized task {}: {v:?}", sanitized[idx].id);
    }
    assert_nothing_left(&sb);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taco_primeintellect_codeforces_and_humaneval_rows() {
    if !python_available() {
        return;
    }
    // These formats have no file in ../shared/data; the rows below are written in their exact
    // shapes (reference/datasets.md §2.1, §2.5, §2.6).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixed.jsonl");
    let rows = [
        serde_json::json!({"problem": "add", "tests": "{\"inputs\": [[1, 2], [5, 7]], \"outputs\": [[3], [12]], \"fn_name\": \"add\"}"}),
        serde_json::json!({"problem": "echo", "tests": {"inputs": [["3", "1 2 3"]], "outputs": [["6"]]}}),
        serde_json::json!({"problem": "pi", "tests": [{"type": "stdin_stdout", "input": "4\n", "output": "16\n"}]}),
        serde_json::json!({"problem": "pif", "tests": [{"type": "function_call", "fn_name": "mul", "input": [3, 4], "output": [12]}]}),
        serde_json::json!({"problem": "cf", "tests": [{"input": "2 3\n", "output": "5\n"}]}),
        serde_json::json!({"task_id": "HumanEval/x", "prompt": "def inc(x):\n    \"\"\"Add one.\"\"\"\n", "canonical_solution": "    return x + 1\n",
                           "test": "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(-1) == 0\n", "entry_point": "inc"}),
    ];
    std::fs::write(&path, rows.iter().map(|r| r.to_string() + "\n").collect::<String>()).unwrap();
    let problems = data::load_file(&path, None).unwrap();
    let kinds: Vec<&str> = problems.iter().map(|p| p.metadata["format"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["taco", "taco", "primeintellect", "primeintellect", "codeforces", "humaneval"]);
    let sb = sandbox(2).await;
    let o = opts(6.0);
    let good = [
        "def add(a, b):\n    return a + b",
        "input()\nprint(sum(map(int, input().split())))",
        "n=int(input())\nprint(n*n)",
        "def mul(a, b):\n    return a * b",
        "print(sum(map(int, input().split())))",
        "    return x + 1\n",
    ];
    let bad = [
        "def add(a, b):\n    return a - b",
        "print(0)",
        "print(4)",
        "def mul(a, b):\n    return a + b",
        "print(6)",
        "def inc(x):\n    return x",
    ];
    for (p, (g, b)) in problems.iter().zip(good.iter().zip(bad)) {
        let v = grade(&sb, p, g, &o).await;
        assert!(v.passed, "{}: {v:?}", p.id);
        let v = grade(&sb, p, b, &o).await;
        assert_eq!(v.status, VerdictStatus::Failed, "{}: {v:?}", p.id);
    }
}

/// The 37 conformance cases of reference/sandbox-fusion.md §3.4. rlx's verdict equals the
/// reference harness's except where the reference rejects correct programs by accident of its
/// in-process execution (now passing) or accepts the known hacks (now failing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn livecodebench_conformance_cases() {
    if !python_available() {
        return;
    }
    // (name, program, [(input, output)], fn_name, reference verdict, rlx verdict)
    type Case = (&'static str, &'static str, Vec<(&'static str, &'static str)>, Option<&'static str>, bool, bool);
    let e = "";
    let cases: Vec<Case> = vec![
        ("exact", "a,b=map(int,input().split())\nprint(a+b)", vec![("1 2\n", "3\n")], None, true, true),
        ("trailing_ws_and_blank_lines", "print('3   ')\nprint()\nprint()", vec![("\n", "3")], None, true, true),
        ("leading_blank_lines", "print()\nprint('3')", vec![("\n", "3\n")], None, true, true),
        ("interior_blank_line", "print('1')\nprint()\nprint('2')", vec![(e, "1\n2\n")], None, true, true),
        ("interior_line_trailing_space", "print('1 ')\nprint('2')", vec![(e, "1\n2\n")], None, true, true),
        ("case_sensitive", "print('YES')", vec![(e, "yes\n")], None, false, false),
        ("token_spacing_differs", "print('1  2')", vec![(e, "1 2\n")], None, false, false),
        ("float_tol_1e-6_rel", "print('1.000001')", vec![(e, "1.0\n")], None, true, true),
        ("float_tol_1e-4_rel", "print('1.0001')", vec![(e, "1.0\n")], None, false, false),
        ("float_two_per_line", "print('1.000001 2.0')", vec![(e, "1.0 2.0\n")], None, false, false),
        ("int_vs_float_line", "print('3.0')", vec![(e, "3\n")], None, true, true),
        ("leading_zero_int", "print('03')", vec![(e, "3\n")], None, false, false),
        ("neg_float", "print('-0.5000001')", vec![(e, "-0.5\n")], None, true, true),
        ("sys_stdin_readline", "import sys\nn=int(sys.stdin.readline())\nprint(n*2)", vec![("21\n", "42\n")], None, true, true),
        ("from_sys_import_stdin_readline", "from sys import stdin\nn=int(stdin.readline())\nprint(n*2)", vec![("21\n", "42\n")], None, true, true),
        ("input_eq_sys_stdin_readline", "import sys\ninput=sys.stdin.readline\nn=int(input())\nprint(n*2)", vec![("21\n", "42\n")], None, true, true),
        ("sys_stdin_read_split", "import sys\nd=sys.stdin.read().split()\nprint(sum(map(int,d)))", vec![("1 2\n3\n", "6\n")], None, true, true),
        ("sys_stdin_buffer", "import sys\nd=sys.stdin.buffer.read().split()\nprint(sum(map(int,d)))", vec![("1 2\n3\n", "6\n")], None, false, true),
        ("open0", "d=open(0).read().split()\nprint(sum(map(int,d)))", vec![("1 2\n3\n", "6\n")], None, false, true),
        ("stdout_write", "import sys\nsys.stdout.write('6\\n')", vec![(e, "6\n")], None, true, true),
        ("os_write_fd1", "import os\nos.write(1,b'6\\n')", vec![(e, "6\n")], None, false, true),
        ("main_guard", "def main():\n    print(6)\nif __name__ == \"__main__\":\n    main()", vec![(e, "6\n")], None, true, true),
        ("main_guard_not_last", "def main():\n    print(6)\nif __name__ == '__main__':\n    main()\nx=1", vec![(e, "6\n")], None, false, true),
        ("global_stmt", "cnt=0\ndef f():\n    global cnt\n    cnt+=1\nf()\nprint(cnt)", vec![(e, "1\n")], None, false, true),
        ("exit_builtin", "print(6)\nexit()", vec![(e, "6\n")], None, false, true),
        ("sys_exit_0_after_print", "import sys\nprint(6)\nsys.exit(0)", vec![(e, "6\n")], None, true, true),
        ("runtime_error", "print(1/0)", vec![(e, "0\n")], None, false, false),
        ("tle_loop", "while True: pass", vec![(e, "0\n")], None, false, false),
        ("hack_os__exit0", "import os\nos._exit(0)", vec![(e, "42\n")], None, true, false),
        (
            "hack_read_test_cases_txt",
            "import json,os\nfor d in ['.', '..', '/tmp']:\n    for f in os.listdir(d):\n        try:\n            t=json.load(open(os.path.join(d,f)))\n            print(json.loads(t['input_output'])['outputs'][0])\n        except Exception:\n            pass\nimport sys\nprint(sys.stdin.read())",
            vec![("5\n1 2 3 4 5\n", "15\n"), ("3\n9 9 9\n", "27\n")],
            None,
            true,
            false,
        ),
        ("multi_test_fail_second", "n=int(input())\nprint(n if n<5 else 0)", vec![("1\n", "1\n"), ("7\n", "7\n")], None, false, false),
        ("fn_exact", "def add(a, b):\n    return a+b", vec![("1\n2", "3")], Some("add"), true, true),
        ("fn_solution_class", "class Solution:\n    def add(self, a, b):\n        return a+b", vec![("1\n2", "3")], Some("add"), true, true),
        ("fn_tuple_vs_list", "def f(a):\n    return (a, a)", vec![("1", "[1, 1]")], Some("f"), true, true),
        ("fn_float_exact_only", "def f(a):\n    return 0.1+0.2", vec![("1", "0.3")], Some("f"), false, false),
        ("fn_int_vs_float", "def f(a):\n    return 3", vec![("1", "3.0")], Some("f"), true, true),
        ("fn_hack_sys_exit0", "import sys\nsys.exit(0)", vec![("1", "3")], Some("f"), true, false),
    ];
    assert_eq!(cases.len(), 37);
    let sb = sandbox(2).await;
    let o = opts(2.0);
    let mut differences = Vec::new();
    for (name, code, tests, fn_name, reference, expected) in &cases {
        let p = match fn_name {
            Some(f) => functional_problem(f, tests),
            None => stdin_problem(name, tests),
        };
        let v = grade(&sb, &p, code, &o).await;
        assert_ne!(v.status, VerdictStatus::InfraError, "{name}: {v:?}");
        assert_eq!(v.passed, *expected, "case {name}: {v:?}");
        if reference != expected {
            differences.push(*name);
        }
    }
    // The deliberate differences, all documented in README.sandbox.md.
    assert_eq!(
        differences,
        [
            "sys_stdin_buffer",
            "open0",
            "os_write_fd1",
            "main_guard_not_last",
            "global_stmt",
            "exit_builtin",
            "hack_os__exit0",
            "hack_read_test_cases_txt",
            "fn_hack_sys_exit0"
        ]
    );
    assert_nothing_left(&sb);
}

/// One adversarial program: its verdict, and nothing left running afterwards.
async fn adversarial(sb: &LocalSandbox, name: &str, code: &str, expected_out: &str, timeout_s: f64) -> Verdict {
    let p = stdin_problem(name, &[("", expected_out)]);
    let v = grade(sb, &p, code, &opts(timeout_s)).await;
    assert_ne!(v.status, VerdictStatus::InfraError, "{name}: {v:?}");
    assert_nothing_left(sb);
    v
}

/// A program that writes the frame a program process sends when its set-up failed, and exits.
const FORGED_INFRA: &str = "import os, struct, json\nb = json.dumps({'infra': 'forged'}).encode()\nos.write(3, struct.pack('>I', len(b)) + b)\nos._exit(0)\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adversarial_resource_abuse() {
    if !python_available() {
        return;
    }
    let sb = sandbox(1).await;
    let fork_bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n";
    let v = adversarial(&sb, "fork_bomb", fork_bomb, "1", 2.0).await;
    assert!(!v.passed);
    assert!(matches!(statuses(&v)[..], [TestStatus::Timeout | TestStatus::RuntimeError]), "{v:?}");

    // A small address-space limit keeps the page-touching short on a loaded machine.
    let p = stdin_problem("memory_bomb", &[("", "1")]);
    let mut o = opts(20.0);
    o.limits.memory_mb = 256;
    let v = grade(&sb, &p, "x = []\nwhile True:\n    x.append(bytearray(16 << 20))\n", &o).await;
    assert_eq!(statuses(&v), [TestStatus::MemoryLimit]);
    assert_nothing_left(&sb);

    let v = adversarial(&sb, "infinite_loop", "while True:\n    pass\n", "1", 1.0).await;
    assert_eq!(statuses(&v), [TestStatus::Timeout]);

    let v = adversarial(&sb, "sleep", "import time\ntime.sleep(1000)\n", "1", 1.0).await;
    assert_eq!(statuses(&v), [TestStatus::Timeout]);

    // A generous limit: on a starved machine, moving 16 MiB must not turn into a timeout.
    let v = adversarial(&sb, "flood", "import sys\nb = 'x' * (1 << 20)\nfor _ in range(100):\n    sys.stdout.write(b)\n", "1", 30.0).await;
    assert_eq!(statuses(&v), [TestStatus::OutputLimit], "{v:?}");

    // Signals are ignored and the program forks and daemonises: still killed, and the children too.
    let daemon = "import os, signal, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(1000)\n    os._exit(0)\nprint(1)\nsys.stdout.flush()\n";
    let v = adversarial(&sb, "daemon", daemon, "1", 10.0).await;
    assert!(v.passed, "the program's own output still counts: {v:?}");

    let v = adversarial(&sb, "deep_recursion", "def f(n):\n    return f(n + 1) + 1\nprint(f(0))\n", "1", 5.0).await;
    // RecursionError at 600 000 frames (the reference's limit), or the limits on a slow machine.
    assert!(matches!(statuses(&v)[..], [TestStatus::RuntimeError | TestStatus::MemoryLimit | TestStatus::Timeout]), "{v:?}");

    // Deep but finite recursion through C frames is a correct program.
    let lru = "from functools import lru_cache\n@lru_cache(None)\ndef f(n):\n    return 0 if n == 0 else f(n - 1) + 1\nprint(f(100000))\n";
    let v = adversarial(&sb, "deep_lru_recursion", lru, "100000", 10.0).await;
    assert!(v.passed, "{v:?}");

    // Killing its parent, init and everything it can see: grading goes on.
    let kill = "import os, signal\nfor pid in (os.getppid(), 1, -1):\n    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\nprint(7)\n";
    let v = adversarial(&sb, "kill_parent", kill, "7", 10.0).await;
    assert!(v.passed, "{v:?}");
    let v = adversarial(&sb, "after_kill", "print(8)", "8", 10.0).await;
    assert!(v.passed, "the worker survives: {v:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adversarial_escapes() {
    if !python_available() {
        return;
    }
    let sb = sandbox(1).await;
    let prot = sb.protection().clone();

    // Network: a server on the host's loopback is unreachable.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!(
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'hi')\n    print('connected')\nexcept OSError:\n    print('blocked')\n"
    );
    let v = adversarial(&sb, "connect", &connect, "blocked", 5.0).await;
    if prot.network_namespace {
        assert!(v.passed, "{v:?}");
        assert_eq!(listener.accept().unwrap_err().kind(), std::io::ErrorKind::WouldBlock, "nothing connected");
    }

    // Writing outside the working directory fails and leaves the host untouched.
    let marker = std::env::temp_dir().join(format!("rlx-escape-{}", std::process::id()));
    let repo_marker = std::env::current_dir().unwrap().join(format!("rlx-escape-{}", std::process::id()));
    let write = format!(
        "ok = 0\nfor p in [{:?}, {:?}, '/etc/rlx-escape', '/usr/rlx-escape', '/tmp/rlx-escape']:\n    try:\n        open(p, 'w').write('x')\n        ok += 1\n    except OSError:\n        pass\nopen('inside.txt', 'w').write('fine')\nprint(ok)\n",
        marker.display().to_string(),
        repo_marker.display().to_string(),
    );
    let v = adversarial(&sb, "write_outside", &write, "0", 5.0).await;
    if prot.mount_namespace {
        assert!(v.passed, "{v:?}");
    }
    assert!(!marker.exists() && !repo_marker.exists(), "the host was written to");

    // Reading the expected output: not on disk anywhere the program can see, not in its memory.
    // The dataset file it also tries is the repository's own, so this runs in any clone.
    let lcb = std::fs::canonicalize(fixture_problems()).unwrap();
    let needle_hunt = format!(
        "import gc, os\nneedle = 'SECRET-' + 'EXPECTED-' + '42'\nfound = None\nfor o in gc.get_objects():\n    if isinstance(o, (str, bytes)) and o is not needle:\n        s = o if isinstance(o, str) else o.decode('latin-1')\n        if needle in s and s != needle:\n            found = needle\nfor root in ['/', '/tmp', '.', '..']:\n    for dirpath, dirs, files in os.walk(root):\n        if dirpath.startswith(('/proc', '/sys', '/usr', '/etc', '/lib', '/dev')) or '.pyenv' in dirpath or 'python3' in dirpath:\n            dirs[:] = []\n            continue\n        for f in files:\n            try:\n                if needle in open(os.path.join(dirpath, f), errors='ignore').read(1 << 20):\n                    found = needle\n            except OSError:\n                pass\ntry:\n    open({:?}).read()\n    found = found or 'dataset-readable'\nexcept OSError:\n    pass\nprint(found)\n",
        lcb.display().to_string()
    );
    let v = adversarial(&sb, "read_tests", &needle_hunt, "SECRET-EXPECTED-42", 20.0).await;
    assert_eq!(statuses(&v), [TestStatus::WrongAnswer], "{v:?}");

    // Non-UTF-8 output is judged (and fails), it does not break grading.
    let v = adversarial(&sb, "non_utf8", "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe42\\n')\n", "42", 10.0).await;
    assert_eq!(statuses(&v), [TestStatus::WrongAnswer]);

    // os._exit(0) and sys.exit(0) decide nothing.
    let v = adversarial(&sb, "os_exit", "import os\nos._exit(0)\n", "42", 10.0).await;
    assert_eq!(statuses(&v), [TestStatus::WrongAnswer]);
    let v = adversarial(&sb, "fake_marker", "print('PASSED')\nprint('All tests passed')\n", "42", 10.0).await;
    assert_eq!(statuses(&v), [TestStatus::WrongAnswer]);
    let p = functional_problem("f", &[("1", "3")]);
    let v = grade(&sb, &p, "import sys\nsys.exit(0)\n", &opts(10.0)).await;
    assert_eq!(statuses(&v), [TestStatus::RuntimeError]);
    // Writing a forged functional result and exiting only "returns" that value: still judged.
    let forge = "import os, struct, json\nb = json.dumps({'res': {'ok': 4}, 'exit': 0}).encode()\nos.write(3, struct.pack('>I', len(b)) + b)\nos._exit(0)\n";
    let v = grade(&sb, &p, forge, &opts(10.0)).await;
    assert_eq!(statuses(&v), [TestStatus::WrongAnswer]);
    // The worker reads the program's process's pipes itself; the first frame on its control
    // pipe is the process's own (ready, or why its set-up failed: an infrastructure error),
    // written before any program code runs. A frame the program writes there, whatever it says,
    // only ends a test: never a sandbox failure, which would keep the program's failure unscored.
    let v = adversarial(&sb, "forged_infra", FORGED_INFRA, "42", 10.0).await;
    assert_eq!(statuses(&v), [TestStatus::WrongAnswer]);
    // A value whose __eq__ always says yes is not plain data and equals nothing.
    let v = grade(&sb, &p, "class Y:\n    def __eq__(self, o):\n        return True\ndef f(a):\n    return Y()\n", &opts(10.0)).await;
    assert_eq!(statuses(&v), [TestStatus::WrongAnswer]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_reports_output_exit_and_signals() {
    if !python_available() {
        return;
    }
    let sb = sandbox(1).await;
    let run = |code: &str| ExecRequest { code: code.into(), limits: Limits { timeout: Duration::from_secs(3), ..Limits::default() }, ..Default::default() };
    let out = sb.run(run("import sys\nsys.stdout.buffer.write(b'\\xff\\xfe ok\\n')\nsys.stderr.write('err')\nsys.exit(3)")).await.unwrap();
    assert_eq!(out.status, ExecStatus::Exited(3));
    assert_eq!(out.stdout, b"\xff\xfe ok\n", "non-UTF-8 output is kept byte for byte");
    assert_eq!(out.stderr, b"err");
    let out = sb.run(run("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)")).await.unwrap();
    assert_eq!(out.status, ExecStatus::Signaled(15));
    let out = sb.run(run(FORGED_INFRA)).await.expect("a frame the program forges is no sandbox failure");
    assert_eq!(out.status, ExecStatus::Exited(0));
    let out = sb.run(run("raise ValueError('boom')")).await.unwrap();
    assert_eq!(out.status, ExecStatus::Exited(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ValueError: boom"));
    let mut req = run("import sys\nprint(open('data.txt').read() + sys.stdin.read())\nopen('out.txt', 'w').write('result')");
    req.stdin = Some("B".into());
    req.files.insert("data.txt".into(), b"A".to_vec());
    req.fetch_files = vec!["out.txt".into(), "missing.txt".into()];
    let out = sb.run(req).await.unwrap();
    assert_eq!(out.stdout, b"AB\n");
    assert_eq!(out.files.get("out.txt").map(Vec::as_slice), Some(&b"result"[..]));
    assert!(!out.files.contains_key("missing.txt"));
    // Environment: nothing of rlx's reaches the program.
    let out = sb.run(run("import os\nprint(sorted(os.environ))")).await.unwrap();
    let env = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!env.contains("CARGO") && !env.contains("RUST"), "inherited environment: {env}");
    assert_nothing_left(&sb);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_fast_stops_at_the_first_failure_and_the_worker_goes_on() {
    if !python_available() {
        return;
    }
    let sb = sandbox(1).await;
    let p = stdin_problem("ff", &[("1\n", "1\n"), ("2\n", "0\n"), ("3\n", "3\n"), ("4\n", "4\n")]);
    let code = "import time\nn = int(input())\nif n == 3:\n    time.sleep(1000)\nprint(n)\n";
    // All tests by default: the third times out, the fourth still runs in a fresh process.
    let v = grade(&sb, &p, code, &opts(1.0)).await;
    assert_eq!(statuses(&v), [TestStatus::Passed, TestStatus::WrongAnswer, TestStatus::Timeout, TestStatus::Passed]);
    assert_eq!((v.tests_passed, v.tests_total), (2, 4));
    // Fail-fast: the reference harness's behaviour, the rest is not run.
    let mut o = opts(1.0);
    o.fail_fast = true;
    let v = grade(&sb, &p, code, &o).await;
    assert_eq!(statuses(&v), [TestStatus::Passed, TestStatus::WrongAnswer]);
    assert_eq!((v.passed, v.tests_total), (false, 4));
    assert_nothing_left(&sb);
    // Also when the first failure ends the program's process (a timeout): nothing after it runs.
    let v = grade(&sb, &p, "import time\nn = int(input())\nif n == 1:\n    time.sleep(1000)\nprint(n)\n", &o).await;
    assert_eq!(statuses(&v), [TestStatus::Timeout]);
    assert_nothing_left(&sb);
    let v = grade(&sb, &p, "print(input())", &opts(1.0)).await;
    assert_eq!(statuses(&v), [TestStatus::Passed, TestStatus::WrongAnswer, TestStatus::Passed, TestStatus::Passed]);
}

/// Without namespaces (as on machines that forbid them): still a separate uid per slot (when
/// root), rlimits and deadlines, and every process of the slot's uid is killed after each test,
/// including a child that left the process group with `setsid`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn degraded_mode_without_namespaces() {
    if !python_available() {
        return;
    }
    let sb = LocalSandbox::start(LocalConfig { workers: 1, namespaces: false, ..LocalConfig::default() }).await.unwrap();
    let prot = sb.protection().clone();
    assert!(!prot.pid_namespace && !prot.network_namespace && !prot.mount_namespace);
    assert!(prot.notes.iter().any(|n| n.contains("disabled")), "{prot:?}");
    assert!(LocalSandbox::start(LocalConfig { workers: 1, namespaces: false, strict: true, ..LocalConfig::default() }).await.is_err());
    // The repository's own problem (ceiling division), so this runs in any clone.
    let problems = data::load_file(&fixture_problems(), None).unwrap();
    let v = grade(&sb, &problems[0], "a, b = map(int, input().split())\nprint(-(-a // b))", &opts(6.0)).await;
    assert!(v.passed, "{v:?}");
    let v = adversarial(&sb, "loop", "while True:\n    pass\n", "1", 1.0).await;
    assert_eq!(statuses(&v), [TestStatus::Timeout]);
    let daemon = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(1000)\n    os._exit(0)\nprint(1)\n";
    let v = adversarial(&sb, "daemon", daemon, "1", 10.0).await;
    assert!(v.passed, "{v:?}");
    let v = adversarial(&sb, "fork_bomb", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", "1", 1.0).await;
    assert!(!v.passed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_tests_report_what_the_program_did() {
    // What the feedback turn of a multi-attempt rollout shows the model.
    if !python_available() {
        return;
    }
    let sb = sandbox(1).await;
    let o = opts(2.0);
    let p = stdin_problem("double", &[("2\n", "4\n"), ("5\n", "10\n")]);
    let v = grade(&sb, &p, "n = int(input())\nprint(n * 2 if n < 3 else n + 2)", &o).await;
    assert_eq!(statuses(&v), vec![TestStatus::Passed, TestStatus::WrongAnswer]);
    assert_eq!((v.tests[0].got.as_deref(), v.tests[0].error.as_deref()), (None, None), "nothing for a passed test");
    assert_eq!(v.tests[1].got.as_deref(), Some("7\n"));
    let v = grade(&sb, &p, "n = int(input())\nprint(undefined_name)", &o).await;
    let err = v.tests[0].error.as_deref().unwrap();
    assert!(err.contains("NameError") && err.contains("undefined_name"), "{err}");
    let f = functional_problem("add", &[("1\n2", "3")]);
    let v = grade(&sb, &f, "def add(a, b):\n    return [a, b]", &o).await;
    assert_eq!(v.tests[0].got.as_deref(), Some("[1, 2]"));
    // Megabytes of output come back clipped.
    let v = grade(&sb, &p, "print('x' * 100000)", &o).await;
    assert!(v.tests[0].got.as_ref().unwrap().len() < 1000);
}
