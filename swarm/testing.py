"""Test doubles that ship with the package: a scripted backend and a function backend.

Both produce *real-looking* token ids so trajectory code can be tested without a model: prompts are
rendered with a tiny deterministic chat template and encoded as UTF-8 bytes (see
:func:`render_prompt`). The template is prefix-stable, so turn ``t+1``'s prompt extends turn ``t``'s
prompt + response exactly, as with a real engine that does not re-tokenize.

::

    backend = ScriptedBackend([
        [call("create_subagent", name="w", system_prompt="..."), call("assign_task", agent="w", task="x")],
        "the answer",
    ])
    ...
    backend.assert_consumed()   # fails if turns were left over
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

import anyio

from swarm.backend import Completion, ModelRequest, Usage, estimate_tokens
from swarm.errors import BackendError, ScriptError
from swarm.messages import AssistantMessage, Message, ToolCall

__all__ = [
    "FunctionBackend",
    "ScriptedBackend",
    "Turn",
    "call",
    "complete_with_tokens",
    "encode",
    "malformed",
    "render_prompt",
    "render_response",
]

_ids = itertools.count()


def call(name: str, /, *, id: str | None = None, **arguments: Any) -> ToolCall:
    """A tool call for a script: ``call("assign_task", agent="w", task="x")``."""
    return ToolCall(id=id or f"call_{next(_ids)}", name=name, arguments=arguments)


def malformed(raw: str, error: str = "tool call is not valid JSON") -> Completion:
    """A turn whose tool-call output the parser rejected (what a small model often emits)."""
    return Completion(text=raw, parse_error=error)


def encode(text: str) -> tuple[int, ...]:
    """The fake tokenizer: UTF-8 bytes."""
    return tuple(text.encode("utf-8"))


def _render_message(m: Message) -> str:
    if isinstance(m, AssistantMessage):
        return f"<|assistant|>\n{_assistant_body(m.content, m.tool_calls)}<|end|>\n"
    return f"<|{m.role}|>\n{m.content}<|end|>\n"


def _assistant_body(text: str, tool_calls: Sequence[ToolCall]) -> str:
    parts = [text]
    for c in tool_calls:
        payload = json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False, sort_keys=True)
        parts.append(f"<tool_call>{payload}</tool_call>")
    return "".join(parts)


def render_prompt(messages: Sequence[Message]) -> str:
    """Prompt text of the fake template (generation prompt included)."""
    return "".join(_render_message(m) for m in messages) + "<|assistant|>\n"


def render_response(text: str, tool_calls: Sequence[ToolCall]) -> str:
    """Response text of the fake template; prompt(t) + response(t) is a prefix of prompt(t+1)."""
    return _assistant_body(text, tool_calls) + "<|end|>\n"


def complete_with_tokens(request: ModelRequest, completion: Completion, model: str) -> Completion:
    """Fill token ids, logprobs and usage of a scripted completion from the fake template."""
    if completion.token_ids is not None:
        return completion
    prompt_ids = encode(render_prompt(request.messages))
    resp_ids = encode(render_response(completion.text, completion.tool_calls))
    logprobs = tuple(-0.01 * ((i % 7) + 1) for i in range(len(resp_ids)))
    finish = completion.finish_reason
    if finish == "stop" and completion.tool_calls:
        finish = "tool_calls"
    return dataclasses.replace(
        completion,
        prompt_token_ids=prompt_ids,
        token_ids=resp_ids,
        logprobs=logprobs,
        usage=Usage(prompt_tokens=len(prompt_ids), completion_tokens=len(resp_ids)),
        model=completion.model or model,
        finish_reason=finish,
    )


TurnFn: TypeAlias = Callable[[ModelRequest], "Completion | Awaitable[Completion]"]
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


async def _resolve(item: Completion | BaseException | TurnFn, request: ModelRequest) -> Completion:
    if isinstance(item, BaseException):
        raise item
    if isinstance(item, Completion):
        return item
    out = item(request)
    if inspect.isawaitable(out):
        out = await out
    if not isinstance(out, Completion):
        raise ScriptError(f"a scripted turn function must return a Completion, got {type(out).__name__}")
    return out


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
        out = await _resolve(item, request)
        return complete_with_tokens(request, out, self._model) if self.tokens else out


class FunctionBackend:
    """A backend whose every turn is ``fn(request)`` (sync or async); records requests.

    ``parallel_slots``: serve that many calls at once, like an engine's slots (the rest queue, their
    ``delay`` not yet running), and say so (the :func:`swarm.backend.parallel_slots` capability).
    ``context_window``: say this context size (:func:`swarm.backend.context_window`); a request
    whose estimated prompt exceeds it fails as an engine's would."""

    def __init__(
        self,
        fn: TurnFn,
        *,
        model: str = "function",
        delay: float = 0.0,
        tokens: bool = True,
        parallel_slots: int | None = None,
        context_window: int | None = None,
    ) -> None:
        self._fn = fn
        self._model = model
        self.delay = delay
        self.tokens = tokens
        self.calls: list[ModelRequest] = []
        self.parallel_slots = parallel_slots
        self.context_window = context_window
        self._slots: anyio.CapacityLimiter | None = None

    @property
    def model(self) -> str:
        return self._model

    async def complete(self, request: ModelRequest) -> Completion:
        self.calls.append(request)
        if self.context_window is not None and (n := estimate_tokens(request)) >= self.context_window:
            raise BackendError(f"the prompt has {n} tokens, which fills the context of {self.context_window}")
        if self.parallel_slots is None:
            return await self._turn(request)
        if self._slots is None:
            self._slots = anyio.CapacityLimiter(self.parallel_slots)
        async with self._slots:
            return await self._turn(request)

    async def _turn(self, request: ModelRequest) -> Completion:
        if self.delay:
            await anyio.sleep(self.delay)
        out = await _resolve(self._fn, request)
        return complete_with_tokens(request, out, self._model) if self.tokens else out
