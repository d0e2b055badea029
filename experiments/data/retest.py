#!/usr/bin/env python3
"""Rows of another version of the list-function task, each given this version's tests.

A run's stored answers (`eval_rollouts.jsonl`) name problems by the ids of the file it ran on.
To grade them again against the tests families.py writes now, this keeps each row of that file
(its `task_id`, text and reference) and replaces its `test_list` with the tests families.py gives
the function of the same name (every problem it generates, before duplicates are dropped, so
`keep_even` is found though the split keeps `drop_odd`), and adds its `category`:

    python3 experiments/data/retest.py OLD.jsonl > retested.jsonl
    rlx grade --problems retested.jsonl --completions runs/<id>/eval_rollouts.jsonl --timeout 1

A row whose function families.py no longer generates keeps its tests, and is named on stderr.
"""
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import families  # noqa: E402


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    new = {r["name"]: r for r in families.make(random.Random(37))}  # the seed families.py uses
    kept = []
    out = []
    for line in open(sys.argv[1]):
        if not line.strip():
            continue
        row = json.loads(line)
        name = row["code"].split("(")[0].removeprefix("def ").strip()
        if name in new:
            row["test_list"] = new[name]["test_list"]
            row["category"] = new[name]["category"]
        else:
            kept.append(f"{row['task_id']} {name}")
        out.append(json.dumps(row))
    print("\n".join(out))
    print(f"{len(out)} rows, {len(out) - len(kept)} given this version's tests"
          + (f"; kept their own: {', '.join(kept)}" if kept else ""), file=sys.stderr)


if __name__ == "__main__":
    main()
