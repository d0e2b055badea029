"""Paired tests over problems for scripts/trl_anchor.py, as `rlx compare` computes them
(docs/compare.md, "The statistics, exactly"): seeds pooled per problem first, then one test over
problems.

Why per problem: several seeds evaluate the same problems, and a problem easy on one seed is easy
on the others (the greedy baseline is identical across seeds), so adding each seed's discordant
pairs counts a problem up to once per seed and gives p-values far too small (issue #54).

No scipy: the anchor's outer Python is any python3. Student's t comes from the regularized
incomplete beta function (continued fraction, Numerical Recipes' betacf), which reproduces the
numbers docs/compare.md quotes from rlx's own implementation.
"""

from __future__ import annotations

import math
import random

EPS = 1e-12


def pooled(per_seed: list[dict]) -> dict:
    """problem id -> its mean score over the seeds, for the problems every seed scored."""
    if not per_seed:
        return {}
    keys = set(per_seed[0]).intersection(*per_seed[1:])
    return {k: sum(s[k] for s in per_seed) / len(per_seed) for k in sorted(keys)}


def mcnemar(up: int, down: int) -> float:
    """Exact two-sided McNemar (binomial sign test) on the discordant pairs."""
    n = up + down
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(0, min(up, down) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def sign_flip(diffs: list[float], draws: int = 200_000) -> tuple[float, bool]:
    """Two-sided paired sign-flip test of mean(diffs) = 0: (p, exact). Exact over every sign
    pattern up to 20 non-zero differences, and the binomial sign test when all have one size (as
    rlx compare); else `draws` random patterns, p = (1 + hits) / (draws + 1)."""
    d = [x for x in diffs if abs(x) > EPS]
    if not d:
        return 1.0, True
    if all(abs(abs(x) - abs(d[0])) < EPS for x in d):
        return mcnemar(sum(x > 0 for x in d), sum(x < 0 for x in d)), True
    obs = abs(sum(d))
    if len(d) <= 20:
        hits = 0
        for mask in range(2 ** len(d)):
            s = sum(x if (mask >> i) & 1 else -x for i, x in enumerate(d))
            hits += abs(s) >= obs - 1e-9
        return hits / 2 ** len(d), True
    rng = random.Random(0)
    hits = sum(abs(sum(x if rng.random() < 0.5 else -x for x in d)) >= obs - 1e-9 for _ in range(draws))
    return (hits + 1) / (draws + 1), False


def _betacf(a: float, b: float, x: float) -> float:
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > 1e-300 else 1e-300
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > 1e-300 else 1e-300
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1.0 - x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df degrees of freedom."""
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p, by bisection."""
    lo, hi = -1e3, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def mean_se(d: list[float]) -> tuple[float, float]:
    """The mean of the differences and its standard error sd/sqrt(P)."""
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1)) if n > 1 else float("nan")
    return mean, sd / math.sqrt(n)


def t_interval(d: list[float], level: float = 0.95) -> tuple[float, float]:
    """The t interval of the mean difference over problems."""
    mean, se = mean_se(d)
    if not se > 0:
        return mean, mean
    h = t_quantile(0.5 + level / 2, len(d) - 1) * se
    return mean - h, mean + h


def tost(d: list[float], margin: float) -> tuple[float, bool, tuple[float, float]]:
    """Equivalence within +-margin (Schuirmann's two one-sided t tests over problems, as
    `rlx compare --margin`): (p, equivalent at 0.05, the 90% t interval)."""
    mean, se = mean_se(d)
    if not se > 0:  # every difference the same: inside the margin or not, for certain
        inside = abs(mean) < margin
        return (0.0 if inside else 1.0), inside, (mean, mean)
    df = len(d) - 1
    p = max(1.0 - t_cdf((mean + margin) / se, df), 1.0 - t_cdf((margin - mean) / se, df))
    return p, p < 0.05, t_interval(d, 0.90)


def paired(a: dict, b: dict, binary: bool) -> dict:
    """B − A over the problems both scored: mean, 95% t interval, problems up/down, and the test:
    exact McNemar when every score is 0 or 1 from one seed (`binary`), else the sign-flip test."""
    keys = sorted(set(a) & set(b))
    d = [b[k] - a[k] for k in keys]
    up, down = sum(x > EPS for x in d), sum(x < -EPS for x in d)
    if binary:
        p, test = mcnemar(up, down), "exact McNemar"
    else:
        p, exact = sign_flip(d)
        test = "sign-flip exact" if exact else "sign-flip Monte Carlo"
    mean = sum(d) / len(d) if d else float("nan")
    return {"problems": len(d), "mean": mean, "ci": t_interval(d) if len(d) > 1 else (mean, mean),
            "up": up, "down": down, "p": p, "test": test, "diffs": d}
