"""Group advantages (K2.5 §4.4.2): each response is scored against the mean of its task's group.

Pure functions on plain lists (no torch): ``rewards[i]`` belongs to group ``group_ids[i]``, the K
samples of the same task. Chosen by name from :data:`ADVANTAGES`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence

from orchestrator.rl.registry import Registry
from swarm.errors import ConfigError

__all__ = ["ADVANTAGES", "AdvantageFn", "group_mean", "group_mean_baseline", "group_normalized"]

AdvantageFn = Callable[[Sequence[float], Sequence[Hashable]], list[float]]
ADVANTAGES: Registry[AdvantageFn] = Registry("advantage estimator")


def _check(rewards: Sequence[float], group_ids: Sequence[Hashable]) -> None:
    if len(rewards) != len(group_ids):
        raise ConfigError(f"{len(rewards)} rewards but {len(group_ids)} group ids; pass one group id per reward")
    bad = [r for r in rewards if not math.isfinite(r)]
    if bad:
        raise ConfigError(f"rewards must be finite numbers, got {bad[:3]}")


def group_mean(rewards: Sequence[float], group_ids: Sequence[Hashable]) -> dict[Hashable, float]:
    """``r̄(x)``: the mean reward of each group."""
    _check(rewards, group_ids)
    groups: dict[Hashable, list[float]] = defaultdict(list)
    for r, g in zip(rewards, group_ids, strict=True):
        groups[g].append(r)
    return {g: sum(v) / len(v) for g, v in groups.items()}


@ADVANTAGES.register("group_mean")
def group_mean_baseline(rewards: Sequence[float], group_ids: Sequence[Hashable]) -> list[float]:
    """``A_j = r(x, y_j) − r̄(x)`` (the K2.5 objective's advantage)."""
    means = group_mean(rewards, group_ids)
    return [r - means[g] for r, g in zip(rewards, group_ids, strict=True)]


@ADVANTAGES.register("group_normalized")
def group_normalized(rewards: Sequence[float], group_ids: Sequence[Hashable], eps: float = 1e-6) -> list[float]:
    """``(r − r̄) / (std_group(r) + eps)`` with the population std (GRPO's normalised variant).

    A group whose rewards are all equal gets advantages of exactly 0 (no signal, no blow-up).
    """
    means = group_mean(rewards, group_ids)
    sq: dict[Hashable, list[float]] = defaultdict(list)
    for r, g in zip(rewards, group_ids, strict=True):
        sq[g].append((r - means[g]) ** 2)
    stds = {g: math.sqrt(sum(v) / len(v)) for g, v in sq.items()}
    return [(r - means[g]) / (stds[g] + eps) for r, g in zip(rewards, group_ids, strict=True)]
