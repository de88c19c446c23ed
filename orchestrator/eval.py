"""``swarm eval``: run a workload's tasks in several arms (swarm, single, single-parallel) and compare them.

For every task and arm the workload builds a fresh environment (:meth:`Workload.episode`, in the
arm's workload mode, :func:`arm_mode`); the episode runs on the given backends (a real model, or the
workload's gold scripted policy) with the workload's own budgets (:func:`arm_config`) and is scored
by the workload. A run whose budgets are below what the workload's gold policy needs is refused before
anything runs (:func:`check_budgets`).

Everything is saved under ``<out>/<run-id>/``: ``manifest.json`` and ``episodes.jsonl.gz`` (the raw
per-episode data, :mod:`agent_swarm.orchestrator.eval_raw`; reports are regenerated from them by
:mod:`agent_swarm.orchestrator.eval_report`), ``report.json`` (the :class:`EvalReport` summary), ``tasks.jsonl``
(a task file ``swarm run``/``swarm rollout`` can read back) and ``episodes/<arm>/<episode-id>/``
(the record and, from the CLI, its trace). A run resumes (``resume=True``): the episodes already in
the raw file are skipped, provided the run's settings match.

:func:`workload_orchestrator_factory` is the hook for rollout collection and training: an
:data:`~agent_swarm.orchestrator.rollout.episodes.EpisodeFactory` that builds each job's orchestrator in its task's own
environment (from the task's metadata) and scores it with the workload (the PARL terms on top).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import statistics
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import anyio
from pydantic import BaseModel, ConfigDict, Field

from agent_swarm.orchestrator.engine import Orchestrator, RewardFn
from agent_swarm.orchestrator.eval_raw import (
    RAW_FILE,
    Provenance,
    RawEpisode,
    RoleTokens,
    RunManifest,
    append_raw,
    code_state,
    read_manifest,
    read_raw,
    settings_diff,
    write_manifest,
    write_raw,
)
from agent_swarm.orchestrator.rollout.episodes import EpisodeFactory, EpisodeJob
from agent_swarm.orchestrator.store import episode_dir, write_episode
from agent_swarm.swarm.backend import ModelBackend
from agent_swarm.swarm.backends.replay_cache import cache_counts, episode_cache_stats, sum_counts, with_cache_stats
from agent_swarm.swarm.config import SwarmConfig, apply_overrides
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.events import EpisodeFinished, Event, Observer
from agent_swarm.swarm.limits import CapacityLimit
from agent_swarm.swarm.records import EpisodeRecord, Task
from agent_swarm.swarm.tracing import Telemetry
from agent_swarm.workloads import Episode, Mode, Workload, episode_for, finish_rate

__all__ = [
    "ARMS",
    "Arm",
    "BackendPair",
    "BackendResolver",
    "Configs",
    "EpisodeRow",
    "EvalReport",
    "ModeSummary",
    "Progress",
    "arm_config",
    "arm_mode",
    "check_budgets",
    "episode_config",
    "episode_orchestrator",
    "parse_arms",
    "plan_configs",
    "run_eval",
    "workload_orchestrator_factory",
    "write_tasks",
]

Arm = Literal["swarm", "single", "single-parallel"]
ARMS: tuple[Arm, ...] = get_args(Arm)
ARM_GROUPS: dict[str, tuple[Arm, ...]] = {"both": ("swarm", "single"), "all": ARMS}
"""Names for several arms at once (``--mode both``, ``--mode all``)."""

BackendPair = tuple[ModelBackend, ModelBackend | None]
"""(orchestrator backend, sub-agent backend or None for the same)."""

BackendResolver = Callable[[Task, Mode], BackendPair]
"""The backends of one episode, from its task and workload mode."""

RATIO_FIELDS = ("metric", "success_rate", "critical_steps", "total_steps", "wall_time_s", "tokens")
BUDGET_FIELDS = (
    ("max_critical_steps", "--max-critical-steps", "critical steps"),
    ("max_subagent_steps", "--max-subagent-steps", "steps per sub-agent"),
    ("max_subagents_per_stage", "max_subagents_per_stage", "sub-agents in one stage"),
)


# -- arms ------------------------------------------------------------------------------------------------


def parse_arms(text: str) -> tuple[Arm, ...]:
    """``"swarm,single"``, ``"both"`` or ``"all"`` → the arms, in the order given, without repeats."""
    out: list[Arm] = []
    for part in (p.strip() for p in text.split(",")):
        names = ARM_GROUPS.get(part) or ((part,) if part in ARMS else None)
        if names is None:
            raise ConfigError(
                f"unknown arm {part!r} in --mode {text!r}; use {', '.join(ARMS)}, a comma-separated list of "
                "them, 'both' (swarm,single) or 'all'"
            )
        out += [a for a in names if a not in out]
    return tuple(out)


def arm_mode(arm: str) -> Mode:
    """The workload mode an arm runs in: the swarm delegates; both single arms act alone."""
    if arm not in ARMS:
        raise ConfigError(f"unknown arm {arm!r}; use one of {', '.join(ARMS)}")
    return "swarm" if arm == "swarm" else "single"


def arm_settings(arm: str) -> dict[str, Any]:
    """The config fields that define an arm, applied on top of everything else (flags and config files
    included): the single agent runs one direct tool call per turn, single-parallel every call of a
    turn (concurrently, one critical step). The swarm's own setting is the workload mode's."""
    arm_mode(arm)  # an unknown arm is a ConfigError
    if arm == "swarm":
        return {}
    return {"parallel_tool_calls": arm == "single-parallel"}


def episode_config(
    ep: Episode, base: SwarmConfig | None = None, overrides: Mapping[str, Any] | None = None
) -> SwarmConfig:
    """The config of one workload episode: ``base`` < the workload's budgets < explicit ``overrides``;
    the system prompt is the prompt profile's orchestrator prompt + the workload's instructions
    (swarm mode) or the workload's instructions alone (single mode, which is also not offered the
    sub-agent actions)."""
    data = (base or SwarmConfig()).model_dump()
    data.update(ep.config.model_dump(exclude_unset=True))  # only the fields the workload sets
    data["subagents"] = ep.mode == "swarm"  # a single agent is not offered create_subagent/assign_task
    apply_overrides(data, overrides or {})
    if not (overrides or {}).get("system_prompt"):
        if ep.mode == "swarm":  # the prompt profile's protocol prompt (chosen from the model), then these
            data["extra_instructions"] = ep.instructions
        else:
            data["system_prompt"] = ep.instructions
    try:
        return SwarmConfig.model_validate(data)
    except Exception as exc:
        raise ConfigError(f"invalid config for workload episode {ep.task.id!r}: {exc}") from None


def arm_config(
    ep: Episode, arm: str, base: SwarmConfig | None = None, overrides: Mapping[str, Any] | None = None
) -> SwarmConfig:
    """:func:`episode_config` with the arm's defining settings (:func:`arm_settings`) on top."""
    cfg = episode_config(ep, base, overrides)
    extra = arm_settings(arm)
    if not extra:
        return cfg
    try:
        return SwarmConfig.model_validate({**cfg.model_dump(), **extra})
    except Exception as exc:
        raise ConfigError(f"invalid {arm} config for workload episode {ep.task.id!r}: {exc}") from None


# -- rows and summaries ----------------------------------------------------------------------------------


class EpisodeRow(BaseModel):
    """One episode of the evaluation (the summary view of a :class:`~agent_swarm.orchestrator.eval_raw.RawEpisode`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str
    mode: Mode
    arm: str = ""
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
    subagent_cache: dict[str, int] = Field(default_factory=dict, description="replay cache hits, misses, bypassed")


class ModeSummary(BaseModel):
    """Means over the episodes of one arm (``finish_rate`` over episodes that ran sub-agents)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: str = Field(description="the arm")
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
    delegation_rate: float = Field(
        0.0,
        description="share of episodes that ran any sub-agent (the controls' fan-out: answering a one-fact "
        "question through a sub-agent counts)",
    )
    finish_rate: float | None
    errors: int
    subagent_cache: dict[str, int] = Field(
        default_factory=dict, description="the sub-agent replay cache's hits, misses and bypassed calls, summed"
    )


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


def summarise(arm: str, rows: Sequence[EpisodeRow]) -> ModeSummary:
    rates = [r.finish_rate for r in rows if r.finish_rate is not None]
    return ModeSummary(
        mode=arm,
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
        delegation_rate=_mean([float(r.max_width >= 1) for r in rows]),
        finish_rate=_mean(rates) if rates else None,
        errors=sum(r.error is not None for r in rows),
        subagent_cache=sum_counts(r.subagent_cache for r in rows),
    )


def ratios(summaries: Mapping[str, ModeSummary]) -> dict[str, float | None]:
    """single / swarm per field (None when an arm is missing or the swarm value is 0)."""
    single, swarm = summaries.get("single"), summaries.get("swarm")
    out: dict[str, float | None] = {}
    for f in RATIO_FIELDS:
        if single is None or swarm is None:
            out[f] = None
            continue
        a, b = float(getattr(single, f)), float(getattr(swarm, f))
        out[f] = a / b if b else None
    return out


def row_of(raw: RawEpisode) -> EpisodeRow:
    """The summary row of a raw episode."""
    details = dict(raw.scores)
    if raw.items is not None:
        details["items"] = dict(raw.items)
    return EpisodeRow(
        task_id=raw.task_id,
        mode=arm_mode(raw.arm),
        arm=raw.arm,
        episode_id=raw.episode_id,
        status=raw.status,
        metric=raw.metric,
        success=raw.success,
        critical_steps=raw.critical_steps,
        total_steps=raw.total_steps,
        wall_time_s=raw.wall_time_s,
        tokens=raw.total_tokens,
        mean_width=raw.mean_width,
        max_width=raw.max_width,
        subagents=raw.subagents,
        finish_rate=raw.finish_rate,
        error=raw.error,
        details=details,
        subagent_cache=dict(raw.subagent_cache),
    )


# -- budgets ---------------------------------------------------------------------------------------------


async def gold_needs(workload: Workload, task: Task, arm: str) -> dict[str, int]:
    """What the workload's gold policy uses on ``task`` in ``arm``, run under the workload's own budgets:
    critical steps, the most steps of one sub-agent, the widest stage."""
    mode = arm_mode(arm)
    ep = workload.episode(task, mode)
    gold = workload.gold_policy(task, mode)
    orch = Orchestrator(
        gold.orchestrator,
        arm_config(ep, arm),
        tools=ep.tools,
        agents=ep.agents if mode == "swarm" else (),
        subagent_backend=gold.subagent,
    )
    record = await orch.run(task, episode_id=f"{task.id}-{arm}-gold")
    subs = record.subagent_results
    return {
        "max_critical_steps": record.dag.critical_steps,
        "max_subagent_steps": max((s.steps for s in subs), default=0),
        "max_subagents_per_stage": max(record.dag.stage_widths, default=0),
    }


Configs = dict[tuple[str, str], tuple[SwarmConfig, SwarmConfig]]
"""(task id, arm) -> (the workload's own config for the arm, the config the run uses)."""


def plan_configs(
    workload: Workload,
    tasks: Sequence[Task],
    arms: Sequence[str],
    base: SwarmConfig | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Configs:
    """Every episode's config, next to the workload's own (building each environment once)."""
    out: Configs = {}
    for task in tasks:
        for arm in arms:
            ep = workload.episode(task, arm_mode(arm))
            out[(task.id, arm)] = (arm_config(ep, arm), arm_config(ep, arm, base, overrides))
    return out


async def check_budgets(workload: Workload, tasks: Sequence[Task], configs: Configs) -> None:
    """Refuse (ConfigError, with the numbers) a run whose budgets are below what the workload's gold
    policy needs on some task. Only (task, arm) pairs whose budgets are below the workload's own run
    the gold policy (a scripted policy: no model)."""
    by_id = {t.id: t for t in tasks}
    for (task_id, arm), (own, cfg) in configs.items():
        lowered = [f for f, _, _ in BUDGET_FIELDS if getattr(cfg, f) < getattr(own, f)]
        if not lowered:
            continue
        needs = await gold_needs(workload, by_id[task_id], arm)
        for name, flag, what in BUDGET_FIELDS:
            have, need = getattr(cfg, name), needs[name]
            if name in lowered and have < need:
                raise ConfigError(
                    f"{flag} {have} is below the {need} {what} {workload.name}'s gold policy needs on task "
                    f"{task_id!r} ({arm} arm; the workload's own budget is {getattr(own, name)}); raise it or "
                    "drop the flag (or the config's value)"
                )


# -- running ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Run:
    """What every episode of one evaluation shares."""

    workload: Workload
    backends: BackendResolver
    base: SwarmConfig | None
    overrides: Mapping[str, Any]
    run_id: str
    split: str
    seed: int
    root: Path | None
    provenance: Provenance
    concurrent: int
    observers: Sequence[Observer]
    telemetry: Callable[[str], Telemetry | None]
    models: set[str] = field(default_factory=set)
    # The sub-agent cap (max_concurrency) that the run's concurrent episodes share.
    subagent_limit: CapacityLimit = field(default_factory=CapacityLimit)


Job = tuple[Task, str, int]
"""(task, arm, sample)."""


def _raw_row(
    run: _Run,
    job: Job,
    cfg: SwarmConfig,
    record: EpisodeRecord | None,
    error: str | None,
    provenance: Provenance,
) -> RawEpisode:
    """The raw row of one episode (``error``: a runtime crash, with ``record`` the partial record if any)."""
    task, arm, sample = job
    common: dict[str, Any] = {
        "run_id": run.run_id,
        "workload": run.workload.name,
        "metric_name": run.workload.metric,
        "split": run.split,
        "seed": run.seed,
        "task_id": task.id,
        "arm": arm,
        "mode": arm_mode(arm),
        "sample": sample,
        "episode_id": episode_id(task.id, arm, sample),
        "provenance": provenance,
        "config": cfg.model_dump(mode="json"),
        "concurrent_episodes": run.concurrent,
    }
    if record is None or error is not None:
        wall = record.wall_time_s if record is not None else 0.0
        return RawEpisode(**common, status="crashed", error=error, wall_time_s=wall)
    reward = record.reward
    details = dict(reward.details) if reward else {}
    success = bool(details.pop("success", False))
    items = details.pop("items", None)
    return RawEpisode(
        **common,
        status=record.status.value,
        answer=record.answer,
        metric=reward.r_perf if reward else 0.0,
        success=success,
        items={str(k): float(v) for k, v in items.items()} if isinstance(items, dict) else None,
        scores=json.loads(json.dumps(details, default=str)),  # as read back from the raw file
        critical_steps=record.dag.critical_steps,
        total_steps=record.dag.total_steps,
        main_steps=record.dag.main_steps,
        subagent_steps=record.dag.subagent_steps,
        max_width=max(record.dag.stage_widths, default=0),
        mean_width=record.dag.mean_width,
        subagents=len(record.subagent_results),
        finish_rate=finish_rate(record),
        tokens={
            "orchestrator": RoleTokens(prompt=record.usage.prompt_tokens, completion=record.usage.completion_tokens),
            "subagent": RoleTokens(
                prompt=record.subagent_usage.prompt_tokens, completion=record.subagent_usage.completion_tokens
            ),
        },
        wall_time_s=record.wall_time_s,
        error=record.error or (reward.error if reward else "no reward recorded"),
        started_at=record.started_at,
        subagent_cache=cache_counts(record),
    )


def episode_id(task_id: str, arm: str, sample: int = 0) -> str:
    """``<task>-<arm>``, and ``-r<sample>`` for samples after the first."""
    return f"{task_id}-{arm}" + (f"-r{sample}" if sample else "")


def sample_config(cfg: SwarmConfig, sample: int) -> SwarmConfig:
    """Sample ``sample`` of a task: each role's sampling seed moved on by ``sample`` (sample 0 unchanged)."""
    if not sample:
        return cfg
    update = {}
    for name in ("orchestrator_sampling", "subagent_sampling"):
        sp = getattr(cfg, name)
        if sp.seed is not None:
            update[name] = sp.model_copy(update={"seed": sp.seed + sample})
    return cfg.model_copy(update=update)


@dataclass(slots=True)
class _Finished:
    """The observer that keeps the record an episode ended with (a crashed episode's partial one too)."""

    record: EpisodeRecord | None = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, EpisodeFinished):
            self.record = event.record


async def _episode(run: _Run, task: Task, arm: str, sample: int) -> RawEpisode:
    """Run one episode, save its record, append its raw row."""
    mode = arm_mode(arm)
    ep = run.workload.episode(task, mode)
    cfg = sample_config(arm_config(ep, arm, run.base, run.overrides), sample)
    orch_backend, sub_backend = run.backends(task, mode)
    run.models.add(orch_backend.model)
    prov = run.provenance
    if not prov.model:  # a library caller's run: the backends name the models
        prov = prov.model_copy(
            update={"model": orch_backend.model, "subagent_model": (sub_backend or orch_backend).model}
        )
    finished = _Finished()
    orch = episode_orchestrator(
        ep,
        cfg,
        (orch_backend, sub_backend),
        ep.reward,
        observers=[*run.observers, finished],
        telemetry=run.telemetry(arm),
    )
    eid = episode_id(task.id, arm, sample)
    if run.root is not None:  # what an interrupted attempt left (its trace) would mix with this one's
        shutil.rmtree(episode_dir(run.root / "episodes" / arm, eid), ignore_errors=True)
    record: EpisodeRecord | None
    error = None
    with episode_cache_stats() as cache:
        try:
            record = await orch.run(task, episode_id=eid, subagent_limit=run.subagent_limit)
        except anyio.get_cancelled_exc_class():
            raise  # interrupted: no row, so a resumed run runs this episode again
        except Exception as exc:  # a runtime bug in one episode must not end the evaluation
            error, record = f"{type(exc).__name__}: {exc}", finished.record
    record = with_cache_stats(record, cache) if record is not None else None
    raw = _raw_row(run, (task, arm, sample), cfg, record, error, prov)
    if run.root is not None:
        if record is not None:
            write_episode(record, run.root / "episodes" / arm)
        append_raw(run.root / RAW_FILE, raw)
    return raw


def _settings(
    workload: Workload,
    tasks: Sequence[Task],
    arms: Sequence[str],
    configs: Configs,
    base: SwarmConfig | None,
    overrides: Mapping[str, Any],
    knobs: Mapping[str, Any],
    backend_name: str,
    provenance: Provenance,
) -> dict[str, Any]:
    """Everything that must match for a resumed run to continue this one."""
    dumped = {f"{t}/{a}": cfg.model_dump(mode="json") for (t, a), (_, cfg) in configs.items()}
    blob = json.dumps(dumped, sort_keys=True, default=str).encode()
    # The same without default values: a config field added by a later commit (at its default) does
    # not stop a resume; a value that differs does.
    set_only = {k: cfg.model_dump(mode="json", exclude_defaults=True) for k, (_, cfg) in configs.items()}
    set_blob = json.dumps({f"{t}/{a}": v for (t, a), v in set_only.items()}, sort_keys=True, default=str).encode()
    settings: dict[str, Any] = json.loads(
        json.dumps(
            {
                "workload": workload.name,
                "tasks": [t.id for t in tasks],
                "task_digest": hashlib.sha256(
                    json.dumps([t.model_dump(mode="json") for t in tasks], sort_keys=True).encode()
                ).hexdigest(),
                "arms": list(arms),
                "knobs": dict(knobs),
                "backend": backend_name,
                "model": provenance.model,
                "model_sha256": provenance.model_sha256,
                "subagent_model": provenance.subagent_model,
                "adapter_sha256": provenance.adapter_sha256,
                "base_config": (base or SwarmConfig()).model_dump(mode="json"),
                "overrides": {k: v for k, v in overrides.items() if v is not None},
                "episode_configs_sha256": hashlib.sha256(blob).hexdigest(),
                "episode_configs_nondefault_sha256": hashlib.sha256(set_blob).hexdigest(),
            },
            default=str,
        )
    )
    return settings


@contextlib.contextmanager
def _exclusive(root: Path) -> Iterator[None]:
    """Hold ``root/.lock`` for the run (released when the process ends, however it ends), so two
    processes never append to one run; where ``fcntl`` is missing, no lock."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with (root / ".lock").open("a") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise ConfigError(
                f"eval run {root} is in use by another swarm eval; wait for it, or pick another --run-id"
            ) from None
        yield


def _comparable(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two runs' settings as a resume compares them: base-config fields at their default left out on both
    sides (a field a later commit added is no difference), and the episode configs compared without
    defaults where both runs recorded that digest."""
    a, b = dict(old), dict(new)
    defaults = SwarmConfig().model_dump(mode="json")
    for d in (a, b):
        if isinstance(d.get("base_config"), dict):
            d["base_config"] = {
                k: v
                for k, v in d["base_config"].items()
                if k not in defaults or settings_diff({k: v}, {k: defaults[k]})
            }
    if "episode_configs_nondefault_sha256" in a and "episode_configs_nondefault_sha256" in b:
        a.pop("episode_configs_sha256", None)
        b.pop("episode_configs_sha256", None)
    return a, b


def _open_run(
    root: Path, manifest: RunManifest, resume: bool, stack: contextlib.ExitStack, tasks: Sequence[Task]
) -> list[RawEpisode]:
    """Create the run directory (with ``tasks.jsonl``), or (``resume``) check the existing one and return
    its finished rows; either way the run is locked for this process (``stack``)."""
    if not root.exists():
        root.mkdir(parents=True)
        stack.enter_context(_exclusive(root))
        write_manifest(root, manifest)
        write_tasks(tasks, root / "tasks.jsonl")
        return []
    if not resume:
        raise ConfigError(
            f"eval results directory {root} already exists; pass --resume to continue it, or pick another --run-id"
        )
    stack.enter_context(_exclusive(root))
    old = read_manifest(root)
    diff = settings_diff(*_comparable(old.settings, manifest.settings))
    for name in ("split", "seed"):
        if getattr(old, name) != getattr(manifest, name):
            diff.insert(0, name)
    if diff:
        raise ConfigError(
            f"cannot resume {root}: its settings differ in {', '.join(diff[:12])}"
            + (f" (+{len(diff) - 12} more)" if len(diff) > 12 else "")
            + "; run again with the same flags and config, or pick another --run-id"
        )
    rows, bad = read_raw(root / RAW_FILE)
    if bad:  # a torn last row from a kill mid-write: keep the whole rows only
        write_raw(root / RAW_FILE, rows)
    keep = {(t, a) for t in manifest.task_ids for a in manifest.arms}
    rows = list({r.key: r for r in rows if (r.task_id, r.arm) in keep}.values())
    write_manifest(root, old.model_copy(update={"resumed_at": (*old.resumed_at, time.time())}))
    if not (root / "tasks.jsonl").exists():  # a run from before tasks.jsonl was written
        write_tasks(tasks, root / "tasks.jsonl")
    return rows


async def _run_all(run: _Run, todo: Sequence[Job], on_row: Callable[[RawEpisode], None]) -> None:
    """Run ``todo`` with at most ``run.concurrent`` episodes at once, in order of starting."""
    jobs: Iterator[Job] = iter(todo)

    async def worker() -> None:
        for task, arm, sample in jobs:  # the workers share one iterator: each job runs once
            on_row(await _episode(run, task, arm, sample))

    async with anyio.create_task_group() as tg:
        for _ in range(max(1, min(run.concurrent, len(todo)))):
            tg.start_soon(worker)


@dataclass(frozen=True, slots=True)
class Progress:
    """Passed to ``on_row`` after each episode: ``done`` of ``total`` episodes of this call finished
    (``resumed`` more were already in the raw file)."""

    row: EpisodeRow
    done: int
    total: int
    resumed: int


async def run_eval(
    workload: Workload,
    tasks: Sequence[Task],
    backends: BackendResolver,
    *,
    arms: Sequence[str] = ("swarm", "single"),
    base_config: SwarmConfig | None = None,
    overrides: Mapping[str, Any] | None = None,
    out_dir: Path | None = None,
    run_id: str | None = None,
    resume: bool = False,
    backend_name: str = "",
    split: str | None = None,
    seed: int = 0,
    knobs: Mapping[str, Any] | None = None,
    observers: Sequence[Observer] = (),
    on_row: Callable[[Progress], None] | None = None,
    on_start: Callable[[int, int, Configs], None] | None = None,
    concurrent_episodes: int = 1,
    samples: int = 1,
    provenance: Provenance | None = None,
    telemetry: Callable[[str], Telemetry | None] | None = None,
    argv: Sequence[str] = (),
) -> EvalReport:
    """Run every task in every arm ``samples`` times (sample ``i`` moves each sampling seed on by ``i``;
    greedy samples measure run-to-run variance), ``concurrent_episodes`` at a time (1: one after
    another, so wall times are comparable). Budgets below what the gold policy needs are refused first (ConfigError).

    A runtime crash in one episode becomes a row with status ``crashed`` and the error; it does not
    stop the evaluation. Rows are written as they finish, so an interrupted run keeps them, and
    ``resume=True`` continues the run ``run_id``. ``on_start(resumed, to_run, configs)`` is called before
    the first episode (the configs of :func:`plan_configs`).
    """
    arms = _checked(
        arms, samples, concurrent_episodes, run_id, needs_root=resume and (out_dir is None or run_id is None)
    )
    over = dict(overrides or {})
    configs = plan_configs(workload, tasks, arms, base_config, over)
    await check_budgets(workload, tasks, configs)
    prov = provenance or _code_provenance(backend_name)
    run_fields = {
        "run_id": run_id or f"{workload.name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}",
        "split": _split_of(tasks, split),
        "seed": seed,
        "samples": samples,
        "concurrent_episodes": concurrent_episodes,
        "argv": tuple(argv),
    }
    manifest = _manifest(workload, tasks, arms, configs, base_config, over, prov, knobs or {}, backend_name, run_fields)
    root = out_dir / manifest.run_id if out_dir is not None else None
    run = _run_of(manifest, workload, backends, base_config, over, root, observers, telemetry or _no_telemetry)
    with contextlib.ExitStack() as stack:
        raws = _open_run(root, manifest, resume, stack, tasks) if root is not None else []
        jobs = [(t, a, i) for t in tasks for i in range(samples) for a in arms]
        await _continue(run, jobs, raws, on_start, on_row, configs)
        return _report(run, manifest, tasks, raws, backend_name, knobs or {})


def _manifest(
    workload: Workload,
    tasks: Sequence[Task],
    arms: tuple[str, ...],
    configs: Configs,
    base: SwarmConfig | None,
    over: Mapping[str, Any],
    prov: Provenance,
    knobs: Mapping[str, Any],
    backend_name: str,
    run_fields: Mapping[str, Any],
) -> RunManifest:
    """The run's ``manifest.json``: ``run_fields`` (run id, split, seed, samples, concurrency, argv), and
    the settings a resume must match."""
    settings = _settings(workload, tasks, arms, configs, base, over, knobs, backend_name, prov)
    return RunManifest.model_validate(
        {
            **run_fields,
            "workload": workload.name,
            "metric_name": workload.metric,
            "task_ids": tuple(t.id for t in tasks),
            "arms": arms,
            "knobs": workload.knobs(knobs).model_dump(mode="json"),
            "settings": {**settings, "samples": run_fields["samples"]},
            "provenance": prov,
            "created_at": time.time(),
        }
    )


def _run_of(
    m: RunManifest,
    workload: Workload,
    backends: BackendResolver,
    base: SwarmConfig | None,
    over: Mapping[str, Any],
    root: Path | None,
    observers: Sequence[Observer],
    telemetry: Callable[[str], Telemetry | None],
) -> _Run:
    """What every episode of the run ``m`` shares."""
    return _Run(
        workload,
        backends,
        base,
        over,
        m.run_id,
        m.split,
        m.seed,
        root,
        m.provenance,
        m.concurrent_episodes,
        observers,
        telemetry,
    )


def _checked(
    arms: Sequence[str], samples: int, concurrent: int, run_id: str | None, *, needs_root: bool
) -> tuple[str, ...]:
    """The arms, without repeats; bad arguments are ConfigErrors."""
    out = tuple(dict.fromkeys(arms))
    if not out or any(a not in ARMS for a in out):
        raise ConfigError(f"arms must be among {list(ARMS)}, got {list(arms)}")
    if samples < 1:
        raise ConfigError(f"samples must be at least 1, got {samples}")
    if concurrent < 1:
        raise ConfigError(f"concurrent_episodes must be at least 1, got {concurrent}")
    if needs_root:
        raise ConfigError("resuming needs the results directory and the run id (--out and --run-id)")
    if run_id is not None and (run_id in ("", ".", "..") or Path(run_id).name != run_id or "\\" in run_id):
        raise ConfigError(f"a run id names one folder under the results directory (no '/' or '..'), got {run_id!r}")
    return out


async def _continue(
    run: _Run,
    jobs: Sequence[Job],
    raws: list[RawEpisode],
    on_start: Callable[[int, int, Configs], None] | None,
    on_row: Callable[[Progress], None] | None,
    configs: Configs,
) -> None:
    """Run the jobs without a row in ``raws`` (appending each new row to it)."""
    done = {r.key for r in raws}
    todo = [j for j in jobs if (j[0].id, j[1], j[2]) not in done]
    resumed = len(raws)
    if on_start is not None:
        on_start(resumed, len(todo), configs)

    def finished(raw: RawEpisode) -> None:
        raws.append(raw)
        if on_row is not None:
            on_row(Progress(row_of(raw), len(raws) - resumed, len(todo), resumed))

    await _run_all(run, todo, finished)


def _code_provenance(backend_name: str) -> Provenance:
    commit, dirty = code_state()
    return Provenance(commit=commit, dirty=dirty, backend=backend_name)


def _split_of(tasks: Sequence[Task], split: str | None) -> str:
    """The tasks' split (``metadata["split"]``); a ``split`` that contradicts it is a ConfigError."""
    found = {str(t.metadata.get("split", "")) for t in tasks} - {""}
    if split is None:
        return found.pop() if len(found) == 1 else ",".join(sorted(found)) or "unknown"
    if found and found != {split}:
        raise ConfigError(f"split {split!r} given, but the tasks are from split(s) {sorted(found)}")
    return split


def _no_telemetry(arm: str) -> Telemetry | None:
    return None


def _report(
    run: _Run,
    manifest: RunManifest,
    tasks: Sequence[Task],
    raws: Sequence[RawEpisode],
    backend_name: str,
    knobs: Mapping[str, Any],
) -> EvalReport:
    """The summary report of a run (task order, then arm order), written to ``report.json``."""
    order = {(t.id, a): i for i, (t, a) in enumerate((t, a) for t in tasks for a in manifest.arms)}
    rows = [row_of(r) for r in sorted(raws, key=lambda r: (order.get((r.task_id, r.arm), len(order)), r.sample))]
    summaries = {a: summarise(a, [r for r in rows if r.arm == a]) for a in manifest.arms}
    models = run.models or {manifest.provenance.model} - {""}
    report = EvalReport(
        run_id=run.run_id,
        workload=run.workload.name,
        metric_name=run.workload.metric,
        backend=backend_name,
        model=",".join(sorted(models)),
        split=run.split,
        seed=run.seed,
        knobs=dict(knobs),
        created_at=manifest.created_at,
        rows=tuple(rows),
        summaries=summaries,
        ratios=ratios(summaries),
        out_dir=str(run.root) if run.root is not None else None,
    )
    if run.root is not None:
        tmp = run.root / ".report.json.tmp"
        tmp.write_text(report.model_dump_json(indent=1), encoding="utf-8")
        tmp.replace(run.root / "report.json")
    return report


def write_tasks(tasks: Sequence[Task], path: Path) -> Path:
    """Write tasks as a JSONL task file (``swarm run -f`` / ``swarm rollout`` read it back)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(json.dumps(t.model_dump(mode="json"), ensure_ascii=False) + "\n" for t in tasks), encoding="utf-8"
    )
    return path


# -- the episode of a workload task ---------------------------------------------------------------------


def episode_orchestrator(
    ep: Episode,
    config: SwarmConfig,
    backends: BackendPair,
    reward_fn: RewardFn,
    *,
    observers: Sequence[Observer] = (),
    telemetry: Telemetry | None = None,
) -> Orchestrator:
    """The orchestrator of one workload episode: its tools, its sub-agent types (swarm mode only: a
    single agent acts alone), ``config`` (see :func:`episode_config`) and ``reward_fn``."""
    orch_backend, sub_backend = backends
    return Orchestrator(
        orch_backend,
        config,
        tools=ep.tools,
        agents=ep.agents if ep.mode == "swarm" else (),
        subagent_backend=sub_backend,
        reward_fn=reward_fn,
        observers=list(observers),
        telemetry=telemetry,
    )


def workload_orchestrator_factory(
    backend: ModelBackend | BackendResolver,
    subagent_backend: ModelBackend | None = None,
    *,
    mode: Mode = "swarm",
    overrides: Mapping[str, Any] | None = None,
) -> EpisodeFactory:
    """An :data:`~agent_swarm.orchestrator.rollout.episodes.EpisodeFactory` for
    :func:`~agent_swarm.orchestrator.rollout.collection.collect_rollouts` over workload tasks: each job gets its task's
    fresh environment, tools and agents
    (:meth:`Workload.episode`), and its reward's ``r_perf`` is the workload's score (the PARL terms and
    λs from the run's reward, :meth:`Episode.reward_with`).

    ``backend`` is one model backend for every episode, or a resolver ``(task, mode) -> (orchestrator
    backend, sub-agent backend or None)`` called once per episode, as :func:`run_eval` takes (the
    workload's gold policy is built per task). ``overrides`` win over the workload's budgets, as in
    :func:`episode_config`; the sampling settings come from the collector's config (per-sample seeds).
    A task that is not a workload task runs on ``backend`` as given (no tools), which a resolver cannot.
    """
    extra = dict(overrides or {})
    fixed = backend if isinstance(backend, ModelBackend) else None

    def resolve(task: Task, mode: Mode) -> BackendPair:
        return (backend, subagent_backend) if isinstance(backend, ModelBackend) else backend(task, mode)

    def make(job: EpisodeJob, config: SwarmConfig, reward_fn: RewardFn) -> Orchestrator:
        task = job.task
        if "workload" not in task.metadata:
            if fixed is None:
                raise ConfigError(
                    f"task {task.id!r} is not a workload task (no metadata.workload); backends resolved per "
                    "workload task cannot run it"
                )
            return Orchestrator(fixed, config, subagent_backend=subagent_backend, reward_fn=reward_fn)
        ep = episode_for(task, mode)
        return episode_orchestrator(
            ep, episode_config(ep, config, extra), resolve(task, mode), ep.reward_with(reward_fn)
        )

    return make
