//! The warm workers of the local sandbox (issue 17): modules preloaded before the fork cannot
//! carry one submission's state into the next nor be written to, and the worker's warm-up of
//! them leaves them as a fresh interpreter has them; no submission finds an earlier one's code,
//! inputs, expected outputs or files in its own memory (with and without namespaces), and a
//! worker that lost its zygote is replaced rather than refilled; a request's files reach the program byte for
//! byte; bytecode cached for repeated request files cannot be planted by a submission; numpy
//! comes from the interpreter's own environment with one BLAS thread and does not eat the memory
//! limit; a virtualenv under /tmp stays visible; and submissions waiting off the CPU do not hold
//! back the queue. Only programs written here; no ../shared data.

#![allow(clippy::print_stderr)] // skip notices are meant to be seen in test output

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use rlx::sandbox::local::{LocalConfig, LocalSandbox};
use rlx::sandbox::{ExecOutput, ExecRequest, ExecStatus, Limits, Sandbox};

use crate::common::{python_available, python_env};

/// numpy as §5 of the Sandbox Fusion reference ran it; wheels for CPython 3.11-3.14.
pub(crate) const NUMPY: &str = "numpy==2.4.6";

/// One slot: consecutive submissions run on the same warm worker.
async fn one_slot(python: Option<PathBuf>) -> LocalSandbox {
    LocalSandbox::start(LocalConfig { workers: 1, max_in_flight: Some(1), python, ..LocalConfig::default() }).await.expect("sandbox starts")
}

async fn run(sb: &LocalSandbox, code: &str, files: &[(&str, &str)], memory_mb: u64) -> ExecOutput {
    let limits = Limits { timeout: Duration::from_secs(30), memory_mb, ..Limits::default() };
    let files: BTreeMap<String, Vec<u8>> = files.iter().map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec())).collect();
    sb.run(ExecRequest { code: code.into(), files, limits, ..Default::default() }).await.expect("the sandbox runs it")
}

fn stdout(o: &ExecOutput) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

/// A submission that changes every kind of shared state a preloaded module offers, and checks
/// that the change took (so the next submission's check is meaningful).
const MUTATE: &str = r#"
import builtins, collections, json, os, statistics, sys
try:
    import numpy
    numpy.add = lambda *a, **k: 42
    numpy.LEAK = "secret-A"
    assert numpy.add(1, 1) == 42
except ImportError:
    pass
sys.modules["leaky_module"] = type(sys)("leaky_module")
sys.modules["json"] = type(sys)("fake_json")
collections.LEAK = "secret-A"
statistics.mean = lambda xs: -1
builtins.LEAK = "secret-A"
builtins.max = lambda *a, **k: -1
os.environ["LEAK"] = "secret-A"
sys.path.insert(0, "/tmp/evil")
sys.setrecursionlimit(4321)
assert max(1, 2) == -1 and statistics.mean([1, 3]) == -1
# Opening the preloaded modules' files and bytecode caches for writing (appending nothing:
# should it succeed, the host's files stay as they were).
import importlib.util
targets = [json.__file__, statistics.__file__, importlib.util.cache_from_source(statistics.__file__)]
if "numpy" in sys.modules:
    targets.append(sys.modules["numpy"].__file__)
written = []
for t in targets:
    try:
        open(t, "a").close()
        written.append(t)
    except OSError:
        pass
print("mutated", "written:" + ",".join(written) if written else "nothing-written")
# The state of unittest.mock and pkgutil that the worker's warm-up exercises before the fork
# (harness.py `warm_up`): a patch left active, a rebound module global, a cache filled.
import pkgutil, unittest.mock
unittest.mock.file_spec = ["secret-A"]
pkgutil.resolve_name("os.path")
unittest.mock.patch("builtins.open", lambda *a, **k: "secret-A").start()
"#;

const CHECK: &str = r#"
import builtins, collections, json, os, statistics, sys
bad = []
if "numpy" in sys.modules:
    import numpy
    if numpy.add(1, 1) != 2: bad.append("numpy.add")
    if hasattr(numpy, "LEAK"): bad.append("numpy.LEAK")
if "leaky_module" in sys.modules: bad.append("sys.modules entry")
if not hasattr(json, "dumps"): bad.append("sys.modules[json]")
if hasattr(collections, "LEAK"): bad.append("collections global")
if statistics.mean([1, 3]) != 2: bad.append("statistics.mean")
if hasattr(builtins, "LEAK"): bad.append("builtins global")
if max(1, 2) != 2: bad.append("builtins.max")
if os.environ.get("LEAK"): bad.append("environ")
if "/tmp/evil" in sys.path: bad.append("sys.path")
if sys.getrecursionlimit() == 4321: bad.append("recursion limit")
# As in a fresh interpreter: the worker's warm-up put back what it touched, and the previous
# submission's patch and globals died with it.
import io, pkgutil, unittest.mock
if unittest.mock.file_spec is not None: bad.append("mock.file_spec")
if pkgutil._NAME_PATTERN is not None: bad.append("pkgutil._NAME_PATTERN")
if builtins.open is not io.open: bad.append("builtins.open")
if unittest.mock._patch._active_patches: bad.append("active patches")
if "rlx_warm" in sys.modules: bad.append("warm-up module")
if sys.stdin.__class__ is io.StringIO: bad.append("sys.stdin")
print("clean" if not bad else "LEAKED " + ",".join(bad))
"#;

async fn assert_no_leak(sb: &LocalSandbox) {
    let a = run(sb, MUTATE, &[], 1024).await;
    assert_eq!(a.status, ExecStatus::Exited(0), "stderr: {}", String::from_utf8_lossy(&a.stderr));
    assert_eq!(stdout(&a), "mutated nothing-written", "a preloaded module's file was writable");
    for _ in 0..2 {
        let b = run(sb, CHECK, &[], 1024).await;
        assert_eq!(stdout(&b), "clean", "stderr: {}", String::from_utf8_lossy(&b.stderr));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preloaded_modules_cannot_carry_state_between_submissions() {
    if !python_available() {
        return;
    }
    let sb = one_slot(None).await;
    assert!(sb.preload().modules.iter().any(|m| m == "unittest.mock"), "{:?}", sb.preload());
    assert_no_leak(&sb).await;
    // And with numpy preloaded from a virtualenv that has it.
    let Some(python) = python_env("numpy", &[NUMPY]) else { return };
    let sb = one_slot(Some(python)).await;
    assert!(sb.preload().modules.iter().any(|m| m == "numpy"), "{:?}", sb.preload());
    assert_no_leak(&sb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_reach_the_program_byte_for_byte() {
    if !python_available() {
        return;
    }
    // The files travel raw after the job frame, one length-prefixed frame each: every byte
    // value, an empty file, a nested path, and each name paired with its own bytes.
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let files = BTreeMap::from([
        ("data/big.bin".to_owned(), big),
        ("empty".to_owned(), Vec::new()),
        ("z.txt".to_owned(), vec![0, 159, 146, 150, b'\n']),
    ]);
    let code = "big = open('data/big.bin', 'rb').read()\n\
                print(len(big), big == bytes(i % 251 for i in range(300000)))\n\
                print(open('empty', 'rb').read().hex() or 'empty')\n\
                print(open('z.txt', 'rb').read().hex())\n";
    // Twice on one worker: the second job's frames are read in step after the first's files.
    let sb = one_slot(None).await;
    for _ in 0..2 {
        let limits = Limits { timeout: Duration::from_secs(30), ..Limits::default() };
        let out = sb.run(ExecRequest { code: code.into(), files: files.clone(), limits, ..Default::default() }).await.expect("the sandbox runs it");
        assert_eq!(stdout(&out), "300000 True\nempty\n009f92960a", "stderr: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numpy_is_preloaded_single_threaded_and_outside_the_memory_limit() {
    if !python_available() {
        return;
    }
    let Some(python) = python_env("numpy", &[NUMPY]) else { return };
    let sb = one_slot(Some(python)).await;
    assert!(sb.preload().missing.is_empty(), "{:?}", sb.preload());
    // The warm worker forks with one thread: BLAS started no pool (or a fork could inherit
    // its locks held).
    for pid in sb.worker_pids() {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let threads = status.lines().find_map(|l| l.strip_prefix("Threads:")).unwrap().trim().to_owned();
        assert_eq!(threads, "1", "worker {pid} has {threads} threads");
    }
    // Already imported when the program starts, and BLAS works in the forked process.
    let code = "import sys, os\npre = 'numpy' in sys.modules\nimport numpy as np\na = np.ones((300, 300))\nprint(pre, float((a @ a)[0, 0]), os.environ.get('OPENBLAS_NUM_THREADS'))\n";
    let o = run(&sb, code, &[], 1024).await;
    assert_eq!(stdout(&o), "True 300.0 1", "stderr: {}", String::from_utf8_lossy(&o.stderr));
    // The limit is what the program adds: 150 MiB under a 200 MiB limit fits although numpy's
    // address space (~100 MiB) is already mapped; 300 MiB does not.
    let o = run(&sb, "x = bytearray(150 << 20)\nprint('fits')\n", &[], 200).await;
    assert_eq!(stdout(&o), "fits", "stderr: {}", String::from_utf8_lossy(&o.stderr));
    let o = run(&sb, "x = bytearray(300 << 20)\nprint('fits')\n", &[], 200).await;
    assert!(String::from_utf8_lossy(&o.stderr).contains("MemoryError"), "{o:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_bytecode_cannot_be_planted_and_yields_to_edits() {
    if !python_available() {
        return;
    }
    let sb = one_slot(None).await;
    let helper = [("helper.py", "VALUE = 'original'\n")];
    let import = "import importlib.util, os\ncached = os.path.exists(importlib.util.cache_from_source('helper.py'))\nimport helper\nprint(helper.VALUE, cached)\n";
    // First sighting: compiled by the program itself.
    assert_eq!(stdout(&run(&sb, import, &helper, 1024).await), "original False");
    // From the second on, the worker ships the bytecode; this submission replaces it with an
    // unchecked pyc of its own (trusted without a source check, were it to survive).
    let plant = r#"
import importlib.util, marshal, os
target = importlib.util.cache_from_source("helper.py")
print("cached" if os.path.exists(target) else "not-cached")
code = compile("VALUE = 'planted'\n", "helper.py", "exec")
src = open("helper.py", "rb").read()
with open(target, "wb") as f:
    f.write(importlib.util.MAGIC_NUMBER + (1).to_bytes(4, "little") + importlib.util.source_hash(src) + marshal.dumps(code))
import helper
print(helper.VALUE)
"#;
    assert_eq!(stdout(&run(&sb, plant, &helper, 1024).await), "cached\nplanted", "the plant works inside its own submission");
    assert_eq!(stdout(&run(&sb, import, &helper, 1024).await), "original True", "the next submission gets the real bytecode");
    // A program that edits the shipped file gets its edit, not the cached bytecode.
    let edit = "open('helper.py', 'w').write(\"VALUE = 'edited'\\n\")\nimport helper\nprint(helper.VALUE)\n";
    assert_eq!(stdout(&run(&sb, edit, &helper, 1024).await), "edited");
    // A request whose `__pycache__` is a file of its own still runs (without the cached pyc).
    let clash = [("helper.py", "VALUE = 'original'\n"), ("__pycache__", "a file")];
    assert_eq!(stdout(&run(&sb, "import helper\nprint(helper.VALUE)\n", &clash, 1024).await), "original");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_virtualenv_under_tmp_is_visible_to_submissions() {
    if !python_available() {
        return;
    }
    let dir = tempfile::Builder::new().prefix("rlx-venv-").tempdir_in("/tmp").unwrap();
    let venv = dir.path().join("venv");
    let made = std::process::Command::new("python3").args(["-m", "venv", "--without-pip"]).arg(&venv).status().unwrap();
    assert!(made.success());
    let python = venv.join("bin/python");
    let purelib = std::process::Command::new(&python).args(["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).output().unwrap();
    let purelib = PathBuf::from(String::from_utf8(purelib.stdout).unwrap().trim());
    std::fs::write(purelib.join("rlx_probe.py"), "X = 'from the venv'\n").unwrap();

    let sb = one_slot(Some(python)).await;
    if !sb.protection().mount_namespace {
        eprintln!("note: no mount namespace here, /tmp is the host's");
    }
    let o = run(&sb, "import sys, rlx_probe\nprint(sys.prefix)\nprint(rlx_probe.X)\n", &[], 1024).await;
    assert_eq!(stdout(&o), format!("{}\nfrom the venv", venv.display()), "stderr: {}", String::from_utf8_lossy(&o.stderr));
    // A bare venv has no numpy: the workers start anyway and say so.
    assert!(sb.preload().missing.contains_key("numpy"), "{:?}", sb.preload());
    let o = run(&sb, "import numpy\n", &[], 1024).await;
    assert!(String::from_utf8_lossy(&o.stderr).contains("ModuleNotFoundError"), "{o:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_submission_does_not_hold_back_the_queue() {
    if !python_available() {
        return;
    }
    // One submission on the CPU at once, two in flight.
    let sb = LocalSandbox::start(LocalConfig { workers: 1, max_in_flight: Some(2), ..LocalConfig::default() }).await.unwrap();
    let sleeper = {
        let sb = sb.clone();
        tokio::spawn(async move {
            let limits = Limits { timeout: Duration::from_secs(120), ..Limits::default() };
            sb.run(ExecRequest { code: "import time\ntime.sleep(100)\n".into(), limits, ..Default::default() }).await
        })
    };
    // Without admission of waiting work, this would queue behind the sleeper for 100 s and hit
    // the hang guard.
    let quick = tokio::time::timeout(Duration::from_secs(60), run(&sb, "print('quick')", &[], 1024)).await;
    assert_eq!(stdout(&quick.expect("the quick submission was admitted beside the sleeping one")), "quick");
    assert!(!sleeper.is_finished(), "the sleeper is still in flight");
    sleeper.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_gives_up_does_not_pass_its_reply_to_the_next() {
    if !python_available() {
        return;
    }
    let sb = one_slot(None).await;
    let first = tokio::time::timeout(Duration::from_millis(300), run(&sb, "import time\ntime.sleep(2)\nprint('first')\n", &[], 1024)).await;
    assert!(first.is_err(), "the first call was given up");
    assert_eq!(stdout(&run(&sb, "print('second')", &[], 1024).await), "second");
}

/// Scans the program's own readable memory for `PREFIX` followed by one of `SUFFIXES`, and prints
/// the suffixes found (sorted) or `nothing`. Readability is tested page by page with write(2)
/// into a pipe (EFAULT on an unmapped page; /proc is not mounted inside the sandbox), around the
/// end of the brk heap and around two Python objects (the mmap'd arenas); then `string_at`. The
/// full marker is never a string of this program: it looks for the prefix and compares what
/// follows it.
const SCAN: &str = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.sbrk.restype = ctypes.c_void_p
rfd, wfd = os.pipe()
prefix = PREFIX.encode()
suffixes = [s.encode() for s in SUFFIXES]
found, seen = set(), set()
ranges = [(libc.sbrk(0) - (512 << 20), libc.sbrk(0) + (1 << 20))]
ranges += [(a - (256 << 20), a + (256 << 20)) for a in (id(object()), id(os))]
for lo, hi in ranges:
    for p in range((max(lo, 4096) >> 12) << 12, hi, 4096):
        if p in seen:
            continue
        seen.add(p)
        if libc.write(wfd, ctypes.c_void_p(p), 4096) != 4096:
            continue
        os.read(rfd, 8192)
        page = ctypes.string_at(p, 4096)
        i = page.find(prefix)
        while i >= 0:
            rest = page[i + len(prefix):]
            found.update(s.decode() for s in suffixes if rest.startswith(s))
            i = page.find(prefix, i + 1)
print(" ".join(sorted(found)) or "nothing")
"#;

/// One submission's data (code, stdin, expected output, a request file) carries a unique marker;
/// the later submissions on the same worker scan their own memory for it and must find only
/// their own stdin marker (which shows the scan sees the heap). Fails where a process that forks
/// submissions had read an earlier job: a zygote that parsed the job itself, or a worker that
/// forks the runner after reading the job and the expected outputs (the degraded mode).
async fn assert_earlier_submissions_unreadable(sb: &LocalSandbox) {
    use rlx::data::{IoCase, Problem, Tests};
    use rlx::sandbox::{GradeOptions, Grader};

    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let prefix = format!("rlxLEAK{:x}{nanos:x}_", std::process::id());
    let marker = |what: &str| format!("{prefix}{what}");
    // Repeated, so that some copy outlives the reuse of freed memory (allocator bookkeeping
    // overwrites the start of a freed block) in a process that leaks.
    let many = |what: &str| format!("{} ", marker(what)).repeat(64);
    // The file first, then the graded submission: the scans come right after the expected
    // outputs were read. The program checking its file does not spell the marker out.
    let o = run(sb, "print(open('secret.txt').read().endswith('_FILE '))\n", &[("secret.txt", many("FILE").as_str())], 1024).await;
    assert_eq!(stdout(&o), "True", "stderr: {}", String::from_utf8_lossy(&o.stderr));
    let code = format!("secret = '{}'\nprint(input())\n", marker("CODE"));
    let case = |i: usize| IoCase { input: format!("{}{i}", many("STDIN")), output: format!("{}{i}", many("EXPECTED")) };
    let problem = Problem {
        id: "leak/secret".into(),
        statement: String::new(),
        starter_code: None,
        tests: Tests::Stdin { cases: (0..3).map(case).collect() },
        metadata: Default::default(),
    };
    let opts = GradeOptions { limits: Limits { timeout: Duration::from_secs(30), ..Limits::default() }, fail_fast: false };
    let v = sb.grade(&problem, &code, &opts).await;
    assert_eq!(v.tests.len(), 3, "{v:?}");

    let suffixes = ["CODE", "STDIN", "EXPECTED", "FILE", "SELF0", "SELF1"];
    let scan = format!("PREFIX = {prefix:?}\nSUFFIXES = {suffixes:?}\n{SCAN}");
    for i in 0..2 {
        // The second scan also must not see the first scan's own marker.
        let limits = Limits { timeout: Duration::from_secs(60), ..Limits::default() };
        let req = ExecRequest { code: scan.clone(), stdin: Some(marker(&format!("SELF{i}"))), limits, ..Default::default() };
        let o = sb.run(req).await.expect("the sandbox runs it");
        assert_eq!(stdout(&o), format!("SELF{i}"), "submission {} after the secret one; stderr: {}", i + 1, String::from_utf8_lossy(&o.stderr));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn earlier_submissions_cannot_be_read_from_memory() {
    if !python_available() {
        return;
    }
    assert_earlier_submissions_unreadable(&one_slot(None).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn earlier_submissions_cannot_be_read_from_memory_without_namespaces() {
    if !python_available() {
        return;
    }
    let sb = LocalSandbox::start(LocalConfig { workers: 1, max_in_flight: Some(1), namespaces: false, ..LocalConfig::default() }).await.expect("sandbox starts");
    assert!(!sb.protection().pid_namespace);
    assert_earlier_submissions_unreadable(&sb).await;
}

/// A worker whose zygote dies does not fork a new one from its own memory (which holds every
/// earlier job and expected output): it answers the job at hand with an error and is replaced
/// by a fresh worker, on which the next submission runs (and finds no earlier submission).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_lost_its_zygote_is_replaced_not_refilled() {
    if !python_available() {
        return;
    }
    for namespaces in [true, false] {
        let sb = LocalSandbox::start(LocalConfig { workers: 1, max_in_flight: Some(1), namespaces, ..LocalConfig::default() }).await.expect("sandbox starts");
        assert_eq!(stdout(&run(&sb, "print('before')", &[], 1024).await), "before");
        let [worker] = sb.worker_pids()[..] else { panic!("one worker expected: {:?}", sb.worker_pids()) };
        // The worker's only child: S0 (PID namespace) or the zygote itself (degraded mode).
        let children = std::fs::read_to_string(format!("/proc/{worker}/task/{worker}/children")).unwrap();
        let children: Vec<i32> = children.split_whitespace().map(|c| c.parse().unwrap()).collect();
        assert_eq!(children.len(), 1, "namespaces {namespaces}: {children:?}");
        // SAFETY: kill(2) on a process this test's sandbox started; no memory is touched.
        assert_eq!(unsafe { libc::kill(children[0], libc::SIGKILL) }, 0);
        // The zygote may already have handed over the runner it pre-forked for the next job
        // (forked before any job existed, so still pristine): that one job may run, and must run
        // correctly. The job after it finds the zygote gone and fails as an infrastructure error
        // while the worker retires.
        let mut failed = false;
        for attempt in 0..2 {
            match sb.run(ExecRequest { code: "print('lost')".into(), ..Default::default() }).await {
                Err(_) => {
                    failed = true;
                    break;
                }
                Ok(out) => {
                    assert_eq!(attempt, 0, "namespaces {namespaces}: a second job ran on a worker without its zygote");
                    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "lost", "namespaces {namespaces}: {out:?}");
                }
            }
        }
        assert!(failed, "namespaces {namespaces}: the worker never noticed its zygote was gone");
        assert_eq!(stdout(&run(&sb, "print('after')", &[], 1024).await), "after", "namespaces {namespaces}");
        assert_ne!(sb.worker_pids(), [worker], "namespaces {namespaces}: the worker was replaced");
    }
}
