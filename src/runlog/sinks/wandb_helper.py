"""rlx's Weights & Biases helper: logs the metrics lines rlx sends it into one W&B run.

Shipped inside the rlx binary (src/runlog/sinks/wandb.rs) and run with the user's Python, because
W&B has no Rust SDK and its file formats are internal. rlx reads metrics.jsonl and keeps the
cursor; this script only talks to W&B, so that how a step is found and counted lives in one place.

Protocol: argv[1] is a JSON object of settings. rlx writes JSON lines to stdin:
  {"log": [{"step": 3, ...}, ...], "cursor": {...}}        -> {"event": "logged", "step": 3}
  {"finish": {"exit_code": 0, "summary": {...}}}          -> {"event": "finished"}
and the script answers on stdout with JSON lines; the first says whether `wandb` imported
({"event": "imported"} or {"event": "error", "stage": "import"}), the second whether the run
started ({"event": "ready"} or an error). End of stdin without "finish" (rlx died) finishes the
W&B run with exit code 1, so it is not left running.

The cursor (where rlx stands in metrics.jsonl) is saved here, after `run.finish()` returned:
W&B's service buffers what it writes, so rows logged by a helper that is then killed are lost,
and only a finished run makes them durable. The helper holds `lock_file` while it lives, so a
resumed rlx waits for a helper left finishing by a killed rlx before reading the cursor.

W&B steps must start at 0 and only grow, and rlx's baseline evaluation is step -1: the W&B step
is rlx's step + 1, and every row carries rlx's own `step`, declared as the x-axis of every metric.
"""

import fcntl
import json
import math
import os
import sys


def main():
    # The protocol owns the real stdout; anything W&B prints goes to stderr (rlx's log file).
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def say(**event):
        proto.write(json.dumps(event) + "\n")
        proto.flush()

    settings = json.loads(sys.argv[1])
    try:
        import wandb
    except Exception as e:  # noqa: BLE001 - any import failure means no W&B
        say(event="error", stage="import", message=f"{type(e).__name__}: {e}")
        return 3
    say(event="imported", version=getattr(wandb, "__version__", "?"))

    lock = open(settings["lock_file"], "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        say(event="error", stage="lock", message=f"another W&B helper holds {settings['lock_file']}: {e}")
        return 5

    with open(os.path.join(settings["run_dir"], "resolved.json"), encoding="utf-8") as f:
        config = json.load(f)
    config["run_id"] = settings["run_id"]
    try:
        run = wandb.init(
            id=settings["id"],
            resume="allow",
            project=settings["project"],
            entity=settings.get("entity"),
            name=settings["name"],
            tags=settings.get("tags") or None,
            mode=settings["mode"],
            dir=settings["run_dir"],
            config=config,
            settings=wandb.Settings(console="off"),
        )
    except Exception as e:  # noqa: BLE001
        say(event="error", stage="init", message=f"{type(e).__name__}: {e}")
        return 4
    run.define_metric("step")
    run.define_metric("*", step_metric="step")
    say(event="ready", url=getattr(run, "url", None), dir=getattr(run, "dir", None))

    exit_code, summary, cursor = 1, {}, None
    for raw in sys.stdin:
        msg = json.loads(raw)
        if "log" in msg:
            cursor = msg.get("cursor", cursor)
            for row in msg["log"]:
                data = {k: (math.nan if v is None else v) for k, v in row.items()}
                # commit=True: the row is written now, not when the next step arrives, so a
                # helper killed after its answer has lost nothing it acknowledged.
                run.log(data, step=int(row["step"]) + 1, commit=True)
            say(event="logged", step=msg["log"][-1]["step"] if msg["log"] else None)
        elif "finish" in msg:
            exit_code = int(msg["finish"].get("exit_code", 0))
            summary = msg["finish"].get("summary") or {}
            break
    for k, v in summary.items():
        run.summary[k] = v
    run.finish(exit_code=exit_code)
    if cursor is not None:
        state = settings["state_file"]
        tmp = f"{state}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"cursor": cursor, "sink": {"id": settings["id"], "project": settings["project"], "entity": settings.get("entity")}}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, state)
    say(event="finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
