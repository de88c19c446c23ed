"""Very wide stages on Ray: a stage's sub-agents spread over several actors' event loops.

::

    placement = RayPlacement(sim_subagents(latency=0.5), actors=2, min_width=1024)
    orch = Orchestrator(policy, SwarmConfig(max_subagents_per_stage=10_000, max_concurrency=10_000),
                        subagent_backend=worker_backend, placement=placement)
    record = await orch.run(task)          # a 10,000-wide stage runs on the two actors
    placement.close()

The engine admits the stage as always and hands the admitted runs to the placement
(:mod:`agent_swarm.orchestrator.placement`); the placement splits them over its actors (interleaved, so long and
short runs mix), each actor runs its part with the engine's own fan-out under the cluster-wide
sub-agent cap, and results stream back in small batches as sub-agents finish. Each actor builds the
sub-agents' backends and tools from ``kit`` (a :class:`~agent_swarm.orchestrator.cluster.Recipe`): the tools must be
stateless or reach shared state through a service (an MCP or HTTP server), since the episode's own
process is elsewhere.

If an actor dies mid-stage, the sub-agents whose results had not come back run again on a live actor
(the results already received stand; each re-run result says ``attempts`` > 1, and every placed result
says in ``ran_in`` which process ran it); after ``max_attempts`` deaths they are recorded as failed. When
the episode is cancelled, the placed runs are cancelled on the actors.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from dataclasses import replace
from typing import Any

import anyio

from agent_swarm.orchestrator.cluster._ray import RayCluster, check_actors, check_fits, kill_all, pickled_size
from agent_swarm.orchestrator.cluster.recipe import Recipe
from agent_swarm.orchestrator.cluster.slots import (
    ClusterLimits,
    LeasingActor,
    Outbox,
    start_leasing_actors,
    start_slot_pool,
)
from agent_swarm.orchestrator.placement import (
    Finished,
    PlacedRun,
    StageBatch,
    SubagentKit,
    kit_registry,
    placement_failure,
    run_batch,
)
from agent_swarm.swarm.errors import ConfigError, ErrorType
from agent_swarm.swarm.limits import current_limits
from agent_swarm.swarm.records import SubagentResult

__all__ = ["RayPlacement", "SubagentWorker"]


class SubagentWorker(LeasingActor):
    """The Ray actor that runs placed batches (``ray.remote`` is applied when a placement starts)."""

    def __init__(self, kit: Recipe[SubagentKit], pool_name: str | None, actor_key: str, gc_freeze: bool) -> None:
        super().__init__(pool_name, actor_key, gc_freeze)
        self.backends, self.tools = kit_registry(kit.get())

    async def run_batch(self, batch_id: str, batch: StageBatch) -> int:
        """Run the batch; results go to its outbox (see :meth:`drain`). Returns how many results."""
        box: Outbox[tuple[str, SubagentResult]] = self.outbox(batch_id)
        here = f"pid {os.getpid()} on {socket.gethostname()}"
        try:
            with await self.limited():
                await run_batch(
                    batch,
                    self.backends,
                    self.tools,
                    lambda agent_id, r: box.put((agent_id, replace(r, ran_in=here))),
                    limit=self.subagent_limit,
                )
        finally:
            box.close()
        return box.count

    async def drain(self, batch_id: str, linger_s: float) -> tuple[list[tuple[str, SubagentResult]], bool]:
        """The batch's results since the last drain (waiting for at least one), and whether it is done."""
        items, closed = await self.outbox(batch_id).take(linger_s)
        if closed:
            self.forget(batch_id)
        return items, closed


class RayPlacement:
    """A :class:`~agent_swarm.orchestrator.placement.SubagentPlacement` on Ray actors for stages of at least
    ``min_width`` sub-agents.

    ``kit``: a :class:`~agent_swarm.orchestrator.cluster.Recipe` building ``(backends by model name, tools)`` on each
    actor. ``actors`` × ``num_cpus``: the actors (started on first use, reused by every stage and episode
    until :meth:`close`). ``cluster_limits``: sub-agents take the sub-agent cap from a cluster-wide pool
    (the one of the :class:`~agent_swarm.orchestrator.cluster.RayExecutor` actor this runs in, else one of its own).
    ``linger_s``: how long an actor gathers finished results before sending them.
    """

    def __init__(
        self,
        kit: Recipe[SubagentKit],
        *,
        address: str | None = None,
        actors: int = 2,
        num_cpus: float = 1.0,
        min_width: int = 512,
        cluster_limits: bool = True,
        max_attempts: int = 2,
        linger_s: float = 0.02,
        gc_freeze: bool = True,
        local_cpus: int | None = None,
        runtime_env: dict[str, Any] | None = None,
    ) -> None:
        check_actors("RayPlacement", actors=actors, num_cpus=num_cpus, max_attempts=max_attempts)
        if min_width < 1:
            raise ConfigError(f"RayPlacement needs min_width >= 1, got {min_width}")
        if not isinstance(kit, Recipe):
            raise ConfigError(
                "RayPlacement's kit must be a Recipe that builds (backends by model, tools) on each actor, "
                f"e.g. Recipe(build_kit, url); got {type(kit).__name__}"
            )
        self.kit = kit
        self.cluster = RayCluster(address, num_cpus=local_cpus, runtime_env=runtime_env)
        self.n_actors = actors
        self.num_cpus = num_cpus
        self.min_width = min_width
        self.cluster_limits = cluster_limits
        self.max_attempts = max_attempts
        self.linger_s = linger_s
        self.gc_freeze = gc_freeze
        self.stats: dict[str, int] = {"batches": 0, "reruns": 0, "actor_errors": 0, "failed_runs": 0}
        self._actors: list[Any] = []
        self._owned: list[Any] = []
        self._started_ray = False
        self._lock: anyio.Lock | None = None

    def takes(self, width: int) -> bool:
        return width >= self.min_width

    @property
    def actors(self) -> list[Any]:
        """The actor handles (empty until the first placed stage)."""
        return list(self._actors)

    async def start(self) -> None:
        """Start the actors now (otherwise the first placed stage does)."""
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            if self._actors:
                return
            from agent_swarm.orchestrator.cluster._ray import require_ray

            ray = require_ray(asyncio_for="RayPlacement")
            pickled_size(
                ray, self.kit, "the sub-agent kit", "build backends and tools from a Recipe of plain arguments"
            )
            self._started_ray = self.cluster.connect()
            check_fits(ray, "sub-agent", self.n_actors, self.num_cpus)
            pool_name = None
            if self.cluster_limits:
                here = current_limits()
                pool_name = here.pool_name if isinstance(here, ClusterLimits) else None
                if pool_name is None:
                    pool_name, pool = start_slot_pool()
                    self._owned.append(pool)
            tag = uuid.uuid4().hex[:8]
            try:
                handles = await start_leasing_actors(
                    ray,
                    SubagentWorker,
                    self.kit,
                    [f"subagents-{tag}-{i}" for i in range(self.n_actors)],
                    pool_name=pool_name,
                    gc_freeze=self.gc_freeze,
                    num_cpus=self.num_cpus,
                    max_concurrency=100_000,
                    max_restarts=4,
                    doing="build the kit",
                )
            except ConfigError:
                self.close()
                raise
            self._owned.extend(handles)
            self._actors = handles

    def close(self) -> None:
        """Kill the actors (and the Ray this placement started)."""
        if not self._owned:
            return
        from agent_swarm.orchestrator.cluster._ray import require_ray

        kill_all(require_ray(), self._owned)
        self._owned, self._actors = [], []
        if self._started_ray:
            self.cluster.shutdown()
            self._started_ray = False

    async def __aenter__(self) -> RayPlacement:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    async def run(self, batch: StageBatch, finished: Finished) -> None:
        await self.start()
        n = len(self._actors)
        parts = [batch.runs[i::n] for i in range(n)]
        self.stats["batches"] += 1
        async with anyio.create_task_group() as tg:
            for i, runs in enumerate(parts):
                if runs:
                    tg.start_soon(self._run_part, batch, runs, finished, i)

    async def _run_part(self, batch: StageBatch, runs: tuple[PlacedRun, ...], finished: Finished, i: int) -> None:
        from agent_swarm.orchestrator.cluster._ray import require_ray

        ray = require_ray()
        pending = {r.agent_id: r for r in runs}
        started = 1  # how many times the runs still pending have been started

        def got(agent_id: str, result: SubagentResult) -> None:
            if pending.pop(agent_id, None) is not None:
                finished(agent_id, replace(result, attempts=started) if started > 1 else result)

        for attempt in range(1, self.max_attempts + 1):
            started = attempt
            actor = self._actors[(i + attempt - 1) % len(self._actors)]
            try:
                await self._stream(ray, actor, batch.part(tuple(pending.values())), got)
                problem = None
            except ray.exceptions.RayActorError as exc:
                self.stats["actor_errors"] += 1
                problem = (f"its Ray actor died ({attempt} time(s)): {str(exc).splitlines()[0]}", type(exc).__name__)
            except ray.exceptions.RayError as exc:
                problem = (f"the placed batch failed: {type(exc).__name__}: {exc}", ErrorType.of(exc))
                attempt = self.max_attempts
            if not pending:
                return
            if problem is None:  # the batch ended without results for these: a bug, recorded
                problem = ("the placed batch ended without their results", ErrorType.PLACEMENT)
                attempt = self.max_attempts
            if attempt < self.max_attempts:
                self.stats["reruns"] += len(pending)
                continue
            for r in list(pending.values()):
                self.stats["failed_runs"] += 1
                got(r.agent_id, placement_failure(batch, r, *problem))
            return

    async def _stream(self, ray: Any, actor: Any, batch: StageBatch, got: Finished) -> None:
        batch_id = uuid.uuid4().hex
        run_ref = actor.run_batch.remote(batch_id, batch)
        drain_ref = None
        finished_ok = False
        try:
            while True:
                drain_ref = actor.drain.remote(batch_id, self.linger_s)
                items, closed = await drain_ref
                for agent_id, result in items:
                    got(agent_id, result)
                if closed:
                    break
            await run_ref
            finished_ok = True
        finally:
            if not finished_ok:  # cancelled, or the actor failed: stop what still runs there
                for ref in (run_ref, drain_ref):
                    if ref is not None:
                        with contextlib.suppress(Exception):
                            ray.cancel(ref)
