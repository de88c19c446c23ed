"""Rollout collection: K episodes per task, PARL rewards, group advantages, trajectories on disk.

::

    summary = await collect_rollouts(
        tasks, orchestrator_factory(backend, tools=[...]), out_dir=Path("runs/r1"),
        config=RolloutConfig(group_size=8, max_concurrent_episodes=16),
        reward=PARLReward(RewardConfig(), step=trainer_step),
    )

Every (task, sample) pair runs once, concurrently under a global episode limit, each sample with
its own sampling seed (derived from the run seed, the task id and the sample index, so a resumed
run uses the same seeds). The output directory holds:

* ``episodes.jsonl`` — one :class:`EpisodeEntry` per finished episode (the full record, every
  ending included); a re-run into the same directory skips these (*resume*);
* ``trajectories.jsonl`` — one :class:`~swarm.trajectory.Trajectory` per episode, written when its
  whole group is in, with ``advantage = r − group mean`` (optionally divided by the group std);
* ``failures.jsonl`` — episodes the runtime crashed on and episodes that failed from infrastructure
  (their model server was unreachable, kept answering errors or timing out — see
  :func:`infrastructure_failure`; the full record is kept), both retried on resume; and episodes
  that could not become trajectories (no token ids, drift: kept as episodes, not retried);
* ``manifest.json`` — group size and seed (a resume with different ones is refused);
* ``summary.json`` — :class:`RolloutSummary` over everything in the directory.

Writes are append-only and atomic per record, so an interrupted run loses at most the episodes that
were still running.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.config import SwarmConfig
from orchestrator.engine import Orchestrator, RewardFn
from orchestrator.tasks import parse_task_line
from swarm.backend import ModelBackend
from swarm.errors import ConfigError, TaskFileError, UnknownNameError
from swarm.export import JsonlProblem, JsonlWriter, read_jsonl, to_trl_rollout
from swarm.records import AgentStatus, EpisodeRecord, EpisodeStatus, Task
from swarm.rewards import PARLReward, group_advantages
from swarm.trajectory import Trajectory, TrajectoryError, build_trajectory
from swarm.verifiers import validate_verifier_args

__all__ = [
    "EpisodeEntry",
    "OrchestratorFactory",
    "RolloutConfig",
    "RolloutFailure",
    "RolloutProgress",
    "RolloutSummary",
    "TaskProblem",
    "collect_rollouts",
    "episode_seed",
    "infrastructure_failure",
    "load_task_file",
    "orchestrator_factory",
    "trl_rollout_func",
]

OrchestratorFactory = Callable[[SwarmConfig, RewardFn], Orchestrator]
"""Builds the orchestrator of one episode from its config (with the sample's seed) and reward hook."""

EPISODES = "episodes.jsonl"
TRAJECTORIES = "trajectories.jsonl"
FAILURES = "failures.jsonl"
MANIFEST = "manifest.json"
SUMMARY = "summary.json"


class RolloutConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    group_size: int = Field(4, ge=1, description="K: episodes per task (one GRPO group)")
    max_concurrent_episodes: int = Field(8, ge=1, description="episodes running at once, over all tasks")
    seed: int = Field(0, description="run seed; each sample's sampling seed derives from it")
    normalize_advantages: bool = Field(False, description="divide r − mean by the group's std")
    include_transcripts: bool = Field(True, description="keep sub-agent transcripts as side data")
    retry_infrastructure_failures: bool = Field(
        True,
        description="episodes that failed from infrastructure (see infrastructure_failure) go to failures.jsonl "
        "and run again on resume; False records them as finished episodes",
    )
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="what else a resume must match, e.g. the workload, mode, knobs and budgets (JSON values)",
    )


class TaskProblem(BaseModel):
    """A task-file line that was skipped."""

    model_config = ConfigDict(frozen=True)

    path: str
    line: int
    error: str


class EpisodeEntry(BaseModel):
    """One line of ``episodes.jsonl``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    group_id: str
    sample_index: int
    seed: int
    record: EpisodeRecord


class RolloutFailure(BaseModel):
    """One line of ``failures.jsonl``: ``kind`` ``episode`` (runtime crash, retried on resume),
    ``infrastructure`` (the episode failed because its model server did, retried on resume; its
    ``record`` is kept) or ``trajectory`` (the finished episode could not become a trajectory)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["episode", "infrastructure", "trajectory"]
    group_id: str
    sample_index: int
    seed: int
    episode_id: str
    error: str
    error_type: str
    record: EpisodeRecord | None = None


class RolloutSummary(BaseModel):
    """Totals over every episode in the output directory (resumed ones included)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tasks: int = 0
    group_size: int = 0
    episodes: int = 0
    episodes_run: int = 0
    episodes_resumed: int = 0
    groups_complete: int = 0
    groups_incomplete: int = 0
    trajectories: int = 0
    mean_reward: float = 0.0
    mean_r_perf: float = 0.0
    mean_r_parallel: float = 0.0
    mean_r_finish: float = 0.0
    mean_critical_steps: float = 0.0
    mean_total_steps: float = 0.0
    mean_parallel_width: float = 0.0
    finish_rate: float = 0.0
    statuses: dict[str, int] = Field(default_factory=dict)
    crashed_episodes: int = 0
    infrastructure_failures: int = 0
    failure_reasons: dict[str, int] = Field(
        default_factory=dict, description="this run's crash and infrastructure errors, by message"
    )
    trajectory_failures: int = 0
    reward_errors: int = 0
    skipped_lines: tuple[TaskProblem, ...] = ()
    unreadable_records: int = 0
    wall_time_s: float = 0.0


@dataclass(frozen=True, slots=True)
class RolloutProgress:
    done: int
    total: int
    failed: int
    last: EpisodeRecord | None = None


# -- tasks ------------------------------------------------------------------------------------------


def _task_problem(path: Path, line: int, task: Task, seen: set[str]) -> str | None:
    if task.id in seen:
        return f"duplicate task id {task.id!r} (ids name the rollout groups; make them unique)"
    if task.verifier is None:
        return None
    try:
        validate_verifier_args(task.verifier, task.verifier_args)
    except (UnknownNameError, ConfigError) as exc:
        return str(exc)
    return None


def load_task_file(
    path: Path, *, on_malformed: Literal["skip", "fail"] = "skip"
) -> tuple[list[Task], list[TaskProblem]]:
    """Read a JSONL task file (``{"id", "prompt", "verifier", "verifier_args", "metadata"}`` a line).

    Unknown top-level keys go into ``metadata``; a missing id becomes ``<file stem>-<line>``. A bad
    line (invalid JSON, no prompt, unknown verifier or bad verifier arguments, duplicate id) raises
    :class:`TaskFileError` naming the line with ``on_malformed="fail"``, or is reported and skipped.
    """
    p = str(path)
    if not path.is_file():
        raise TaskFileError("task file does not exist or is not a file; check the path", p)
    tasks: list[Task] = []
    problems: list[TaskProblem] = []
    seen: set[str] = set()
    with path.open("rb") as f:
        for lineno, raw_bytes in enumerate(f, start=1):
            try:
                raw = raw_bytes.decode("utf-8")
            except UnicodeDecodeError:
                err: str | None = "line is not UTF-8 text"
            else:
                if not raw.strip():
                    continue
                err = None
            task: Task | None = None
            if err is None:
                try:
                    obj = json.loads(raw)
                    if isinstance(obj, dict):
                        known = set(Task.model_fields) | {"task"}
                        extra = {k: v for k, v in obj.items() if k not in known}
                        if extra:
                            obj = {k: v for k, v in obj.items() if k in known}
                            obj["metadata"] = {**extra, **(obj.get("metadata") or {})}
                        if not obj.get("id"):
                            obj["id"] = f"{path.stem}-{lineno}"
                    task = parse_task_line(json.dumps(obj), p, lineno)
                    err = _task_problem(path, lineno, task, seen)
                except json.JSONDecodeError as exc:
                    err = f"invalid JSON ({exc.msg} at column {exc.colno})"
                except TaskFileError as exc:
                    err = exc.message
            if err is not None:
                if on_malformed == "fail":
                    raise TaskFileError(err + " (use --on-malformed skip to skip bad lines)", p, lineno)
                problems.append(TaskProblem(path=p, line=lineno, error=err))
                continue
            assert task is not None
            seen.add(task.id)
            tasks.append(task)
    if not tasks:
        raise TaskFileError(f"task file holds no usable tasks ({len(problems)} malformed line(s))", p)
    return tasks, problems


# -- running ----------------------------------------------------------------------------------------


def episode_seed(run_seed: int, task_id: str, sample_index: int) -> int:
    """The sampling seed of one sample: stable across runs and resumes, distinct within a group."""
    digest = hashlib.sha256(f"{run_seed}\x00{task_id}\x00{sample_index}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


_BACKEND_ERRORS = frozenset({"BackendError", "BackendTimeoutError", "BackendUnavailableError"})


def infrastructure_failure(record: EpisodeRecord) -> str | None:
    """Why a finished episode says nothing about the policy, or ``None`` when it does.

    An episode failed from infrastructure when its orchestrator's model call failed after the
    backend's retries (server down, answering errors or garbage, timing out), or when it started
    sub-agents and every one of them failed that way. Such an episode is retried on resume instead
    of entering training data as a zero-reward sample.
    """
    if record.status is EpisodeStatus.FAILED and record.error_type in _BACKEND_ERRORS:
        return record.error or "the orchestrator's model call failed"
    subs = [s for stage in record.stages for s in stage.subagents]
    if subs and all(s.status is AgentStatus.FAILED and s.error_type in _BACKEND_ERRORS for s in subs):
        return f"every sub-agent's model call failed ({len(subs)}); the first: {subs[0].error}"
    return None


def orchestrator_factory(
    backend: ModelBackend, *, subagent_backend: ModelBackend | None = None, **kwargs: Any
) -> OrchestratorFactory:
    """A factory building ``Orchestrator(backend, config, reward_fn=..., **kwargs)`` per episode."""

    def make(config: SwarmConfig, reward_fn: RewardFn) -> Orchestrator:
        return Orchestrator(backend, config, subagent_backend=subagent_backend, reward_fn=reward_fn, **kwargs)

    return make


def _atomic_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _check_manifest(out: Path, config: RolloutConfig) -> None:
    out.mkdir(parents=True, exist_ok=True)
    path = out / MANIFEST
    mine: dict[str, Any] = {"group_size": config.group_size, "seed": config.seed}
    if config.settings:
        mine["settings"] = config.settings
    if path.exists():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            old = None
        if isinstance(old, dict) and {k: old.get(k) for k in mine} != mine:
            theirs = ", ".join(f"{k}={json.dumps(old.get(k))}" for k in mine)
            ours = ", ".join(f"{k}={json.dumps(v)}" for k, v in mine.items())
            raise ConfigError(
                f"{out} holds a rollout with {theirs}; this run asks for {ours}. "
                "Resume with the same settings or write to a new --out directory"
            )
    _atomic_json(path, mine)


class _Run:
    """State of one collection: what is on disk, what runs, and the writers."""

    def __init__(self, tasks: Sequence[Task], out: Path, config: RolloutConfig) -> None:
        self.tasks = {t.id: t for t in tasks}
        self.config = config
        self.problems: list[JsonlProblem] = []
        ep_path, tr_path = out / EPISODES, out / TRAJECTORIES
        # Open the writers first: they cut a half-written tail left by a crash before we read.
        self.episodes_w = JsonlWriter(ep_path)
        self.traj_w = JsonlWriter(tr_path)
        self.fail_w = JsonlWriter(out / FAILURES)
        prior = read_jsonl(ep_path, EpisodeEntry, on_error="skip", problems=self.problems)
        self.entries: dict[tuple[str, int], EpisodeEntry] = {}
        for e in prior:
            if e.group_id in self.tasks and e.sample_index < config.group_size:
                # Runs before infrastructure failures were told apart recorded them as episodes.
                if config.retry_infrastructure_failures and infrastructure_failure(e.record) is not None:
                    continue
                self.entries[(e.group_id, e.sample_index)] = e
        self.resumed = len(self.entries)
        exported = read_jsonl(tr_path, Trajectory, on_error="skip", problems=self.problems)
        self.trajectories = sum(1 for t in exported if t.group_id in self.tasks)
        prior_fail = read_jsonl(out / FAILURES, RolloutFailure, on_error="skip", problems=self.problems)
        self.traj_failures = [f for f in prior_fail if f.kind == "trajectory" and f.group_id in self.tasks]
        # Per sample, not per group: a run killed in the middle of a group's export resumes it.
        self.exported: set[tuple[str, int]] = {(t.group_id, t.sample_index) for t in exported}
        self.exported |= {(f.group_id, f.sample_index) for f in self.traj_failures}
        self.crashed: list[RolloutFailure] = []
        self.infra_failed: list[RolloutFailure] = []
        self.ran = 0

    def pending(self) -> list[tuple[Task, int]]:
        return [
            (t, j) for t in self.tasks.values() for j in range(self.config.group_size) if (t.id, j) not in self.entries
        ]

    def close(self) -> None:
        for w in (self.episodes_w, self.traj_w, self.fail_w):
            w.close()

    def record(self, entry: EpisodeEntry) -> None:
        self.entries[(entry.group_id, entry.sample_index)] = entry
        self.episodes_w.write(entry)
        self.ran += 1
        self.maybe_export(entry.group_id)

    def crash(self, failure: RolloutFailure) -> None:
        self.crashed.append(failure)
        self.fail_w.write(failure)

    def infra(self, failure: RolloutFailure, *, keep: bool) -> None:
        """An episode that failed from infrastructure: to failures.jsonl (retried on resume), or, to
        ``keep`` it, only counted (the caller records it as a finished episode)."""
        self.infra_failed.append(failure)
        if not keep:
            self.fail_w.write(failure)

    def maybe_export(self, group_id: str) -> None:
        """Write the group's trajectories once all K episodes are in (not before: advantages need K)."""
        k = self.config.group_size
        if all((group_id, j) in self.exported for j in range(k)):
            return
        group = [self.entries.get((group_id, j)) for j in range(k)]
        if any(e is None for e in group):
            return
        entries = [e for e in group if e is not None]
        rewards = [e.record.reward.total if e.record.reward else 0.0 for e in entries]
        advs = group_advantages(rewards, normalize=self.config.normalize_advantages)
        for e, adv in zip(entries, advs, strict=True):
            if (group_id, e.sample_index) in self.exported:
                continue
            self.exported.add((group_id, e.sample_index))
            try:
                traj = build_trajectory(
                    e.record,
                    group_id=group_id,
                    sample_index=e.sample_index,
                    advantage=adv,
                    include_transcripts=self.config.include_transcripts,
                    metadata={"seed": e.seed},
                )
            except TrajectoryError as exc:
                f = RolloutFailure(
                    kind="trajectory",
                    group_id=group_id,
                    sample_index=e.sample_index,
                    seed=e.seed,
                    episode_id=e.record.episode_id,
                    error=str(exc),
                    error_type=type(exc).__name__,
                )
                self.traj_failures.append(f)
                self.fail_w.write(f)
                continue
            self.traj_w.write(traj)
            self.trajectories += 1


async def collect_rollouts(
    tasks: Sequence[Task],
    factory: OrchestratorFactory,
    *,
    out_dir: Path,
    config: RolloutConfig | None = None,
    swarm_config: SwarmConfig | None = None,
    reward: RewardFn | None = None,
    progress: Callable[[RolloutProgress], None] | None = None,
    skipped_lines: Iterable[TaskProblem] = (),
) -> RolloutSummary:
    """Run ``group_size`` episodes per task into ``out_dir`` (resuming what is there) and summarise.

    ``reward`` defaults to :class:`~swarm.rewards.PARLReward` with its default config. A runtime crash
    of one episode is recorded in ``failures.jsonl`` and does not stop the others; cancellation
    (Ctrl-C) stops the run with every finished episode already on disk.
    """
    cfg = config or RolloutConfig()
    base = swarm_config or SwarmConfig()
    reward_fn: RewardFn = reward or PARLReward()
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids) or not all(ids):
        raise ConfigError("rollout tasks need unique, non-empty ids (they name the groups)")
    factory(base, reward_fn)  # a factory/config mistake fails here, once, not in every episode
    out = Path(out_dir)
    _check_manifest(out, cfg)
    started = time.perf_counter()
    run = _Run(tasks, out, cfg)
    try:
        for group_id in run.tasks:  # groups completed before a crash in the middle of an export
            run.maybe_export(group_id)
        todo = run.pending()
        total = len(todo)
        limiter = anyio.CapacityLimiter(cfg.max_concurrent_episodes)
        done = failed = 0

        async def one(task: Task, j: int) -> None:
            nonlocal done, failed
            seed = episode_seed(cfg.seed, task.id, j)
            sampling = base.orchestrator_sampling.model_copy(update={"seed": seed})
            eid = f"{task.id}-s{j}"
            record: EpisodeRecord | None = None
            async with limiter:
                try:
                    orch = factory(base.model_copy(update={"orchestrator_sampling": sampling}), reward_fn)
                    record = await orch.run(task, episode_id=eid)
                except Exception as exc:  # a runtime bug in one episode must not end the others
                    run.crash(
                        RolloutFailure(
                            kind="episode",
                            group_id=task.id,
                            sample_index=j,
                            seed=seed,
                            episode_id=eid,
                            error=f"{type(exc).__name__}: {exc}",
                            error_type=type(exc).__name__,
                        )
                    )
            reason = None if record is None else infrastructure_failure(record)
            if record is not None and reason is not None:
                failure = RolloutFailure(
                    kind="infrastructure",
                    group_id=task.id,
                    sample_index=j,
                    seed=seed,
                    episode_id=eid,
                    error=reason,
                    error_type=record.error_type or "BackendError",
                    record=record,
                )
                run.infra(failure, keep=not cfg.retry_infrastructure_failures)
            if record is not None and (reason is None or not cfg.retry_infrastructure_failures):
                run.record(EpisodeEntry(group_id=task.id, sample_index=j, seed=seed, record=record))
            if record is None or reason is not None:
                failed += 1
            done += 1
            if progress is not None:
                progress(RolloutProgress(done=done, total=total, failed=failed, last=record))

        async with anyio.create_task_group() as tg:
            for task, j in todo:
                tg.start_soon(one, task, j)
    finally:
        run.close()
        summary = _summarise(run, cfg, list(skipped_lines), time.perf_counter() - started)
        _atomic_json(out / SUMMARY, summary.model_dump(mode="json"))
    return summary


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _summarise(run: _Run, cfg: RolloutConfig, skipped: list[TaskProblem], wall: float) -> RolloutSummary:
    records = [e.record for e in run.entries.values()]
    rewards = [r.reward for r in records if r.reward is not None]
    statuses: dict[str, int] = {}
    for r in records:
        statuses[r.status.value] = statuses.get(r.status.value, 0) + 1
    completed = assigned = 0
    for rw in rewards:
        completed += int(rw.details.get("subagents_completed", 0))
        assigned += int(rw.details.get("subagents_assigned", 0))
    widths = [r.dag.mean_width for r in records if any(r.dag.stage_widths)]
    complete = sum(1 for g in run.tasks if all((g, j) in run.entries for j in range(cfg.group_size)))
    reasons: dict[str, int] = {}
    for f in [*run.crashed, *run.infra_failed]:
        text = " ".join(f.error.split())  # one line per reason, even for an HTML error page
        key = text if len(text) <= 300 else text[:300] + "…"
        reasons[key] = reasons.get(key, 0) + 1
    return RolloutSummary(
        tasks=len(run.tasks),
        group_size=cfg.group_size,
        episodes=len(records),
        episodes_run=run.ran,
        episodes_resumed=run.resumed,
        groups_complete=complete,
        groups_incomplete=len(run.tasks) - complete,
        trajectories=run.trajectories,
        mean_reward=_mean([r.total for r in rewards]),
        mean_r_perf=_mean([r.r_perf for r in rewards]),
        mean_r_parallel=_mean([r.r_parallel for r in rewards]),
        mean_r_finish=_mean([r.r_finish for r in rewards]),
        mean_critical_steps=_mean([r.dag.critical_steps for r in records]),
        mean_total_steps=_mean([r.dag.total_steps for r in records]),
        mean_parallel_width=_mean(widths),
        finish_rate=completed / assigned if assigned else 0.0,
        statuses=statuses,
        crashed_episodes=len(run.crashed),
        infrastructure_failures=len(run.infra_failed),
        failure_reasons=reasons,
        trajectory_failures=len(run.traj_failures),
        reward_errors=sum(1 for r in rewards if r.error),
        skipped_lines=tuple(skipped),
        unreadable_records=len(run.problems),
        wall_time_s=wall,
    )


def _prompt_text(prompt: Any) -> str:
    """A TRL prompt: plain text, or a conversation whose last user message is the task."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if users and isinstance(users[-1], str):
            return users[-1]
    raise ConfigError(f"cannot read a task from TRL prompt {prompt!r}: give text or chat messages with a user turn")


def trl_rollout_func(
    factory: OrchestratorFactory,
    *,
    tasks: Sequence[Task] = (),
    swarm_config: SwarmConfig | None = None,
    reward: RewardFn | None = None,
    normalize_advantages: bool = False,
    seed: int = 0,
    max_concurrent_episodes: int = 8,
) -> Callable[[list[Any], Any], dict[str, list[Any]]]:
    """A ``rollout_func`` for TRL's ``GRPOTrainer`` that runs swarm episodes.

    TRL hands the function each prompt ``num_generations`` times in a row; every run of identical
    prompts becomes one group: one episode per copy (distinct seeds), PARL rewards, advantages, then
    :func:`~swarm.export.to_trl_rollout` (``env_mask`` marks the orchestrator's own tokens, ``reward``
    and ``advantage`` reach the reward functions). A prompt equal to a given task's prompt uses that
    task (and its verifier). A :class:`~swarm.rewards.PARLReward` follows the trainer's
    ``state.global_step`` so the λ schedules anneal with training. An episode that cannot become a
    trajectory raises :class:`~swarm.trajectory.TrajectoryError` (TRL needs one completion per prompt).
    """
    by_prompt = {t.prompt: t for t in tasks}
    base = swarm_config or SwarmConfig()
    reward_fn: RewardFn = reward or PARLReward()

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        if isinstance(reward_fn, PARLReward):
            reward_fn.step = int(getattr(getattr(trainer, "state", None), "global_step", 0) or 0)
        texts = [_prompt_text(p) for p in prompts]
        groups: list[tuple[Task, int]] = []
        for text in texts:
            if groups and groups[-1][0].prompt == text:
                groups[-1] = (groups[-1][0], groups[-1][1] + 1)
            else:
                n = len(groups)
                task = by_prompt.get(text) or Task(
                    id=f"trl-{n}-{hashlib.sha1(text.encode()).hexdigest()[:8]}", prompt=text
                )
                groups.append((task.model_copy(update={"id": f"{task.id}@{n}"}), 1))
        records: dict[tuple[int, int], EpisodeRecord] = {}
        limiter = anyio.CapacityLimiter(max_concurrent_episodes)

        async def one(g: int, task: Task, j: int) -> None:
            sampling = base.orchestrator_sampling.model_copy(update={"seed": episode_seed(seed, task.id, j)})
            orch = factory(base.model_copy(update={"orchestrator_sampling": sampling}), reward_fn)
            async with limiter:
                records[(g, j)] = await orch.run(task, episode_id=f"{task.id}-s{j}")

        async def main() -> None:
            async with anyio.create_task_group() as tg:
                for g, (task, k) in enumerate(groups):
                    for j in range(k):
                        tg.start_soon(one, g, task, j)

        anyio.run(main)
        trajectories: list[Trajectory] = []
        for g, (task, k) in enumerate(groups):
            recs = [records[(g, j)] for j in range(k)]
            advs = group_advantages([r.reward.total if r.reward else 0.0 for r in recs], normalize=normalize_advantages)
            trajectories += [
                build_trajectory(r, group_id=task.id, sample_index=j, advantage=a)
                for j, (r, a) in enumerate(zip(recs, advs, strict=True))
            ]
        return to_trl_rollout(trajectories)

    return rollout_func
