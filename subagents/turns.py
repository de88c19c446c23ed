"""The turn primitives both loops share: the orchestrator's (``agent_swarm.orchestrator.engine``) and each
sub-agent's (:mod:`agent_swarm.subagents.loop`).

One model call inside its span (:func:`call_model`), the feedback for output that did not parse
(:func:`retry_malformed`), one turn's tool calls run together (:func:`run_tool_calls`), and the
identity of a call for repeat detection (:func:`call_signature`, :func:`repeat_notice`). Neither loop
owns them: each loop decides what a failed call or a spent retry means for its own agent.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial

import anyio

from agent_swarm.swarm.backend import Completion, ModelBackend, ModelRequest
from agent_swarm.swarm.errors import ErrorType
from agent_swarm.swarm.messages import AssistantMessage, Message, ToolCall, UserMessage
from agent_swarm.swarm.records import ToolResult
from agent_swarm.swarm.tracing import Telemetry, attr
from agent_swarm.tools.registry import Tool, ToolContext, execute_tool

__all__ = [
    "call_model",
    "call_signature",
    "malformed_feedback",
    "repeat_notice",
    "retry_malformed",
    "run_tool_calls",
]


def malformed_feedback(error: str, *, cut_at: int | None = None) -> str:
    """What an agent is told after emitting tool-call output that could not be parsed
    (``cut_at``: the output stopped at this token limit, which is usually why)."""
    if cut_at is not None:
        return (
            f"Your last message was cut off at the limit of {cut_at} tokens before the tool call was complete. "
            "Write shorter calls (short task texts, fewer calls per message), or answer in plain text."
        )
    return (
        f"Your last message could not be parsed as a tool call ({error}). "
        'Emit each tool call as JSON {"name": ..., "arguments": {...}} inside <tool_call></tool_call> '
        "tags, or answer in plain text without tool calls."
    )


def call_signature(call: ToolCall) -> str:
    """A call's identity for repeat detection: its name and arguments, not its id."""
    return json.dumps({"name": call.name, "arguments": call.arguments}, sort_keys=True, ensure_ascii=False)


def repeat_notice(error: str) -> str:
    """The error a model gets for a call it already made, verbatim, with the same failure."""
    return (
        "You already made exactly this call and it failed. Do not repeat it: fix what the error says, "
        f"or answer in plain text now. The error was: {error}"
    )


def call_model(
    backend: ModelBackend, request: ModelRequest, telemetry: Telemetry, messages: Sequence[Message]
) -> Awaitable[Completion]:
    """One generation, inside its ``chat`` span when telemetry is on, for the orchestrator and sub-agent
    loops alike: await it.

    A backend that raises raises here (recorded on the span): what a failed call means is the calling
    loop's decision. Cancellation propagates. ``messages``: the list the request's messages were taken
    from (the span reads it only when content capture is on). With telemetry off this is the backend's
    own ``complete`` awaitable: no coroutine of ours between a loop and its model on every step.
    """
    if not telemetry.enabled:  # what the null span would do, without entering it
        return backend.complete(request)
    return _chat(backend, request, telemetry, messages)


async def _chat(
    backend: ModelBackend, request: ModelRequest, telemetry: Telemetry, messages: Sequence[Message]
) -> Completion:
    with telemetry.chat(model=backend.model, backend=backend, sampling=request.sampling, messages=messages) as span:
        try:
            completion = await backend.complete(request)
        except Exception as exc:  # recorded as the span's failure; raised outside it, which ends as before
            span.fail(type(exc).__name__, str(exc))
            failed: Exception | None = exc
        else:
            telemetry.completion(span, completion)
            failed = None
    if failed is not None:
        raise failed
    return completion


def retry_malformed(
    messages: list[Message],
    completion: Completion,
    *,
    max_tokens: int,
    retries: int,
    max_retries: int,
    who: str = "model",
) -> str | None:
    """Feed back a completion whose tool-call output could not be parsed (``completion.parse_error``).

    Appends what the model wrote and what was wrong with it to ``messages``, so the next generation
    can fix it (``max_tokens``: the request's token limit, named when the output was cut off there).
    ``retries`` counts malformed outputs so far, this one included; once it exceeds
    ``max_retries`` the agent fails, and the reason is returned (``None`` while retries are left).
    The caller owns the counter; ``who`` names the agent in the reason.
    """
    error = completion.parse_error or "unparseable output"
    messages.append(AssistantMessage(content=completion.text))
    cut = max_tokens if completion.finish_reason == "length" else None
    messages.append(UserMessage(content=malformed_feedback(error, cut_at=cut)))
    if retries > max_retries:
        return f"{who} output stayed malformed after {max_retries} retries: {error}"
    return None


async def _tool_call(
    c: ToolCall,
    tools: Mapping[str, Tool],
    ctx: ToolContext,
    telemetry: Telemetry,
    clock: Callable[[], float],
) -> ToolResult:
    if not telemetry.enabled:  # what the null span would do, without entering it
        return await execute_tool(c, tools, ctx, clock)
    with telemetry.tool(name=c.name, call_id=c.id, arguments=c.arguments) as span:
        r = await execute_tool(c, tools, ctx, clock)
        if r.is_error:
            span.fail(r.error_type or ErrorType.TOOL, r.content)
        telemetry.content(span, attr.TOOL_RESULT, r.content)
    return r


async def run_tool_calls(
    calls: Sequence[ToolCall],
    tools: Mapping[str, Tool],
    ctx: ToolContext,
    telemetry: Telemetry,
    clock: Callable[[], float],
) -> list[ToolResult]:
    """Execute one turn's tool calls; several run concurrently. Results keep the calls' order."""
    if len(calls) != 1:
        return await _concurrently([partial(_tool_call, c, tools, ctx, telemetry, clock) for c in calls])
    if not telemetry.enabled:  # the common turn: one call, no span (one coroutine less per step)
        return [await execute_tool(calls[0], tools, ctx, clock)]
    return [await _tool_call(calls[0], tools, ctx, telemetry, clock)]


async def _concurrently(runs: Sequence[Callable[[], Awaitable[ToolResult]]]) -> list[ToolResult]:
    """Each of ``runs`` in one task group; the results in their order. Apart from run_tool_calls: a
    closure's variables are cells made at every call of its function, and one call per turn is the
    common case."""
    results: list[ToolResult | None] = [None] * len(runs)

    async def one(i: int, run: Callable[[], Awaitable[ToolResult]]) -> None:
        results[i] = await run()

    async with anyio.create_task_group() as tg:
        for i, run in enumerate(runs):
            tg.start_soon(one, i, run)
    return [r for r in results if r is not None]
