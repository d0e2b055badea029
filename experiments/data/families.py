#!/usr/bin/env python3
"""The quickstart's problems: small list functions, as MBPP rows, from operations x predicates.

Every problem is one operation (count, sum, keep, drop, any, all; or map / sum after a transform)
applied with one predicate (even, odd, positive, greater than 5, at least 7, divisible by 3, ...)
or transform (doubled, squared, increased by 2, ...).

Tests. Each problem's first three tests (the ones a prompt shows) are random lists, redrawn until
they tell the reference from trivial answers (identity, len, sum, a constant, ...) and give at
least three distinct answers (both answers for True/False problems). Then hidden tests: a list
holding every boundary value of the predicate (each constant, and one either side), a list with
a matching and a non-matching value each repeated, the empty list where the answer is defined
(not for `all`, stated for a non-empty list), and then, one at a time, the random list that
rejects the most plausible wrong programs still passing (mutate.py: `<` <-> `<=`, constants +-1,
`len(set(...))`, keep <-> drop, any <-> all, ...) until none is left but those equivalent to the
reference. A combination no tests can tell from a constant (the sum of the zeros) is left out.

Split. Problems equal in behaviour (`keep_even` and `drop_odd`) are kept once; problems that are
each other's complement (`any_lt3` and `all_gt2`: one is `not` the other; `count_even` and
`count_odd`: they add up to `len(xs)`) are tied together, and each group of tied problems goes
whole to one split, so no dev or test problem is, or is the complement of, a training problem.
The groups are shuffled with the split seed and dealt to test (reported, never used to choose),
dev (every recipe choice and sweep arm) and train. Neither step looks at any model's answers.

    python3 experiments/data/families.py                      # the committed files (split seed 37)
    python3 experiments/data/families.py --split-seed 1 --out DIR   # another split, same tests
"""
import argparse
import json
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mutate  # noqa: E402

N_TEST = 50
N_DEV = 28

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
for k in (7, 8):  # "at least" / "at most": where `>` for `>=` is the mistake to catch
    PREDS.append((f"ge{k}", f"are at least {k}", f"x >= {k}"))
    PREDS.append((f"le{k}", f"are at most {k}", f"x <= {k}"))
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


def problems():
    for name, phrase, e in PREDS:
        yield (f"count_{name}", f"returns how many numbers in the list xs {phrase}.",
               f"def count_{name}(xs):\n    return sum(1 for x in xs if {e})")
        yield (f"sum_{name}", f"returns the sum of the numbers in the list xs that {phrase} (0 if there are none).",
               f"def sum_{name}(xs):\n    return sum(x for x in xs if {e})")
        yield (f"keep_{name}", f"returns a new list with only the numbers of xs that {phrase}, in their original order.",
               f"def keep_{name}(xs):\n    return [x for x in xs if {e}]")
        yield (f"drop_{name}", f"returns a new list without the numbers of xs that {phrase}, keeping the others in order.",
               f"def drop_{name}(xs):\n    return [x for x in xs if not ({e})]")
        yield (f"any_{name}", f"returns True if at least one number in the list xs {phrase.replace('are ', 'is ', 1)}, and False otherwise.",
               f"def any_{name}(xs):\n    return any({e} for x in xs)")
        yield (f"all_{name}", f"returns True if all the numbers in the non-empty list xs {phrase}, and False otherwise.",
               f"def all_{name}(xs):\n    return all({e} for x in xs)")
    for name, phrase, e in TRANSFORMS:
        yield (f"{name}_all", f"returns a new list with every number of xs {phrase}.",
               f"def {name}_all(xs):\n    return [{e} for x in xs]")
        yield (f"sum_{name}", f"returns the sum of the numbers of xs after each is {phrase}.",
               f"def sum_{name}(xs):\n    return sum({e} for x in xs)")


def category(code):
    """The problem's operation, what `rlx compare` and `rlx doctor` break pass@1 down by: count,
    sum, keep, drop, any, all, map, or sum_map (the sum after a transform). Written into each row
    rather than left for a reader to guess from the function name."""
    op = mutate.parse(code)[1]
    return "sum_map" if op == "summap" else op


TRIVIAL = [lambda xs: xs, len, sum, lambda xs: [], lambda xs: 0, lambda xs: True,
           lambda xs: False, lambda xs: xs[:1], lambda xs: None]


def random_list(rng, lo=-6, hi=12, n=(3, 7)):
    return [rng.randint(lo, hi) for _ in range(rng.randint(*n))]


def shown_tests(rng, f):
    """Three random lists that beat the trivial answers and give distinct answers; None if the
    problem has none (it is then left out)."""
    for _ in range(1000):
        inputs = [random_list(rng) for _ in range(3)]
        outs = [f(list(xs)) for xs in inputs]
        distinct = len({repr(o) for o in outs}) >= 3 or (isinstance(outs[0], bool) and len(set(outs)) == 2)
        beaten = all(any(not mutate.same(t(list(xs)), o) for xs, o in zip(inputs, outs)) for t in TRIVIAL)
        if distinct and beaten:
            return inputs
    return None


def boundary_list(rng, e):
    """Each integer constant of E with its neighbours, zero and a negative odd value, shuffled."""
    vals = {0, -3}
    for c in (int(m) for m in re.findall(r"(?<![\w.])(\d+)", e)):
        vals |= {c - 1, c, c + 1, -c}
    xs = sorted(vals)
    rng.shuffle(xs)
    return xs


def repeat_list(rng, f_pred):
    """A matching and a non-matching value, each twice, among random ones."""
    pool = list(range(-6, 13))
    rng.shuffle(pool)
    yes = next((v for v in pool if f_pred(v)), None)
    no = next((v for v in pool if not f_pred(v)), None)
    xs = random_list(rng, n=(1, 3)) + [v for v in (yes, no) if v is not None] * 2
    rng.shuffle(xs)
    return xs


def hidden_tests(rng, code, shown):
    """The hidden inputs: boundary, repeats, empty, then greedy rejection of the wrong programs."""
    _, op, e = mutate.parse(code)
    f = mutate.compile_fn(code)
    inputs = [boundary_list(rng, e)]
    if op not in ("map", "summap"):
        pred = eval(f"lambda x: {e}")  # the generator's own predicate text
        inputs.append(repeat_list(rng, pred))
    if op != "all":
        inputs.append([])
    wrong, _ = mutate.distinct_wrong(code)
    fns = {k: mutate.compile_fn(m) for k, m in wrong.items()}

    def survivors(ins):
        tests = [(xs, f(list(xs))) for xs in ins]
        return [k for k, g in fns.items() if mutate.passes(g, tests)]

    left = survivors(shown + inputs)
    pool = [random_list(rng, -8, 14, (2, 8)) for _ in range(300)]
    if op not in ("map", "summap"):
        # For any/all a boundary value must be the one value deciding the answer: it joins a
        # list of values that all match, or that all do not.
        for v in boundary_list(rng, e):
            for want in (True, False):
                same_side = [x for x in range(-8, 15) if bool(pred(x)) == want]
                if same_side:
                    xs = [rng.choice(same_side) for _ in range(rng.randint(1, 4))] + [v]
                    rng.shuffle(xs)
                    pool.append(xs)
    while left:
        best = max(pool, key=lambda xs: sum(not mutate.passes(fns[k], [(xs, f(list(xs)))]) for k in left))
        if all(mutate.passes(fns[k], [(best, f(list(best)))]) for k in left):
            raise SystemExit(f"{code!r}: no test rejects {left}")
        inputs.append(best)
        left = survivors(shown + inputs)
    return inputs


def make(rng):
    rows = []
    for fname, desc, code in problems():
        f = mutate.compile_fn(code)
        shown = shown_tests(rng, f)
        if shown is None:
            continue  # e.g. the sum of the zeros of a list: no test tells it from a constant
        inputs = shown + hidden_tests(rng, code, shown)
        tests = [f"assert {fname}({xs!r}) == {f(list(xs))!r}" for xs in inputs]
        rows.append({"name": fname, "text": f"Write a function `{fname}(xs)` that {desc}", "code": code,
                     "test_list": tests, "test_setup_code": "", "challenge_test_list": [],
                     "category": category(code)})
    return rows


DOMAIN = [xs for xs in mutate.GRID if xs]  # `all` is undefined on []: compare where all are


def signatures(code):
    """(its behaviour, the behaviours of its complements) on the grid, as hashable keys: a
    complement is `not` it (True/False answers), what adds up with it to len(xs) or sum(xs)
    (numbers), or what holds the rest of xs (lists)."""
    out = mutate.outputs(mutate.compile_fn(code), DOMAIN)
    own = repr(out)
    comp = []
    if all(isinstance(o, bool) for o in out):
        comp.append(repr([not o for o in out]))
    elif all(isinstance(o, int) for o in out):
        comp += [repr([len(xs) - o for o, xs in zip(out, DOMAIN)]), repr([sum(xs) - o for o, xs in zip(out, DOMAIN)])]
    elif all(isinstance(o, list) for o in out):
        rest = []
        for o, xs in zip(out, DOMAIN):
            left = list(xs)
            for v in o:
                if v not in left:
                    return own, []  # not a filter of xs (a map): no complement
                left.remove(v)
            rest.append(sorted(left))
        comp.append(repr(rest))
        own_sorted = repr([sorted(o) for o in out])
        return own, comp, own_sorted
    return own, comp


def groups(rows):
    """Drops behavioural duplicates; ties complements together. Returns (groups, dropped)."""
    kept, dropped, seen = [], [], {}
    for r in rows:
        sig = signatures(r["code"])
        if sig[0] in seen:
            dropped.append((r["name"], seen[sig[0]]["name"]))
            continue
        seen[sig[0]] = r
        r["_sig"] = sig
        kept.append(r)
    parent = list(range(len(kept)))

    def find(i):
        while parent[i] != i:
            i = parent[i]
        return i
    # A list answer's complement is compared as a multiset of what it keeps (order aside).
    index = {}
    for i, r in enumerate(kept):
        index.setdefault(r["_sig"][2] if len(r["_sig"]) > 2 else r["_sig"][0], []).append(i)
    for i, r in enumerate(kept):
        for c in r["_sig"][1]:
            for j in index.get(c, []):
                parent[find(i)] = find(j)
    by = {}
    for i, r in enumerate(kept):
        by.setdefault(find(i), []).append(r)
    return list(by.values()), dropped


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split-seed", type=int, default=37)
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    args = ap.parse_args()
    rows = make(random.Random(37))  # the tests do not depend on the split seed
    gs, dropped = groups(rows)
    random.Random(args.split_seed).shuffle(gs)
    split = {"test": [], "dev": [], "train": []}
    for g in gs:
        dest = "test" if len(split["test"]) < N_TEST else "dev" if len(split["dev"]) < N_DEV else "train"
        split[dest].extend(g)
    base = {"train": 60001, "dev": 61001, "test": 62001}
    # `category` last: the MBPP fields keep their order, so each row is the old row plus one key.
    key = ["task_id", "text", "code", "test_list", "test_setup_code", "challenge_test_list", "category"]
    os.makedirs(args.out, exist_ok=True)
    for name, rs in split.items():
        rng = random.Random(args.split_seed * 1000 + len(name))
        rng.shuffle(rs)
        with open(os.path.join(args.out, f"family_{name}.jsonl"), "w") as fh:
            for i, r in enumerate(rs):
                r["task_id"] = base[name] + i
                fh.write(json.dumps({k: r[k] for k in key}) + "\n")
    print(f"{len(rows)} problems, {len(dropped)} dropped as equal to another "
          f"({', '.join(f'{a} = {b}' for a, b in dropped)}), {len(gs)} groups; "
          + ", ".join(f"{len(v)} {k}" for k, v in split.items()), file=sys.stderr)


if __name__ == "__main__":
    main()
