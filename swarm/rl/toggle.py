"""Toggle (K2.5 §4.4.2): alternate a budget-limited phase and a free phase every ``m`` iterations.

In phase 0 (``⌊t/m⌋ mod 2 = 0``) a response keeps its reward only if its task's group accuracy is
below ``λ`` *or* its length is within the task's budget; phase 1 leaves rewards alone. Accuracy is
measured on the task outcome ``r_perf``, never on the shaped total (PARL's auxiliary terms would
make a wrong swarm answer look "accurate"). The budget of a task is the ``p``-th percentile of the
lengths of its *correct* responses, estimated the first time the task has a correct response and
then kept fixed (:func:`update_budgets`). "Length" is whatever the caller measures — orchestrator
tokens, or critical steps for a swarm.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from agent_swarm.swarm.errors import ConfigError

__all__ = ["estimate_budgets", "percentile", "toggle_phase", "toggle_rewards", "update_budgets"]


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0–100), interpolating linearly between order statistics (as numpy)."""
    if not values:
        raise ConfigError("percentile of an empty list is undefined")
    if not 0.0 <= p <= 100.0:
        raise ConfigError(f"percentile p must be in [0, 100], got {p}")
    xs = sorted(values)
    pos = (len(xs) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def estimate_budgets(
    rewards: Sequence[float],
    lengths: Sequence[float],
    task_ids: Sequence[Hashable],
    p: float,
    correct_at: float = 1.0,
) -> dict[Hashable, float]:
    """``budget(x) = Percentile({|y_j| : r(x, y_j) ≥ correct_at}, p)`` per task.

    Tasks without a single correct response get no budget (they are never length-limited).
    """
    if not len(rewards) == len(lengths) == len(task_ids):
        raise ConfigError(
            f"rewards, lengths and task ids must have one entry per response "
            f"(got {len(rewards)}, {len(lengths)}, {len(task_ids)})"
        )
    correct: dict[Hashable, list[float]] = defaultdict(list)
    for r, n, t in zip(rewards, lengths, task_ids, strict=True):
        if r >= correct_at:
            correct[t].append(n)
    return {t: percentile(v, p) for t, v in correct.items()}


def update_budgets(
    budgets: Mapping[str, float] | None,
    perf: Sequence[float],
    lengths: Sequence[float],
    task_ids: Sequence[Hashable],
    p: float,
    correct_at: float = 1.0,
) -> dict[str, float]:
    """``budgets`` plus a budget for every task seen here for the first time with a correct response.

    A task's budget is fixed once set (the K2.5 budget is a property of the task, not of the batch);
    tasks that are sampled later in training, or solved only later, get theirs when that happens.
    """
    new = estimate_budgets(perf, lengths, task_ids, p, correct_at)
    return {**{str(k): v for k, v in new.items()}, **(budgets or {})}


def toggle_phase(iteration: int, m: int) -> int:
    """0 = budget-limited phase, 1 = free (scaling) phase."""
    if m < 1:
        raise ConfigError(f"Toggle period m must be ≥ 1, got {m}")
    return (iteration // m) % 2


def toggle_rewards(
    rewards: Sequence[float],
    perf: Sequence[float],
    lengths: Sequence[float],
    task_ids: Sequence[Hashable],
    budgets: Mapping[Any, float],
    iteration: int,
    m: int,
    lam: float,
) -> list[float]:
    """``r̃(x, y)``: zero the reward of over-budget responses on tasks the policy already solves.

    ``rewards`` are what the update will use (e.g. the PARL total), ``perf`` each response's task
    outcome ``r_perf``. ``task_ids[i]`` names the group of response ``i`` (its K siblings); the
    group accuracy is the mean ``perf`` of that group.
    """
    if not len(rewards) == len(perf) == len(lengths) == len(task_ids):
        raise ConfigError(
            f"rewards, perf, lengths and task ids must have one entry per response "
            f"(got {len(rewards)}, {len(perf)}, {len(lengths)}, {len(task_ids)})"
        )
    if toggle_phase(iteration, m) == 1:
        return list(rewards)
    groups: dict[Hashable, list[float]] = defaultdict(list)
    for r, t in zip(perf, task_ids, strict=True):
        groups[t].append(r)
    acc = {t: sum(v) / len(v) for t, v in groups.items()}
    out = []
    for r, n, t in zip(rewards, lengths, task_ids, strict=True):
        budget = budgets.get(t)
        keep = acc[t] < lam or budget is None or n <= budget
        out.append(r if keep else 0.0)
    return out
