"""Many deadlines, one timer task.

A cancel scope with a deadline arms an event-loop timer on entry and disarms it on exit; on the
runtime's hot path (a sub-agent per task, a tool call per step, a thousand at once) that costs more
than the rest of a cheap step. :class:`DeadlineWatch` keeps the deadlines instead (in a heap, or in
one queue per delay for the common "``delay`` seconds from now", see :meth:`DeadlineWatch.after`),
and one task sleeps until the earliest and expires what is due. What expires decides what that means: a
sub-agent cancels its task, a tool call cancels its own (deadline-free) scope.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from typing import Protocol

import anyio

from swarm._aio import running_loop

__all__ = ["DeadlineWatch", "Expirable"]


def _loop_clock() -> Callable[[], float]:
    """The running loop's clock function: what ``anyio.current_time()`` returns, as a direct call."""
    loop = running_loop()
    # anyio's asyncio backend reads exactly this clock; another backend (trio) has its own.
    return anyio.current_time if loop is None else loop.time


class Expirable(Protocol):
    @property
    def done(self) -> bool:
        """True once the work finished: the watch may then forget it before its deadline."""
        ...

    def expire(self) -> None:
        """The deadline passed. Must not block; may be called after the work already finished."""


class DeadlineWatch:
    """Enforces the deadlines of many concurrent operations with one task.

    Run :meth:`run` in a task group for as long as operations may register, then cancel it. While it
    is not running, :attr:`running` is false and callers must enforce their deadlines themselves; when
    it stops it forgets every deadline it held.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Expirable]] = []
        # delay -> [deadlines in order, compaction size] (see :meth:`after`)
        self._fifos: dict[float, _Fifo] = {}
        self._seq = 0
        self._sleep: anyio.CancelScope | None = None
        self._target = math.inf
        self._compact_at = 1024
        self.running = False
        self.now: Callable[[], float] = anyio.current_time
        """The event loop's clock (``anyio.current_time``, read without anyio's per-call dispatch)."""
        self.cancel_scope: Callable[[], anyio.CancelScope] = anyio.CancelScope
        """Makes a deadline-free cancel scope: while running, the running backend's own cancel-scope
        class, called directly (``anyio.CancelScope()`` looks the backend up through sniffio on every
        call and then builds exactly this object)."""

    def __len__(self) -> int:
        return len(self._heap) + sum(len(f.items) for f in self._fifos.values())

    def add(self, deadline: float, item: Expirable) -> None:
        """Expire ``item`` once ``anyio.current_time()`` reaches ``deadline``."""
        heapq.heappush(self._heap, (deadline, self._seq, item))
        self._seq += 1
        if len(self._heap) >= self._compact_at:  # finished work would otherwise wait for its deadline
            self._heap = [e for e in self._heap if not e[2].done]
            heapq.heapify(self._heap)
            self._compact_at = max(1024, 2 * len(self._heap))
        if deadline < self._target and self._sleep is not None:
            self._sleep.cancel()  # sleeping past this deadline: wake up and re-plan

    def after(self, delay: float, item: Expirable) -> None:
        """Expire ``item`` ``delay`` seconds from now (the loop clock, :attr:`now`).

        The same as ``add(now() + delay, item)``, cheaper: the loop clock never goes back, so the
        deadlines of one ``delay`` (every call of one tool, every sub-agent of one timeout) arrive in
        order and wait in a queue of their own instead of the heap; finished work at its front is
        dropped as new work arrives."""
        deadline = self.now() + delay
        fifo = self._fifos.get(delay)
        if fifo is None:
            fifo = self._fifos[delay] = _Fifo()
        items = fifo.items
        while items and items[0][1].done:
            items.popleft()
        items.append((deadline, item))
        if len(items) >= fifo.compact_at:  # a long-running call at the front holds finished ones behind it
            fifo.items = items = deque(e for e in items if not e[1].done)
            fifo.compact_at = max(1024, 2 * len(items))
        if deadline < self._target and self._sleep is not None:
            self._sleep.cancel()  # sleeping past this deadline: wake up and re-plan

    def _next_deadline(self) -> float:
        nearest = self._heap[0][0] if self._heap else math.inf
        for fifo in self._fifos.values():
            if fifo.items and fifo.items[0][0] < nearest:
                nearest = fifo.items[0][0]
        return nearest

    def _expire_due(self, now: float) -> None:
        while self._heap and self._heap[0][0] <= now:
            heapq.heappop(self._heap)[2].expire()
        for fifo in self._fifos.values():
            items = fifo.items
            while items and items[0][0] <= now:
                item = items.popleft()[1]
                if not item.done:
                    item.expire()

    async def run(self) -> None:
        self.now = _loop_clock()
        self.cancel_scope = type(anyio.CancelScope())
        self.running = True
        try:
            while True:
                # Nothing of the work may be a local of this frame: cancelling this task puts the frame
                # in a cycle with its CancelledError (anyio's task-done callback keeps the exception,
                # whose traceback holds the frame), and a local deque of deadlines would keep a stage's
                # sub-agents (transcripts, results) alive until the cyclic GC runs.
                now = self.now()
                self._expire_due(now)
                self._target = self._next_deadline()
                with anyio.CancelScope() as self._sleep:
                    if self._target < math.inf:
                        await anyio.sleep(self._target - now)
                    else:
                        await anyio.sleep_forever()
                self._sleep = None
        finally:
            self.running = False
            self.cancel_scope = anyio.CancelScope
            # Forget everything: once stopped, callers enforce their own deadlines, and what is left
            # (a stage's sub-agents) must not live on in the cancelled task's traceback cycle.
            self._heap, self._fifos, self._sleep, self._target = [], {}, None, math.inf


class _Fifo:
    """The deadlines of one delay, in the order they were added (so in deadline order)."""

    __slots__ = ("compact_at", "items")

    def __init__(self) -> None:
        self.items: deque[tuple[float, Expirable]] = deque()
        self.compact_at = 1024
