"""``run_dir/metrics.jsonl``: one :class:`StepMetrics` line per training step, and its upkeep on resume."""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agent_swarm.swarm.monitors import summarise_monitors
from agent_swarm.swarm.records import AgentStatus, EpisodeRecord

__all__ = ["METRICS", "StepMetrics", "append_jsonl", "step_metrics", "truncate_metrics"]

METRICS = "metrics.jsonl"


class StepMetrics(BaseModel):
    """One line of ``metrics.jsonl``."""

    model_config = ConfigDict(extra="forbid")

    step: int
    loss: float
    policy_loss: float
    ptx_loss: float | None = None
    reward: float
    r_perf: float
    r_parallel: float
    r_finish: float
    lambda1: float
    lambda2: float
    temperature: float
    toggle_phase: int | None = None
    toggled_zero: int = 0
    mean_critical_steps: float
    mean_total_steps: float
    mean_parallel_width: float
    finish_rate: float
    masked_token_frac: float
    ratio_mismatch: float
    grad_norm: float
    episodes: int
    trained_sequences: int
    trained_tokens: int
    sequence_tokens: int = Field(0, description="all tokens the update ran through (prompts and observations too)")
    dropped_episodes: int
    split_episodes: int = 0
    statuses: dict[str, int]
    reward_details: dict[str, float] = Field(
        default_factory=dict,
        description="mean over the step's episodes of each numeric (or boolean) reward detail the verifier "
        "or workload reports (e.g. exact fan-out, over-assignment, call F1)",
    )
    weight_version: int
    rollout_s: float
    update_s: float
    subagent_cache: dict[str, int] = Field(
        default_factory=dict, description="the sub-agent replay cache's hits, misses and bypassed calls this step"
    )
    monitors: dict[str, float] = Field(
        default_factory=dict,
        description="collapse monitors over the step's episodes (agent_swarm.swarm.monitors.summarise_monitors): "
        "share of serial collapse and spurious parallelism, mean finish rate and straggler ratio",
    )


def step_metrics(
    step: int,
    records: Sequence[EpisodeRecord],
    rewards: Sequence[float],
    upd: dict[str, float],
    *,
    lambdas: tuple[float, float],
    weight_version: int,
    temperature: float,
    phase: int | None,
    zeroed: int,
    sequences: int,
    dropped: int,
    split: int,
    rollout_s: float,
    update_s: float,
) -> StepMetrics:
    """The ``metrics.jsonl`` line of a step: its episodes (``records``), the rewards the update used, the
    update's own figures (``upd``), the PARL λs, and what the step trained on (``sequences`` of the
    episodes, ``dropped`` without token ids, ``split`` trained turn by turn) and how long it took."""
    l1, l2 = lambdas
    return StepMetrics(
        step=step,
        loss=upd.get("loss", 0.0),
        policy_loss=upd.get("policy_loss", 0.0),
        ptx_loss=upd.get("ptx_loss"),
        reward=_mean(rewards),
        lambda1=l1,
        lambda2=l2,
        temperature=temperature,
        toggle_phase=phase,
        toggled_zero=zeroed,
        masked_token_frac=upd.get("masked_token_frac", 0.0),
        ratio_mismatch=upd.get("ratio_mismatch", 0.0),
        grad_norm=upd.get("grad_norm", 0.0),
        trained_sequences=sequences,
        trained_tokens=int(upd.get("tokens", 0)),
        sequence_tokens=int(upd.get("sequence_tokens", 0)),
        dropped_episodes=dropped,
        split_episodes=split,
        weight_version=weight_version,
        rollout_s=rollout_s,
        update_s=update_s,
        **_episode_figures(records),
    )


def _mean(xs: Iterable[float]) -> float:
    v = list(xs)
    return sum(v) / len(v) if v else 0.0


def _episode_figures(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    """The :class:`StepMetrics` fields that summarise a step's episodes."""
    rr = [r.reward for r in records if r.reward is not None]
    subs = [s for r in records for s in r.subagent_results]
    statuses: dict[str, int] = {}
    for r in records:
        statuses[r.status.value] = statuses.get(r.status.value, 0) + 1
    widths = [w for r in records for w in r.dag.stage_widths if w]
    return {
        "r_perf": _mean(x.r_perf for x in rr),
        "r_parallel": _mean(x.r_parallel for x in rr),
        "r_finish": _mean(x.r_finish for x in rr),
        "mean_critical_steps": _mean(r.dag.critical_steps for r in records),
        "mean_total_steps": _mean(r.dag.total_steps for r in records),
        "mean_parallel_width": _mean(widths),
        "finish_rate": _mean(float(s.status is AgentStatus.COMPLETED) for s in subs) if subs else 0.0,
        "episodes": len(records),
        "statuses": statuses,
        "reward_details": _mean_details(rr),
        "subagent_cache": _cache_totals(records),
        "monitors": summarise_monitors(records),
    }


def _cache_totals(records: Sequence[EpisodeRecord]) -> dict[str, int]:
    from agent_swarm.swarm.backends.replay_cache import cache_counts, sum_counts

    return sum_counts(cache_counts(r) for r in records)


def _mean_details(rewards: Sequence[Any]) -> dict[str, float]:
    """Mean of every numeric or boolean reward detail, over the episodes that report it."""
    sums: dict[str, list[float]] = {}
    for r in rewards:
        for k, v in r.details.items():
            if isinstance(v, bool | int | float) and math.isfinite(float(v)):
                sums.setdefault(k, []).append(float(v))
    return {k: sum(v) / len(v) for k, v in sorted(sums.items())}


def append_jsonl(path: Path, data: dict[str, Any]) -> None:
    """Append one JSON line and fsync it (a crash keeps every finished step's line)."""
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(data, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def truncate_metrics(path: Path, completed_steps: int) -> None:
    """Keep only metrics of steps a checkpoint covers (a resumed step is re-run and re-logged)."""
    if not path.exists():
        return
    keep = []
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):
            if json.loads(line).get("step", 1 << 60) < completed_steps:
                keep.append(line)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(x + "\n" for x in keep), encoding="utf-8")
    os.replace(tmp, path)
