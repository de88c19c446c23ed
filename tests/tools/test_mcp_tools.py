"""MCP servers as tools, against real servers written for the tests (mcp_servers/calc_server.py)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")  # the 'mcp' extra; .ci/run installs it

from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.messages import ToolCall
from agent_swarm.swarm.records import ToolResult
from agent_swarm.tools.mcp import MCPServers, load_mcp_config, parse_mcp_config
from agent_swarm.tools.registry import Tool, ToolContext, ToolRegistry, execute_tool

pytestmark = pytest.mark.integration
SERVER = Path(__file__).parent / "mcp_servers" / "calc_server.py"


def stdio(**extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(SERVER), *extra.pop("args", [])], **extra}


async def call(tools: dict[str, Tool], tool_name: str, **args: object) -> ToolResult:
    return await execute_tool(ToolCall(id="c", name=tool_name, arguments=args), tools, ToolContext())


def test_config_shapes_and_errors(tmp_path: Path) -> None:
    cfg = parse_mcp_config(
        {"mcpServers": {"a": {"command": "x", "args": ["y"], "env": {"K": "v"}}, "b": {"url": "http://h/mcp"}}}
    )
    assert cfg.servers["a"].type == "stdio" and cfg.servers["b"].type == "http"
    for raw, msg in [
        ({}, "mcpServers"),
        ({"mcpServers": {"a": {"args": []}}}, "'command' .* or 'url'"),
        ({"mcpServers": {"bad name": {"command": "x"}}}, "server name"),
        ({"mcpServers": {"a": {"url": "ftp://x"}}}, "http"),
        ({"mcpServers": {"a": {"command": "x", "bogus": 1}}}, "bogus"),
        ({"mcpServers": {"a": {"type": "sse", "url": "http://x"}}}, "SSE"),
    ]:
        with pytest.raises(ConfigError, match=msg):
            parse_mcp_config(raw)
    bad = tmp_path / "mcp.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_mcp_config(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_mcp_config(tmp_path / "missing.json")


async def test_stdio_server_tools_results_errors_hang_and_crash() -> None:
    cfg = parse_mcp_config(
        {
            "mcpServers": {
                "calc": stdio(timeout_s=60, max_restarts=1),
                "stuck": stdio(timeout_s=2),  # same server, short call timeout: for the hang
                "broken": {"command": "/nonexistent/mcp-server"},
            }
        }
    )
    async with MCPServers(cfg) as servers:
        status = {s.name: s for s in servers.status}
        assert status["calc"].connected and set(status["calc"].tools) == {"add", "greet", "divide", "crash", "hang"}
        assert not status["broken"].connected and "connect failed" in (status["broken"].error or "")
        reg = ToolRegistry(servers.toolsets())
        assert "calc" in reg and "broken" not in reg  # one toolset per connected server
        tools = reg.resolve(["calc"])
        spec = tools["calc__add"].spec.to_openai()["function"]
        assert spec["parameters"]["required"] == ["a", "b"]
        assert spec["parameters"]["properties"]["a"]["type"] == "integer"

        # Calls from tasks other than the one that entered the context (the owner task serves them).
        results: dict[str, ToolResult] = {}

        async def run(key: str, tool_name: str, args: dict[str, Any]) -> None:
            results[key] = await call(tools, tool_name, **args)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "add", "calc__add", {"a": 2, "b": 3})
            tg.start_soon(run, "greet", "calc__greet", {"name": "Ada"})
            tg.start_soon(run, "div0", "calc__divide", {"a": 1, "b": 0})
            tg.start_soon(run, "badargs", "calc__add", {"a": "x"})
        assert (results["add"].content, results["add"].is_error) == ("5", False)
        assert results["greet"].content == "Hello, Ada!"
        assert results["div0"].is_error and "divide" in results["div0"].content
        assert results["badargs"].is_error and "valid integer" in results["badargs"].content

        started = time.monotonic()
        hung = await call(reg.resolve(["stuck"]), "stuck__hang")
        assert hung.is_error and hung.error_type == "ToolTimeoutError" and "2s" in hung.content
        assert time.monotonic() - started < 10
        assert (await call(reg.resolve(["stuck"]), "stuck__add", a=1, b=1)).content == "2"  # serving after a hang

        # A crash mid-call is an error; the owner restarts the server once (max_restarts=1) ...
        crashed = await call(tools, "calc__crash")
        assert crashed.is_error and "calc" in crashed.content and "Connection closed" in crashed.content
        assert (await call(tools, "calc__add", a=1, b=1)).content == "2"
        status = {s.name: s for s in servers.status}
        assert status["calc"].connected and status["calc"].restarts == 1
        # ... and after the second crash it gives up: the tools answer "unavailable" at once.
        assert (await call(tools, "calc__crash")).is_error
        with anyio.fail_after(10):
            after = await call(tools, "calc__add", a=1, b=1)
        assert after.is_error and ("unavailable" in after.content or "went away" in after.content)
        await anyio.sleep(0.5)
        status = {s.name: s for s in servers.status}
        assert not status["calc"].connected and "connection lost" in (status["calc"].error or "")
        after = await call(tools, "calc__add", a=1, b=1)
        assert after.is_error and "unavailable" in after.content


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server() -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("the streamable HTTP test server did not start")
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


async def test_streamable_http_server(http_server: str, tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"web": {"url": http_server, "headers": {"X-Test": "1"}}}}))
    async with MCPServers(load_mcp_config(path)) as servers:
        (status,) = servers.status
        assert status.connected and status.transport == "http"
        tools = {t.name: t for t in servers.tools}
        assert (await call(tools, "web__add", a=20, b=22)).content == "42"
        assert (await call(tools, "web__greet", name="Bob")).content == "Hello, Bob!"


def _server_pids(tag: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if tag.encode() in (d / "cmdline").read_bytes():
                    pids.append(int(d.name))
            except OSError:
                continue
    return pids


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
async def test_cancel_during_a_call_closes_connections_and_stops_servers() -> None:
    tag = f"tag-{uuid.uuid4().hex}"
    cfg = parse_mcp_config({"mcpServers": {"calc": stdio(args=["--tag", tag], timeout_s=60)}})
    with anyio.move_on_after(20) as outer:
        async with MCPServers(cfg) as servers:
            assert _server_pids(tag), "the stdio server should be running"
            tools = {t.name: t for t in servers.tools}
            with anyio.move_on_after(1):  # cancel while the call is in flight
                await call(tools, "calc__hang")
    assert not outer.cancelled_caught, "closing took too long"
    for _ in range(50):
        if not _server_pids(tag):
            break
        await anyio.sleep(0.1)
    assert _server_pids(tag) == []


def test_public_tool_names_are_valid_unique_and_stable() -> None:
    from agent_swarm.tools.mcp import public_tool_name

    assert public_tool_name("fs", "read.file") == "fs__read_file"
    long = public_tool_name("srv", "x" * 100)
    assert len(long) == 64 and long == public_tool_name("srv", "x" * 100)
    assert public_tool_name("fs", "a", taken={"fs__a"}) != "fs__a"


def test_results_map_text_structured_and_errors() -> None:
    from mcp_types import CallToolResult, ImageContent, TextContent

    from agent_swarm.tools.mcp import result_to_text

    text = CallToolResult(content=[TextContent(text="a"), TextContent(text="b")])
    assert result_to_text(text) == ("a\nb", False)
    structured = CallToolResult(content=[], structured_content={"n": 1})
    assert result_to_text(structured) == ('{"n": 1}', False)
    image = CallToolResult(content=[ImageContent(data="AAAA", mime_type="image/png")], is_error=True)
    assert result_to_text(image) == ("[image content: image/png, 3 bytes]", True)
    assert result_to_text(CallToolResult(content=[], is_error=True))[1] is True


async def test_a_server_that_never_answers_the_handshake_times_out_at_connect() -> None:
    mute = {"command": sys.executable, "args": ["-c", "import time; time.sleep(120)"], "connect_timeout_s": 1}
    cfg = parse_mcp_config({"mcpServers": {"mute": mute}})
    started = time.monotonic()
    async with MCPServers(cfg) as servers:
        (status,) = servers.status
        assert not status.connected and (status.error or "").startswith("connect timed out after 1s; `command`")
        assert servers.tools == [] and servers.toolsets() == []
    assert time.monotonic() - started < 20
