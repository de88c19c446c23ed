"""Built-in tools inside a real episode: a sub-agent writes with python and reads with read_file."""

from __future__ import annotations

from pathlib import Path

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.swarm.sandbox import SandboxLimits
from agent_swarm.swarm.testing import ScriptedBackend, call
from agent_swarm.tools.builtin import files_toolset, python_tool
from agent_swarm.tools.registry import ToolRegistry


async def test_subagent_uses_python_and_file_tools_in_the_episode_workspace(tmp_path: Path) -> None:
    policy = ScriptedBackend(
        [
            [
                call("create_subagent", name="coder", system_prompt="You compute.", tools=["python", "read_file"]),
                call("assign_task", agent="coder", task="compute 6*7 into x.txt"),
            ],
            "42",
        ]
    )
    worker = ScriptedBackend(
        {
            "coder-0-0": [
                call("python", code="open('x.txt', 'w').write(str(6 * 7))"),
                call("read_file", path="../escape.txt"),
                call("read_file", path="x.txt"),
                "x.txt holds 42",
            ]
        }
    )
    tools = ToolRegistry([python_tool(SandboxLimits(cpu_s=2, wall_s=10)), files_toolset()])
    config = SwarmConfig(max_critical_steps=10, workspace_root=tmp_path / "ws")
    record = await Orchestrator(policy, config, tools=tools, subagent_backend=worker).run("go")
    assert record.answer == "42"
    written = list((tmp_path / "ws").rglob("x.txt"))
    assert len(written) == 1 and written[0].read_text() == "42"
    (sub,) = record.subagent_results
    results = [r for step in sub.step_records for r in step.tool_results]
    assert [r.is_error for r in results] == [False, True, False]
    assert "outside the workspace" in results[1].content
    assert results[2].content == "42"
