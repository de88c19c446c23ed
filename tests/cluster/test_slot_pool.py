"""The cluster-wide slot pool and its leasing limiters, run in this process (no Ray): a holder learns
that others wait from one waiting ``watch`` call, answered as soon as its fair share changes; a lease
follows the recent peak instead of asking the pool again for every fan-out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any

import anyio

from agent_swarm.orchestrator.cluster.slots import SUBAGENT_CAP, ClusterLimits, SlotPool
from agent_swarm.swarm import _aio


class _Ref:
    def __init__(self, fut: Future[Any]) -> None:
        self._fut = fut

    def future(self) -> Future[Any]:
        return self._fut


class _Method:
    def __init__(self, handle: LocalHandle, name: str, fn: Callable[..., Coroutine[Any, Any, Any]]) -> None:
        self.handle, self.name, self.fn = handle, name, fn

    def remote(self, *args: Any) -> _Ref:
        self.handle.calls[self.name] += 1
        reply: Future[Any] = Future()
        task = _aio.get_running_loop().create_task(self.fn(*args))

        def done(t: Any) -> None:
            if t.exception() is not None:
                reply.set_exception(t.exception())
            else:
                reply.set_result(t.result())

        task.add_done_callback(done)
        return _Ref(reply)


class LocalHandle:
    """A double of a Ray actor handle: ``handle.method.remote(...)`` runs the method on this event loop
    and replies through a concurrent future, as a Ray object ref's ``future()`` does; calls are counted."""

    def __init__(self, target: SlotPool) -> None:
        self.target = target
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> _Method:
        return _Method(self, name, getattr(self.target, name))


async def test_a_watching_holder_learns_at_once_that_another_waits_and_when_it_stops() -> None:
    pool = SlotPool()
    assert await pool.acquire("k", 4, 4, "a") == (4, 4)  # nobody waits: a may hold the whole cap
    shares: list[int] = []
    granted: list[tuple[int, int]] = []
    with anyio.fail_after(2):  # far below the watch's own timeout: the pool answered on the change
        async with anyio.create_task_group() as tg:

            async def b_asks() -> None:
                granted.append(await pool.acquire("k", 4, 2, "b"))

            async def a_watches() -> None:
                shares.append(await pool.watch("k", 4, 4, 30.0))
                await pool.release("k", 4, 2, "a")  # a gives back what exceeds its share
                shares.append(await pool.watch("k", 4, shares[-1], 30.0))

            tg.start_soon(a_watches)
            await anyio.sleep(0.05)
            tg.start_soon(b_asks)
    assert shares == [2, 4]  # halved while b waited; the whole cap again once nobody waits
    assert granted == [(2, 4)]
    stats = (await pool.stats())["k#4"]
    assert stats["used"] == 4 and stats["holders"] == {"a": 2, "b": 2}


async def test_a_watch_with_nothing_changing_returns_the_share_after_its_timeout() -> None:
    pool = SlotPool()
    await pool.acquire("k", 3, 1, "a")
    with anyio.fail_after(2):
        assert await pool.watch("k", 3, 3, 0.05) == 3


async def test_a_lease_follows_the_recent_peak_instead_of_asking_the_pool_for_every_fan_out() -> None:
    pool = LocalHandle(SlotPool())
    limits = ClusterLimits(pool, "a", linger_s=0.2)
    lim = limits.limiter("k", 100)

    async def subagent() -> None:
        async with lim:
            await anyio.sleep(0.005)

    for _ in range(40):  # 40 stages of a 16-wide fan-out over about a second: the demand swings 0..16
        async with anyio.create_task_group() as tg:
            for _ in range(16):
                tg.start_soon(subagent)
        await anyio.sleep(0.02)
    assert pool.calls["acquire"] <= 2  # not one round trip per stage, nor one per linger period
    assert pool.calls["share"] == 0 and pool.calls["watch"] <= 2  # no polling for the fair share
    assert limits.leased() == {"k": 16}
    await anyio.sleep(0.6)  # once the demand is gone, the idle lease goes back within two periods
    assert limits.leased() == {"k": 0}
    assert (await pool.target.stats())["k#100"]["used"] == 0


async def test_the_subagent_cap_of_every_process_leases_from_one_pool() -> None:
    """Two processes' :meth:`ClusterLimits.limit` objects of the sub-agent cap hold one cap between them."""
    pool = LocalHandle(SlotPool())
    holders = [ClusterLimits(pool, h, linger_s=0.05) for h in ("a", "b")]
    now = peak = 0

    async def subagent(lim: Any) -> None:
        nonlocal now, peak
        async with lim:
            now += 1
            peak = max(peak, now)
            await anyio.sleep(0.01)
            now -= 1

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for limits in holders:
                lim = limits.limit(SUBAGENT_CAP).limiter(3)
                for _ in range(8):
                    tg.start_soon(subagent, lim)
    assert peak == 3
    assert set((await pool.target.stats()).keys()) == {f"{SUBAGENT_CAP}#3"}
