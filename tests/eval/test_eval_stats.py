"""Paired statistics of evaluation reports, against hand-worked values and a brute-force reference."""

from __future__ import annotations

import itertools
import math

import pytest

from agent_swarm.orchestrator.eval_stats import (
    HEADLINE_MIN_N,
    bootstrap_ci,
    paired,
    quantile,
    sign_test,
    spread,
    wilcoxon,
)


def brute_wilcoxon(diffs: list[float]) -> float:
    """Two-sided signed-rank p by enumerating every sign assignment (the slow reference)."""
    nz = [d for d in diffs if d != 0]
    absv = sorted(abs(d) for d in nz)

    def rank(v: float) -> float:
        idx = [i + 1 for i, a in enumerate(absv) if a == v]
        return sum(idx) / len(idx)

    ranks = [rank(abs(d)) for d in nz]
    t = sum(r for r, d in zip(ranks, nz, strict=True) if d > 0)
    sums = [
        sum(r for r, s in zip(ranks, signs, strict=True) if s) for signs in itertools.product([0, 1], repeat=len(nz))
    ]
    below = sum(s <= t + 1e-9 for s in sums) / len(sums)
    above = sum(s >= t - 1e-9 for s in sums) / len(sums)
    return min(1.0, 2 * min(below, above))


def test_sign_test_hand_worked() -> None:
    assert sign_test([1, 1, 1, 1, 1]) == pytest.approx(2 / 32)
    assert sign_test([0.5] * 6 + [0.0] * 4) == pytest.approx(2 / 64)  # ties are dropped
    assert sign_test([1] * 8 + [-1] * 2) == pytest.approx(2 * (1 + 10 + 45) / 1024)
    assert sign_test([1, -1]) == 1.0 and sign_test([0, 0]) == 1.0


def test_wilcoxon_exact_hand_worked() -> None:
    assert wilcoxon([1, 2, 3, 4, 5]) == (pytest.approx(2 / 32), "exact")
    # T+ = 11 of 15: 7 of 32 sign assignments reach >= 11 (scipy.stats.wilcoxon gives 0.4375 too)
    assert wilcoxon([1, 2, 3, -4, 5])[0] == pytest.approx(14 / 32)
    # ties: |d| ranks 2, 2, 2, 4; T+ = 8; P(T >= 8) = 4/16
    assert wilcoxon([1, 1, -1, 2]) == (pytest.approx(0.5), "exact")
    assert wilcoxon([0.0, 0.0]) == (1.0, "none")


@pytest.mark.parametrize(
    "diffs",
    [
        [0.3, -0.1, 0.2, 0.2, 0.5, -0.4, 0.1, 0.0, 0.33],
        [1, 1, 1, -1, 0.5, 0.5, -0.5, 2, 0],
        [0.25, 0.5, 0.75, 1.0, -0.25, -0.25, 0.5],
        [-1, -2, -3, -4, 1, -5, -6, -7, -8, -9, -10],
    ],
)
def test_wilcoxon_exact_matches_enumeration_with_and_without_ties(diffs: list[float]) -> None:
    p, method = wilcoxon(diffs)
    assert method == "exact" and p == pytest.approx(brute_wilcoxon(diffs))


def test_wilcoxon_normal_approximation_for_many_tasks() -> None:
    # 60 differences, |d| in {1, 2, 3} twenty times each (average ranks 10.5, 30.5, 50.5); 42 positive.
    diffs = [1, 2, 3] * 14 + [-1, -2, -3] * 6
    p, method = wilcoxon(diffs)
    assert method == "normal"
    # By hand: T+ = 14 · 91.5 = 1281; mean 60·61/4 = 915; variance 60·61·121/24 - 3·(20³ - 20)/48
    # = 18452.5 - 498.75 = 17953.75; z = 366 / 133.99 = 2.7315; p = erfc(z / √2).
    z = 366 / math.sqrt(17953.75)
    assert p == pytest.approx(math.erfc(z / math.sqrt(2))) and p == pytest.approx(0.00630, abs=5e-5)


def test_quantile_is_numpys_linear_method() -> None:
    assert quantile([1, 2, 3, 4], 0.5) == 2.5
    assert quantile([1, 2, 3, 4], 0.25) == 1.75
    assert quantile([7], 0.975) == 7


def test_bootstrap_ci_is_seeded_and_sensible() -> None:
    diffs = [0.0] * 15 + [1.0] * 15
    lo, hi = bootstrap_ci(diffs, seed=1)
    assert (lo, hi) == bootstrap_ci(diffs, seed=1)
    varied = [math.sin(i) for i in range(20)]
    assert bootstrap_ci(varied, seed=1) != bootstrap_ci(varied, seed=2)
    # the normal interval is 0.5 ± 1.96·√(0.25/30) = (0.32, 0.68)
    assert lo == pytest.approx(0.32, abs=0.04) and hi == pytest.approx(0.68, abs=0.04)
    assert bootstrap_ci([0.25] * 5) == (0.25, 0.25)
    with pytest.raises(ValueError, match="none"):
        bootstrap_ci([])


def test_paired_counts_and_headline_flag() -> None:
    a = [0.0, 0.5, 1.0, 0.0, 0.2]
    b = [1.0, 0.5, 1.0, 0.5, 0.0]
    p = paired(a, b, resamples=500)
    assert (p.n, p.wins, p.losses, p.ties) == (5, 2, 1, 2)
    assert p.diff == pytest.approx((1.0 + 0.5 - 0.2) / 5) and p.mean_b - p.mean_a == pytest.approx(p.diff)
    assert p.ci_low <= p.diff <= p.ci_high
    assert not p.headline and p.sign_p == pytest.approx(1.0)
    cells = p.cells().split(" | ")
    assert cells[:2] == ["0.340", "0.600"] and cells[2].startswith("+0.260 [") and cells[3:5] == ["2/1/2", "1"]
    big = paired([0.0] * HEADLINE_MIN_N, [1.0] * HEADLINE_MIN_N, resamples=200)
    assert big.headline and big.sign_p < 1e-8 and big.wilcoxon_p < 1e-8
    with pytest.raises(ValueError, match="same tasks"):
        paired([1.0], [1.0, 2.0])


def test_spread_never_prints_plus_minus_zero() -> None:
    s = spread([0.5, 0.5, 0.5])
    assert s.format() == "0.50 (all 3 equal)" and "±" not in s.format()
    assert spread([0.33, 0.5, 0.66]).format() == "0.50 (0.33–0.66)"
    assert spread([2.0]).format("{:.1f}") == "2.0"
