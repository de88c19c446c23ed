"""A backend whose every turn is a Python function of the request, and the byte template that gives
its turns token ids.

Production code plays scripted policies through it: the workloads' gold policies, ``swarm demo`` and
the simulated cluster workload. :mod:`agent_swarm.swarm.testing` re-exports all of it next to the scripted backend,
for tests.

Token ids come from a tiny deterministic chat template encoded as UTF-8 bytes (:func:`render_prompt`),
so trajectory code runs without a model. The template is prefix-stable: turn ``t+1``'s prompt extends
turn ``t``'s prompt + response exactly, as with a real engine that does not re-tokenize.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeAlias

import anyio

from agent_swarm.swarm.backend import Completion, ModelRequest, Usage, estimate_tokens
from agent_swarm.swarm.errors import BackendError, ScriptError
from agent_swarm.swarm.messages import AssistantMessage, Message, ToolCall

__all__ = [
    "FunctionBackend",
    "TurnFn",
    "call",
    "complete_with_tokens",
    "encode",
    "malformed",
    "render_prompt",
    "render_response",
    "resolve_turn",
]

_ids = itertools.count()


def call(name: str, /, *, id: str | None = None, **arguments: Any) -> ToolCall:
    """A tool call for a script: ``call("assign_task", agent="w", task="x")``."""
    return ToolCall(id=id or f"call_{next(_ids)}", name=name, arguments=arguments)


def malformed(raw: str, error: str = "tool call is not valid JSON") -> Completion:
    """A turn whose tool-call output the parser rejected (what a small model often emits)."""
    return Completion(text=raw, parse_error=error)


def encode(text: str) -> tuple[int, ...]:
    """The byte template's tokenizer: UTF-8 bytes."""
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
    """Prompt text of the byte template (generation prompt included)."""
    return "".join(_render_message(m) for m in messages) + "<|assistant|>\n"


def render_response(text: str, tool_calls: Sequence[ToolCall]) -> str:
    """Response text of the byte template; prompt(t) + response(t) is a prefix of prompt(t+1)."""
    return _assistant_body(text, tool_calls) + "<|end|>\n"


def complete_with_tokens(request: ModelRequest, completion: Completion, model: str) -> Completion:
    """Fill token ids, logprobs and usage of a scripted completion from the byte template."""
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


async def resolve_turn(item: Completion | BaseException | TurnFn, request: ModelRequest) -> Completion:
    """The completion of one turn: ``item`` itself, raised when it is an exception, or called on the request."""
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


class FunctionBackend:
    """A backend whose every turn is ``fn(request)`` (sync or async); records requests.

    ``parallel_slots``: serve that many calls at once, like an engine's slots (the rest queue, their
    ``delay`` not yet running), and say so (the :func:`agent_swarm.swarm.backend.parallel_slots` capability).
    ``context_window``: say this context size (:func:`agent_swarm.swarm.backend.context_window`); a request
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
        out = await resolve_turn(self._fn, request)
        return complete_with_tokens(request, out, self._model) if self.tokens else out
