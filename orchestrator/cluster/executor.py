"""Rollouts on Ray: episodes spread over actors, results streamed back to the driver, which writes.

::

    from agent_swarm.orchestrator.cluster import RayExecutor, remote_factory

    summary = await collect_rollouts(
        tasks, remote_factory(build_factory, url), out_dir=out,
        config=RolloutConfig(group_size=8, max_concurrent_episodes=256),
        executor=RayExecutor(actors=4),                  # or RayExecutor("ray://head:10001", actors=64)
    )

Each actor is an asyncio Ray actor running many episodes at once on its own event loop (the same
:class:`~agent_swarm.orchestrator.rollout.executors.EpisodeRunner` as in-process: it prepares the episode's JSONL
lines where it ran). The driver keeps ``max_concurrent_episodes`` episodes in flight over all actors, each sent to
the actor with the fewest, and hands every result to
:func:`~agent_swarm.orchestrator.rollout.collection.collect_rollouts` as
it arrives: the files, their format, resume and groups are exactly those of an in-process run.

Limits: with ``cluster_limits`` (default) every actor leases the sub-agent cap and each endpoint's
request cap from one :class:`~agent_swarm.orchestrator.cluster.slots.SlotPool` actor, so they hold over the whole
cluster; without, each actor's episodes share a cap of their own.

Faults: an actor that dies (killed, OOM, segfault) is restarted by Ray (``max_restarts``); the episodes
it was running are rerun (each at most ``max_attempts`` times, then recorded as crashed, which a
resume retries), and the record of a rerun episode says so: ``metadata["attempts"]``, and
``attempts`` on each of its sub-agents (:func:`~agent_swarm.orchestrator.rollout.episodes.rerun_record`); results that
reached the driver are on disk and never rerun, so nothing is written twice. Cancelling the driver
(Ctrl-C) kills every actor; finished episodes are already on disk.
"""

from __future__ import annotations

import math
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from agent_swarm.orchestrator.cluster._ray import RayCluster, check_actors, check_fits, kill_all, pickled_size
from agent_swarm.orchestrator.cluster.slots import LeasingActor, start_leasing_actors, start_slot_pool
from agent_swarm.orchestrator.rollout.episodes import EpisodeJob, EpisodeOutcome, episode_crash
from agent_swarm.orchestrator.rollout.executors import Deliver, EpisodeBatch, EpisodeRunner
from agent_swarm.swarm.errors import ClusterError, ErrorType

__all__ = ["RayExecutor"]

_SHIP_HINT = (
    "pass a picklable factory: agent_swarm.orchestrator.cluster.remote_factory(build, *args) builds the backends on "
    "each actor instead of shipping live clients or engines"
)


class EpisodeWorker(LeasingActor):
    """The Ray actor that runs episodes (``ray.remote`` is applied when a run starts).

    One :meth:`serve` call per run holds the task group its episodes run in; :meth:`exchange` hands it
    new episodes and returns the finished ones in the same round trip.
    """

    def __init__(self, runner: EpisodeRunner, pool_name: str | None, actor_key: str, gc_freeze: bool) -> None:
        super().__init__(pool_name, actor_key, gc_freeze)
        self.runner = runner.sharing(self.subagent_limit)  # its episodes share this actor's (or the cluster's) cap
        runner.check()  # a factory that cannot be built here fails the actor at creation, with the cause
        self._inboxes: dict[str, _Inbox] = {}

    def _inbox(self, run_id: str) -> _Inbox:
        box = self._inboxes.get(run_id)
        if box is None:
            box = self._inboxes[run_id] = _Inbox(*anyio.create_memory_object_stream[list[EpisodeJob]](math.inf))
        return box

    async def serve(self, run_id: str) -> None:
        """Run the run's episodes, as :meth:`exchange` hands them in, until :meth:`finish`; each outcome
        goes to the run's outbox as soon as it is known."""
        box, inbox = self.outbox(run_id), self._inbox(run_id)

        async def one(job: EpisodeJob) -> None:
            box.put(await self.runner.run(job))

        try:
            with await self.limited():
                async with anyio.create_task_group() as tg, inbox.receive:
                    async for jobs in inbox.receive:
                        for job in jobs:
                            tg.start_soon(one, job)
        except Exception as exc:  # no episode can run here: the next exchange tells the driver why
            box.fail(exc)
            raise
        else:
            self.forget(run_id)
        finally:
            self._inboxes.pop(run_id, None)

    async def exchange(self, run_id: str, jobs: list[EpisodeJob], linger_s: float) -> list[EpisodeOutcome]:
        """Start ``jobs``, then return the run's outcomes since the last exchange (waiting for at least one,
        then ``linger_s`` more for company)."""
        if jobs:
            self._inbox(run_id).send.send_nowait(jobs)
        items, _ = await self.outbox(run_id).take(linger_s)
        return items

    async def finish(self, run_id: str) -> None:
        """The driver has every outcome of the run: its :meth:`serve` returns."""
        self._inbox(run_id).send.close()


@dataclass(slots=True)
class _Inbox:
    send: MemoryObjectSendStream[list[EpisodeJob]]
    receive: MemoryObjectReceiveStream[list[EpisodeJob]]


def _fitting(ray: Any, num_cpus: float) -> int:
    cpus = float(ray.cluster_resources().get("CPU", 1.0))
    return max(1, int(cpus // num_cpus) if num_cpus > 0 else int(cpus))


@dataclass(slots=True)
class _Actor:
    index: int
    key: str
    handle: Any
    in_flight: dict[str, EpisodeJob] = field(default_factory=dict)
    alive: bool = True
    isolating: bool = False
    """Running one suspect episode alone: nothing else is sent here until it is done."""
    draining: bool = False
    """Taking no new episodes, so that it can run a suspect alone."""


class _Scheduler:
    """Keeps each live actor busy with up to its share of the episodes in flight, and reruns what a death
    lost.

    Episodes go to an actor and come back in batches, both ways in one call (``exchange``): one round
    trip carries every episode that finished meanwhile back, and as many new ones out, so Ray's per-call
    cost (about a millisecond of CPU, measured) is shared.

    When an actor dies, every episode it was running is lost, and which one killed it is unknown. So a
    lost episode is rerun with the others as usual, and its last allowed attempt runs *alone* on an
    actor: an episode that kills its actor even then is the culprit, and only it is recorded as crashed.
    """

    def __init__(
        self,
        ray: Any,
        actors: list[_Actor],
        pool: Any,
        deliver: Deliver,
        max_attempts: int,
        restart_timeout_s: float,
        linger_s: float,
        stats: dict[str, Any],
    ) -> None:
        self.ray = ray
        self.actors = actors
        self.pool = pool
        self.deliver = deliver
        self.max_attempts = max_attempts
        self.restart_timeout_s = restart_timeout_s
        self.linger_s = linger_s
        self.stats = stats
        self.queue: deque[EpisodeJob] = deque()
        self.suspects: deque[EpisodeJob] = deque()
        self.deaths: dict[str, int] = {}
        self._changed = anyio.Event()
        stats.update(reruns=0, actor_errors=0, actors_lost=0, isolated_runs=0, round_trips=0)

    async def run(self, jobs: Sequence[EpisodeJob], max_concurrent: int) -> None:
        self.queue.extend(jobs)
        share = math.ceil(max_concurrent / len(self.actors))
        async with anyio.create_task_group() as tg:
            for a in self.actors:
                tg.start_soon(self._serve, a, share)
        if self.queue or self.suspects:
            self._all_dead()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def _all_dead(self) -> None:
        raise ClusterError(
            f"every Ray episode actor died ({len(self.actors)} started, each restarted by Ray until it ran "
            "out of restarts); finished episodes are on disk, re-run to resume"
        )

    def _finished(self) -> bool:
        return not self.queue and not self.suspects and not any(a.in_flight for a in self.actors if a.alive)

    def _refill(self, a: _Actor, share: int) -> list[EpisodeJob]:
        """The episodes to send ``a`` with its next exchange: new ones up to its share, or a suspect, alone,
        once it has drained. They count as in flight on ``a`` from here on."""
        if a.isolating:
            return []
        batch: list[EpisodeJob] = []
        if self.suspects:
            if not a.in_flight:
                batch.append(self.suspects.popleft())
                a.isolating, a.draining = True, False
                self.stats["isolated_runs"] += 1
            elif not any(b.draining for b in self.actors if b.alive):
                a.draining = True  # one actor at a time stops taking work to run the suspect alone
        if not a.draining and not a.isolating:
            while self.queue and len(a.in_flight) + len(batch) < share:
                batch.append(self.queue.popleft())
        for job in batch:
            a.in_flight[job.episode_id] = job
        return batch

    def _open(self, a: _Actor) -> str:
        """Start a run on ``a`` (again, after a restart: a restarted actor starts empty); its id."""
        run_id = uuid.uuid4().hex
        a.handle.serve.remote(run_id)  # runs until finish(); errors come back through exchange
        return run_id

    async def _serve(self, a: _Actor, share: int) -> None:
        run_id = self._open(a)
        while a.alive:
            jobs = self._refill(a, share)
            if not a.in_flight:
                if self._finished():
                    a.handle.finish.remote(run_id)
                    self._notify()
                    return
                await self._changed.wait()
                continue
            try:
                # One round trip sends the new episodes and brings back every one finished meanwhile.
                outcomes = await a.handle.exchange.remote(run_id, jobs, self.linger_s)
            except self.ray.exceptions.RayActorError as exc:
                self._lost(a, exc)
                await self._health(a)
                if a.alive:
                    run_id = self._open(a)
                self._notify()
                continue
            self.stats["round_trips"] += 1
            for o in outcomes:
                if a.in_flight.pop(o.episode_id, None) is not None:
                    self.deliver(o)
            if not a.in_flight:
                a.isolating = False
            self._notify()

    def _lost(self, a: _Actor, exc: BaseException) -> None:
        """``a`` died: rerun what it was running (alone on the last attempt), or record it as crashed."""
        self.stats["actor_errors"] += 1
        lost, alone = list(a.in_flight.values()), a.isolating
        a.in_flight.clear()
        a.isolating = a.draining = False
        first = str(exc).splitlines()[0] if str(exc) else ""
        for job in lost:
            n = self.deaths[job.episode_id] = self.deaths.get(job.episode_id, 0) + 1
            if n >= self.max_attempts:
                where = "alone on its actor" if alone else "on its actor"
                self.deliver(
                    episode_crash(
                        job,
                        f"the Ray actor running it died {n} time(s), the last {where}; "
                        f"last error: {type(exc).__name__}: {first}",
                        ErrorType.of(exc),
                    )
                )
                continue
            self.stats["reruns"] += 1
            job = replace(job, attempt=n + 1)  # its record will say it ran again
            if n >= self.max_attempts - 1:
                self.suspects.append(job)
            else:
                self.queue.appendleft(job)

    async def _health(self, actor: _Actor) -> None:
        """After an error: wait for Ray's restart of the actor, or mark it gone for good."""
        errors = self.ray.exceptions
        deadline = anyio.current_time() + self.restart_timeout_s
        while actor.alive:
            try:
                await actor.handle.ping.remote()
                return
            except errors.ActorUnavailableError:  # restarting: ask again shortly
                if anyio.current_time() > deadline:
                    break
                await anyio.sleep(0.1)
            except errors.RayActorError:  # dead, out of restarts
                break
        if actor.alive:
            actor.alive = False
            self.stats["actors_lost"] += 1
            self._notify()
            if self.pool is not None:
                await self.pool.drop_actor.remote(actor.key)


class RayExecutor:
    """A :class:`~agent_swarm.orchestrator.rollout.executors.RolloutExecutor` that runs episodes on Ray actors.

    ``address``: see :class:`~agent_swarm.orchestrator.cluster.RayCluster` (``None`` starts a local Ray for the
    run and stops it after; a Ray already initialised in this process is used as it is).
    ``actors``: episode actors, each with ``num_cpus`` CPUs reserved (one event loop each; on one
    machine, one per core; ``None``: as many as the cluster's CPUs hold). ``cluster_limits``: make the
    sub-agent and endpoint caps cluster-wide.
    ``max_attempts``: runs of one episode whose actor died before it is recorded as crashed.
    ``max_restarts``: Ray restarts of one actor. ``gc_freeze``: the CLI's GC settings in the actors.
    ``linger_s``: how long an actor gathers finished episodes before sending them (fewer round trips).
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        actors: int | None = 2,
        num_cpus: float = 1.0,
        cluster_limits: bool = True,
        max_attempts: int = 3,
        max_restarts: int = 8,
        gc_freeze: bool = True,
        local_cpus: int | None = None,
        runtime_env: dict[str, Any] | None = None,
        on_started: Callable[[list[Any]], None] | None = None,
        linger_s: float = 0.02,
    ) -> None:
        check_actors("RayExecutor", actors=actors, num_cpus=num_cpus, max_attempts=max_attempts)
        self.cluster = RayCluster(address, num_cpus=local_cpus, runtime_env=runtime_env)
        self.actors = actors
        self.num_cpus = num_cpus
        self.cluster_limits = cluster_limits
        self.max_attempts = max_attempts
        self.max_restarts = max_restarts
        self.gc_freeze = gc_freeze
        self.linger_s = linger_s
        self.restart_timeout_s = 120.0
        """How long an actor Ray is restarting may stay unreachable before it counts as lost."""
        self.on_started = on_started
        """Called with the actor handles once they are up (monitoring; tests kill one)."""
        self.stats: dict[str, Any] = {}
        """After a run: reruns, actor deaths, the limit pool's statistics, each actor's CPU and RSS."""

    def check(self, runner: EpisodeRunner) -> None:
        from agent_swarm.orchestrator.cluster._ray import require_ray

        ray = require_ray()
        pickled_size(ray, runner.factory, "the orchestrator factory", _SHIP_HINT)
        pickled_size(ray, runner.reward_fn, "the reward function", _SHIP_HINT)

    async def _start_actors(
        self, ray: Any, runner: EpisodeRunner, n_actors: int, pool_name: str | None
    ) -> list[_Actor]:
        """``n_actors`` episode actors, each running a copy of ``runner`` that keeps no records."""
        shipped = EpisodeRunner(
            runner.factory,
            runner.swarm_config,
            runner.reward_fn,
            runner.config,
            keep_records=False,
            probe=runner.probe,
        )
        keys = [f"episodes-{i}" for i in range(n_actors)]
        handles = await start_leasing_actors(
            ray,
            EpisodeWorker,
            shipped,
            keys,
            pool_name=pool_name,
            gc_freeze=self.gc_freeze,
            num_cpus=self.num_cpus,
            max_concurrency=32,  # serve, exchange, and monitoring calls
            max_restarts=self.max_restarts,
            doing="start the episode runner",
        )
        return [_Actor(i, key, h) for i, (key, h) in enumerate(zip(keys, handles, strict=True))]

    async def run(self, batch: EpisodeBatch) -> None:
        from agent_swarm.orchestrator.cluster._ray import require_ray

        ray = require_ray(asyncio_for="RayExecutor")
        started = self.cluster.connect()
        handles: list[Any] = []
        try:
            n_actors = self.actors or _fitting(ray, self.num_cpus)
            check_fits(ray, "episode", n_actors, self.num_cpus)
            pool = pool_name = None
            if self.cluster_limits:
                pool_name, pool = start_slot_pool()
                handles.append(pool)
            actors = await self._start_actors(ray, batch.runner, n_actors, pool_name)
            handles += [a.handle for a in actors]
            started_cpu = {a.key: (await a.handle.usage.remote())["cpu_s"] for a in actors}
            if self.on_started is not None:
                self.on_started([a.handle for a in actors])
            sched = _Scheduler(
                ray, actors, pool, batch.deliver, self.max_attempts, self.restart_timeout_s, self.linger_s, self.stats
            )
            await sched.run(batch.jobs, batch.max_concurrent)
            if pool is not None:
                self.stats["limits"] = await pool.stats.remote()
            # CPU each actor spent on this run's episodes (start-up excluded), and its memory now.
            usage = [(a, await a.handle.usage.remote()) for a in actors if a.alive]
            self.stats["actors"] = [
                {"cpu_s": u["cpu_s"] - started_cpu.get(a.key, 0.0), "rss_b": u["rss_b"]} for a, u in usage
            ]
        finally:  # synchronous calls: nothing here can be cancelled half-way
            kill_all(ray, handles)
            if started:
                self.cluster.shutdown()
