#!/usr/bin/env python3
"""Replays the Tinker calls of a recorded `rlx run` against any Tinker-API server; prints a table.

    rlx serve --record calls.jsonl ... &     # then `rlx run` a spec with backend.base_url on it
    python3 scripts/tinker_compat.py --record calls.jsonl --url http://127.0.0.1:8000 \
        --base-model NAME [--json-wire] [--key KEY] [--out table.json]

Every submission of the record (sessions, models, forward_backward, optim_step, saves, loads,
sampling sessions, samples) is sent again in the same order, with the ids the new server hands
out put in place of the recorded ones, and every future is polled to its end. A row per endpoint
says how many calls the server accepted and completed, and the first way it differed: a refused
body (the HTTP status and the server's words), a failed future, or a result of the wrong shape
(log-probabilities per target token, `num_samples` sequences, a `tinker://` path).

The record stores `forward_backward` decoded from protobuf; it is sent as protobuf is not an
option here (Python's standard library has no protobuf), so `--json-wire` sends it as the JSON
body of SDKs before 0.25 (`/forward_backward` with `forward_backward_input`, `/forward` with
`forward_input`), which SkyRL, verl_tinker, TuFT and `rlx serve` read. Without it those rows are
skipped and say so.

Standard library only; exit status 0 when every replayed call matched, 1 otherwise.
"""

import argparse
import json
import sys
import time
import urllib.error
import urllib.request

LIFECYCLE = ("/retrieve_future", "/session_heartbeat", "/telemetry", "/finish", "/healthz", "/client/dynamic_config")


class Server:
    def __init__(self, url, key):
        self.url = url.rstrip("/")
        self.key = key

    def call(self, method, path, body=None, timeout=120):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("content-type", "application/json")
        req.add_header("x-api-key", self.key)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                text = r.read().decode() or "null"
                return r.status, json.loads(text)
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                return e.code, json.loads(text)
            except ValueError:
                return e.code, text

    def result(self, request_id, deadline_s=300):
        """Polls a future to its end: ("ok", result) or ("failed", message)."""
        end = time.time() + deadline_s
        while time.time() < end:
            status, body = self.call("POST", "/api/v1/retrieve_future", {"request_id": request_id, "allow_metadata_only": False}, timeout=320)
            if status == 200 and isinstance(body, dict):
                if body.get("type") == "try_again":
                    continue
                if "error" in body:
                    return "failed", str(body["error"])
                return "ok", body
            if status in (408, 429) or status >= 500:
                time.sleep(0.5)
                continue
            return "failed", f"HTTP {status}: {detail(body)}"
        return "failed", "no result within the deadline"


def detail(body):
    if isinstance(body, dict) and "detail" in body:
        return json.dumps(body["detail"])[:200]
    return json.dumps(body)[:200] if not isinstance(body, str) else body[:200]


class Ids:
    """Recorded ids → the new server's."""

    def __init__(self):
        self.map = {}

    def put(self, old, new):
        if old and new and old != new:
            self.map[old] = new

    def sub(self, value):
        if isinstance(value, str):
            for old in sorted(self.map, key=len, reverse=True):
                if old in value:
                    value = value.replace(old, self.map[old])
            return value
        if isinstance(value, list):
            return [self.sub(v) for v in value]
        if isinstance(value, dict):
            return {k: self.sub(v) for k, v in value.items()}
        return value


def json_wire(fb):
    """A recorded (decoded protobuf) forward_backward as the JSON body of SDKs before 0.25."""
    data = []
    for d in fb["data"]:
        chunks = [{"type": "encoded_text", "tokens": c} for c in d["model_input"] if isinstance(c, list)]
        data.append({"model_input": {"chunks": chunks}, "loss_fn_inputs": d["loss_fn_inputs"]})
    config = {k: v for k, v in (fb.get("loss_fn_config") or {}).items() if isinstance(v, (int, float))}
    key = "forward_input" if fb.get("forward_only") else "forward_backward_input"
    path = "/api/v1/forward" if fb.get("forward_only") else "/api/v1/forward_backward"
    return path, {"model_id": fb["model_id"], "seq_id": fb["seq_id"], key: {"data": data, "loss_fn": fb["loss_fn"], "loss_fn_config": config}}


def check_result(path, body, result):
    """The result's shape against what was asked: None when it matches, else why not."""
    if path.endswith("/forward_backward") or path.endswith("/forward"):
        inp = body.get("forward_backward_input") or body.get("forward_input") or {}
        outs = result.get("loss_fn_outputs")
        if not isinstance(outs, list) or len(outs) != len(inp.get("data", [])):
            return f"{len(outs or [])} outputs for {len(inp.get('data', []))} datums"
        for o, d in zip(outs, inp["data"]):
            n = len(d["loss_fn_inputs"]["target_tokens"]["data"])
            lp = (o.get("logprobs") or {}).get("data")
            if lp is None or len(lp) != n:
                return f"{len(lp or [])} logprobs for {n} targets"
        if "loss:sum" not in (result.get("metrics") or {}) and not all("elementwise_loss" in o for o in outs):
            return "neither `loss:sum` nor `elementwise_loss`"
    elif path.endswith("/asample"):
        seqs = result.get("sequences")
        if not isinstance(seqs, list) or len(seqs) != body.get("num_samples", 1):
            return f"{len(seqs or [])} sequences for num_samples {body.get('num_samples', 1)}"
        if any(len(s.get("tokens", [])) != len(s.get("logprobs") or []) for s in seqs):
            return "tokens without their logprobs"
    elif path.endswith("/save_weights"):
        if not str(result.get("path", "")).startswith("tinker://"):
            return f"no tinker:// path: {detail(result)}"
    elif path.endswith("/save_weights_for_sampler"):
        if not (result.get("sampling_session_id") or str(result.get("path", "")).startswith("tinker://")):
            return f"neither a sampling session nor a path: {detail(result)}"
    return None


def replay(server, record, base_model, json_wire_ok):
    rows = {}
    ids = Ids()

    def row(path):
        return rows.setdefault(path, {"endpoint": path, "calls": 0, "ok": 0, "skipped": 0, "first_difference": None})

    def differ(r, why):
        if r["first_difference"] is None:
            r["first_difference"] = why

    # A model whose forward_backward was not sent: its later requests would wait forever for
    # the missing seq_id on servers that order by it, so they are skipped too.
    skipped_models = set()
    for line in record:
        path = line.get("path", "")
        if line.get("method") != "POST" or any(path.endswith(s) for s in LIFECYCLE) or line.get("duplicate") or line.get("fault") or line.get("status") not in (200, None):
            continue
        body = line.get("body")
        if not isinstance(body, dict):
            continue
        if body.get("model_id") in skipped_models:
            r = row(path)
            r["calls"] += 1
            r["skipped"] += 1
            differ(r, "skipped: follows a skipped forward_backward of its model")
            continue
        if path == "/api/v1/forward_backward" and "data" in body:
            if not json_wire_ok:
                r = row("/api/v1/forward_backward (protobuf)")
                r["calls"] += 1
                r["skipped"] += 1
                differ(r, "skipped: protobuf bodies are not replayed (use --json-wire)")
                skipped_models.add(body.get("model_id"))
                continue
            path, body = json_wire(body)
        body = ids.sub(body)
        if path == "/api/v1/create_model" or path == "/api/v1/create_sampling_session" and body.get("base_model"):
            body["base_model"] = base_model
        r = row(path)
        r["calls"] += 1
        status, reply = server.call("POST", path, body)
        if status != 200:
            differ(r, f"HTTP {status}: {detail(reply)}")
            continue
        if path == "/api/v1/create_session":
            ids.put(recorded_session(line, record), reply.get("session_id"))
        if path == "/api/v1/create_sampling_session":
            ids.put(recorded_sampler(line, record), reply.get("sampling_session_id"))
        if path == "/api/v1/client/config" or "request_id" not in reply:
            r["ok"] += 1
            continue
        outcome, result = server.result(reply["request_id"])
        if outcome != "ok":
            differ(r, f"failed: {result[:200]}")
            continue
        if path == "/api/v1/create_model" or (path == "/api/v1/load_weights" and "model_seq_id" in body):
            ids.put(recorded_model(line, record), result.get("model_id") or reply.get("model_id"))
        if path == "/api/v1/save_weights" or path == "/api/v1/save_weights_for_sampler":
            ids.put(recorded_result_path(line, record), result.get("path"))
            ids.put(recorded_sampler(line, record), result.get("sampling_session_id"))
        why = check_result(path, body, result)
        if why:
            differ(r, why)
        else:
            r["ok"] += 1
    return list(rows.values())


def recorded_session(line, record):
    """The session a recorded create_session produced: the record keeps requests, not replies,
    so it is the session the next request naming one uses."""
    for other in record[record.index(line) + 1:]:
        if other.get("session_id") and other.get("path") != "/api/v1/create_session":
            return other["session_id"]
    return None


def recorded_model(line, record):
    """The model id a recorded create_model or create-from-state load produced (rlx serve and
    hosted Tinker name models `<session>:train:<model_seq_id>`)."""
    session = line["body"].get("session_id")
    n = line["body"].get("model_seq_id")
    return f"{session}:train:{n}" if session is not None and n is not None else None


def recorded_sampler(line, record):
    """The sampling session id a recorded call produced (`<session>:sample:<n>`)."""
    body = line["body"]
    session = body.get("session_id") or str(body.get("model_id", "")).split(":train:")[0] or None
    n = body.get("sampling_session_seq_id")
    return f"{session}:sample:{n}" if session is not None and n is not None else None


def recorded_result_path(line, record):
    name = (line.get("body") or {}).get("path")
    model = line.get("model_id")
    if not (name and model):
        return None
    kind = "weights" if line["path"].endswith("/save_weights") else "sampler_weights"
    return f"tinker://{model}/{kind}/{name}"


def table(rows, name):
    out = [f"| endpoint ({name}) | calls | matched | first difference |", "|---|---|---|---|"]
    for r in rows:
        out.append(f"| `{r['endpoint']}` | {r['calls']} | {r['ok']} | {r['first_difference'] or ''} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--record", required=True)
    ap.add_argument("--url", required=True)
    ap.add_argument("--base-model", required=True)
    ap.add_argument("--name", default="server")
    ap.add_argument("--key", default="tml-compat")
    ap.add_argument("--json-wire", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    with open(a.record) as f:
        record = [json.loads(l) for l in f if l.strip()]
    rows = replay(Server(a.url, a.key), record, a.base_model, a.json_wire)
    print(table(rows, a.name))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)
    matched = all(r["ok"] == r["calls"] for r in rows)
    sys.stdout.flush()
    sys.exit(0 if matched else 1)


if __name__ == "__main__":
    main()
