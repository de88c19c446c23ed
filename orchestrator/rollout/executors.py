"""Where rollout episodes run: the :class:`EpisodeRunner` that turns a job into an outcome (the same code
in this process and on a cluster actor), the :class:`EpisodeBatch` a run hands an executor, the
:class:`RolloutExecutor` protocol, and the in-process :class:`LocalExecutor` (the default). The Ray executor
is :class:`agent_swarm.orchestrator.cluster.RayExecutor`.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import anyio

from agent_swarm.orchestrator.engine import RewardFn
from agent_swarm.orchestrator.rollout.config import RolloutConfig
from agent_swarm.orchestrator.rollout.episodes import (
    EpisodeEntry,
    EpisodeFactory,
    EpisodeJob,
    EpisodeOutcome,
    episode_crash,
    infrastructure_failure,
    prepare_episode,
    rerun_record,
)
from agent_swarm.swarm.backends.replay_cache import METADATA_KEY as CACHE_KEY
from agent_swarm.swarm.backends.replay_cache import episode_cache_stats
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import ErrorType
from agent_swarm.swarm.limits import CapacityLimit, ConcurrencyLimit
from agent_swarm.swarm.records import Task

__all__ = ["Deliver", "EpisodeBatch", "EpisodeRunner", "LocalExecutor", "RolloutExecutor"]

Deliver = Callable[[EpisodeOutcome], None]
"""How an executor hands the driver each job's outcome."""


class EpisodeRunner:
    """Runs one job to an :data:`EpisodeOutcome`: the same code in this process and on a cluster actor.

    It holds the episode factory, the base config, the reward and the rollout config, and must be
    picklable to run on a cluster (see :func:`agent_swarm.orchestrator.cluster.remote_factory`). ``probe`` is the
    task :meth:`check` builds an episode of (:func:`~agent_swarm.orchestrator.rollout.collection.collect_rollouts`
    gives its first task).
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
        config = job.seeded(self.swarm_config)
        try:
            orch = self.factory(job, config, self.reward_fn)
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
            error_type = record.error_type or ErrorType.BACKEND
            failure = job.failure("infrastructure", reason, error_type, record if retry else None)
            if retry:
                return failure  # to failures.jsonl with its record; runs again on resume
        prepared = prepare_episode(
            entry, include_transcripts=self.config.include_transcripts, keep_record=self.keep_records
        )
        return prepared if failure is None else dataclasses.replace(prepared, infrastructure=failure)


@dataclass(frozen=True, slots=True)
class EpisodeBatch:
    """One run's episodes, as the driver hands them to an executor: the :class:`EpisodeRunner` that runs
    each job, the jobs, ``deliver`` (where each outcome goes, once per job, as soon as it is known) and
    ``max_concurrent``, the episodes in flight at once over the whole executor."""

    runner: EpisodeRunner
    jobs: Sequence[EpisodeJob]
    deliver: Deliver
    max_concurrent: int


class RolloutExecutor(Protocol):
    """Where episodes run. The driver (:func:`~agent_swarm.orchestrator.rollout.collection.collect_rollouts`) alone
    writes files: an executor calls the batch's ``deliver`` once per job, as soon as its outcome is known, and
    never twice for one job."""

    def check(self, runner: EpisodeRunner) -> None:
        """Fail early (and once) on a factory or config mistake."""
        ...

    async def run(self, batch: EpisodeBatch) -> None:
        """Run every job of ``batch``; cancellation stops the run (outcomes delivered so far stay delivered)."""
        ...


class LocalExecutor:
    """Runs the episodes in this process's event loop, ``max_concurrent`` at a time (the default)."""

    def check(self, runner: EpisodeRunner) -> None:
        runner.check()

    async def run(self, batch: EpisodeBatch) -> None:
        limiter = anyio.CapacityLimiter(batch.max_concurrent)

        async def one(job: EpisodeJob) -> None:
            async with limiter:
                outcome = await batch.runner.run(job)
            batch.deliver(outcome)

        async with anyio.create_task_group() as tg:
            for job in batch.jobs:
                tg.start_soon(one, job)
