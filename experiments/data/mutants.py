#!/usr/bin/env python3
"""The mutation check of the list-function task: do its tests reject plausible wrong answers?

For every problem of the given MBPP files (by default family_{train,dev,test}.jsonl beside this
file) it builds the wrong programs mutate.py derives from the reference (`<` <-> `<=`, constants
+-1, `len(set(...))` to count, keep <-> drop, any <-> all, count <-> sum, a dropped filter, another
transform, ...), sets aside those equivalent to the reference (equal on every list of the grid:
no test could reject them, and none should), keeps one per behaviour, and runs the rest against
the problem's own asserts. It also checks that every reference passes its tests and that no
problem of one file equals, or is the complement of, a problem of another (the split's promise).

Prints a table (problems x wrong programs, survivors named) and exits 1 when a non-equivalent
wrong program passes every test of its problem, a reference fails, or two files share a problem.

    python3 experiments/data/mutants.py [FILE.jsonl ...]
"""
import ast
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import families  # noqa: E402
import mutate  # noqa: E402


def read_tests(row):
    """(input list, expected answer) of each `assert NAME(LIST) == VALUE` of the row."""
    out = []
    for t in row["test_list"]:
        node = ast.parse(t).body[0]
        if not (isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare)
                and isinstance(node.test.left, ast.Call) and len(node.test.comparators) == 1):
            raise ValueError(f"task {row['task_id']}: not `assert f(xs) == value`: {t}")
        out.append((ast.literal_eval(node.test.left.args[0]), ast.literal_eval(node.test.comparators[0])))
    return out


def check_file(path):
    """(rows, per-file counts, failures)."""
    rows = [json.loads(line) for line in open(path) if line.strip()]
    counts = {"problems": len(rows), "tests": 0, "wrong": 0, "equivalent": 0, "survivors": 0}
    failures = []
    for row in rows:
        code, tests = row["code"], read_tests(row)
        counts["tests"] += len(tests)
        if not mutate.passes(mutate.compile_fn(code), tests):
            failures.append(f"{path}: task {row['task_id']}: the reference fails its own tests")
        wrong, equiv = mutate.distinct_wrong(code)
        counts["wrong"] += len(wrong)
        counts["equivalent"] += len(equiv)
        name = mutate.parse(code)[0]
        for label in equiv:
            print(f"  equivalent, set aside: {name}: {label}")
        for label, m in wrong.items():
            if mutate.passes(mutate.compile_fn(m), tests):
                counts["survivors"] += 1
                failures.append(f"{path}: task {row['task_id']} {name}: wrong program passes every test: {label}")
    return rows, counts, failures


def check_split(files_rows):
    """Problems of one file equal to, or the complement of, a problem of another."""
    failures = []
    sigs = []
    for path, rows in files_rows:
        for r in rows:
            s = families.signatures(r["code"])
            sigs.append((path, r, s[2] if len(s) > 2 else s[0], s[0], s[1]))
    by_own = {}
    for path, r, own_key, own, _ in sigs:
        for key in {own_key, own}:
            by_own.setdefault(key, []).append((path, r))
    for path, r, _, own, comps in sigs:
        for key, how in [(own, "equals")] + [(c, "is the complement of") for c in comps]:
            for other_path, o in by_own.get(key, []):
                if other_path != path:
                    failures.append(f"{path}: task {r['task_id']} {how} {other_path}: task {o['task_id']}")
    return sorted(set(failures))


def main(argv):
    files = argv or [os.path.join(here, f"family_{s}.jsonl") for s in ("train", "dev", "test")]
    failures, files_rows, total = [], [], {}
    print(f"{'file':<24} {'problems':>8} {'tests':>6} {'wrong programs':>15} {'equivalent':>10} {'survivors':>9}")
    for path in files:
        rows, counts, fails = check_file(path)
        files_rows.append((path, rows))
        failures += fails
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v
        print(f"{os.path.basename(path):<24} {counts['problems']:>8} {counts['tests']:>6} {counts['wrong']:>15} "
              f"{counts['equivalent']:>10} {counts['survivors']:>9}")
    failures += check_split(files_rows)
    print(f"mutation check: {total['problems']} problems x {total['wrong']} wrong programs "
          f"({total['equivalent']} equivalent set aside): {total['survivors']} pass every test")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
