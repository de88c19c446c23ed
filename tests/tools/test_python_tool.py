"""The python tool runs code in the sandbox, in the episode workspace shared with the file tools."""

from __future__ import annotations

from pathlib import Path

from agent_swarm.swarm.messages import ToolCall
from agent_swarm.swarm.sandbox import SandboxLimits
from agent_swarm.tools.builtin import files_toolset, python_tool
from agent_swarm.tools.registry import ToolContext, ToolRegistry, execute_tool


async def test_python_tool_output_errors_and_shared_workspace(tmp_path: Path) -> None:
    reg = ToolRegistry([python_tool(SandboxLimits(cpu_s=2, wall_s=10)), files_toolset()])
    tools = reg.resolve(["python", "files"])
    ctx = ToolContext(episode_id="e1", agent_id="a", workspace=tmp_path / "e1")

    ok = await execute_tool(
        ToolCall(id="1", name="python", arguments={"code": "open('r.txt','w').write(str(6*7)); print('done')"}),
        tools,
        ctx,
    )
    assert not ok.is_error
    assert "status: ok" in ok.content and "done" in ok.content
    read = await execute_tool(ToolCall(id="2", name="read_file", arguments={"path": "r.txt"}), tools, ctx)
    assert read.content == "42"

    bad = await execute_tool(ToolCall(id="3", name="python", arguments={"code": "1/0"}), tools, ctx)
    assert bad.is_error
    assert "ZeroDivisionError" in bad.content and "exit_code: 1" in bad.content

    loop = await execute_tool(ToolCall(id="4", name="python", arguments={"code": "while True: pass"}), tools, ctx)
    assert loop.is_error and "status: timeout" in loop.content

    missing = await execute_tool(ToolCall(id="5", name="python", arguments={}), tools, ctx)
    assert missing.is_error and "code" in missing.content


def test_python_tool_schema_is_openai_shaped() -> None:
    spec = python_tool().spec.to_openai()
    params = spec["function"]["parameters"]
    assert spec["function"]["name"] == "python"
    assert params["required"] == ["code"]
    assert "ctx" not in params["properties"]


async def test_max_concurrent_queues_runs(tmp_path: Path) -> None:
    import anyio

    tools = ToolRegistry([python_tool(SandboxLimits(cpu_s=5, wall_s=20), max_concurrent=1)]).resolve(["python"])
    ctx = ToolContext(workspace=tmp_path)
    code = (
        "import os, time\n"
        "fd = os.open('lock', os.O_CREAT | os.O_EXCL)  # fails if another run holds it\n"
        "time.sleep(0.3)\n"
        "os.close(fd); os.remove('lock')\n"
        "print('ran alone')\n"
    )
    results = []

    async def one(i: int) -> None:
        results.append(await execute_tool(ToolCall(id=str(i), name="python", arguments={"code": code}), tools, ctx))

    async with anyio.create_task_group() as tg:
        for i in range(3):
            tg.start_soon(one, i)
    assert [r.is_error for r in results] == [False, False, False], [r.content for r in results]
