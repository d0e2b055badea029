#!/usr/bin/env python3
"""CPU per C++ `/run_code` request: `rlx sandbox serve` (or any Sandbox-Fusion-compatible server)
against what Sandbox Fusion does per request, on the seven kinds of request of issue 41.

Requests (Sandbox Fusion's `cpp`: `code`, `language`, `stdin`, `compile_timeout`, `run_timeout`,
`memory_limit_MB`), each a competitive-programming program starting with `#include
<bits/stdc++.h>`: a correct A+B over 10^5 numbers, a wrong answer, a compile error, a timeout
(an endless loop, run_timeout 1 s), a runtime error (a null write), a memory limit (a 2 GiB
vector under 256 MiB) and a special-checker program (floats printed with 7 digits, which only a
tolerance checker accepts); and two that include smaller headers instead (`correct_iostream`,
`checker_cstdio`), reported apart. Each kind is checked against the status and return code Sandbox
Fusion gives (reference/sandbox-fusion.md §1.3: `Success`/`Failed`, `compile_result` and
`run_result`, `TimeLimitExceeded` with `return_code: null`, negative codes for signals).

Two workloads per kind: `distinct` (a unique comment per request, so every request compiles, as
every Sandbox Fusion request does) and `repeat` (the same program with new stdin, as verl sends
one request per test: rlx builds it once and keeps the binary; Sandbox Fusion compiles again).

Server CPU = the change in utime+stime+cutime+cstime over the server process and its live
descendants (/proc), per request. Anchor, in the same run: what Sandbox Fusion runs per request
without its own server work, a fresh temporary directory, `g++ -O2 -std=c++17` and the program
under `subprocess` (children's rusage). Ratio = anchor / server. Requests run one at a time.

  scripts/bench_cpp.py --rlx target/release/rlx [--n 20]
  scripts/bench_cpp.py --url http://127.0.0.1:8080 --server-pid PID   # any running server

Side by side (`--fusion-url`, `--fusion-pid`, with `--rlx`): the same requests go to Sandbox
Fusion (built from source, see docs/sandbox.md "C++ side by side") and to `rlx sandbox serve`,
in two rounds of opposite order; each response is reduced to its verdict (status, compile
return code, run status and return code, and whether the kind's check holds: the answer, or for
`checker` a float tolerance of 1e-6, which both servers leave to the client since `/run_code`
has no checker), the verdicts must be identical, and the table gives each server's CPU per
request and the ratio Sandbox Fusion / rlx.

Standard library only.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_fusion_lcb import TICK, Client, start_rlx, tree_cpu_s  # noqa: E402

NUMS = " ".join(str(i % 1000) for i in range(100_000))
SUM = sum(i % 1000 for i in range(100_000))
# Competitive-programming C++ starts with <bits/stdc++.h> (as Codeforces and CodeContests
# solutions mostly do), so every kind of issue 41 does; `*_iostream` and `*_cstdio` include
# smaller headers instead and are reported on rows of their own (a precompiled
# <bits/stdc++.h> does nothing for them).
BITS = "#include <bits/stdc++.h>\nusing namespace std;\n"
APLUSB = "#include <bits/stdc++.h>\nint main(){ long long s = 0, x; while (std::cin >> x) s += x; std::cout << s << \"\\n\"; }\n"


def correct(r):
    return r["status"] == "Success" and r["run_result"]["stdout"].strip() == str(SUM)


def third(r):
    return r["status"] == "Success" and abs(float(r["run_result"]["stdout"]) - 1 / 3) < 1e-6


# kind: (code, stdin, extra request fields, check(reply) -> bool)
KINDS = {
    "correct": (APLUSB, NUMS, {}, correct),
    "wrong_answer": (APLUSB.replace("s += x", "s -= x"), NUMS, {}, lambda r: r["status"] == "Success" and r["run_result"]["stdout"].strip() != str(SUM)),
    "compile_error": (BITS + "int main(){ int n; cin >> n; cout << nope << endl; }\n", "", {},
                      lambda r: r["status"] == "Failed" and r["run_result"] is None and r["compile_result"]["return_code"] not in (0, None)),
    "timeout": (BITS + "int main(){ for(;;); }\n", "", {"run_timeout": 1},
                lambda r: r["status"] == "Failed" and r["run_result"]["status"] == "TimeLimitExceeded" and r["run_result"]["return_code"] is None),
    "runtime_error": (BITS + "int main(){ volatile int *p = nullptr; *p = 1; }\n", "", {}, lambda r: r["status"] == "Failed" and r["run_result"]["return_code"] == -11),
    "memory_limit": (BITS + "int main(){ vector<char> v(1ull << 31, 1); return v[7] - 1; }\n", "", {"memory_limit_MB": 256},
                     lambda r: r["status"] == "Failed" and r["run_result"]["return_code"] == -6 and "bad_alloc" in r["run_result"]["stderr"]),
    "checker": (BITS + "int main(){ printf(\"%.7f\\n\", 1.0 / 3); }\n", "", {}, third),
    "correct_iostream": ("#include <iostream>\nint main(){ long long s = 0, x; while (std::cin >> x) s += x; std::cout << s << \"\\n\"; }\n", NUMS, {}, correct),
    "checker_cstdio": ("#include <cstdio>\nint main(){ printf(\"%.7f\\n\", 1.0 / 3); }\n", "", {}, third),
}


def body(kind, i, distinct):
    code, stdin, extra, _ = KINDS[kind]
    if distinct:
        code = f"// request {i} {time.time_ns()}\n" + code
    req = {"code": code, "language": "cpp", "stdin": stdin, "compile_timeout": 30, "run_timeout": 6}
    req.update(extra)
    return json.dumps(req).encode(), KINDS[kind][3]


def anchor_ms(kind, n):
    """Sandbox Fusion's work per request minus its server: a fresh directory, g++, the program."""
    code, stdin, extra, _ = KINDS[kind]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for i in range(n):
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "tmp.cpp")
            with open(src, "w") as f:
                f.write(f"// {i}\n" + code)
            cc = subprocess.run(["g++", "-O2", "-std=c++17", src, "-o", os.path.join(d, "a.out")], capture_output=True)
            if cc.returncode != 0:
                continue

            def limit(mb=extra.get("memory_limit_MB")):
                if mb:
                    resource.setrlimit(resource.RLIMIT_AS, (mb << 20, mb << 20))

            try:
                subprocess.run([os.path.join(d, "a.out")], input=stdin.encode(), capture_output=True, timeout=extra.get("run_timeout", 6), preexec_fn=limit)
            except subprocess.TimeoutExpired:
                pass
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)) * 1000 / n


def verdict(kind, r):
    """What a response says, reduced to what a grader reads."""
    c, run = r.get("compile_result"), r.get("run_result")
    compile_rc = "-" if c is None else c["return_code"]
    ran = "-" if run is None else f"{run['status']}/{run['return_code']}"
    return f"{r['status']} cc={compile_rc} run={ran} check={'yes' if KINDS[kind][3](r) else 'no'}"


def side_by_side(args, servers):
    """Each kind and workload on every server, in two rounds of opposite order."""
    names = [name for name, _, _ in servers]
    print(f"{'kind':<14} {'workload':<9} {'verdicts (all identical?)':<58} " + " ".join(f"{n + ' ms/req':>13}" for n in names) + f" {'ratio':>7}")
    all_same = True
    for kind in args.kinds.split(","):
        for distinct in (True, False):
            cpu = {n: 0.0 for n in names}
            seen = {n: set() for n in names}
            for order in (servers, servers[::-1]):
                for name, client, pid in order:
                    client.post(body(kind, -1, distinct)[0])  # warm-up (and, for `repeat`, the build)
                    cpu0 = tree_cpu_s(pid)
                    for i in range(args.n):
                        seen[name].add(verdict(kind, client.post(body(kind, i, distinct)[0])))
                    cpu[name] += (tree_cpu_s(pid) - cpu0) * 1000 / (2 * args.n)
            verdicts = set().union(*seen.values())
            same = len(verdicts) == 1 and all(len(v) == 1 for v in seen.values())
            all_same &= same
            shown = " | ".join(sorted(verdicts)) if same else "; ".join(f"{n}: {sorted(v)}" for n, v in seen.items())
            ms = " ".join(f"{cpu[n]:>13.1f}" for n in names)
            # Below one clock tick over all of a server's requests the CPU reads 0: bound it.
            floor = 1000 / TICK / (2 * args.n)
            ratio = f"{cpu[names[0]] / cpu[names[1]]:>6.1f}x" if cpu[names[1]] else f">{cpu[names[0]] / floor:.0f}x"
            print(f"{kind:<14} {'distinct' if distinct else 'repeat':<9} {('SAME ' if same else 'DIFF ') + shown:<58} {ms} {ratio:>7}", flush=True)
    print("verdicts identical on every request" if all_same else "VERDICTS DIFFER (see DIFF rows)")
    return all_same


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rlx", help="rlx binary: start `rlx sandbox serve` (and stop it)")
    ap.add_argument("--url", help="a running server instead")
    ap.add_argument("--server-pid", type=int, help="its process id, for the CPU column")
    ap.add_argument("--n", type=int, default=20, help="requests per kind and workload")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--fusion-url", help="side by side: a running Sandbox Fusion (with --rlx)")
    ap.add_argument("--fusion-pid", type=int, help="its server process id (uvicorn)")
    args = ap.parse_args()
    proc = None
    if args.fusion_url:
        if not (args.rlx and args.fusion_pid):
            sys.exit("--fusion-url needs --fusion-pid and --rlx")
        proc, url = start_rlx(args.rlx, ["--concurrency", "1"])
        try:
            ok = side_by_side(args, [("SF", Client(args.fusion_url), args.fusion_pid), ("rlx", Client(url), proc.pid)])
        finally:
            proc.terminate()
            proc.wait()
        sys.exit(0 if ok else 1)
    if args.rlx:
        proc, url = start_rlx(args.rlx, ["--concurrency", "1"])
        pid = proc.pid
    elif args.url:
        url, pid = args.url, args.server_pid
    else:
        sys.exit("give --rlx BINARY or --url URL")
    client = Client(url)
    print(f"{'kind':<14} {'workload':<9} {'verdicts':>9} {'server ms':>10} {'p50 ms':>8} {'anchor ms':>10} {'ratio':>7}")
    try:
        for kind in args.kinds.split(","):
            anchor = anchor_ms(kind, max(3, args.n // 4))
            for distinct in (True, False):
                client.post(body(kind, -1, distinct)[0])  # warm-up (and, for `repeat`, the build)
                cpu0 = tree_cpu_s(pid) if pid else 0.0
                lat, ok = [], 0
                for i in range(args.n):
                    b, check = body(kind, i, distinct)
                    t = time.perf_counter()
                    r = client.post(b)
                    lat.append((time.perf_counter() - t) * 1000)
                    ok += bool(check(r))
                cpu = (tree_cpu_s(pid) - cpu0) * 1000 / args.n if pid else float("nan")
                lat.sort()
                ratio = anchor / cpu if cpu and cpu == cpu else float("nan")
                print(f"{kind:<14} {'distinct' if distinct else 'repeat':<9} {ok:>4}/{args.n:<4} {cpu:>10.1f} {lat[len(lat) // 2]:>8.1f} {anchor:>10.1f} {ratio:>6.1f}x", flush=True)
    finally:
        if proc:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
