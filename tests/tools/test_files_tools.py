"""Workspace file tools: they work inside the workspace and refuse every way out of it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent_swarm.swarm.messages import ToolCall
from agent_swarm.swarm.records import ToolResult
from agent_swarm.tools.builtin import files_toolset
from agent_swarm.tools.registry import Tool, ToolContext, ToolRegistry, execute_tool

Env = tuple[Path, Path, ToolContext, dict[str, Tool]]


@pytest.fixture
def env(tmp_path: Path) -> Env:
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("secret outside")
    reg = ToolRegistry([files_toolset()])
    return ws, outside, ToolContext(episode_id="e", agent_id="a", workspace=ws), reg.resolve(["files"])


async def call(tools: dict[str, Tool], ctx: ToolContext, name: str, **args: object) -> ToolResult:
    return await execute_tool(ToolCall(id="c", name=name, arguments=args), tools, ctx)


async def test_write_read_list_search_roundtrip(env: Env) -> None:
    ws, _, ctx, tools = env
    r = await call(tools, ctx, "write_file", path="notes/a.txt", content="alpha\nBeta gamma\n")
    assert not r.is_error, r.content
    assert (ws / "notes" / "a.txt").read_text() == "alpha\nBeta gamma\n"
    await call(tools, ctx, "write_file", path="notes/a.txt", content="delta\n", append=True)
    r = await call(tools, ctx, "read_file", path="notes/a.txt")
    assert r.content == "alpha\nBeta gamma\ndelta\n"
    r = await call(tools, ctx, "list_files")
    assert "notes/" in r.content and "notes/a.txt" in r.content
    r = await call(tools, ctx, "search_files", pattern="beta")
    assert r.content == "notes/a.txt:2: Beta gamma"
    r = await call(tools, ctx, "read_file", path="notes/a.txt", offset=6, max_chars=4)
    assert r.content.startswith("Beta") and "offset=10" in r.content


@pytest.mark.parametrize(
    "path",
    ["/etc/passwd", "../outside.txt", "notes/../../outside.txt", "~/x", "a\x00b"],
)
async def test_traversal_and_absolute_paths_are_refused(env: Env, path: str) -> None:
    _ws, outside, ctx, tools = env
    for name, args in [
        ("read_file", {"path": path}),
        ("write_file", {"path": path, "content": "pwned"}),
        ("list_files", {"path": path}),
        ("search_files", {"pattern": "secret", "path": path}),
    ]:
        r = await call(tools, ctx, name, **args)
        assert r.is_error, (name, path, r.content)
        assert "secret outside" not in r.content
    assert outside.read_text() == "secret outside"


async def test_symlinks_out_of_the_workspace_are_refused(env: Env) -> None:
    ws, outside, ctx, tools = env
    os.symlink(outside, ws / "link.txt")
    os.symlink(outside.parent, ws / "dirlink")
    os.symlink(outside.parent / "new.txt", ws / "dangling.txt")
    for name, args in [
        ("read_file", {"path": "link.txt"}),
        ("write_file", {"path": "link.txt", "content": "pwned"}),
        ("read_file", {"path": "dirlink/outside.txt"}),
        ("write_file", {"path": "dirlink/new.txt", "content": "pwned"}),
        ("write_file", {"path": "dangling.txt", "content": "pwned"}),
        ("list_files", {"path": "dirlink"}),
    ]:
        r = await call(tools, ctx, name, **args)
        assert r.is_error and "outside the workspace" in r.content, (name, r.content)
    r = await call(tools, ctx, "search_files", pattern="secret")
    assert r.content == "no matches for 'secret'"
    assert outside.read_text() == "secret outside"
    assert not (outside.parent / "new.txt").exists()


async def test_missing_workspace_and_missing_files_are_tool_errors(tmp_path: Path) -> None:
    tools = ToolRegistry([files_toolset()]).resolve(["files"])
    r = await call(tools, ToolContext(), "list_files")
    assert r.is_error and "no workspace" in r.content
    ctx = ToolContext(workspace=tmp_path)
    r = await call(tools, ctx, "read_file", path="nope.txt")
    assert r.is_error and "list_files" in r.content
    r = await call(tools, ctx, "search_files", pattern="(", regex=True)
    assert r.is_error and "regular expression" in r.content
