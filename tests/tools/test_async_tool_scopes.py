"""Async tools that open cancel scopes (fail_after, move_on_after, task groups, httpx clients) work
inside episodes, as direct orchestrator tools and as sub-agent tools, with and without timeouts.

Regression: the registry used to step a tool's coroutine once by hand, outside
the task's cancel scope, so any tool that entered a scope before its first await crashed the whole
episode with "Attempted to exit a cancel scope that isn't the current task's current cancel scope".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anyio
import httpx
import pytest

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.swarm.backend import Completion
from agent_swarm.swarm.messages import ToolCall
from agent_swarm.swarm.records import EpisodeStatus
from agent_swarm.swarm.testing import FunctionBackend, ScriptedBackend, call
from agent_swarm.tools.registry import Tool, ToolContext, execute_tool, tool


class _Echo(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        time.sleep(0.01)  # the client really waits on the socket
        body = f"echo {self.path}".encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def echo_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _tools(url: str) -> list[Tool]:
    @tool
    async def bounded(x: int) -> int:
        """Opens a move_on_after scope before its first await."""
        with anyio.move_on_after(5):
            await anyio.sleep(0.01)
        return x + 1

    @tool
    async def deadline(x: int) -> int:
        """Opens a fail_after scope before its first await."""
        with anyio.fail_after(5):
            await anyio.sleep(0.01)
        return x * 2

    @tool
    async def fan(n: int) -> int:
        """Runs a task group of n sleepers."""
        out: list[int] = []

        async def one(i: int) -> None:
            await anyio.sleep(0.01)
            out.append(i)

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)
        return sum(out)

    @tool
    async def fetch(path: str) -> str:
        """A web provider on a real httpx.AsyncClient (the README's extension pattern)."""
        async with httpx.AsyncClient(base_url=url, timeout=5) as client:
            r = await client.get(path)
            return r.text

    return [bounded, deadline, fan, fetch]


CALLS = [
    call("bounded", x=1),
    call("deadline", x=2),
    call("fan", n=4),
    call("fetch", path="/hello"),
]
EXPECTED = ["2", "4", "6", "echo /hello"]


@pytest.mark.parametrize("timeout_s", [None, 5.0])
async def test_scoped_async_tools_run_directly_and_alone(echo_url: str, timeout_s: float | None) -> None:
    for t, c, want in zip(_tools(echo_url), CALLS, EXPECTED, strict=True):
        t = t.replace(timeout_s=timeout_s)
        tc = ToolCall(id="1", name=t.name, arguments=c.arguments)
        r = await execute_tool(tc, {t.name: t}, ToolContext())
        assert not r.is_error, r.content
        assert r.content == want


def _episode_results(record: object) -> list[tuple[str, bool]]:
    from agent_swarm.swarm.records import EpisodeRecord

    assert isinstance(record, EpisodeRecord)
    return [(r.content, r.is_error) for s in record.stages for r in s.tool_results]


def test_scoped_async_tools_as_orchestrator_tools_in_run_sync(echo_url: str) -> None:
    """The issue's reproduction: a direct tool with move_on_after, through Orchestrator.run_sync."""
    policy = ScriptedBackend([CALLS, "done"])
    record = Orchestrator(policy, SwarmConfig(subagents=False), tools=_tools(echo_url)).run_sync("go")
    assert record.status is EpisodeStatus.COMPLETED and record.answer == "done"
    assert _episode_results(record) == [(w, False) for w in EXPECTED]


async def test_scoped_async_tools_as_subagent_tools(echo_url: str) -> None:
    policy = ScriptedBackend(
        [
            [
                call("create_subagent", name="w", system_prompt="work", tools=["bounded", "deadline", "fan", "fetch"]),
                call("assign_task", agent="w", task="a"),
                call("assign_task", agent="w", task="b"),
            ],
            "done",
        ]
    )
    worker = FunctionBackend(
        lambda req: Completion(tool_calls=tuple(CALLS)) if len(req.messages) == 2 else Completion(text="ok")
    )
    record = await Orchestrator(
        policy, SwarmConfig(subagent_timeout_s=30), tools=_tools(echo_url), subagent_backend=worker
    ).run("go")
    assert record.status is EpisodeStatus.COMPLETED
    subs = record.stages[0].subagents
    assert [s.status.value for s in subs] == ["completed", "completed"]
    for s in subs:
        got = [(r.content, r.is_error) for step in s.step_records for r in step.tool_results]
        assert got == [(w, False) for w in EXPECTED]
