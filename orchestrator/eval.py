"""``swarm eval``: run a workload's tasks in swarm mode and single-agent mode and compare them.

For every task and mode the workload builds a fresh environment (:meth:`Workload.episode`); the
episode runs on the given backends (a real model, or the workload's gold scripted policy) and is
scored by the workload. Each episode gives one :class:`EpisodeRow`; rows are summarised per mode
(:class:`ModeSummary`) and compared as single/swarm ratios. Everything is saved under
``<out>/<run-id>/``: ``report.json`` (the :class:`EvalReport`), ``rows.jsonl``, ``tasks.jsonl`` (a
task file ``swarm run``/``swarm rollout`` can read back) and ``episodes/<mode>/<episode-id>/``.

:func:`workload_orchestrator_factory` is the hook for rollout collection: an
:data:`~orchestrator.rollout.OrchestratorFactory` whose orchestrators build each task's environment
from the task's metadata and score it with the workload (the PARL terms on top).
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.config import SwarmConfig
from orchestrator.engine import Orchestrator, RewardFn
from orchestrator.store import write_episode
from swarm.backend import Completion, ModelBackend, ModelRequest
from swarm.errors import ConfigError
from swarm.events import Observer
from swarm.records import EpisodeRecord, RewardRecord, Task
from swarm.rl.rewards import PARLReward, parl_total
from workloads import MODES, Episode, Mode, Workload, episode_for, finish_rate

__all__ = [
    "BackendPair",
    "BackendResolver",
    "EpisodeRow",
    "EvalReport",
    "ModeSummary",
    "episode_config",
    "run_eval",
    "workload_orchestrator_factory",
    "write_tasks",
]

BackendPair = tuple[ModelBackend, ModelBackend | None]
"""(orchestrator backend, sub-agent backend or None for the same)."""

BackendResolver = Callable[[Task, Mode], BackendPair]
"""The backends of one episode, from its task and mode."""

RATIO_FIELDS = ("metric", "success_rate", "critical_steps", "total_steps", "wall_time_s", "tokens")


class EpisodeRow(BaseModel):
    """One episode of the evaluation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str
    mode: Mode
    episode_id: str
    status: str
    metric: float = 0.0
    success: bool = False
    critical_steps: int = 0
    total_steps: int = 0
    wall_time_s: float = 0.0
    tokens: int = 0
    mean_width: float = 0.0
    max_width: int = 0
    subagents: int = 0
    finish_rate: float | None = None
    error: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class ModeSummary(BaseModel):
    """Means over the episodes of one mode (``finish_rate`` over episodes that ran sub-agents)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Mode
    episodes: int
    metric: float
    success_rate: float
    critical_steps: float
    total_steps: float
    wall_time_s: float
    median_wall_time_s: float = 0.0
    tokens: float
    mean_width: float
    fanout_rate: float = Field(0.0, description="share of episodes with >= 2 sub-agents in one stage")
    finish_rate: float | None
    errors: int


class EvalReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    workload: str
    metric_name: str
    backend: str
    model: str
    split: str
    seed: int
    knobs: dict[str, Any]
    created_at: float
    rows: tuple[EpisodeRow, ...]
    summaries: dict[str, ModeSummary]
    ratios: dict[str, float | None] = Field(description="single / swarm for each summary field")
    out_dir: str | None = None


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def summarise(mode: Mode, rows: Sequence[EpisodeRow]) -> ModeSummary:
    rates = [r.finish_rate for r in rows if r.finish_rate is not None]
    return ModeSummary(
        mode=mode,
        episodes=len(rows),
        metric=_mean([r.metric for r in rows]),
        success_rate=_mean([float(r.success) for r in rows]),
        critical_steps=_mean([r.critical_steps for r in rows]),
        total_steps=_mean([r.total_steps for r in rows]),
        wall_time_s=_mean([r.wall_time_s for r in rows]),
        median_wall_time_s=statistics.median([r.wall_time_s for r in rows]) if rows else 0.0,
        tokens=_mean([r.tokens for r in rows]),
        mean_width=_mean([r.mean_width for r in rows]),
        fanout_rate=_mean([float(r.max_width >= 2) for r in rows]),
        finish_rate=_mean(rates) if rates else None,
        errors=sum(r.error is not None for r in rows),
    )


def ratios(summaries: Mapping[str, ModeSummary]) -> dict[str, float | None]:
    """single / swarm per field (None when a mode is missing or the swarm value is 0)."""
    single, swarm = summaries.get("single"), summaries.get("swarm")
    out: dict[str, float | None] = {}
    for f in RATIO_FIELDS:
        if single is None or swarm is None:
            out[f] = None
            continue
        a, b = float(getattr(single, f)), float(getattr(swarm, f))
        out[f] = a / b if b else None
    return out


def episode_config(
    ep: Episode, base: SwarmConfig | None = None, overrides: Mapping[str, Any] | None = None
) -> SwarmConfig:
    """The config of one workload episode: ``base`` < the workload's budgets < explicit ``overrides``;
    the system prompt is the prompt profile's orchestrator prompt + the workload's instructions
    (swarm mode) or the workload's instructions alone (single mode, which is also not offered the
    sub-agent actions)."""
    data = (base or SwarmConfig()).model_dump()
    data.update(ep.config)
    data["subagents"] = ep.mode == "swarm"  # a single agent is not offered create_subagent/assign_task
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    if not (overrides or {}).get("system_prompt"):
        if ep.mode == "swarm":  # the prompt profile's protocol prompt (chosen from the model), then these
            data["extra_instructions"] = ep.instructions
        else:
            data["system_prompt"] = ep.instructions
    try:
        return SwarmConfig.model_validate(data)
    except Exception as exc:
        raise ConfigError(f"invalid config for workload episode {ep.task.id!r}: {exc}") from None


def _row(task: Task, mode: Mode, record: EpisodeRecord) -> EpisodeRow:
    reward = record.reward
    details = dict(reward.details) if reward else {}
    subs = record.subagent_results
    tokens = record.usage.total_tokens + record.subagent_usage.total_tokens
    error = record.error or (reward.error if reward else "no reward recorded")
    return EpisodeRow(
        task_id=task.id,
        mode=mode,
        episode_id=record.episode_id,
        status=record.status.value,
        metric=reward.r_perf if reward else 0.0,
        success=bool(details.pop("success", False)),
        critical_steps=record.dag.critical_steps,
        total_steps=record.dag.total_steps,
        wall_time_s=record.wall_time_s,
        tokens=tokens,
        mean_width=record.dag.mean_width,
        max_width=max(record.dag.stage_widths, default=0),
        subagents=len(subs),
        finish_rate=finish_rate(record),
        error=error,
        details=details,
    )


async def run_eval(
    workload: Workload,
    tasks: Sequence[Task],
    backends: BackendResolver,
    *,
    modes: Sequence[Mode] = MODES,
    base_config: SwarmConfig | None = None,
    overrides: Mapping[str, Any] | None = None,
    out_dir: Path | None = None,
    run_id: str | None = None,
    backend_name: str = "",
    split: str = "train",
    seed: int = 0,
    knobs: Mapping[str, Any] | None = None,
    observers: Sequence[Observer] = (),
    on_row: Callable[[EpisodeRow], None] | None = None,
) -> EvalReport:
    """Run every task in every mode, one episode at a time (so wall times are comparable).

    A runtime crash in one episode becomes a row with status ``crashed`` and the error; it does not
    stop the evaluation. Files are written as rows arrive, so an interrupted run keeps what finished.
    """
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ConfigError(f"modes must be among {list(MODES)}, got {list(modes)}")
    rid = run_id or f"{workload.name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    root = out_dir / rid if out_dir is not None else None
    if root is not None:
        if root.exists():
            raise ConfigError(f"eval results directory {root} already exists; pick another --run-id")
        root.mkdir(parents=True)
        write_tasks(tasks, root / "tasks.jsonl")
    rows: list[EpisodeRow] = []
    models: set[str] = set()
    for task in tasks:
        for mode in modes:
            ep = workload.episode(task, mode)
            cfg = episode_config(ep, base_config, overrides)
            orch_backend, sub_backend = backends(task, mode)
            models.add(orch_backend.model)
            orch = Orchestrator(
                orch_backend,
                cfg,
                tools=ep.tools,
                agents=ep.agents if mode == "swarm" else (),
                subagent_backend=sub_backend,
                reward_fn=ep.reward,
                observers=list(observers),
            )
            eid = f"{task.id}-{mode}"
            record: EpisodeRecord | None
            try:
                record = await orch.run(task, episode_id=eid)
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:  # a runtime bug in one episode must not end the evaluation
                row = EpisodeRow(
                    task_id=task.id, mode=mode, episode_id=eid, status="crashed", error=f"{type(exc).__name__}: {exc}"
                )
                record = orch.last_record
            else:
                row = _row(task, mode, record)
            if root is not None and record is not None:
                write_episode(record, root / "episodes" / mode)
            if root is not None:
                with (root / "rows.jsonl").open("a", encoding="utf-8") as f:
                    f.write(row.model_dump_json() + "\n")
            rows.append(row)
            if on_row is not None:
                on_row(row)
    summaries: dict[str, ModeSummary] = {m: summarise(m, [r for r in rows if r.mode == m]) for m in modes}
    report = EvalReport(
        run_id=rid,
        workload=workload.name,
        metric_name=workload.metric,
        backend=backend_name,
        model=",".join(sorted(models)),
        split=split,
        seed=seed,
        knobs=dict(knobs or {}),
        created_at=time.time(),
        rows=tuple(rows),
        summaries=summaries,
        ratios=ratios(summaries),
        out_dir=str(root) if root is not None else None,
    )
    if root is not None:
        tmp = root / ".report.json.tmp"
        tmp.write_text(report.model_dump_json(indent=1), encoding="utf-8")
        tmp.replace(root / "report.json")
    return report


def write_tasks(tasks: Sequence[Task], path: Path) -> Path:
    """Write tasks as a JSONL task file (``swarm run -f`` / ``swarm rollout`` read it back)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(json.dumps(t.model_dump(mode="json"), ensure_ascii=False) + "\n" for t in tasks), encoding="utf-8"
    )
    return path


# -- rollout hook ---------------------------------------------------------------------------------------


class _WorkloadReward:
    """PARL reward whose r_perf is the workload's score of this episode's environment."""

    def __init__(self, episode: Episode, parl: RewardFn) -> None:
        self.episode = episode
        self.parl = parl

    async def __call__(self, record: EpisodeRecord) -> RewardRecord:
        base = await self.parl(record)
        score = self.episode.score(record)
        total = parl_total(score.metric, base.r_parallel, base.r_finish, base.lambda1, base.lambda2)
        return base.model_copy(
            update={
                "total": total,
                "r_perf": score.metric,
                "verifier": f"workload:{self.episode.task.metadata['workload']}",
                "details": {**base.details, "success": score.success, **score.details},
                "error": None,
            }
        )


class _PerTaskBackend:
    """The outer orchestrator's backend when backends are resolved per task: never asked to complete."""

    model = "per-task"

    async def complete(self, request: ModelRequest) -> Completion:
        raise ConfigError("backends resolved per workload task serve workload tasks only")


class _WorkloadOrchestrator(Orchestrator):
    """An orchestrator that builds each task's workload environment when it runs the task."""

    def __init__(
        self,
        backend: ModelBackend,
        config: SwarmConfig,
        reward_fn: RewardFn,
        *,
        mode: Mode,
        subagent_backend: ModelBackend | None,
        overrides: Mapping[str, Any] | None,
        resolve: BackendResolver | None = None,
    ) -> None:
        super().__init__(backend, config, subagent_backend=subagent_backend, reward_fn=reward_fn)
        self._mode: Mode = mode
        self._overrides = dict(overrides or {})
        self._resolve = resolve

    async def run(self, task: Task | str, *, episode_id: str | None = None) -> EpisodeRecord:
        if isinstance(task, str) or "workload" not in task.metadata:
            if self._resolve is not None:
                tid = task if isinstance(task, str) else task.id
                raise ConfigError(
                    f"task {tid!r} is not a workload task (no metadata.workload); backends resolved per "
                    "workload task cannot run it"
                )
            return await super().run(task, episode_id=episode_id)
        ep = episode_for(task, self._mode)
        cfg = episode_config(ep, self.config, self._overrides)
        parl = self.reward_fn or PARLReward()
        if self._resolve is not None:
            orch_backend, sub_backend = self._resolve(task, self._mode)
        else:
            orch_backend, sub_backend = self.backend, self.subagent_backend
        inner = Orchestrator(
            orch_backend,
            cfg,
            tools=ep.tools,
            agents=ep.agents if self._mode == "swarm" else (),
            subagent_backend=sub_backend,
            reward_fn=_WorkloadReward(ep, parl),
            telemetry=self.telemetry,
            observers=self.observers,
        )
        try:
            return await inner.run(task, episode_id=episode_id)
        finally:
            self.last_record = inner.last_record


def workload_orchestrator_factory(
    backend: ModelBackend | BackendResolver,
    subagent_backend: ModelBackend | None = None,
    *,
    mode: Mode = "swarm",
    overrides: Mapping[str, Any] | None = None,
) -> Callable[[SwarmConfig, RewardFn], Orchestrator]:
    """An ``OrchestratorFactory`` for :func:`orchestrator.rollout.collect_rollouts` over workload tasks:
    each episode gets the task's fresh environment, tools and agents, and its reward's ``r_perf`` is
    the workload's score (the PARL terms and λs from the given reward).

    ``backend`` is one model backend for every episode, or a resolver ``(task, mode) -> (orchestrator
    backend, sub-agent backend or None)`` called once per episode, as :func:`run_eval` takes (the
    workload's gold policy is built per task). ``overrides`` win over the workload's budgets, as in
    :func:`episode_config`; the sampling settings come from the collector's config (per-sample seeds).
    """
    if isinstance(backend, ModelBackend):
        fixed: ModelBackend = backend
        resolve: BackendResolver | None = None
    else:
        fixed, resolve = _PerTaskBackend(), backend

    def make(config: SwarmConfig, reward_fn: RewardFn) -> Orchestrator:
        return _WorkloadOrchestrator(
            fixed,
            config,
            reward_fn,
            mode=mode,
            subagent_backend=subagent_backend,
            overrides=overrides,
            resolve=resolve,
        )

    return make
