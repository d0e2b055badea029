"""Plausible wrong programs for the list-function task, and behaviour on a grid of inputs.

Shared by families.py (which chooses each problem's tests until every non-equivalent mutant fails
one) and mutants.py (which checks the written files, and is what `cargo test` runs). A reference
is `def NAME(xs):\n    return BODY` with BODY one of eight shapes (count, sum, keep, drop, any,
all of a predicate E over x; a map or a sum of a transform T of x); the mutants are the mistakes
a small model makes on them (docs/learning.md): a comparison flipped (`<` <-> `<=`, `>` <-> `>=`,
`==` <-> `!=`), every integer constant +-1, `len(set(...))` to count, count <-> sum, keep <-> drop,
any <-> all, the filter or the transform dropped, another transform, order or repeats lost
(`sorted`, `list(set(...))`), true division for floor division.

Equivalence is judged by behaviour, with the grader's own comparison (`==`, so 3.0 == 3): two
programs are equal when they agree on every list of GRID. A mutant equal to its reference there
is equivalent (`x % 2 != 0` for `x % 2 == 1`) and no test can or should reject it.
"""
import random
import re

SHAPES = [  # (operation, regex over the body, how to rebuild it from E or T)
    ("count", r"sum\(1 for x in xs if (.+)\)", "sum(1 for x in xs if {})"),
    ("sum", r"sum\(x for x in xs if (.+)\)", "sum(x for x in xs if {})"),
    ("drop", r"\[x for x in xs if not \((.+)\)\]", "[x for x in xs if not ({})]"),
    ("keep", r"\[x for x in xs if (.+)\]", "[x for x in xs if {}]"),
    ("any", r"any\((.+) for x in xs\)", "any({} for x in xs)"),
    ("all", r"all\((.+) for x in xs\)", "all({} for x in xs)"),
    ("map", r"\[(.+) for x in xs\]", "[{} for x in xs]"),
    ("summap", r"sum\((.+) for x in xs\)", "sum({} for x in xs)"),
]
TEMPLATE = dict((op, t) for op, _, t in SHAPES)
# Transforms a wrong answer may use instead of the asked one (the task's own, families.py).
OTHER_TRANSFORMS = ["x * 2", "x * 3", "x * x", "-x", "abs(x)", "x // 2", "x + 1", "x - 1", "x + 2",
                    "x - 2", "x + 5", "x - 5", "x + 10", "x - 10", "x"]
FLIPS = {">": ">=", ">=": ">", "<": "<=", "<=": "<", "==": "!=", "!=": "=="}


def parse(code):
    """(function name, operation, E or T) of a reference; ValueError if it has another shape."""
    m = re.fullmatch(r"def (\w+)\(xs\):\n    return (.+)", code.strip())
    if not m:
        raise ValueError(f"not a one-line list function: {code!r}")
    name, body = m.groups()
    for op, rx, _ in SHAPES:
        e = re.fullmatch(rx, body)
        if e:
            return name, op, e.group(1)
    raise ValueError(f"unknown shape: {body!r}")


def expr_mutants(e):
    """E or T with one comparison flipped or one integer constant moved by 1."""
    out = []
    for m in re.finditer(r"(>=|<=|==|!=|>|<)", e):
        out.append(e[:m.start()] + FLIPS[m.group(1)] + e[m.end():])
    for m in re.finditer(r"(?<![\w.])(\d+)", e):
        v = int(m.group(1))
        for w in (v - 1, v + 1):
            out.append(e[:m.start()] + str(w) + e[m.end():])
    return out


def mutants(code):
    """{label: code} of the plausible wrong programs for a reference (some may be equivalent)."""
    name, op, e = parse(code)
    bodies = {}
    t = TEMPLATE[op]
    for m in expr_mutants(e):
        bodies[f"expr {m}"] = t.format(m)
    if op in ("count", "sum", "keep", "drop", "any", "all"):
        neg = f"not ({e})"
        bodies["filter dropped"] = {"count": "len(xs)", "sum": "sum(xs)", "keep": "list(xs)",
                                    "drop": "list(xs)", "any": "len(xs) > 0", "all": "True"}[op]
        bodies["predicate negated"] = t.format(neg)
    if op == "count":
        bodies["len(set(...))"] = f"len(set(x for x in xs if {e}))"
        bodies["count -> sum"] = TEMPLATE["sum"].format(e)
    if op == "sum":
        bodies["sum -> count"] = TEMPLATE["count"].format(e)
        bodies["sum(set(...))"] = f"sum(set(x for x in xs if {e}))"
    if op in ("keep", "drop"):
        other = "drop" if op == "keep" else "keep"
        bodies[f"{op} -> {other}"] = TEMPLATE[other].format(e)
        bodies["list(set(...))"] = f"list(set({t.format(e)}))"
        bodies["sorted(...)"] = f"sorted({t.format(e)})"
    if op in ("any", "all"):
        other = "all" if op == "any" else "any"
        bodies[f"{op} -> {other}"] = TEMPLATE[other].format(e)
    if op in ("map", "summap"):
        bodies["transform dropped"] = "list(xs)" if op == "map" else "sum(xs)"
        for o in OTHER_TRANSFORMS:
            if o != e:
                bodies[f"transform {o}"] = t.format(o)
        if "//" in e:
            bodies["int(x / 2)"] = t.format(e.replace("x // 2", "int(x / 2)"))
            bodies["x / 2"] = t.format(e.replace("//", "/"))
        if op == "map":
            bodies["sorted(...)"] = f"sorted({t.format(e)})"
            bodies["list(set(...))"] = f"list(set({t.format(e)}))"
        else:
            bodies["sum(set(...))"] = f"sum(set({e} for x in xs))"
    return {k: f"def {name}(xs):\n    return {b}" for k, b in bodies.items() if b != t.format(e)}


def compile_fn(code):
    env = {}
    exec(code, env)  # the task's own generated programs, nothing from outside
    return env[re.match(r"def (\w+)", code).group(1)]


def _grid():
    rng = random.Random(20261129)
    lists = [[]] + [[a] for a in range(-15, 21)] + [[a, b] for a in range(-12, 16) for b in range(-12, 16)]
    for _ in range(3000):
        lists.append([rng.randint(-20, 25) for _ in range(rng.randint(1, 9))])
    return lists


GRID = _grid()


def needs_nonempty(code):
    """`all` problems are stated for a non-empty list: the empty one is out of their domain."""
    return parse(code)[1] == "all"


def outputs(f, lists):
    out = []
    for xs in lists:
        try:
            out.append(f(list(xs)))
        except Exception as exc:  # a mutant may raise; that is a behaviour too
            out.append(("raised", type(exc).__name__))
    return out


def same(a, b):
    try:
        return bool(a == b)
    except Exception:
        return False


def domain(code):
    return [xs for xs in GRID if xs or not needs_nonempty(code)]


def distinct_wrong(code):
    """{label: code} of the mutants not equivalent to the reference, one per behaviour; and the
    labels of the equivalent ones."""
    d = domain(code)
    ref = outputs(compile_fn(code), d)
    seen, wrong, equiv = [], {}, []
    for label, m in sorted(mutants(code).items()):
        out = outputs(compile_fn(m), d)
        if all(same(a, b) for a, b in zip(ref, out)):
            equiv.append(label)
            continue
        if any(all(same(a, b) for a, b in zip(out, o)) for o in seen):
            continue
        seen.append(out)
        wrong[label] = m
    return wrong, equiv


def passes(f, tests):
    """Whether f passes every (input, expected) pair, with the grader's `==`."""
    for xs, want in tests:
        try:
            if not same(f(list(xs)), want):
                return False
        except Exception:
            return False
    return True
