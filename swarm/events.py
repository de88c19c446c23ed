"""Progress events the runtime emits to observers (the CLI's live view, loggers, monitors).

Observers are plain callables ``(event) -> None`` called synchronously in the emitting task; they
must be cheap and must not raise (an observer that raises is a bug and propagates). Events are only
built when at least one observer is registered, so they cost nothing on the benchmark's hot path.

Endpoint events (:class:`EndpointWaiting`, :class:`EndpointRefused`) come from a model backend, which
knows no episode: they go to the observers installed with :func:`observing` in the emitting task's
context (the engine installs its own for the length of an episode, so its observers see them too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from agent_swarm.swarm.records import AgentStatus, EpisodeRecord, SubagentResult

__all__ = [
    "ActionResolved",
    "EndpointRefused",
    "EndpointWaiting",
    "EpisodeFinished",
    "EpisodeStarted",
    "Event",
    "Observer",
    "StageFinished",
    "StageStarted",
    "SubagentFinished",
    "SubagentStarted",
    "SubagentStep",
    "TurnFinished",
    "ambient_observers",
    "observing",
]


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)


class EpisodeStarted(_Event):
    type: Literal["episode_started"] = "episode_started"
    episode_id: str
    task: str
    parts: int | None = None
    """The independent parts the task declares (``metadata["parts"]``), for the live collapse monitors."""


class TurnFinished(_Event):
    type: Literal["turn_finished"] = "turn_finished"
    index: int
    text: str
    tool_calls: tuple[str, ...]
    call_ids: tuple[str, ...] = ()
    """The calls' ids, in the order the model wrote them (the order the stage's rows keep)."""


class StageStarted(_Event):
    type: Literal["stage_started"] = "stage_started"
    index: int
    kind: str
    width: int
    critical_so_far: int


class SubagentStarted(_Event):
    type: Literal["subagent_started"] = "subagent_started"
    agent_id: str
    name: str
    task: str
    step_cap: int


class SubagentStep(_Event):
    type: Literal["subagent_step"] = "subagent_step"
    agent_id: str
    step: int
    tools: tuple[str, ...] = ()
    """The tools this step called, in order."""
    error: str | None = None
    """What went wrong in this step: its own error (malformed output, model failure) or its first failed tool call."""


class ActionResolved(_Event):
    """An orchestrator action that is not a sub-agent run, once its outcome is known: a
    ``create_subagent`` (created or rejected), a refused ``assign_task`` (``ok`` False with the
    reason the model was told), or a direct tool call (its result). Sub-agent runs report through
    ``SubagentStarted``/``SubagentFinished``."""

    type: Literal["action_resolved"] = "action_resolved"
    stage: int
    call_id: str
    name: str
    target: str = ""
    """The sub-agent type a ``create_subagent``/``assign_task`` names; empty for a direct tool call."""
    ok: bool
    detail: str = ""
    """The result the orchestrator saw (trimmed to 300 characters)."""
    error_type: str | None = None


class SubagentFinished(_Event):
    type: Literal["subagent_finished"] = "subagent_finished"
    agent_id: str
    status: AgentStatus
    result: SubagentResult


class StageFinished(_Event):
    type: Literal["stage_finished"] = "stage_finished"
    index: int
    critical_steps: int
    critical_so_far: int


class EndpointWaiting(_Event):
    """A model endpoint answered 429: every request to it waits ``wait_s`` seconds before the next
    one is sent (``message``: the line a view shows, e.g. ``waiting for rate limit, 12 s``)."""

    type: Literal["endpoint_waiting"] = "endpoint_waiting"
    endpoint: str
    wait_s: float
    reason: str = ""
    message: str = ""


class EndpointRefused(_Event):
    """A model endpoint refused service (401/403/quota): it takes no more requests from this run and
    every agent that calls it fails at once with ``reason``."""

    type: Literal["endpoint_refused"] = "endpoint_refused"
    endpoint: str
    status: int
    reason: str


class EpisodeFinished(_Event):
    type: Literal["episode_finished"] = "episode_finished"
    record: EpisodeRecord


Event = Annotated[
    ActionResolved
    | EndpointRefused
    | EndpointWaiting
    | EpisodeStarted
    | TurnFinished
    | StageStarted
    | SubagentStarted
    | SubagentStep
    | SubagentFinished
    | StageFinished
    | EpisodeFinished,
    Field(discriminator="type"),
]
Observer = Callable[[Event], None]

_ambient: ContextVar[tuple[Observer, ...]] = ContextVar("swarm_ambient_observers", default=())


@contextmanager
def observing(observers: Iterable[Observer]) -> Iterator[None]:
    """Install ``observers`` for events emitted by code that knows no episode (a backend), in this
    task and the tasks it starts, for the length of the block (added to any installed outside it)."""
    extra = tuple(observers)
    if not extra:
        yield
        return
    token = _ambient.set((*_ambient.get(), *extra))
    try:
        yield
    finally:
        _ambient.reset(token)


def ambient_observers() -> tuple[Observer, ...]:
    """The observers :func:`observing` installed in this context (empty when none)."""
    return _ambient.get()
