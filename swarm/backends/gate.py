"""The gate in front of one model endpoint: a launch ramp, suspension on 429, and refusal.

Every request a backend sends to an endpoint first passes the endpoint's :class:`EndpointGate`
(:func:`endpoint_gate`: one per endpoint, API key and ramp in each event loop, shared by every backend
that talks to it). The gate holds no request slot: requests wait here before they take one.

* **launch ramp** (:class:`LaunchRamp`, opt-in): at most ``burst`` requests start at once, then one
  every ``1 / per_second`` seconds (Kimi's swarm launches 5 at once, then one per 700 ms). A quiet
  endpoint earns its burst back at the same rate.
* **suspension**: a 429 suspends the whole endpoint for the backoff (the server's ``Retry-After`` when
  it sends one): no request to it is sent until then, and the wait is announced once as an
  :class:`~agent_swarm.swarm.events.EndpointWaiting` event (``waiting for rate limit, 12 s``) to the observers of
  each episode that has to wait.
* **refusal**: a 401, 403 or spent quota closes the endpoint for the rest of the run: every request,
  waiting or new, fails at once with :class:`~agent_swarm.swarm.errors.BackendRefusedError` and the reason, so a
  swarm whose key or quota is gone fails fast instead of idling (announced as
  :class:`~agent_swarm.swarm.events.EndpointRefused`).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import anyio
from anyio.lowlevel import RunVar

from agent_swarm.swarm.errors import BackendRefusedError, ConfigError
from agent_swarm.swarm.events import EndpointRefused, EndpointWaiting, Event, Observer, ambient_observers
from agent_swarm.swarm.limits import endpoint_key

__all__ = ["EndpointGate", "LaunchRamp", "endpoint_gate"]


@dataclass(frozen=True, slots=True)
class LaunchRamp:
    """``burst`` requests may start at once, then ``per_second`` more each second."""

    burst: int
    per_second: float

    def __post_init__(self) -> None:
        if self.burst < 1:
            raise ConfigError(f"launch ramp burst must be >= 1 request, got {self.burst}")
        if not (self.per_second > 0 and math.isfinite(self.per_second)):
            raise ConfigError(f"launch ramp rate must be > 0 requests per second, got {self.per_second}")

    @property
    def interval(self) -> float:
        return 1.0 / self.per_second


@dataclass(slots=True)
class EndpointGate:
    """Admission of requests to one endpoint (see the module docstring). Times are
    :func:`anyio.current_time` seconds."""

    endpoint: str
    ramp: LaunchRamp | None = None
    resume_at: float = 0.0
    """Requests wait until this time (a 429's backoff)."""
    refused: str | None = None
    """Why the endpoint takes no more requests, once it refused service."""
    refused_status: int = 0
    waits: int = 0
    """Suspensions so far (429s that extended the wait)."""
    reason: str = ""
    """What the last 429 said."""
    _next_start: float = -math.inf  # the ramp's theoretical next start (GCRA)
    _epoch: int = 0  # bumped by each suspension: who has been told about the current wait
    _told: dict[int, int] = field(default_factory=dict)  # id(observers) -> epoch told (this epoch only)

    async def enter(self) -> None:
        """Wait until a request may be sent; raise :class:`BackendRefusedError` once the endpoint refused."""
        waited_ramp = False
        while True:
            if self.refused is not None:
                raise BackendRefusedError(self.refused)
            now = anyio.current_time()
            if now < self.resume_at:
                self._announce(now)
                await anyio.sleep(self.resume_at - now)
                continue
            if self.ramp is None or waited_ramp:
                return
            start = self._reserve(now, self.ramp)
            if start <= now:
                return
            waited_ramp = True
            await anyio.sleep(start - now)

    def _reserve(self, now: float, ramp: LaunchRamp) -> float:
        """Reserve the next start the ramp allows: ``burst`` at once, then one per interval."""
        interval = ramp.interval
        due = max(self._next_start, now)
        self._next_start = due + interval
        return max(now, due - (ramp.burst - 1) * interval)

    def suspend(self, seconds: float, reason: str) -> None:
        """A 429: hold every request to this endpoint for ``seconds`` from now (never shortens a wait)."""
        until = anyio.current_time() + max(seconds, 0.0)
        if until > self.resume_at:
            self.resume_at = until
            self.waits += 1
            self._epoch += 1
            self._told.clear()
            self.reason = reason
            self._announce(anyio.current_time())

    def refuse(self, status: int, reason: str) -> None:
        """A 401/403/quota answer: the endpoint takes no more requests (the first reason is kept)."""
        if self.refused is None:
            self.refused, self.refused_status = reason, status
            _tell(ambient_observers(), EndpointRefused(endpoint=self.endpoint, status=status, reason=reason))

    def status(self) -> str | None:
        """What a view shows about this endpoint now: refused, waiting, or ``None`` when it is open."""
        if self.refused is not None:
            return f"endpoint refused: {self.refused}"
        left = self.resume_at - anyio.current_time()
        return f"waiting for rate limit, {math.ceil(left):d} s" if left > 0 else None

    def _announce(self, now: float) -> None:
        """Tell this context's observers about the current wait, once per suspension."""
        observers = ambient_observers()
        if not observers or self._told.get(id(observers)) == self._epoch:
            return
        self._told[id(observers)] = self._epoch
        left = max(self.resume_at - now, 0.0)
        _tell(
            observers,
            EndpointWaiting(
                endpoint=self.endpoint,
                wait_s=round(left, 3),
                reason=self.reason,
                message=f"waiting for rate limit, {math.ceil(left):d} s",
            ),
        )


def _tell(observers: tuple[Observer, ...], event: Event) -> None:
    for o in observers:
        o(event)


_gates: RunVar[dict[tuple[str, str, LaunchRamp | None], EndpointGate]] = RunVar("swarm_endpoint_gates")


def endpoint_gate(url: str, api_key: str | None = None, ramp: LaunchRamp | None = None) -> EndpointGate:
    """The gate of the endpoint at ``url`` for ``api_key`` in this event loop (rate limits and
    refusals belong to a key: a second key on the same server has its own gate)."""
    try:
        table = _gates.get()
    except LookupError:
        table = {}
        _gates.set(table)
    who = hashlib.sha256(api_key.encode()).hexdigest()[:12] if api_key else ""
    key = (endpoint_key(url), who, ramp)
    gate = table.get(key)
    if gate is None:
        gate = table[key] = EndpointGate(endpoint=url, ramp=ramp)
    return gate
