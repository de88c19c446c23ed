"""Paired statistics for evaluation reports: small pure functions over lists of floats.

Two arms run on the same tasks, so they are compared per task: the differences ``b_i - a_i`` are
summarised by their mean with a seeded percentile-bootstrap confidence interval, a two-sided sign
test (exact binomial) and a two-sided Wilcoxon signed-rank test. Zero differences are dropped by both
tests (Wilcoxon's ``zero_method="wilcox"``). The Wilcoxon p-value is exact up to :data:`EXACT_MAX_N`
non-zero differences, ties included (the permutation distribution of the average ranks); above that,
the normal approximation with the tie correction of the variance and no continuity correction (scipy's
``wilcoxon(..., method="approx")``).

A comparison over fewer than :data:`HEADLINE_MIN_N` tasks is marked ``headline=False``: it may be
shown, never quoted as a result. :func:`spread` replaces "mean ± std" of a few runs: "± 0.00" from three
equal seed means says nothing about variance; the median and range over runs (with their count) does.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "EXACT_MAX_N",
    "HEADLINE_MIN_N",
    "Paired",
    "Spread",
    "bootstrap_ci",
    "paired",
    "quantile",
    "sign_test",
    "spread",
    "wilcoxon",
]

HEADLINE_MIN_N = 30
"""Tasks a paired comparison needs before it may be a headline (issue 26: ≥ 30 per workload)."""
EXACT_MAX_N = 50
"""Non-zero differences up to which the Wilcoxon p-value is computed exactly."""
DEFAULT_RESAMPLES = 10_000


@dataclass(frozen=True, slots=True)
class Paired:
    """``b`` against ``a`` over the same ``n`` tasks: ``diff`` is mean(b - a)."""

    n: int
    mean_a: float
    mean_b: float
    diff: float
    ci_low: float
    ci_high: float
    confidence: float
    wins: int
    losses: int
    ties: int
    sign_p: float
    wilcoxon_p: float
    wilcoxon_method: str
    headline: bool

    def cells(self) -> str:
        """``mean a | mean b | diff [CI] | W/L/T | sign p | Wilcoxon p``: the cells of a markdown row."""
        return (
            f"{self.mean_a:.3f} | {self.mean_b:.3f} | {self.diff:+.3f} [{self.ci_low:+.3f}, {self.ci_high:+.3f}] "
            f"| {self.wins}/{self.losses}/{self.ties} | {self.sign_p:.3g} | {self.wilcoxon_p:.3g}"
        )


@dataclass(frozen=True, slots=True)
class Spread:
    """Median, minimum and maximum of ``n`` values (runs, episodes)."""

    n: int
    median: float
    low: float
    high: float

    def format(self, fmt: str = "{:.2f}") -> str:
        """``0.50`` for one value or equal values with n stated; ``0.50 (0.33–0.66)`` otherwise."""
        mid = fmt.format(self.median)
        if self.n <= 1:
            return mid
        if self.low == self.high:
            return f"{mid} (all {self.n} equal)"
        return f"{mid} ({fmt.format(self.low)}–{fmt.format(self.high)})"


def _check(values: Sequence[float], what: str) -> list[float]:
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError(f"{what} needs at least one value, got none")
    if any(math.isnan(x) for x in xs):
        raise ValueError(f"{what} got NaN among {xs}")
    return xs


def quantile(sorted_xs: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted values by linear interpolation (numpy's default method)."""
    if not sorted_xs:
        raise ValueError("quantile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile q must be in [0, 1], got {q}")
    pos = q * (len(sorted_xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def spread(values: Sequence[float]) -> Spread:
    """Median and range of ``values``."""
    xs = sorted(_check(values, "spread"))
    return Spread(n=len(xs), median=quantile(xs, 0.5), low=xs[0], high=xs[-1])


def bootstrap_ci(
    diffs: Sequence[float], *, seed: int = 0, resamples: int = DEFAULT_RESAMPLES, confidence: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``diffs`` (resampling tasks with replacement;
    deterministic for a given ``seed``)."""
    xs = _check(diffs, "bootstrap_ci")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    rng = random.Random(seed)
    n = len(xs)
    means = sorted(sum(rng.choices(xs, k=n)) / n for _ in range(resamples))
    alpha = (1.0 - confidence) / 2.0
    return quantile(means, alpha), quantile(means, 1.0 - alpha)


def sign_test(diffs: Sequence[float]) -> float:
    """Two-sided exact sign test of ``diffs`` (zeros dropped): 1.0 when nothing differs."""
    xs = _check(diffs, "sign_test")
    wins = sum(x > 0 for x in xs)
    m = wins + sum(x < 0 for x in xs)
    if m == 0:
        return 1.0
    k = min(wins, m - wins)
    tail = sum(math.comb(m, i) for i in range(k + 1)) / (1 << m)
    return min(1.0, 2.0 * tail)


def _avg_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks of ``values``, ties sharing their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def _exact_p(ranks: Sequence[float], t_plus: float) -> float:
    """Two-sided p of the signed-rank statistic under the null (each sign ± with probability 1/2), by
    counting sign assignments over the doubled (integer) ranks."""
    doubled = [round(2 * r) for r in ranks]
    counts = [0] * (sum(doubled) + 1)
    counts[0] = 1
    for r in doubled:
        for s in range(len(counts) - 1, r - 1, -1):
            counts[s] += counts[s - r]
    t = round(2 * t_plus)
    total = 1 << len(doubled)
    below = sum(counts[: t + 1]) / total
    above = sum(counts[t:]) / total
    return min(1.0, 2.0 * min(below, above))


def wilcoxon(diffs: Sequence[float]) -> tuple[float, str]:
    """Two-sided Wilcoxon signed-rank p-value of ``diffs`` and the method used (``exact``,
    ``normal`` or ``none`` when every difference is 0)."""
    nonzero = [x for x in _check(diffs, "wilcoxon") if x != 0.0]
    n = len(nonzero)
    if n == 0:
        return 1.0, "none"
    ranks = _avg_ranks([abs(x) for x in nonzero])
    t_plus = sum(r for r, x in zip(ranks, nonzero, strict=True) if x > 0)
    if n <= EXACT_MAX_N:
        return _exact_p(ranks, t_plus), "exact"
    mean = n * (n + 1) / 4.0
    ties: dict[float, int] = {}
    for r in ranks:
        ties[r] = ties.get(r, 0) + 1
    var = n * (n + 1) * (2 * n + 1) / 24.0 - sum(t**3 - t for t in ties.values()) / 48.0
    z = (t_plus - mean) / math.sqrt(var)
    return min(1.0, math.erfc(abs(z) / math.sqrt(2.0))), "normal"


def paired(
    a: Sequence[float],
    b: Sequence[float],
    *,
    seed: int = 0,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
) -> Paired:
    """Compare ``b`` with ``a`` task by task (``a[i]`` and ``b[i]`` are the same task)."""
    xa, xb = _check(a, "paired (a)"), _check(b, "paired (b)")
    if len(xa) != len(xb):
        raise ValueError(f"paired needs the same tasks in both arms; got {len(xa)} and {len(xb)} values")
    diffs = [y - x for x, y in zip(xa, xb, strict=True)]
    n = len(diffs)
    low, high = bootstrap_ci(diffs, seed=seed, resamples=resamples, confidence=confidence)
    w_p, method = wilcoxon(diffs)
    return Paired(
        n=n,
        mean_a=sum(xa) / n,
        mean_b=sum(xb) / n,
        diff=sum(diffs) / n,
        ci_low=low,
        ci_high=high,
        confidence=confidence,
        wins=sum(d > 0 for d in diffs),
        losses=sum(d < 0 for d in diffs),
        ties=sum(d == 0 for d in diffs),
        sign_p=sign_test(diffs),
        wilcoxon_p=w_p,
        wilcoxon_method=method,
        headline=n >= HEADLINE_MIN_N,
    )
