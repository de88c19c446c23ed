"""Many deadlines, one timer task.

A cancel scope with a deadline arms an event-loop timer on entry and disarms it on exit; on the
runtime's hot path (a sub-agent per task, a tool call per step, a thousand at once) that costs more
than the rest of a cheap step. :class:`DeadlineWatch` keeps the deadlines in a heap instead, and one
task sleeps until the earliest and expires what is due. What expires decides what that means: a
sub-agent cancels its task, a tool call cancels its own (deadline-free) scope.
"""

from __future__ import annotations

import heapq
import math
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
    is not running, :attr:`running` is false and callers must enforce their deadlines themselves.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Expirable]] = []
        self._seq = 0
        self._sleep: anyio.CancelScope | None = None
        self._target = math.inf
        self._compact_at = 1024
        self.running = False
        self.now: Callable[[], float] = anyio.current_time
        """The event loop's clock (``anyio.current_time``, read without anyio's per-call dispatch)."""

    def __len__(self) -> int:
        return len(self._heap)

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

    async def run(self) -> None:
        self.now = _loop_clock()
        self.running = True
        try:
            while True:
                now = self.now()
                while self._heap and self._heap[0][0] <= now:
                    heapq.heappop(self._heap)[2].expire()
                self._target = self._heap[0][0] if self._heap else math.inf
                with anyio.CancelScope() as self._sleep:
                    if self._heap:
                        await anyio.sleep(self._target - now)
                    else:
                        await anyio.sleep_forever()
                self._sleep = None
        finally:
            self.running = False
