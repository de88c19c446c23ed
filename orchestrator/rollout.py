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
* ``trajectories.jsonl`` — one :class:`~swarm.rl.trajectory.Trajectory` per episode, written when its
  whole group is in, with the advantage of ``RolloutConfig.advantage`` (default ``r − group mean``);
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

import copy
import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import anyio
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import to_json

from orchestrator.engine import Orchestrator, RewardFn
from orchestrator.tasks import task_from
from swarm.backend import ModelBackend
from swarm.backends.replay_cache import METADATA_KEY as CACHE_KEY
from swarm.backends.replay_cache import episode_cache_stats
from swarm.config import SwarmConfig
from swarm.errors import ConfigError, ErrorType, TaskFileError, UnknownNameError
from swarm.limits import CapacityLimit, ConcurrencyLimit
from swarm.records import AgentStatus, EpisodeRecord, EpisodeStatus, Task, dump_record
from swarm.rl.export import JsonlProblem, JsonlWriter, iter_jsonl, to_trl_rollout
from swarm.rl.rewards import ADVANTAGES, PARLReward
from swarm.rl.trajectory import Trajectory, TrajectoryError, build_trajectory
from swarm.verifiers import validate_verifier_args

__all__ = [
    "EpisodeDigest",
    "EpisodeEntry",
    "EpisodeFactory",
    "EpisodeJob",
    "EpisodeOutcome",
    "EpisodeRunner",
    "LocalExecutor",
    "PreparedEpisode",
    "PreparedTrajectory",
    "RolloutConfig",
    "RolloutExecutor",
    "RolloutFailure",
    "RolloutProgress",
    "RolloutSummary",
    "TaskProblem",
    "collect_rollouts",
    "episode_crash",
    "episode_seed",
    "infrastructure_failure",
    "load_task_file",
    "orchestrator_factory",
    "prepare_episode",
    "trl_rollout_func",
]

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
    advantage: str = Field(
        "group_mean",
        description="advantage estimator, by name from swarm.rl.rewards.ADVANTAGES (e.g. group_normalized)",
    )
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

    @field_validator("advantage")
    @classmethod
    def _known_advantage(cls, v: str) -> str:
        ADVANTAGES.get(v)  # an unknown name fails when the config is read, listing the known ones
        return v


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
    subagent_cache: dict[str, int] = Field(
        default_factory=dict, description="the sub-agent replay cache's hits, misses and bypassed calls, summed"
    )
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
                    if isinstance(obj, dict) and not obj.get("id"):
                        obj["id"] = f"{path.stem}-{lineno}"
                    task = task_from(obj, p, lineno)  # the task loader's one rule for unknown keys
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


_BACKEND_ERRORS = frozenset(
    {ErrorType.BACKEND, ErrorType.BACKEND_REFUSED, ErrorType.BACKEND_TIMEOUT, ErrorType.BACKEND_UNAVAILABLE}
)


def infrastructure_failure(record: EpisodeRecord) -> str | None:
    """Why a finished episode says nothing about the policy, or ``None`` when it does.

    An episode failed from infrastructure when its orchestrator's model call failed after the
    backend's retries (server down, answering errors or garbage, timing out), or when it started
    sub-agents and every one of them failed that way, or when an endpoint refused service to any
    of its agents (401/403/quota: :class:`~swarm.errors.BackendRefusedError`; the sub-agents it cut
    off make the episode say nothing about the policy). Such an episode is retried on resume instead
    of entering training data as a zero-reward sample.
    """
    if record.status is EpisodeStatus.FAILED and record.error_type in _BACKEND_ERRORS:
        return record.error or "the orchestrator's model call failed"
    subs = [s for stage in record.stages for s in stage.subagents]
    refused = next((s for s in subs if s.error_type == ErrorType.BACKEND_REFUSED), None)
    if refused is not None:
        return f"an endpoint refused service to sub-agent {refused.agent_id}: {refused.error}"
    if subs and all(s.status is AgentStatus.FAILED and s.error_type in _BACKEND_ERRORS for s in subs):
        return f"every sub-agent's model call failed ({len(subs)}); the first: {subs[0].error}"
    return None


# -- episodes as the driver receives them -----------------------------------------------------------

_TRAJECTORY_FIELDS = list(Trajectory.model_fields)
_ADVANTAGE_AT = _TRAJECTORY_FIELDS.index("advantage")
_BEFORE_ADVANTAGE = set(_TRAJECTORY_FIELDS[:_ADVANTAGE_AT])
_AFTER_ADVANTAGE = set(_TRAJECTORY_FIELDS[_ADVANTAGE_AT + 1 :])


@dataclass(frozen=True, slots=True)
class EpisodeJob:
    """One (task, sample) to run: what an executor is handed."""

    task: Task
    sample_index: int
    seed: int
    attempt: int = 1
    """Which run of the episode this is: > 1 when the process running it before died (a Ray actor)."""

    @property
    def episode_id(self) -> str:
        return f"{self.task.id}-s{self.sample_index}"


EpisodeFactory = Callable[[EpisodeJob, SwarmConfig, RewardFn], Orchestrator]
"""Builds the orchestrator of one episode from its job (the task, as verl's agent loop gets each sample's
own kwargs), its config (with the sample's seed) and the run's reward hook. A workload task gets its
own environment here (:func:`orchestrator.eval.workload_orchestrator_factory`)."""


def orchestrator_factory(
    backend: ModelBackend, *, subagent_backend: ModelBackend | None = None, **kwargs: Any
) -> EpisodeFactory:
    """A factory building ``Orchestrator(backend, config, reward_fn=..., **kwargs)`` for every job alike."""

    def make(job: EpisodeJob, config: SwarmConfig, reward_fn: RewardFn) -> Orchestrator:
        return Orchestrator(backend, config, subagent_backend=subagent_backend, reward_fn=reward_fn, **kwargs)

    return make


@dataclass(frozen=True, slots=True)
class EpisodeDigest:
    """What the summary and the group advantages need of one finished episode."""

    status: str
    reward: float
    scored: bool
    r_perf: float
    r_parallel: float
    r_finish: float
    reward_error: bool
    subagents_completed: int
    subagents_assigned: int
    critical_steps: int
    total_steps: int
    mean_width: float
    """Mean width of the stages that ran sub-agents; 0.0 when none did."""
    cache: tuple[int, int, int] = (0, 0, 0)
    """The sub-agent replay cache's (hits, misses, bypassed) in this episode."""

    @classmethod
    def of(cls, record: EpisodeRecord) -> EpisodeDigest:
        rw = record.reward
        return cls(
            status=record.status.value,
            reward=rw.total if rw else 0.0,
            scored=rw is not None,
            r_perf=rw.r_perf if rw else 0.0,
            r_parallel=rw.r_parallel if rw else 0.0,
            r_finish=rw.r_finish if rw else 0.0,
            reward_error=bool(rw and rw.error),
            subagents_completed=int(rw.details.get("subagents_completed", 0)) if rw else 0,
            subagents_assigned=int(rw.details.get("subagents_assigned", 0)) if rw else 0,
            critical_steps=record.dag.critical_steps,
            total_steps=record.dag.total_steps,
            mean_width=record.dag.mean_width,
            cache=_cache_counts(record),
        )


def _cache_counts(record: EpisodeRecord) -> tuple[int, int, int]:
    got = record.metadata.get(CACHE_KEY)
    if not isinstance(got, dict):
        return (0, 0, 0)
    return (int(got.get("hits", 0)), int(got.get("misses", 0)), int(got.get("bypassed", 0)))


@dataclass(frozen=True, slots=True)
class PreparedTrajectory:
    """A ``trajectories.jsonl`` line built where the episode ran, split around its ``advantage``
    (known only once the whole group is in), so the driver only joins strings."""

    head: str
    tail: str

    def line(self, advantage: float) -> str:
        """The exact line ``build_trajectory(..., advantage=advantage).model_dump_json()`` gives."""
        return f'{self.head[:-1]},"advantage":{to_json(advantage).decode()},{self.tail[1:]}'


@dataclass(frozen=True, slots=True)
class PreparedEpisode:
    """A finished episode, serialised where it ran: its ``episodes.jsonl`` line, its digest and its
    trajectory (or why it cannot be one). ``record`` is kept only in-process (progress callbacks)."""

    group_id: str
    sample_index: int
    seed: int
    episode_id: str
    digest: EpisodeDigest
    entry_json: str
    trajectory: PreparedTrajectory | None
    trajectory_error: tuple[str, str] | None = None
    record: EpisodeRecord | None = None
    infrastructure: RolloutFailure | None = None
    """Set when the episode failed from infrastructure and the run keeps such episodes."""


def prepare_episode(
    entry: EpisodeEntry, *, include_transcripts: bool = True, serialize: bool = True, keep_record: bool = False
) -> PreparedEpisode:
    """Serialise a finished episode: entry line (``serialize``), digest and trajectory line halves."""
    record = entry.record
    trajectory: PreparedTrajectory | None = None
    error: tuple[str, str] | None = None
    try:
        traj = build_trajectory(
            record,
            group_id=entry.group_id,
            sample_index=entry.sample_index,
            include_transcripts=include_transcripts,
            metadata={"seed": entry.seed},
        )
    except TrajectoryError as exc:
        error = (str(exc), type(exc).__name__)
    else:
        trajectory = PreparedTrajectory(
            traj.model_dump_json(include=_BEFORE_ADVANTAGE), traj.model_dump_json(include=_AFTER_ADVANTAGE)
        )
    return PreparedEpisode(
        group_id=entry.group_id,
        sample_index=entry.sample_index,
        seed=entry.seed,
        episode_id=record.episode_id,
        digest=EpisodeDigest.of(record),
        entry_json=dump_record(entry) if serialize else "",
        trajectory=trajectory,
        trajectory_error=error,
        record=record if keep_record else None,
    )


EpisodeOutcome = PreparedEpisode | RolloutFailure
"""What an executor delivers for each job: the finished episode, or the runtime crash that ended it."""


class EpisodeRunner:
    """Runs one job to an :data:`EpisodeOutcome`: the same code in this process and on a cluster actor.

    It holds the episode factory, the base config, the reward and the rollout config, and must be
    picklable to run on a cluster (see :func:`orchestrator.cluster.remote_factory`). ``probe`` is the
    task :meth:`check` builds an episode of (:func:`collect_rollouts` gives its first task).
    ``subagent_limit``: the sub-agent cap every episode it runs shares (default: one of its own, so
    concurrent episodes share one cap; a pickled runner arrives with a fresh one, see :meth:`sharing`).
    """

    def __init__(
        self,
        factory: EpisodeFactory,
        swarm_config: SwarmConfig,
        reward_fn: RewardFn,
        config: RolloutConfig,
        *,
        keep_records: bool = True,
        probe: Task | None = None,
        subagent_limit: ConcurrencyLimit | None = None,
    ) -> None:
        self.factory = factory
        self.swarm_config = swarm_config
        self.reward_fn = reward_fn
        self.config = config
        self.keep_records = keep_records
        self.probe = probe or Task(id="check", prompt="check")
        self.subagent_limit: ConcurrencyLimit = CapacityLimit() if subagent_limit is None else subagent_limit

    def sharing(self, subagent_limit: ConcurrencyLimit) -> EpisodeRunner:
        """The same runner, its episodes sharing ``subagent_limit`` (a cluster actor passes the cluster's)."""
        runner = copy.copy(self)
        runner.subagent_limit = subagent_limit
        return runner

    def check(self) -> None:
        """Build the probe task's orchestrator, so a factory or config mistake fails once, before anything runs."""
        self.factory(EpisodeJob(self.probe, 0, 0), self.swarm_config, self.reward_fn)

    async def run(self, job: EpisodeJob) -> EpisodeOutcome:
        base = self.swarm_config
        sampling = base.orchestrator_sampling.model_copy(update={"seed": job.seed})
        try:
            orch = self.factory(job, base.model_copy(update={"orchestrator_sampling": sampling}), self.reward_fn)
            with episode_cache_stats() as cache:
                record = await orch.run(job.task, episode_id=job.episode_id, subagent_limit=self.subagent_limit)
            if cache:
                record = record.model_copy(update={"metadata": {**record.metadata, CACHE_KEY: cache.as_dict()}})
            if job.attempt > 1:
                record = rerun_record(record, job.attempt)
        except Exception as exc:  # a runtime bug in one episode must not end the others
            return episode_crash(job, f"{type(exc).__name__}: {exc}", ErrorType.of(exc))
        entry = EpisodeEntry(group_id=job.task.id, sample_index=job.sample_index, seed=job.seed, record=record)
        reason = infrastructure_failure(record)
        failure = None
        if reason is not None:
            retry = self.config.retry_infrastructure_failures
            failure = RolloutFailure(
                kind="infrastructure",
                group_id=job.task.id,
                sample_index=job.sample_index,
                seed=job.seed,
                episode_id=job.episode_id,
                error=reason,
                error_type=record.error_type or ErrorType.BACKEND,
                record=record if retry else None,
            )
            if retry:
                return failure  # to failures.jsonl with its record; runs again on resume
        prepared = prepare_episode(
            entry, include_transcripts=self.config.include_transcripts, keep_record=self.keep_records
        )
        return prepared if failure is None else dataclasses.replace(prepared, infrastructure=failure)


def rerun_record(record: EpisodeRecord, attempt: int) -> EpisodeRecord:
    """The record of an episode's ``attempt``-th run, the earlier ones lost with the process that ran
    them: ``metadata["attempts"]`` says so, and every sub-agent's ``attempts`` (all of them ran again)."""
    stages = tuple(
        s.model_copy(update={"subagents": tuple(dataclasses.replace(r, attempts=attempt) for r in s.subagents)})
        for s in record.stages
    )
    return record.model_copy(update={"stages": stages, "metadata": {**record.metadata, "attempts": attempt}})


def episode_crash(job: EpisodeJob, error: str, error_type: str) -> RolloutFailure:
    """The ``failures.jsonl`` record of an episode the runtime could not finish (retried on resume)."""
    return RolloutFailure(
        kind="episode",
        group_id=job.task.id,
        sample_index=job.sample_index,
        seed=job.seed,
        episode_id=job.episode_id,
        error=error,
        error_type=error_type,
    )


class RolloutExecutor(Protocol):
    """Where episodes run. The driver (:func:`collect_rollouts`) alone writes files: an executor calls
    ``deliver`` once per job, as soon as its outcome is known, and never twice for one job."""

    def check(self, runner: EpisodeRunner) -> None:
        """Fail early (and once) on a factory or config mistake."""
        ...

    async def run(
        self,
        runner: EpisodeRunner,
        jobs: Sequence[EpisodeJob],
        deliver: Callable[[EpisodeOutcome], None],
        *,
        max_concurrent: int,
    ) -> None:
        """Run every job; cancellation stops the run (outcomes delivered so far stay delivered)."""
        ...


class LocalExecutor:
    """Runs the episodes in this process's event loop, ``max_concurrent`` at a time (the default)."""

    def check(self, runner: EpisodeRunner) -> None:
        runner.check()

    async def run(
        self,
        runner: EpisodeRunner,
        jobs: Sequence[EpisodeJob],
        deliver: Callable[[EpisodeOutcome], None],
        *,
        max_concurrent: int,
    ) -> None:
        limiter = anyio.CapacityLimiter(max_concurrent)

        async def one(job: EpisodeJob) -> None:
            async with limiter:
                outcome = await runner.run(job)
            deliver(outcome)

        async with anyio.create_task_group() as tg:
            for job in jobs:
                tg.start_soon(one, job)


def _atomic_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _differences(old: Any, new: Any, path: str = "") -> list[str]:
    """What changed between two settings trees, one ``key.path old → new`` per differing leaf."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted(set(old) | set(new), key=str):
            out += _differences(old.get(k), new.get(k), f"{path}.{k}" if path else str(k))
        return out
    if old == new:
        return []
    return [f"{path or 'settings'} {json.dumps(old)} → {json.dumps(new)}"]


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
        # Manifests written before the reward settings were recorded do not pin them.
        known = old.get("settings") if isinstance(old, dict) else None
        settings = dict(mine.get("settings", {}))
        if not (isinstance(known, dict) and "reward" in known):
            settings.pop("reward", None)
        mine_cmp = {k: v for k, v in mine.items() if k != "settings"} | ({"settings": settings} if settings else {})
        if isinstance(old, dict) and {k: old.get(k) for k in mine_cmp} != mine_cmp:
            changes = "; ".join(_differences({k: old.get(k) for k in mine_cmp}, mine_cmp))
            raise ConfigError(
                f"{out} holds a rollout made with other settings ({changes}). "
                "Resume with the same settings or write to a new --out directory"
            )
    _atomic_json(path, mine)


class _Run:
    """State of one collection: what is on disk, what runs, and the writers.

    Only digests of finished episodes are kept (for the summary), and the prepared trajectories of
    groups not yet exported: never whole records, so memory does not grow with the run.
    """

    def __init__(self, tasks: Sequence[Task], out: Path, config: RolloutConfig) -> None:
        self.tasks = {t.id: t for t in tasks}
        self.config = config
        self.problems: list[JsonlProblem] = []
        ep_path, tr_path = out / EPISODES, out / TRAJECTORIES
        # Open the writers first: they cut a half-written tail left by a crash before we read.
        self.episodes_w = JsonlWriter(ep_path)
        self.traj_w = JsonlWriter(tr_path)
        self.fail_w = JsonlWriter(out / FAILURES)
        # Earlier files are streamed, a record at a time: they hold every episode of the run (hundreds of
        # MB at a 1,000-way fan-out), and a resume must not need them all in memory at once.
        # Per sample, not per group: a run killed in the middle of a group's export resumes it.
        self.exported: set[tuple[str, int]] = set()
        self.trajectories = 0
        for t in iter_jsonl(tr_path, Trajectory, on_error="skip", problems=self.problems):
            self.exported.add((t.group_id, t.sample_index))
            self.trajectories += t.group_id in self.tasks
        prior_fail = iter_jsonl(out / FAILURES, RolloutFailure, on_error="skip", problems=self.problems)
        self.traj_failures = [f for f in prior_fail if f.kind == "trajectory" and f.group_id in self.tasks]
        self.exported |= {(f.group_id, f.sample_index) for f in self.traj_failures}
        self.entries: dict[tuple[str, int], EpisodeDigest] = {}
        self.unexported: dict[tuple[str, int], PreparedEpisode] = {}
        for e in iter_jsonl(ep_path, EpisodeEntry, on_error="skip", problems=self.problems):
            if e.group_id in self.tasks and e.sample_index < config.group_size:
                # Runs before infrastructure failures were told apart recorded them as episodes.
                if config.retry_infrastructure_failures and infrastructure_failure(e.record) is not None:
                    continue
                key = (e.group_id, e.sample_index)
                self.entries[key] = EpisodeDigest.of(e.record)
                if key not in self.exported:
                    self.unexported[key] = prepare_episode(
                        e, include_transcripts=config.include_transcripts, serialize=False
                    )
        self.resumed = len(self.entries)
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

    def record(self, episode: PreparedEpisode) -> None:
        key = (episode.group_id, episode.sample_index)
        self.episodes_w.write_line(episode.entry_json)
        self.entries[key] = episode.digest
        self.unexported[key] = episode
        self.ran += 1
        self.maybe_export(episode.group_id)

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
        keys = [(group_id, j) for j in range(self.config.group_size)]
        if all(k in self.exported for k in keys) or any(k not in self.entries for k in keys):
            return
        rewards = [self.entries[k].reward for k in keys]
        advs = ADVANTAGES.get(self.config.advantage)(rewards, [group_id] * len(keys))
        for key, adv in zip(keys, advs, strict=True):
            if key in self.exported:
                continue
            self.exported.add(key)
            e = self.unexported.pop(key)
            if e.trajectory is None:
                message, kind = e.trajectory_error or ("no trajectory", ErrorType.TRAJECTORY)
                f = RolloutFailure(
                    kind="trajectory",
                    group_id=group_id,
                    sample_index=e.sample_index,
                    seed=e.seed,
                    episode_id=e.episode_id,
                    error=message,
                    error_type=kind,
                )
                self.traj_failures.append(f)
                self.fail_w.write(f)
                continue
            self.traj_w.write_line(e.trajectory.line(adv))
            self.trajectories += 1


async def collect_rollouts(
    tasks: Sequence[Task],
    factory: EpisodeFactory,
    *,
    out_dir: Path,
    config: RolloutConfig | None = None,
    swarm_config: SwarmConfig | None = None,
    reward: RewardFn | None = None,
    progress: Callable[[RolloutProgress], None] | None = None,
    skipped_lines: Iterable[TaskProblem] = (),
    executor: RolloutExecutor | None = None,
) -> RolloutSummary:
    """Run ``group_size`` episodes per task into ``out_dir`` (resuming what is there) and summarise.

    ``reward`` defaults to :class:`~swarm.rl.rewards.PARLReward` with its default config. A runtime crash
    of one episode is recorded in ``failures.jsonl`` and does not stop the others; cancellation
    (Ctrl-C) stops the run with every finished episode already on disk.

    ``executor`` says where the episodes run: :class:`LocalExecutor` (default, this event loop) or
    :class:`orchestrator.cluster.RayExecutor` (Ray actors; the factory must then be picklable, see
    :func:`orchestrator.cluster.remote_factory`). Either way this function alone writes the files, in
    the same format, with the same resume and group rules. ``progress`` gets the finished record as
    ``last`` only from executors that run in this process.
    """
    cfg = config or RolloutConfig()
    base = swarm_config or SwarmConfig()
    reward_fn: RewardFn = reward or PARLReward()
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids) or not all(ids):
        raise ConfigError("rollout tasks need unique, non-empty ids (they name the groups)")
    where = executor or LocalExecutor()
    probe = tasks[0] if tasks else None
    runner = EpisodeRunner(factory, base, reward_fn, cfg, keep_records=progress is not None, probe=probe)
    where.check(runner)  # a factory/config mistake fails here, once, not in every episode
    out = Path(out_dir)
    _check_manifest(out, cfg)
    started = time.perf_counter()
    run = _Run(tasks, out, cfg)
    try:
        for group_id in run.tasks:  # groups completed before a crash in the middle of an export
            run.maybe_export(group_id)
        jobs = [EpisodeJob(task, j, episode_seed(cfg.seed, task.id, j)) for task, j in run.pending()]
        total = len(jobs)
        done = failed = 0

        def deliver(outcome: EpisodeOutcome) -> None:
            nonlocal done, failed
            last = None
            if isinstance(outcome, RolloutFailure):
                if outcome.kind == "infrastructure":
                    run.infra(outcome, keep=False)
                else:
                    run.crash(outcome)
                failed += 1
            else:
                if outcome.infrastructure is not None:  # failed from infrastructure, kept as an episode
                    run.infra(outcome.infrastructure, keep=True)
                    failed += 1
                run.record(outcome)
                last = outcome.record
            done += 1
            if progress is not None:
                progress(RolloutProgress(done=done, total=total, failed=failed, last=last))

        if jobs:
            await where.run(runner, jobs, deliver, max_concurrent=cfg.max_concurrent_episodes)
    finally:
        run.close()
        summary = _summarise(run, cfg, list(skipped_lines), time.perf_counter() - started)
        _atomic_json(out / SUMMARY, summary.model_dump(mode="json"))
    return summary


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _cache_totals(digests: Sequence[EpisodeDigest]) -> dict[str, int]:
    totals = [sum(d.cache[i] for d in digests) for i in range(3)]
    return dict(zip(("hits", "misses", "bypassed"), totals, strict=True)) if any(totals) else {}


def _summarise(run: _Run, cfg: RolloutConfig, skipped: list[TaskProblem], wall: float) -> RolloutSummary:
    digests = list(run.entries.values())
    scored = [d for d in digests if d.scored]
    statuses: dict[str, int] = {}
    for d in digests:
        statuses[d.status] = statuses.get(d.status, 0) + 1
    completed = sum(d.subagents_completed for d in scored)
    assigned = sum(d.subagents_assigned for d in scored)
    widths = [d.mean_width for d in digests if d.mean_width]
    complete = sum(1 for g in run.tasks if all((g, j) in run.entries for j in range(cfg.group_size)))
    reasons: dict[str, int] = {}
    for f in [*run.crashed, *run.infra_failed]:
        text = " ".join(f.error.split())  # one line per reason, even for an HTML error page
        key = text if len(text) <= 300 else text[:300] + "…"
        reasons[key] = reasons.get(key, 0) + 1
    return RolloutSummary(
        tasks=len(run.tasks),
        group_size=cfg.group_size,
        episodes=len(digests),
        episodes_run=run.ran,
        episodes_resumed=run.resumed,
        groups_complete=complete,
        groups_incomplete=len(run.tasks) - complete,
        trajectories=run.trajectories,
        mean_reward=_mean([d.reward for d in scored]),
        mean_r_perf=_mean([d.r_perf for d in scored]),
        mean_r_parallel=_mean([d.r_parallel for d in scored]),
        mean_r_finish=_mean([d.r_finish for d in scored]),
        mean_critical_steps=_mean([d.critical_steps for d in digests]),
        mean_total_steps=_mean([d.total_steps for d in digests]),
        mean_parallel_width=_mean(widths),
        finish_rate=completed / assigned if assigned else 0.0,
        statuses=statuses,
        crashed_episodes=len(run.crashed),
        infrastructure_failures=len(run.infra_failed),
        failure_reasons=reasons,
        trajectory_failures=len(run.traj_failures),
        reward_errors=sum(1 for d in scored if d.reward_error),
        skipped_lines=tuple(skipped),
        unreadable_records=len(run.problems),
        subagent_cache=_cache_totals(digests),
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
    factory: EpisodeFactory,
    *,
    tasks: Sequence[Task] = (),
    swarm_config: SwarmConfig | None = None,
    reward: RewardFn | None = None,
    advantage: str = "group_mean",
    seed: int = 0,
    max_concurrent_episodes: int = 8,
) -> Callable[[list[Any], Any], dict[str, list[Any]]]:
    """A ``rollout_func`` for TRL's ``GRPOTrainer`` that runs swarm episodes.

    TRL hands the function each prompt ``num_generations`` times in a row; every run of identical
    prompts becomes one group: one episode per copy (distinct seeds), PARL rewards, advantages, then
    :func:`~swarm.rl.export.to_trl_rollout` (``env_mask`` marks the orchestrator's own tokens, ``reward``
    and ``advantage`` reach the reward functions). A prompt equal to a given task's prompt uses that
    task (and its verifier). A :class:`~swarm.rl.rewards.PARLReward` follows the trainer's
    ``state.global_step`` so the λ schedules anneal with training. An episode that cannot become a
    trajectory raises :class:`~swarm.rl.trajectory.TrajectoryError` (TRL needs one completion per prompt).
    """
    advantage_fn = ADVANTAGES.get(advantage)  # an unknown name fails here, before any episode runs
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
        subagents = CapacityLimit()  # one sub-agent cap for the call's concurrent episodes

        async def one(g: int, task: Task, j: int) -> None:
            job = EpisodeJob(task, j, episode_seed(seed, task.id, j))
            sampling = base.orchestrator_sampling.model_copy(update={"seed": job.seed})
            orch = factory(job, base.model_copy(update={"orchestrator_sampling": sampling}), reward_fn)
            async with limiter:
                records[(g, j)] = await orch.run(task, episode_id=f"{task.id}-s{j}", subagent_limit=subagents)

        async def main() -> None:
            async with anyio.create_task_group() as tg:
                for g, (task, k) in enumerate(groups):
                    for j in range(k):
                        tg.start_soon(one, g, task, j)

        anyio.run(main)
        trajectories: list[Trajectory] = []
        for g, (task, k) in enumerate(groups):
            recs = [records[(g, j)] for j in range(k)]
            advs = advantage_fn([r.reward.total if r.reward else 0.0 for r in recs], [task.id] * k)
            trajectories += [
                build_trajectory(r, group_id=task.id, sample_index=j, advantage=a)
                for j, (r, a) in enumerate(zip(recs, advs, strict=True))
            ]
        return to_trl_rollout(trajectories)

    return rollout_func
