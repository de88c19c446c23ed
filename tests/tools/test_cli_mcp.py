"""`swarm mcp list --config FILE` shows connected servers with their tools, and failures."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("mcp")

from agent_swarm.orchestrator.cli import app

SERVER = Path(__file__).parent / "mcp_servers" / "calc_server.py"


@pytest.mark.integration
def test_mcp_list_shows_tools_and_failed_servers(tmp_path: Path) -> None:
    cfg = tmp_path / "mcp.json"
    cfg.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "calc": {"command": sys.executable, "args": [str(SERVER)]},
                    "gone": {"command": str(tmp_path / "no-such-server")},
                }
            }
        )
    )
    res = CliRunner().invoke(app, ["mcp", "list", "--mcp-config", str(cfg), "--json"])
    assert res.exit_code == 1, res.output  # one server failed
    data = {s["name"]: s for s in map(json.loads, res.stdout.splitlines())}
    assert data["calc"]["connected"] is True
    assert {t["name"] for t in data["calc"]["tools"]} >= {"calc__add", "calc__greet"}
    assert data["gone"]["connected"] is False and "connect failed" in data["gone"]["error"]

    cfg.write_text(json.dumps({"mcpServers": {"calc": {"command": sys.executable, "args": [str(SERVER)]}}}))
    res = CliRunner().invoke(app, ["mcp", "list", "--mcp-config", str(cfg)])
    assert res.exit_code == 0, res.output
    assert "calc__add" in res.stdout and "Add two integers." in res.stdout


def test_mcp_list_bad_config_exits_2(tmp_path: Path) -> None:
    cfg = tmp_path / "mcp.json"
    cfg.write_text('{"servers": {}}')
    res = CliRunner().invoke(app, ["mcp", "list", "--mcp-config", str(cfg)])
    assert res.exit_code == 2
    assert "mcpServers" in res.stderr
