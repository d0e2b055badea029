#!/usr/bin/env python3
"""The quickstart's problems: small list functions, as MBPP rows, from operations x predicates.

Every problem is one operation (count, sum, keep, drop, any, all; or map / sum after a transform)
applied with one predicate (even, odd, positive, greater than 5, divisible by 3, ...) or transform
(doubled, squared, increased by 2, ...). The 130 problems are shuffled with a fixed seed and split
60 eval / 70 train, so every eval problem is a combination the training never saw, built from
parts it did (docs/learning.md says what that does and does not show). The split does not look at
any model's answers.

Each problem gets four tests on random lists, redrawn until they tell the reference solution from
trivial ones (identity, len, sum, a constant, ...) and give at least three distinct answers (both
answers for True/False problems); a combination no such tests exist for (the sum of the zeros of a
list) is left out.

    python3 experiments/data/families.py      # rewrites family_train.jsonl and family_eval.jsonl
"""
import json
import os
import random
import sys

rng = random.Random(37)
N_EVAL = 60

PREDS = [  # (name fragment, phrase, python expr over x)
    ("even", "are even", "x % 2 == 0"),
    ("odd", "are odd", "x % 2 == 1"),
    ("positive", "are greater than zero", "x > 0"),
    ("negative", "are less than zero", "x < 0"),
    ("zero", "are equal to zero", "x == 0"),
    ("nonzero", "are not equal to zero", "x != 0"),
]
for k in (2, 3, 5, 10):
    PREDS.append((f"gt{k}", f"are greater than {k}", f"x > {k}"))
    PREDS.append((f"lt{k}", f"are less than {k}", f"x < {k}"))
for k in (3, 4, 5, 7):
    PREDS.append((f"div{k}", f"are divisible by {k}", f"x % {k} == 0"))

TRANSFORMS = [
    ("double", "multiplied by 2", "x * 2"),
    ("triple", "multiplied by 3", "x * 3"),
    ("square", "squared", "x * x"),
    ("negate", "negated", "-x"),
    ("abs", "replaced by its absolute value", "abs(x)"),
    ("halve", "divided by 2 (integer division)", "x // 2"),
]
for k in (1, 2, 5, 10):
    TRANSFORMS.append((f"add{k}", f"increased by {k}", f"x + {k}"))
    TRANSFORMS.append((f"sub{k}", f"decreased by {k}", f"x - {k}"))

def list_inputs():
    out = []
    for _ in range(4):
        n = rng.randint(3, 7)
        out.append([rng.randint(-6, 12) for _ in range(n)])
    return out

def problems():
    for name, phrase, e in PREDS:
        yield (f"count_{name}", f"returns how many numbers in the list xs {phrase}.",
               f"def count_{name}(xs):\n    return sum(1 for x in xs if {e})", "xs")
        yield (f"sum_{name}", f"returns the sum of the numbers in the list xs that {phrase} (0 if there are none).",
               f"def sum_{name}(xs):\n    return sum(x for x in xs if {e})", "xs")
        yield (f"keep_{name}", f"returns a new list with only the numbers of xs that {phrase}, in their original order.",
               f"def keep_{name}(xs):\n    return [x for x in xs if {e}]", "xs")
        yield (f"drop_{name}", f"returns a new list without the numbers of xs that {phrase}, keeping the others in order.",
               f"def drop_{name}(xs):\n    return [x for x in xs if not ({e})]", "xs")
        yield (f"any_{name}", f"returns True if at least one number in the list xs {phrase.replace('are ', 'is ', 1)}, and False otherwise.",
               f"def any_{name}(xs):\n    return any({e} for x in xs)", "xs")
        yield (f"all_{name}", f"returns True if all the numbers in the non-empty list xs {phrase}, and False otherwise.",
               f"def all_{name}(xs):\n    return all({e} for x in xs)", "xs")
    for name, phrase, e in TRANSFORMS:
        yield (f"{name}_all", f"returns a new list with every number of xs {phrase}.",
               f"def {name}_all(xs):\n    return [{e} for x in xs]", "xs")
        yield (f"sum_{name}", f"returns the sum of the numbers of xs after each is {phrase}.",
               f"def sum_{name}(xs):\n    return sum({e} for x in xs)", "xs")

def make(rows_out):
    seen = set()
    for fname, desc, code, arg in problems():
        if fname in seen:
            continue
        seen.add(fname)
        env = {}
        exec(code, env)
        f = env[fname]
        trivial = [lambda xs: xs, len, sum, lambda xs: [], lambda xs: 0, lambda xs: True,
                   lambda xs: False, lambda xs: xs[:1], lambda xs: None]
        for _ in range(1000):
            inputs = list_inputs()
            outs = [f(list(xs)) for xs in inputs]
            distinct = len({repr(o) for o in outs}) >= 3 or (
                isinstance(outs[0], bool) and len(set(outs)) == 2)
            beaten = all(any(t(list(xs)) != o for xs, o in zip(inputs, outs)) for t in trivial)
            if distinct and beaten:
                break
        else:
            continue  # e.g. the sum of the zeros of a list: no test tells it from a constant
        tests = [f"assert {fname}({xs!r}) == {o!r}" for xs, o in zip(inputs, outs)]
        rows_out.append({"text": f"Write a function `{fname}({arg})` that {desc}", "code": code,
                         "test_list": tests, "test_setup_code": "", "challenge_test_list": []})

rows = []
make(rows)
rng.shuffle(rows)
ev, tr = rows[:N_EVAL], rows[N_EVAL:]
for i, r in enumerate(tr):
    r["task_id"] = 30001 + i
for i, r in enumerate(ev):
    r["task_id"] = 40001 + i
key = ["task_id", "text", "code", "test_list", "test_setup_code", "challenge_test_list"]
here = os.path.dirname(os.path.abspath(__file__))
for path, rs in (("family_train.jsonl", tr), ("family_eval.jsonl", ev)):
    with open(os.path.join(here, path), "w") as fh:
        for r in rs:
            fh.write(json.dumps({k: r[k] for k in key}) + "\n")
print(len(tr), "train", len(ev), "eval", file=sys.stderr)
