"""Test doubles that ship with the package: a scripted backend, and the function backend.

:class:`ScriptedBackend` plays a fixed list of turns and fails when turns are left over; it lives here
because only tests use it. :class:`FunctionBackend`, :func:`call`, :func:`malformed` and the byte
template (:func:`~agent_swarm.swarm.function_backend.render_prompt`,
:func:`~agent_swarm.swarm.function_backend.complete_with_tokens`)
live in :mod:`agent_swarm.swarm.function_backend`, where production code (gold policies, the demo) imports them;
the doubles among them (the backend, ``call``, ``malformed``) are re-exported here so a test imports
every double from one place. Both backends produce *real-looking* token ids from the byte template,
so trajectory code can be tested without a model.

::

    backend = ScriptedBackend([
        [call("create_subagent", name="w", system_prompt="..."), call("assign_task", agent="w", task="x")],
        "the answer",
    ])
    ...
    backend.assert_consumed()   # fails if turns were left over
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeAlias

import anyio

from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.errors import ScriptError
from agent_swarm.swarm.function_backend import (
    FunctionBackend,
    TurnFn,
    call,
    complete_with_tokens,
    malformed,
    resolve_turn,
)
from agent_swarm.swarm.messages import ToolCall

__all__ = ["FunctionBackend", "ScriptedBackend", "Turn", "call", "malformed"]

Turn: TypeAlias = "Completion | str | ToolCall | Sequence[ToolCall] | BaseException | TurnFn"
"""One scripted turn: a completion, an answer text, one or several tool calls (one parallel turn),
an exception to raise (simulating a failing model call), or a function of the request."""


def _normalise(turn: Turn) -> Completion | BaseException | TurnFn:
    if isinstance(turn, Completion | BaseException):
        return turn
    if isinstance(turn, str):
        return Completion(text=turn)
    if isinstance(turn, ToolCall):
        return Completion(tool_calls=(turn,))
    if callable(turn):
        return turn
    calls = tuple(turn)
    if not all(isinstance(c, ToolCall) for c in calls):
        raise ScriptError(
            f"a scripted turn must be a Completion, str, ToolCall(s), exception or callable; got {turn!r}"
        )
    return Completion(tool_calls=calls)


class ScriptedBackend:
    """Plays a fixed list of turns in order and records every request.

    Pass a sequence for one agent, or a mapping ``{key: turns}`` to route by ``route(request)``
    (default: the calling agent's id), which keeps concurrent sub-agents deterministic.
    Running out of turns raises :class:`ScriptError`; :meth:`assert_consumed` (also run on leaving a
    ``with`` block) fails when turns were left unconsumed.
    """

    def __init__(
        self,
        turns: Iterable[Turn] | Mapping[str, Iterable[Turn]],
        *,
        model: str = "scripted",
        delay: float = 0.0,
        tokens: bool = True,
        route: Callable[[ModelRequest], str] | None = None,
    ) -> None:
        self._model = model
        self.delay = delay
        self.tokens = tokens
        self.calls: list[ModelRequest] = []
        self._route = route or (lambda r: r.agent_id)
        if isinstance(turns, Mapping):
            self._queues: dict[str, list[Completion | BaseException | TurnFn]] | None = {
                k: [_normalise(t) for t in v] for k, v in turns.items()
            }
            self._queue: list[Completion | BaseException | TurnFn] = []
        else:
            self._queues = None
            self._queue = [_normalise(t) for t in turns]
        self._pos: dict[str, int] = {}

    @property
    def model(self) -> str:
        return self._model

    def _next(self, request: ModelRequest) -> Completion | BaseException | TurnFn:
        if self._queues is None:
            key, queue = "", self._queue
        else:
            key = self._route(request)
            if key not in self._queues:
                raise ScriptError(
                    f"scripted backend {self._model!r} has no turns for route {key!r}; "
                    f"known routes: {', '.join(sorted(self._queues))}"
                )
            queue = self._queues[key]
        pos = self._pos.get(key, 0)
        if pos >= len(queue):
            who = f" for route {key!r}" if key else ""
            raise ScriptError(
                f"scripted backend {self._model!r} ran out of turns{who} after {pos} call(s); "
                "add turns to the script or check why the agent called the model again"
            )
        self._pos[key] = pos + 1
        return queue[pos]

    @property
    def remaining(self) -> int:
        if self._queues is None:
            return len(self._queue) - self._pos.get("", 0)
        return sum(len(q) - self._pos.get(k, 0) for k, q in self._queues.items())

    def assert_consumed(self) -> None:
        if self.remaining:
            raise ScriptError(f"scripted backend {self._model!r} has {self.remaining} unconsumed turn(s)")

    def __enter__(self) -> ScriptedBackend:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is None:
            self.assert_consumed()

    async def complete(self, request: ModelRequest) -> Completion:
        self.calls.append(request)
        item = self._next(request)
        if self.delay:
            await anyio.sleep(self.delay)
        out = await resolve_turn(item, request)
        return complete_with_tokens(request, out, self._model) if self.tokens else out
