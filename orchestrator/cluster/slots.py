"""Cluster-wide limits: one Ray actor hands out slots; every process leases them in batches.

Inside a cluster every process holds a :class:`ClusterLimits`, whose limiters lease slots from one
:class:`SlotPool` actor, so a name means one cap across the whole cluster: the slots leased out never
exceed the capacity, and a slot is in use only while its process holds a lease on it. The sub-agent cap
is the :class:`~agent_swarm.swarm.limits.ConcurrencyLimit` ``limits.limit(SUBAGENT_CAP)`` that a cluster actor
passes to its episodes and placed batches; each model endpoint's request cap is a :mod:`agent_swarm.swarm.limits`
key, which the provider installed around an actor's work (``use_limits``) leases the same way.

Asking the pool for every slot would cost a round trip per model call. Instead a process

* asks once for all its current waiters (a stage's fan-out is one request, not sixteen),
* hands a released slot straight to a local waiter while it holds no more than its fair share
  (the whole capacity while nobody waits at the pool, else ``ceil(capacity / processes that hold or
  want slots)``; the pool answers a waiting ``watch`` call when it changes, so a holder learns that
  others wait without polling, at most once every ``refresh_s``),
* returns slots that stayed idle for ``linger_s`` (and excess over its share at once when others wait).

The pool serves waiting requests first come, first served. A process that dies keeps no slots: its
restarted incarnation registers under the same actor key, which frees what the dead one held, and the
driver drops the leases of actors that are gone for good.
"""

from __future__ import annotations

import contextlib
import math
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import ModuleType, TracebackType
from typing import Any, Generic, TypeVar

import anyio

from agent_swarm.orchestrator.cluster._ray import kill_all, remote_class, wait_started
from agent_swarm.swarm import _aio
from agent_swarm.swarm.errors import ClusterError
from agent_swarm.swarm.limits import CapacityLimit, ConcurrencyLimit, Limiter, use_limits

__all__ = [
    "SUBAGENT_CAP",
    "ClusterLimits",
    "LeasingActor",
    "Outbox",
    "SlotPool",
    "start_leasing_actors",
    "start_slot_pool",
]

SUBAGENT_CAP = "subagents"
"""The pool name of the sub-agent cap: every process's :meth:`ClusterLimits.limit` of it leases from one
pool per width (``SwarmConfig.max_concurrency``, narrowed to the sub-agents' backend)."""


# -- the pool (a Ray actor) ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Ask:
    holder: str
    want: int
    future: _aio.Future[int]


@dataclass(slots=True)
class _Pool:
    capacity: int
    used: int = 0
    peak: int = 0
    granted: int = 0
    held: dict[str, int] = field(default_factory=dict)
    queue: deque[_Ask] = field(default_factory=deque)
    changed: anyio.Event = field(default_factory=anyio.Event)
    """Set (and replaced) whenever who holds or waits changes: :meth:`SlotPool.watch` wakes on it."""

    def touch(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    def grant(self, holder: str, want: int) -> int:
        n = min(want, self.capacity - self.used)
        self.used += n
        self.peak = max(self.peak, self.used)
        self.granted += n
        self.held[holder] = self.held.get(holder, 0) + n
        return n

    def give_back(self, holder: str, n: int) -> None:
        n = min(n, self.held.get(holder, 0))
        self.held[holder] = self.held.get(holder, 0) - n
        if not self.held[holder]:
            del self.held[holder]
        self.used -= n

    def serve(self) -> None:
        while self.queue and self.used < self.capacity:
            ask = self.queue.popleft()
            if not ask.future.done():
                ask.future.set_result(self.grant(ask.holder, ask.want))

    def share(self) -> int:
        """What one holder may keep: everything while nobody waits, else an even split."""
        if not self.queue:
            return self.capacity
        active = set(self.held) | {a.holder for a in self.queue}
        return max(1, math.ceil(self.capacity / max(1, len(active))))


class SlotPool:
    """The Ray actor behind :class:`ClusterLimits` (create it with ``max_concurrency`` well above the
    number of processes: a request for slots waits inside the actor until slots are free)."""

    def __init__(self) -> None:
        self._pools: dict[tuple[str, int], _Pool] = {}
        self._actors: dict[str, str] = {}

    def _pool(self, key: str, capacity: int) -> _Pool:
        p = self._pools.get((key, capacity))
        if p is None:
            p = self._pools[(key, capacity)] = _Pool(capacity)
        return p

    async def acquire(self, key: str, capacity: int, want: int, holder: str) -> tuple[int, int]:
        """Lease between 1 and ``want`` slots (waiting for the first); returns (granted, fair share)."""
        p = self._pool(key, capacity)
        if not p.queue and p.used < capacity:
            return p.grant(holder, want), p.share()
        fut: _aio.Future[int] = _aio.get_running_loop().create_future()
        p.queue.append(_Ask(holder, max(1, want), fut))
        p.touch()  # someone waits: the holders' fair share shrinks
        try:
            n = await fut
        except _aio.CancelledError:
            if fut.done() and not fut.cancelled():
                p.give_back(holder, fut.result())
                p.serve()
            raise
        return n, p.share()

    async def release(self, key: str, capacity: int, n: int, holder: str) -> None:
        p = self._pool(key, capacity)
        p.give_back(holder, n)
        p.serve()
        p.touch()

    async def share(self, key: str, capacity: int) -> int:
        return self._pool(key, capacity).share()

    async def watch(self, key: str, capacity: int, known: int, timeout_s: float) -> int:
        """The fair share, as soon as it differs from ``known`` (or after ``timeout_s``): a holder learns
        that others wait without asking every few milliseconds."""
        p = self._pool(key, capacity)
        with anyio.move_on_after(timeout_s):
            while p.share() == known:
                await p.changed.wait()
        return p.share()

    async def register(self, actor_key: str, holder: str) -> None:
        """A process (re)started as ``actor_key``: whatever an earlier incarnation held is free again."""
        old = self._actors.get(actor_key)
        self._actors[actor_key] = holder
        if old is not None and old != holder:
            await self.drop(old)

    async def drop(self, holder: str) -> None:
        """Free everything ``holder`` holds (it died); its pending requests get nothing."""
        for p in self._pools.values():
            n = p.held.get(holder, 0)
            if n:
                p.give_back(holder, n)
            for ask in [a for a in p.queue if a.holder == holder]:
                p.queue.remove(ask)
                if not ask.future.done():
                    ask.future.set_result(0)
            p.serve()
            p.touch()

    async def drop_actor(self, actor_key: str) -> None:
        holder = self._actors.pop(actor_key, None)
        if holder is not None:
            await self.drop(holder)

    async def stats(self) -> dict[str, dict[str, Any]]:
        """Per key: capacity, slots leased now, the most ever leased at once, total grants, waiting asks."""
        return {
            f"{k}#{c}": {
                "capacity": p.capacity,
                "used": p.used,
                "peak": p.peak,
                "granted": p.granted,
                "holders": dict(p.held),
                "waiting": len(p.queue),
            }
            for (k, c), p in self._pools.items()
        }


def start_slot_pool() -> tuple[str, Any]:
    """Start a :class:`SlotPool` actor under a fresh name: ``(name, handle)``; processes find it by name."""
    name = f"swarm-slots-{uuid.uuid4().hex[:12]}"
    return name, remote_class(SlotPool).options(name=name, num_cpus=0, max_concurrency=100_000).remote()


# -- the leasing side (every process of the cluster) ---------------------------------------------------


@dataclass(slots=True)
class _Waiter:
    event: anyio.Event = field(default_factory=anyio.Event)
    granted: bool = False
    error: BaseException | None = None


class _LeasedLimiter:
    """A :class:`agent_swarm.swarm.limits.Limiter` whose slots are leased from the pool (asyncio event loop only)."""

    def __init__(self, owner: ClusterLimits, key: str, capacity: int) -> None:
        self._owner = owner
        self._key = key
        self._capacity = capacity
        self._loop = _aio.get_running_loop()
        self._leased = 0
        self._in_use = 0
        self._idle_low = 0
        """The fewest idle leased slots since the last flush: those were not needed all that time."""
        self._share = capacity
        self._waiters: deque[_Waiter] = deque()
        self._asking = False
        self._ask_soon: _aio.Handle | None = None
        self._flush_at: _aio.TimerHandle | None = None
        self._refresh_at: _aio.TimerHandle | None = None
        self._watching = False
        self._error: ClusterError | None = None

    # -- the Limiter interface ----------------------------------------------------------------------

    @property
    def available_tokens(self) -> float:
        return 0 if self._waiters else self._leased - self._in_use

    @property
    def leased(self) -> int:
        return self._leased

    def acquire_nowait(self) -> None:
        if self._waiters or self._leased - self._in_use < 1:
            raise anyio.WouldBlock
        self._take()

    def _take(self) -> None:
        self._in_use += 1
        idle = self._leased - self._in_use
        if idle < self._idle_low:
            self._idle_low = idle

    async def acquire(self) -> None:
        if not self._waiters and self._leased - self._in_use >= 1:
            self._take()
            return
        if self._error is not None:
            raise self._error
        w = _Waiter()
        self._waiters.append(w)
        self._want()
        try:
            await w.event.wait()
        except BaseException:
            if w.granted:
                self.release()
            else:
                self._waiters.remove(w)
            raise
        if w.error is not None:
            raise w.error

    def release(self) -> None:
        self._in_use -= 1
        if self._waiters and self._leased <= self._share:
            self._hand_out()
        elif self._waiters:
            self._schedule_flush(0.0)  # over our share while others may wait: give the excess back
        else:
            self._schedule_flush(self._owner.linger_s)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    # -- leasing ------------------------------------------------------------------------------------

    def _hand_out(self) -> None:
        while self._waiters and self._leased - self._in_use >= 1:
            w = self._waiters.popleft()
            w.granted = True
            self._take()
            w.event.set()

    def _want(self) -> None:
        """Ask the pool for the waiters' slots, once all waiters of this loop iteration are queued."""
        if not self._asking and self._ask_soon is None:
            self._ask_soon = self._loop.call_soon(self._ask)

    def _ask(self) -> None:
        self._ask_soon = None
        want = len(self._waiters) - (self._leased - self._in_use)
        if want <= 0 or self._asking:
            self._hand_out()
            return
        self._asking = True
        ref = self._owner.pool.acquire.remote(self._key, self._capacity, want, self._owner.holder)
        self._on_reply(ref.future(), self._granted)

    def _on_reply(self, fut: Future[Any], then: Callable[[Future[Any]], None]) -> None:
        def done(f: Future[Any]) -> None:
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
                self._loop.call_soon_threadsafe(then, f)

        fut.add_done_callback(done)

    def _granted(self, fut: Future[Any]) -> None:
        self._asking = False
        try:
            n, share = fut.result()
        except Exception as exc:
            self._fail(exc)
            return
        self._share = share
        self._leased += n
        self._hand_out()
        if self._waiters:
            self._want()
        elif self._leased > self._in_use:
            self._schedule_flush(self._owner.linger_s)
        self._schedule_refresh()

    def _fail(self, exc: BaseException) -> None:
        self._error = ClusterError(
            f"the cluster's limit service ({self._key}) failed: {type(exc).__name__}: {exc}; "
            "the run cannot keep its cluster-wide caps, re-run to resume"
        )
        while self._waiters:
            w = self._waiters.popleft()
            w.error = self._error
            w.event.set()

    def _schedule_flush(self, delay: float) -> None:
        if self._flush_at is not None:
            if delay > 0:
                return
            self._flush_at.cancel()
        self._flush_at = self._loop.call_later(delay, self._flush)

    def _flush(self) -> None:
        """Give idle slots back: what exceeds our share, and, when nobody here waits, the slots that stayed
        idle since the last flush (a lease that follows the recent peak is not asked for again and again
        as the demand swings: every ask is a round trip to the pool)."""
        self._flush_at = None
        idle = self._leased - self._in_use
        over = max(0, self._leased - self._share)
        give = min(idle, over if self._waiters else max(over, self._idle_low))
        if give > 0:
            self._leased -= give
            self._owner.pool.release.remote(self._key, self._capacity, give, self._owner.holder)
        self._idle_low = self._leased - self._in_use
        if self._idle_low > 0 and not self._waiters:
            self._schedule_flush(self._owner.linger_s)  # what is still idle a period from now goes back then
        if self._waiters:
            self._hand_out()
            if self._waiters:
                self._want()

    def _schedule_refresh(self) -> None:
        if self._refresh_at is None and not self._watching and self._leased > 0:
            self._refresh_at = self._loop.call_later(self._owner.refresh_s, self._refresh)

    def _refresh(self) -> None:
        """While holding slots, learn when the fair share changes (others start waiting): one waiting call
        that the pool answers on a change, at most one every ``refresh_s``."""
        self._refresh_at = None
        if self._leased <= 0:
            return
        self._watching = True
        ref = self._owner.pool.watch.remote(self._key, self._capacity, self._share, self._owner.watch_s)
        self._on_reply(ref.future(), self._shared)

    def _shared(self, fut: Future[Any]) -> None:
        self._watching = False
        try:
            self._share = fut.result()
        except Exception as exc:
            self._fail(exc)
            return
        if self._leased > self._share and self._leased > self._in_use:
            self._schedule_flush(0.0)
        self._schedule_refresh()


class ClusterLimits:
    """A :class:`agent_swarm.swarm.limits.LimitProvider` whose limiters lease slots from a :class:`SlotPool` actor.

    ``holder`` names this process to the pool (unique per process incarnation). Install it with
    ``agent_swarm.swarm.limits.use_limits`` around the work; it must be used from one asyncio event loop.
    """

    def __init__(
        self, pool: Any, holder: str, *, pool_name: str | None = None, linger_s: float = 0.5, refresh_s: float = 0.05
    ) -> None:
        self.pool = pool
        self.pool_name = pool_name
        """The pool actor's name, so that actors this process starts can lease from the same pool."""
        self.holder = holder
        self.linger_s = linger_s
        self.refresh_s = refresh_s
        self.watch_s = 5.0
        """The longest a share watch waits in the pool before it is renewed."""
        self._limiters: dict[tuple[str, int], _LeasedLimiter] = {}

    def limiter(self, key: str, capacity: int) -> Limiter:
        lim = self._limiters.get((key, capacity))
        if lim is None:
            lim = self._limiters[(key, capacity)] = _LeasedLimiter(self, key, capacity)
        return lim

    def limit(self, name: str) -> ConcurrencyLimit:
        """The cap ``name`` as a :class:`~agent_swarm.swarm.limits.ConcurrencyLimit` to pass in: its limiter of width
        ``w`` leases from the pool's ``(name, w)`` cap, which every process asking for it shares."""
        return _LeasedLimit(self, name)

    def leased(self) -> dict[str, int]:
        """Slots this process holds now, per key (for tests and diagnostics)."""
        return {k: lim.leased for (k, _), lim in self._limiters.items()}


class _LeasedLimit:
    __slots__ = ("name", "owner")

    def __init__(self, owner: ClusterLimits, name: str) -> None:
        self.owner = owner
        self.name = name

    def limiter(self, width: int) -> Limiter:
        return self.owner.limiter(self.name, width)


T = TypeVar("T")


class Outbox(Generic[T]):
    """Results an actor holds until the driver drains them (many per round trip)."""

    def __init__(self) -> None:
        self.items: list[T] = []
        self.closed = False
        self.count = 0
        self.event = anyio.Event()
        self.error: BaseException | None = None

    def put(self, item: T) -> None:
        self.items.append(item)
        self.count += 1
        self.event.set()

    def close(self) -> None:
        self.closed = True
        self.event.set()

    def fail(self, error: BaseException) -> None:
        """Nothing more will be put, because of ``error``: the next :meth:`take` raises it."""
        self.error = error
        self.event.set()

    async def take(self, linger_s: float) -> tuple[list[T], bool]:
        """Everything put since the last take (waiting for at least one, then ``linger_s`` more for
        company), and whether the box is closed."""
        if not self.items and not self.closed and self.error is None:
            await self.event.wait()
        if self.error is not None and not self.items:
            raise self.error
        if not self.closed and linger_s:
            await anyio.sleep(linger_s)
        out, self.items = self.items, []
        self.event = anyio.Event()
        return out, self.closed


class LeasingActor:
    """What every actor of ours shares: the CLI's GC settings, a name for this process incarnation, and
    (with a pool) cluster-wide limits that are installed around its work with :meth:`limited`;
    :attr:`subagent_limit` is the sub-agent cap its work shares (the cluster's, else this process's)."""

    def __init__(self, pool_name: str | None, actor_key: str, gc_freeze: bool) -> None:
        if gc_freeze:
            from agent_swarm.orchestrator.process import tune_gc

            tune_gc()  # the per-step costs measured in bench/ assume the CLI's GC settings
        self.actor_key = actor_key
        self.holder = f"{actor_key}/{uuid.uuid4().hex[:12]}"
        # The pool goes by name, not handle: a handle among the constructor arguments would live in the
        # object store, which Ray warns may be lost before a restart.
        self.limits: ClusterLimits | None = None
        if pool_name is not None:
            from agent_swarm.orchestrator.cluster._ray import require_ray

            pool = require_ray().get_actor(pool_name)
            self.limits = ClusterLimits(pool, self.holder, pool_name=pool_name)
        self.subagent_limit: ConcurrencyLimit = (
            CapacityLimit() if self.limits is None else self.limits.limit(SUBAGENT_CAP)
        )
        self._registered = pool_name is None
        self._boxes: dict[str, Outbox[Any]] = {}

    def outbox(self, key: str) -> Outbox[Any]:
        box = self._boxes.get(key)
        if box is None:
            box = self._boxes[key] = Outbox()
        return box

    def forget(self, key: str) -> None:
        self._boxes.pop(key, None)

    async def _register(self) -> None:
        if not self._registered and self.limits is not None:  # frees what an earlier (dead) incarnation held
            await self.limits.pool.register.remote(self.actor_key, self.holder)
            self._registered = True

    async def limited(self) -> contextlib.AbstractContextManager[object]:
        """Use as ``with await self.limited():`` around work that must keep the cluster-wide caps."""
        await self._register()
        return use_limits(self.limits) if self.limits is not None else contextlib.nullcontext()

    async def ping(self) -> str:
        await self._register()
        return self.holder

    async def usage(self) -> dict[str, float]:
        """This process's CPU seconds and resident memory (benchmarks and diagnostics)."""
        from agent_swarm.orchestrator.cluster._ray import process_usage

        return process_usage()


async def start_leasing_actors(
    ray: ModuleType,
    worker: type[LeasingActor],
    payload: object,
    keys: list[str],
    *,
    pool_name: str | None,
    gc_freeze: bool,
    num_cpus: float,
    max_concurrency: int,
    max_restarts: int,
    doing: str,
) -> list[Any]:
    """One ``worker(payload, pool_name, key, gc_freeze)`` actor per key, each answering ``ping`` before
    this returns. No task retries: the driver reruns what a lost actor ran, so nothing runs (or is
    written) twice. An actor that cannot start is a ConfigError naming it and what it was ``doing``;
    then, or when this is cancelled, every actor started here is killed."""
    cls = remote_class(worker)
    options = {"num_cpus": num_cpus, "max_concurrency": max_concurrency, "max_restarts": max_restarts}
    handles = [cls.options(**options, max_task_retries=0).remote(payload, pool_name, k, gc_freeze) for k in keys]
    try:
        await wait_started(ray, [(f"Ray actor {k}", h) for k, h in zip(keys, handles, strict=True)], doing)
    except BaseException:
        kill_all(ray, handles)
        raise
    return handles
