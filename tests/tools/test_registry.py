"""The tool registry contract: schemas from type hints and docstrings, validation, failures as data."""

from __future__ import annotations

import json
import threading
import time
from typing import Literal

import anyio
import anyio.lowlevel
import pytest
from pydantic import BaseModel

from agent_swarm.swarm.errors import ConfigError, ToolError, UnknownNameError
from agent_swarm.swarm.messages import ToolCall
from agent_swarm.swarm.records import ToolResult
from agent_swarm.tools.registry import Tool, ToolContext, ToolRegistry, Toolset, execute_tool, tool


class Point(BaseModel):
    x: int
    y: int


@tool
def move(p: Point, unit: Literal["m", "km"] = "m", ctx: ToolContext | None = None) -> dict[str, object]:
    """Move a point.

    Args:
        p: the point to move.
        unit: distance unit.
    """
    return {"x": p.x + 1, "y": p.y, "unit": unit}


@tool
async def whoami(ctx: ToolContext) -> str:
    """Say which agent is calling."""
    return f"{ctx.agent_id}@{ctx.episode_id}"


@tool
def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(reason)


@tool
def refuse() -> str:
    """Fails the way tools should: with a ToolError."""
    raise ToolError("not today; try tomorrow")


@tool(timeout_s=0.2)
async def slow() -> str:
    """Sleeps too long."""
    await anyio.sleep(5)
    return "late"


@tool(max_output_chars=20)
def chatty() -> str:
    """Talks a lot."""
    return "x" * 100


async def run(t: Tool, args: dict[str, object], ctx: ToolContext | None = None) -> ToolResult:
    return await execute_tool(ToolCall(id="1", name=t.name, arguments=args), {t.name: t}, ctx or ToolContext())


def test_schema_comes_from_hints_and_docstring() -> None:
    fn = move.spec.to_openai()["function"]
    assert fn["name"] == "move" and fn["description"] == "Move a point."
    params = fn["parameters"]
    assert params["required"] == ["p"]
    assert params["properties"]["unit"]["enum"] == ["m", "km"]
    assert params["properties"]["unit"]["description"] == "distance unit."
    assert "ctx" not in params["properties"]
    assert params["additionalProperties"] is False


async def test_arguments_are_validated_and_coerced() -> None:
    ok = await run(move, {"p": {"x": "1", "y": 2}, "unit": "km"})
    assert not ok.is_error and ok.content == '{"x": 2, "y": 2, "unit": "km"}'
    bad = await run(move, {"p": {"x": 1}, "unit": "miles", "extra": 1})
    assert bad.is_error and bad.error_type == "ToolError"
    for needle in ("p.y", "unit", "extra"):
        assert needle in bad.content


async def test_failures_become_error_results_the_model_can_read() -> None:
    r = await run(explode, {"reason": "kaboom"})
    assert r.is_error and r.error_type == "RuntimeError" and "kaboom" in r.content
    r = await run(refuse, {})
    assert r.is_error and r.content == "error: not today; try tomorrow"
    started = time.monotonic()
    r = await run(slow, {})
    assert r.is_error and r.error_type == "ToolTimeoutError" and "0.2s" in r.content
    assert time.monotonic() - started < 4  # not the tool's 5 s (a margin that holds at load 4)
    r = await execute_tool(ToolCall(id="1", name="nope", arguments={}), {"move": move}, ToolContext())
    assert r.is_error and "unknown tool 'nope'" in r.content and "move" in r.content


async def test_output_is_truncated_with_a_marker_and_context_is_injected() -> None:
    r = await run(chatty, {})
    assert r.content.startswith("x" * 20) and "80 of 100 characters dropped" in r.content
    r = await run(whoami, {}, ToolContext(episode_id="ep", agent_id="w-0-0"))
    assert r.content == "w-0-0@ep"


async def test_replace_makes_a_configured_copy() -> None:
    tight = chatty.replace(name="chatty_short", max_output_chars=5, timeout_s=None)
    assert (tight.name, tight.max_output_chars, tight.timeout_s) == ("chatty_short", 5, None)
    assert chatty.name == "chatty" and chatty.max_output_chars == 20
    r = await run(tight, {})
    assert r.content.startswith("xxxxx\n")
    with pytest.raises(ConfigError, match="invalid"):
        chatty.replace(name="bad name!")
    with pytest.raises(ConfigError, match="timeout_s"):
        chatty.replace(timeout_s=0)


def test_registry_resolves_tools_and_toolsets_and_rejects_clashes() -> None:
    reg = ToolRegistry([Toolset("geo", (move,)), whoami])
    assert set(reg.resolve(["geo", "whoami"])) == {"move", "whoami"}
    with pytest.raises(UnknownNameError, match="geo"):
        reg.resolve(["nope"])
    with pytest.raises(ConfigError, match="two different tools"):
        reg.add(Tool(lambda: "x", name="move"))
    with pytest.raises(ConfigError, match="duplicate"):
        Toolset("dup", (move, move))
    with pytest.raises(ConfigError, match="invalid"):
        Tool(lambda: 1, name="has space")


@pytest.mark.parametrize("kind", ["thread", "returns-awaitable"])
async def test_every_kind_of_slow_tool_times_out(kind: str) -> None:
    """Blocking sync tools (run in a thread) and sync tools that return an awaitable are bounded by
    their timeout too; only inline non-blocking sync calls, which cannot be interrupted, run unbounded."""
    gate = threading.Event()  # the tool cannot finish before the test opens it: event order, not a clock
    if kind == "thread":

        def blocked() -> str:
            gate.wait(30)
            return "late"

        t = Tool(blocked, timeout_s=0.2, blocking=True)
    else:

        async def wait_for_gate() -> None:
            await anyio.to_thread.run_sync(gate.wait, 30, abandon_on_cancel=True)

        def lazy() -> object:
            return wait_for_gate()

        t = Tool(lazy, timeout_s=0.2, blocking=False)
    try:
        with anyio.fail_after(20):
            r = await run(t, {})
        assert r.is_error and r.error_type == "ToolTimeoutError" and "0.2s" in r.content
        assert not gate.is_set()  # the result came while the tool still ran: the timeout ended it
    finally:
        gate.set()


async def test_async_tools_behave_the_same_whether_or_not_they_suspend() -> None:
    """Results, errors, timeouts and cancellation of async calls are what a plain await gives,
    whether the call suspends or not."""

    @tool(timeout_s=0.3)
    async def instant(x: int) -> int:
        """No await at all."""
        return x * 2

    @tool(timeout_s=0.3)
    async def yields(x: int) -> int:
        """Suspends a few times (checkpoints yield to the loop, sleep(0.01) waits on a timer future)."""
        for _ in range(3):
            await anyio.lowlevel.checkpoint()
        await anyio.sleep(0.01)
        return x * 3

    @tool(timeout_s=0.3)
    async def fails_early() -> str:
        """Raises before suspending."""
        raise ValueError("early")

    @tool(timeout_s=0.3)
    async def fails_late() -> str:
        """Raises after suspending."""
        await anyio.sleep(0.01)
        raise ValueError("late")

    @tool(timeout_s=0.2)
    async def hangs() -> str:
        """Never finishes in time, and cleans up when cancelled."""
        try:
            await anyio.sleep(10)
        finally:
            cleaned.append(True)
        return "never"

    cleaned: list[bool] = []
    async with anyio.create_task_group() as tg:

        async def call(t: Tool, **args: object) -> ToolResult:
            return await execute_tool(ToolCall(id="1", name=t.name, arguments=args), {t.name: t}, ToolContext())

        assert (await call(instant, x=2)).content == "4"
        assert (await call(yields, x=2)).content == "6"
        early, late = await call(fails_early), await call(fails_late)
        assert early.is_error and "ValueError: early" in early.content
        assert late.is_error and "ValueError: late" in late.content
        started = time.monotonic()
        r = await call(hangs)
        assert r.is_error and r.error_type == "ToolTimeoutError" and cleaned == [True]
        assert 0.15 < time.monotonic() - started < 5  # not the tool's 10 s
        # Cancelling the caller mid-call cancels the tool (and runs its cleanup), not a timeout.
        cleaned.clear()
        with anyio.move_on_after(0.05) as outer:
            await call(hangs)
        assert outer.cancelled_caught and cleaned == [True]
        tg.cancel_scope.cancel()


class _Point(BaseModel):
    x: int
    y: int


class _Tree(BaseModel):
    label: str
    children: list[_Tree] = []


def test_nested_argument_schemas_are_self_contained() -> None:
    """Tool schemas get embedded in larger ones (constrained decoding, provider tool lists), where a
    reference to the tool schema's own $defs would dangle: nested models are inlined."""

    @tool
    def segment(a: _Point, b: _Point) -> str:
        """Join two points."""
        return "ok"

    params = segment.spec.parameters
    assert "$defs" not in params and "$ref" not in json.dumps(params)
    assert params["properties"]["a"]["properties"]["x"]["type"] == "integer"

    @tool
    def walk(tree: _Tree) -> str:
        """A recursive argument: the reference must stay resolvable."""
        return tree.label

    params = walk.spec.parameters
    assert params["$defs"]["_Tree"]["properties"]["children"]["items"] == {"$ref": "#/$defs/_Tree"}
    assert params["properties"]["tree"]["properties"]["label"]["type"] == "string"
