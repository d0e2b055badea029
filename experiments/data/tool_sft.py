#!/usr/bin/env python3
"""Writes family_train_tool_sft.jsonl: one chat transcript per training problem in which the
assistant calls `check_solution` with the reference solution, reads the verdict, and answers with
it: what experiments/quickstart-tools-sft.yaml's SFT stage trains on, so that SmolLM2-135M
samples tool calls at all (on its own it never does: docs/learning.md).

The system message is the one rlx declares for a template without a `tools` variable, taken from
`rlx render` so that the transcripts match the rollouts' prompts token for token; the user
message is prompts/mbpp_user.j2 rendered as rlx renders it (checked against `rlx render`).

    python3 experiments/data/tool_sft.py [RLX_BINARY]
"""
import json
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def user(p):
    tests = "\n".join(p["test_list"][:3])
    return f"{p['text']}\nYour code should pass these tests:\n{tests}\n\nWrite the function in Python and put it in one ```python code block."


def main():
    rlx = sys.argv[1] if len(sys.argv) > 1 else "rlx"
    shown = subprocess.run([rlx, "render", "experiments/quickstart-tools.yaml", "--n", "1"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    system = shown.split("<|im_start|>system\n", 1)[1].split("<|im_end|>", 1)[0]
    first_user = shown.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
    rows = [json.loads(line) for line in open(HERE / "family_train.jsonl")]
    if not any(user(p) == first_user for p in rows):
        sys.exit("the user message no longer matches `rlx render`: update user()")
    out = []
    for p in rows:
        call = "<tool_call>\n" + json.dumps({"name": "check_solution", "arguments": {"code": p["code"]}}) + "\n</tool_call>"
        out.append({"messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": user(p)},
            {"role": "assistant", "content": call},
            {"role": "user", "content": "<tool_response>\npassed: 1/1 public tests\n</tool_response>"},
            {"role": "assistant", "content": "```python\n" + p["code"] + "\n```"},
        ]})
    (HERE / "family_train_tool_sft.jsonl").write_text("".join(json.dumps(o) + "\n" for o in out))
    print(f"{len(out)} transcripts")


if __name__ == "__main__":
    main()
