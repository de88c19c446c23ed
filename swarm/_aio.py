"""The one module that imports :mod:`asyncio` (ruff's TID251 bans it everywhere else).

The runtime is written against anyio (structured concurrency, STYLE: task groups and cancel scopes);
these are the few places it must reach the asyncio event loop itself: whether one runs (a script's
event loop, :meth:`orchestrator.Orchestrator.run_sync`), and the futures and loop timers of the Ray
actors, whose object refs only asyncio can await (:mod:`agent_swarm.orchestrator.cluster`).
"""

from __future__ import annotations

import asyncio
from asyncio import AbstractEventLoop, CancelledError, Future, Handle, TimerHandle, get_running_loop

__all__ = [
    "AbstractEventLoop",
    "CancelledError",
    "Future",
    "Handle",
    "TimerHandle",
    "get_running_loop",
    "running_loop",
]


def running_loop() -> AbstractEventLoop | None:
    """The running asyncio loop, or ``None`` under another anyio backend (trio) or outside a loop."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
