"""MCP server tools inside a real episode: granted to a sub-agent by server (toolset) name."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator import Orchestrator
from agent_swarm.orchestrator.cli import app
from agent_swarm.swarm.records import AgentStatus, EpisodeStatus
from agent_swarm.swarm.testing import ScriptedBackend, call

pytest.importorskip("mcp")
from agent_swarm.tools.mcp import MCPServers, parse_mcp_config

SERVER = Path(__file__).resolve().parents[1] / "tools" / "mcp_servers" / "calc_server.py"


@pytest.mark.integration
async def test_subagent_uses_an_mcp_server_granted_by_name() -> None:
    config = parse_mcp_config({"mcpServers": {"calc": {"command": sys.executable, "args": [str(SERVER)]}}})
    policy = ScriptedBackend(
        [
            [
                call("create_subagent", name="mathlete", system_prompt="use calc", tools=["calc"]),
                call("assign_task", agent="mathlete", task="2+40"),
            ],
            "42",
        ]
    )
    workers = ScriptedBackend({"mathlete-0-0": [call("calc__add", a=2, b=40), call("calc__divide", a=1, b=0), "42"]})
    async with MCPServers(config) as servers:
        record = await Orchestrator(policy, tools=servers.toolsets(), subagent_backend=workers).run("add")
    assert record.status is EpisodeStatus.COMPLETED
    result = record.subagent_results[0]
    assert result.status is AgentStatus.COMPLETED
    assert "calc__add" in record.agents[0].tools and "calc__divide" in record.agents[0].tools
    add, div = (s.tool_results[0] for s in result.step_records[:2])
    assert "42" in add.content and not add.is_error
    assert div.is_error and "divide" in div.content


def test_cli_rejects_a_bad_mcp_config(tmp_path: Path) -> None:
    bad = tmp_path / "mcp.json"
    bad.write_text(json.dumps({"mcpServers": {"x": {"args": ["no command"]}}}))
    result = CliRunner().invoke(app, ["run", "--demo", "capitals", "--mcp-config", str(bad), "-q"])
    assert result.exit_code == 2 and "mcpServers" in result.stderr


@pytest.mark.integration
def test_cli_run_connects_mcp_servers_for_the_whole_run(tmp_path: Path) -> None:
    cfg = tmp_path / "mcp.json"
    cfg.write_text(json.dumps({"mcpServers": {"calc": {"command": sys.executable, "args": [str(SERVER)]}}}))
    result = CliRunner().invoke(
        app,
        ["run", "--demo", "capitals", "--mcp-config", str(cfg), "--out", str(tmp_path), "--json", "--no-trace-file"],
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "completed"
    assert "unavailable" not in result.stderr
