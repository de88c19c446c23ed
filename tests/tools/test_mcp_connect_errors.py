"""A stdio MCP server that fails to start says why: its last stderr lines and where its `command`
resolved on PATH (the README's `"command": "python"` finds a Python without `mcp`), in `swarm mcp
list`, in `swarm run`'s warning and in the library's status; its stderr still reaches the log."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("mcp")

from agent_swarm.orchestrator.cli import app
from agent_swarm.tools.mcp import MCPServers, load_mcp_config

BROKEN = (
    "import sys; print('starting', file=sys.stderr); "
    "print(\"ModuleNotFoundError: No module named 'mcp'\", file=sys.stderr); sys.exit(1)"
)


def _config(tmp_path: Path) -> Path:
    cfg = tmp_path / "mcp.json"
    cfg.write_text(json.dumps({"mcpServers": {"calc": {"command": sys.executable, "args": ["-c", BROKEN]}}}))
    return cfg


@pytest.mark.integration
def test_mcp_list_quotes_the_servers_stderr_and_the_resolved_command(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["mcp", "list", "--mcp-config", str(_config(tmp_path)), "--json"])
    assert res.exit_code == 1
    (calc,) = map(json.loads, res.stdout.splitlines())
    error = calc["error"]
    assert "connect failed" in error
    assert f"`command` {sys.executable!r} is resolved on PATH to {sys.executable}" in error
    assert "the server's last stderr lines: starting | ModuleNotFoundError: No module named 'mcp'" in error


@pytest.mark.integration
def test_a_command_not_on_path_says_so(tmp_path: Path) -> None:
    cfg = tmp_path / "mcp.json"
    cfg.write_text(json.dumps({"mcpServers": {"calc": {"command": "no-such-mcp-server-xyz"}}}))
    res = CliRunner().invoke(app, ["mcp", "list", "--mcp-config", str(cfg), "--json"])
    assert res.exit_code == 1
    assert "'no-such-mcp-server-xyz' is not found on PATH" in json.loads(res.stdout.splitlines()[0])["error"]


@pytest.mark.integration
def test_swarm_run_warns_with_the_cause(tmp_path: Path) -> None:
    args = [
        "run",
        "--demo",
        "capitals",
        "-q",
        "-p",
        "-o",
        str(tmp_path / "rec"),
        "--mcp-config",
        str(_config(tmp_path)),
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    text = " ".join(res.stderr.split())
    assert "MCP server 'calc' unavailable" in text and "No module named 'mcp'" in text
    assert "No module named 'mcp'" in (tmp_path / "rec" / "mcp-servers.log").read_text()


@pytest.mark.integration
async def test_the_library_status_has_the_cause_and_the_log_keeps_the_stderr(tmp_path: Path) -> None:
    log = io.StringIO()
    async with MCPServers(load_mcp_config(_config(tmp_path)), server_stderr=log) as servers:
        (status,) = servers.status
    assert not status.connected and "No module named 'mcp'" in (status.error or "")
    assert "starting\n" in log.getvalue()
