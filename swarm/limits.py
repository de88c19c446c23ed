"""Concurrency limits: a shared cap is an object passed in; a model endpoint's cap is shared by its URL.

**The sub-agent cap** (``SwarmConfig.max_concurrency``: sub-agents running at once) is a
:class:`ConcurrencyLimit` object, as pydantic-ai's ``ConcurrencyLimitedModel(wrapped, limiter)`` takes
its limiter: whoever runs episodes that must share one cap creates one :class:`CapacityLimit` and
passes the same object to each (``Orchestrator.run(task, subagent_limit=...)``; a rollout's or an
eval's runner does it for its concurrent episodes). Episodes given different objects never wait for
each other, whatever their capacities; nothing is looked up by a number. Each user asks the object for
its :class:`Limiter` with the width it wants (its ``max_concurrency``, no wider than its sub-agents'
backend serves at once), so holders that share one object should agree on it. Inside a cluster
(``agent_swarm.orchestrator.cluster``) the object leases its slots from one Ray actor instead, so one cap holds
across every process.

**Each model endpoint's request cap** (an OpenAI-compatible server's ``max_concurrency``) is shared by
every backend on that server, found by the endpoint's key::

    async with limiter(endpoint_key(url), capacity):
        ...

Where those limiters come from is the *provider*'s business:

* by default, one :class:`anyio.CapacityLimiter` per (event loop, key, capacity): every backend in one
  loop shares it;
* inside a cluster, a provider installed with :func:`use_limits` (``agent_swarm.orchestrator.cluster`` leases slots
  from one Ray actor) makes the same key mean the same cap across every process of the cluster.

The provider is a context variable, so it follows tasks spawned under :func:`use_limits`.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from types import TracebackType
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit

import anyio
from anyio.lowlevel import RunVar

from agent_swarm.swarm.errors import ConfigError

__all__ = [
    "CapacityLimit",
    "ConcurrencyLimit",
    "LimitProvider",
    "Limiter",
    "LocalLimits",
    "current_limits",
    "endpoint_key",
    "limiter",
    "use_limits",
]


@runtime_checkable
class Limiter(Protocol):
    """What the runtime uses of a capacity limiter (the subset of :class:`anyio.CapacityLimiter`)."""

    @property
    def available_tokens(self) -> float:
        """Slots that :meth:`acquire_nowait` can take now without waiting."""
        ...

    def acquire_nowait(self) -> None:
        """Take a slot or raise :class:`anyio.WouldBlock`."""
        ...

    async def acquire(self) -> None:
        """Take a slot, waiting for one."""
        ...

    def release(self) -> None:
        """Give a slot back."""
        ...

    async def __aenter__(self) -> None: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class ConcurrencyLimit(Protocol):
    """A cap shared by everything given the same object (see the module docstring)."""

    def limiter(self, width: int) -> Limiter:
        """The limiter its holders share, ``width`` slots wide (or narrower, where the object caps it)."""
        ...


class CapacityLimit:
    """A :class:`ConcurrencyLimit` in this process: one :class:`anyio.CapacityLimiter`, made on first use.

    ``capacity``: at most that many holders at once, whatever width they ask for; ``None``: as many as
    the width asked for (each :meth:`limiter` call sets it, so sharers should agree on it). Pickled, it
    arrives as a fresh, unshared limit with the same capacity: a limit never spans two processes (a
    cluster leases its slots instead).
    """

    __slots__ = ("_limiter", "capacity")

    def __init__(self, capacity: int | None = None) -> None:
        if capacity is not None and capacity < 1:
            raise ConfigError(f"a CapacityLimit needs capacity >= 1 (or None: the width asked for), got {capacity}")
        self.capacity = capacity
        self._limiter: anyio.CapacityLimiter | None = None

    def limiter(self, width: int) -> Limiter:
        total = width if self.capacity is None else min(self.capacity, width)
        lim = self._limiter
        if lim is None:
            lim = self._limiter = anyio.CapacityLimiter(total)
        elif lim.total_tokens != total:  # a narrower width holds new holders back; running ones finish
            lim.total_tokens = total
        return lim

    def __reduce__(self) -> tuple[type[CapacityLimit], tuple[int | None]]:
        return (CapacityLimit, (self.capacity,))

    def __repr__(self) -> str:
        return f"CapacityLimit({self.capacity})"


class LimitProvider(Protocol):
    """Hands out the limiter of a key; the same key and capacity give the same limiter."""

    def limiter(self, key: str, capacity: int) -> Limiter: ...


_loop_limiters: RunVar[dict[tuple[str, int], anyio.CapacityLimiter]] = RunVar("swarm_limiters")


class LocalLimits:
    """The default provider: one :class:`anyio.CapacityLimiter` per (event loop, key, capacity).

    A limiter belongs to the event loop it was made in (``run_sync`` and tests start several loops), so
    limiters are kept per loop.
    """

    def limiter(self, key: str, capacity: int) -> Limiter:
        try:
            table = _loop_limiters.get()
        except LookupError:
            table = {}
            _loop_limiters.set(table)
        lim = table.get((key, capacity))
        if lim is None:
            lim = table[(key, capacity)] = anyio.CapacityLimiter(capacity)
        return lim


_LOCAL = LocalLimits()
_provider: ContextVar[LimitProvider] = ContextVar("swarm_limit_provider", default=_LOCAL)


def current_limits() -> LimitProvider:
    """The provider in effect here (the :class:`LocalLimits` default unless :func:`use_limits` set one)."""
    return _provider.get()


def limiter(key: str, capacity: int) -> Limiter:
    """The shared limiter of ``key`` with ``capacity`` slots, from the current provider."""
    if capacity < 1:
        raise ValueError(f"a limiter needs capacity >= 1, got {capacity} for {key!r}")
    return _provider.get().limiter(key, capacity)


@contextmanager
def use_limits(provider: LimitProvider) -> Iterator[LimitProvider]:
    """Make ``provider`` hand out every limiter asked for inside the block (and in tasks started there)."""
    token = _provider.set(provider)
    try:
        yield provider
    finally:
        _provider.reset(token)


_LOOPBACK = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "[::1]"}


@lru_cache(maxsize=256)
def endpoint_key(url: str) -> str:
    """The key of a model endpoint's request cap: its scheme, host and port.

    A loopback address names a different server on every machine, so its key also carries this
    machine's host name (one cluster-wide cap per real server, never one for all ``localhost``s).
    """
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    base = f"endpoint/{parts.scheme}://{parts.netloc.lower()}"
    if host in _LOOPBACK or host.startswith("127."):
        return f"{base}@{socket.gethostname()}"
    return base
