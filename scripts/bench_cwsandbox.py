#!/usr/bin/env python3
"""Throughput of grading through CoreWeave Sandbox's protocol against the embedded sandbox.

The same MBPP completions (the first N problems' reference solutions, every third replaced by a
wrong one) graded by `rlx grade` four ways in one run: the embedded sandbox (the anchor), and
`--sandbox cwsandbox` against `rlx sandbox serve --protocol cwsandbox` on this host with a
sandbox per completion (at the default creation-rate limit of 4/s, and with the limit lifted)
and with one sandbox per worker (`--cwsandbox-reuse per-worker`). Prints seconds, completions
per second, the ratio to the anchor, whether the verdicts agree with the anchor's, and the
server's closing line (sandboxes created, alive at the end). Standard library only.

    python3 scripts/bench_cwsandbox.py --rlx target/debug/rlx --problems ../shared/data/mbpp/mbpp.jsonl
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time


def completions(problems, n, out):
    rows = []
    with open(problems) as f:
        for i, line in enumerate(f):
            if i >= n:
                break
            r = json.loads(line)
            code = "def wrong(*a, **k):\n    return None\n" if i % 3 == 2 else r["code"]
            rows.append({"problem_id": str(r["task_id"]), "code": code})
    with open(out, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return len(rows)


def serve(rlx):
    p = subprocess.Popen([rlx, "sandbox", "serve", "--protocol", "cwsandbox", "--bind", "127.0.0.1:0", "--concurrency", "2"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        if line.startswith("rlx sandbox listening on "):
            return p, line.split()[4]
    raise SystemExit("the server did not start")


def stop(p):
    p.send_signal(signal.SIGINT)
    rest = p.stderr.read()
    p.wait()
    return next((l.strip() for l in rest.splitlines() if "rlx sandbox stopped" in l), "?")


def grade(rlx, args, problems, comps, concurrency, env):
    cmd = [rlx, "grade", "--no-progress", "--concurrency", str(concurrency), "--timeout", "6", "--problems", problems, "--completions", comps] + args
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
    verdicts = [json.loads(l) for l in out.stdout.splitlines()]
    return dt, [(v["status"], v["tests_passed"]) for v in verdicts]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlx", default="target/debug/rlx")
    ap.add_argument("--problems", default="../shared/data/mbpp/mbpp.jsonl")
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--concurrency", type=int, default=2)
    a = ap.parse_args()
    env = dict(os.environ, CWSANDBOX_API_KEY="bench", NO_COLOR="1")
    with tempfile.TemporaryDirectory() as d:
        comps = os.path.join(d, "c.jsonl")
        n = completions(a.problems, a.n, comps)
        anchor_s, anchor = grade(a.rlx, ["--sandbox", "local"], a.problems, comps, a.concurrency, env)
        rows = [("embedded (anchor)", anchor_s, anchor, "")]
        for name, extra in [
            ("cwsandbox per rollout, 4 creates/s", []),
            ("cwsandbox per rollout, no rate limit", ["--cwsandbox-creates-per-s", "1000"]),
            ("cwsandbox per worker", ["--cwsandbox-reuse", "per-worker"]),
        ]:
            server, url = serve(a.rlx)
            try:
                dt, v = grade(a.rlx, ["--sandbox", "cwsandbox", "--cwsandbox-url", url] + extra, a.problems, comps, a.concurrency, env)
            finally:
                closing = stop(server)
            rows.append((name, dt, v, closing.replace("rlx sandbox stopped: ", "")))
    passed = sum(1 for s, _ in anchor if s == "passed")
    print(f"{n} MBPP completions ({passed} pass in the anchor), rlx grade --concurrency {a.concurrency}")
    print(f"{'path':<38} {'s':>7} {'/s':>7} {'x anchor':>9}  same verdicts  server")
    for name, dt, v, closing in rows:
        print(f"{name:<38} {dt:>7.2f} {n / dt:>7.2f} {dt / anchor_s:>8.2f}x  {str(v == anchor):<13}  {closing}")


if __name__ == "__main__":
    main()
