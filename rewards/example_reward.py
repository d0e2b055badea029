"""An example Python reward for rlx (docs/rewards.md; used by experiments/python-reward.yaml).

rlx calls `reward(problem, completion, code, verdict)` once per completion, in its sandbox
(no network, this directory as the working directory, nothing else of the host), and logs each
component of the returned dict as `reward/<name>`; the reward is their sum.
"""


def reward(problem, completion, code, verdict):
    # No code block: nothing ran, and `verdict["status"]` is "format_error".
    if code is None:
        return {"tests": 0.0, "format": -0.1, "length": 0.0}
    total = verdict["tests_total"]
    tests = verdict["tests_passed"] / total if total else 0.0
    # A little pressure towards short answers: -0.01 per line beyond 30.
    lines = len(code.strip().splitlines())
    length = -0.01 * (lines - 30) if lines > 30 else 0.0
    return {"tests": tests, "format": 0.0, "length": length}
