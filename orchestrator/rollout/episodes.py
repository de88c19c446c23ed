"""One rollout episode: the job an executor is handed, and the outcome it hands back to the driver.

A job (:class:`EpisodeJob`: a task, a sample index, its seed) becomes an orchestrator through an
:data:`EpisodeFactory`; its finished record becomes a :class:`PreparedEpisode` (its ``episodes.jsonl``
line, its digest for the summary, its trajectory line split around the advantage) where it ran, or a
:class:`RolloutFailure` (a runtime crash, or a failure from infrastructure:
:func:`infrastructure_failure`). Executors (:mod:`agent_swarm.orchestrator.rollout.executors`) produce these;
collection (:mod:`agent_swarm.orchestrator.rollout.collection`) writes them.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic_core import to_json

from agent_swarm.orchestrator.engine import Orchestrator, RewardFn
from agent_swarm.swarm.backend import ModelBackend
from agent_swarm.swarm.backends.replay_cache import METADATA_KEY as CACHE_KEY
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import ErrorType
from agent_swarm.swarm.records import AgentStatus, EpisodeRecord, EpisodeStatus, Task, dump_record
from agent_swarm.swarm.rl.trajectory import Trajectory, TrajectoryError, build_trajectory

__all__ = [
    "EpisodeDigest",
    "EpisodeEntry",
    "EpisodeFactory",
    "EpisodeJob",
    "EpisodeOutcome",
    "PreparedEpisode",
    "PreparedTrajectory",
    "RolloutFailure",
    "episode_crash",
    "episode_seed",
    "infrastructure_failure",
    "orchestrator_factory",
    "prepare_episode",
    "rerun_record",
]


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
    of its agents (401/403/quota: :class:`~agent_swarm.swarm.errors.BackendRefusedError`; the sub-agents it cut
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

    def seeded(self, base: SwarmConfig) -> SwarmConfig:
        """``base`` with this sample's seed as the orchestrator's sampling seed: the config it runs with."""
        sampling = base.orchestrator_sampling.model_copy(update={"seed": self.seed})
        return base.model_copy(update={"orchestrator_sampling": sampling})

    def failure(
        self,
        kind: Literal["episode", "infrastructure"],
        error: str,
        error_type: str,
        record: EpisodeRecord | None = None,
    ) -> RolloutFailure:
        """The ``failures.jsonl`` record of this job's episode, ended by ``error``."""
        return RolloutFailure(
            kind=kind,
            group_id=self.task.id,
            sample_index=self.sample_index,
            seed=self.seed,
            episode_id=self.episode_id,
            error=error,
            error_type=error_type,
            record=record,
        )


EpisodeFactory = Callable[[EpisodeJob, SwarmConfig, RewardFn], Orchestrator]
"""Builds the orchestrator of one episode from its job (the task, as verl's agent loop gets each sample's
own kwargs), its config (with the sample's seed) and the run's reward hook. A workload task gets its
own environment here (:func:`agent_swarm.orchestrator.eval.workload_orchestrator_factory`)."""


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
    return job.failure("episode", error, error_type)
