#!/usr/bin/env python3
"""Drive a Sandbox-Fusion-compatible `/run_code` server with Sandbox Fusion's own LiveCodeBench
harness requests, and print throughput, latency and the server's CPU per request.

The requests are the ones tinker-cookbook and Sandbox Fusion's `live_code_bench` dataset send
(reference/sandbox-fusion.md §3.1, §5): `code` is Sandbox Fusion's driver (TEST_CODE, per-test
timeout 6 s), `files` carries `testing_util.py` (TEST_UTIL), `code.py` (the solution) and
`test_cases.txt` (10 stdin tests of n = 1,000..5,000 integers; the output is their sum and their
max), `run_timeout` 75 s. Two workloads: a correct solution (expects `Success`) and the same
with the expected output of test 5 wrong (expects `Failed`, return code 255).

TEST_UTIL and TEST_CODE are Sandbox Fusion's code (Apache-2.0) and are not copied into rlx: pass
`--lcb-harness` the path of `sandbox/datasets/live_code_bench.py` from a Sandbox Fusion checkout
(or a copy of the file); the two strings are read from it with `ast`, without importing it.

Load: C client threads, each keeping one request in flight (closed loop, one keep-alive
connection each) until N requests are done; 2·C warm-up requests are not counted. Server CPU =
the change in utime+stime+cutime+cstime summed over the server process and all its live
descendants (/proc/<pid>/stat), divided by the requests: it includes everything the server ran
and reaped, and barely depends on the load of the machine, unlike requests/s.

Anchor: the same request run directly by a fresh interpreter per request (`python main.py` in a
fresh directory holding the three files, which is what Sandbox Fusion runs per request, minus its
own ~4 ms of server work), in the same run: its CPU per request is the last column's
denominator, so the ratio survives a loaded machine better than absolute figures. The anchor
runs without `site` (site-packages put on sys.path directly), as a clean runtime environment
would: `.pth` hooks of the development interpreter cost 40+ ms per start and are no part of
Sandbox Fusion's cost. `--python` picks the interpreter (default: `python3` on PATH, resolved).

Examples:

  # rlx: the script starts `rlx sandbox serve` itself (and stops it).
  scripts/bench_fusion_lcb.py --lcb-harness SF/sandbox/datasets/live_code_bench.py \\
      --rlx target/release/rlx --inflight 1,2,4

  # Any running server (Sandbox Fusion: the uvicorn process id for the CPU column).
  scripts/bench_fusion_lcb.py --lcb-harness ... --url http://127.0.0.1:8080 --server-pid PID

Standard library only.
"""

import argparse
import ast
import base64
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

TICK = os.sysconf("SC_CLK_TCK")


def load_harness(path):
    """TEST_UTIL and TEST_CODE from Sandbox Fusion's live_code_bench.py (string constants)."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("TEST_UTIL", "TEST_CODE") and isinstance(node.value, ast.Constant):
                found[name] = node.value.value
    missing = {"TEST_UTIL", "TEST_CODE"} - set(found)
    if missing:
        sys.exit(f"{path}: no {' or '.join(sorted(missing))} string (is this Sandbox Fusion's sandbox/datasets/live_code_bench.py?)")
    return found["TEST_UTIL"], found["TEST_CODE"]


SOLUTION = "n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(xs))\nprint(max(xs))\n"


def tests(wrong_on=None):
    inputs, outputs = [], []
    for i in range(10):
        n = 1000 + (4000 * i) // 9
        xs = [(k * 7919 + i * 104729) % 100003 - 50000 for k in range(n)]
        inputs.append(f"{n}\n{' '.join(map(str, xs))}\n")
        outputs.append("0\n0\n" if i == wrong_on else f"{sum(xs)}\n{max(xs)}\n")
    return {"input_output": json.dumps({"inputs": inputs, "outputs": outputs})}


def request_body(test_util, test_code, cases, timeout=6):
    b64 = lambda s: base64.b64encode(s.encode()).decode()
    n = len(json.loads(cases["input_output"])["inputs"])
    return json.dumps({
        "code": test_code % {"timeout": timeout},
        "language": "python",
        "run_timeout": int((timeout + 1) * n + 5),
        "files": {
            "test_cases.txt": b64(json.dumps(cases)),
            "code.py": b64(SOLUTION),
            "testing_util.py": b64(test_util),
        },
    }).encode()


def descendants(pid):
    out, stack = [], [pid]
    while stack:
        p = stack.pop()
        out.append(p)
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
            except OSError:
                pass
    return out


def tree_cpu_s(pid):
    total = 0
    for p in descendants(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                rest = f.read().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        # Fields 14..17 of stat (utime, stime, cutime, cstime) are 11..14 after the name.
        total += sum(int(x) for x in rest[11:15])
    return total / TICK


class Client:
    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port or 80
        self.path = (u.path.rstrip("/") or "") + "/run_code"
        self.conn = None

    def post(self, body):
        for attempt in (0, 1):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection(self.host, self.port, timeout=300)
                self.conn.request("POST", self.path, body, {"content-type": "application/json"})
                resp = self.conn.getresponse()
                data = resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"HTTP {resp.status}: {data[:300]!r}")
                return json.loads(data)
            except (http.client.HTTPException, ConnectionError, socket.timeout):
                self.conn = None
                if attempt:
                    raise


def expected(reply, want_pass):
    if want_pass:
        return reply.get("status") == "Success"
    rr = reply.get("run_result") or {}
    return reply.get("status") == "Failed" and rr.get("return_code") == 255


def run_point(url, body, want_pass, c, n, server_pid):
    clients = [Client(url) for _ in range(c)]
    # Warm-up: 2·C requests, not counted (connections open, server caches warm).
    warm = threading.Barrier(c)

    def warmup(cl):
        for _ in range(2):
            cl.post(body)
        warm.wait()

    ths = [threading.Thread(target=warmup, args=(cl,)) for cl in clients]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    lock = threading.Lock()
    state = {"next": 0, "lat": [], "bad": 0, "err": None}

    def loop(cl):
        while True:
            with lock:
                if state["next"] >= n or state["err"]:
                    return
                state["next"] += 1
            t = time.perf_counter()
            try:
                reply = cl.post(body)
            except Exception as e:  # a broken server ends the point, loudly
                with lock:
                    state["err"] = repr(e)
                return
            dt = (time.perf_counter() - t) * 1000
            with lock:
                state["lat"].append(dt)
                state["bad"] += not expected(reply, want_pass)

    cpu0 = tree_cpu_s(server_pid) if server_pid else None
    t0 = time.perf_counter()
    ths = [threading.Thread(target=loop, args=(cl,)) for cl in clients]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    wall = time.perf_counter() - t0
    cpu = tree_cpu_s(server_pid) - cpu0 if server_pid else None
    if state["err"]:
        sys.exit(f"request failed at {c} in flight: {state['err']}")
    lat = sorted(state["lat"])
    pct = lambda p: lat[min(len(lat) - 1, round((len(lat) - 1) * p))]
    return {
        "rps": len(lat) / wall,
        "p50": pct(0.5),
        "p95": pct(0.95),
        "cpu_ms": None if cpu is None else cpu * 1000 / len(lat),
        "bad": state["bad"],
    }


def anchor_cpu_ms(python, body, n):
    """CPU ms per request of running the request's program in a fresh interpreter."""
    import resource
    import shutil
    import tempfile

    req = json.loads(body)
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True).stdout.strip()
    boot = (
        f"import sys; sys.path[:0] = ['', {purelib!r}]; sys.argv = ['main.py']; "
        "exec(compile(open('main.py').read(), 'main.py', 'exec'), {'__name__': '__main__'})"
    )
    codes = set()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(n):
        d = tempfile.mkdtemp(prefix="rlx-anchor-")
        try:
            for name, b64 in req["files"].items():
                with open(os.path.join(d, name), "wb") as f:
                    f.write(base64.b64decode(b64))
            with open(os.path.join(d, "main.py"), "w") as f:
                f.write(req["code"])
            r = subprocess.run([python, "-I", "-S", "-c", boot], cwd=d, stdin=subprocess.DEVNULL, capture_output=True)
            codes.add(r.returncode)
        finally:
            shutil.rmtree(d, ignore_errors=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return cpu * 1000 / n, codes


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_rlx(binary, extra):
    port = free_port()
    cmd = [binary, "sandbox", "serve", "--bind", f"127.0.0.1:{port}", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"`{' '.join(cmd)}` exited with {proc.returncode}: {proc.stderr.read()[-2000:]}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/v1/ping")
            if c.getresponse().status == 200:
                return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    sys.exit(f"`{' '.join(cmd)}` did not answer /v1/ping within 120 s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--lcb-harness", required=True, metavar="LIVE_CODE_BENCH_PY", help="Sandbox Fusion's sandbox/datasets/live_code_bench.py")
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--rlx", metavar="BIN", help="start `BIN sandbox serve` on a free port and measure it")
    where.add_argument("--url", help="a running server, e.g. http://127.0.0.1:8080")
    ap.add_argument("--server-pid", type=int, help="with --url: the server's process id, for the CPU column")
    ap.add_argument("--serve-arg", action="append", default=[], help="extra argument for `rlx sandbox serve` (repeatable)")
    ap.add_argument("--inflight", default="1,2,4", help="requests in flight (default 1,2,4)")
    ap.add_argument("--requests", type=int, default=60, help="measured requests per point (default 60)")
    ap.add_argument("--workloads", default="pass,fail", help="pass, fail or both (default)")
    ap.add_argument("--label", default=None, help="server name in the table")
    ap.add_argument("--python", default=None, help="interpreter of the fresh-process anchor (default: python3 on PATH, resolved)")
    ap.add_argument("--anchor-runs", type=int, default=20, help="fresh-process runs per workload for the anchor (0: none; default 20)")
    args = ap.parse_args()

    test_util, test_code = load_harness(args.lcb_harness)
    bodies = {
        "pass": ("LCB harness, 10 tests, correct", request_body(test_util, test_code, tests()), True),
        "fail": ("LCB harness, test 5 wrong", request_body(test_util, test_code, tests(wrong_on=4)), False),
    }
    proc = None
    if args.rlx:
        proc, url = start_rlx(args.rlx, args.serve_arg)
        pid = proc.pid
        label = args.label or "rlx"
    else:
        url, pid = args.url, args.server_pid
        label = args.label or url
    try:
        print(f"server: {label} ({url}, pid {pid}); machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; request: {len(bodies['pass'][1]) // 1024} KiB")
        print()
        python = args.python or subprocess.run(["python3", "-c", "import sys; print(sys.executable)"], capture_output=True, text=True, check=True).stdout.strip()
        anchors = {}
        if args.anchor_runs > 0:
            for key in args.workloads.split(","):
                name, body, want_pass = bodies[key.strip()]
                ms, codes = anchor_cpu_ms(python, body, args.anchor_runs)
                ok = codes == ({0} if want_pass else {255})
                anchors[key.strip()] = ms
                print(f"anchor: {name}, fresh `{python}` per request: {ms:.1f} CPU ms/req{'' if ok else f' (unexpected exit codes {sorted(codes)})'}")
            print()
        print("| server | workload | in flight | req/s | p50 ms | p95 ms | server CPU ms/req | anchor / server CPU | unexpected |")
        print("|---|---|---|---|---|---|---|---|---|")
        for key in args.workloads.split(","):
            name, body, want_pass = bodies[key.strip()]
            for c in [int(x) for x in args.inflight.split(",")]:
                r = run_point(url, body, want_pass, c, args.requests, pid)
                cpu = "-" if r["cpu_ms"] is None else f"{r['cpu_ms']:.1f}"
                ratio = f"{anchors[key.strip()] / r['cpu_ms']:.1f}x" if r["cpu_ms"] and key.strip() in anchors else "-"
                print(f"| {label} | {name} | {c} | {r['rps']:.1f} | {r['p50']:.0f} | {r['p95']:.0f} | {cpu} | {ratio} | {r['bad']} |", flush=True)
        print()
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        if proc:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()
