"""``swarm mcp list --mcp-config mcp.json``: connect the configured MCP servers and show their tools.

Exit code 0 when every enabled server connected, 1 when at least one did not (its error is shown),
2 for a missing or malformed config. ``--json`` prints the status objects instead of tables.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Annotated, TextIO

import anyio
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent_swarm.swarm.errors import UserError
from agent_swarm.tools.mcp import MCPServers, ServerStatus, load_mcp_config

__all__ = ["mcp_app"]

mcp_app = typer.Typer(
    name="mcp",
    help="MCP servers as tools: inspect what a config connects to."
    "\n\nExamples:\n\n\b\n  swarm mcp list --mcp-config mcp.json",
    no_args_is_help=True,
)
_err = Console(stderr=True)


async def _collect(
    config_path: Path, server_stderr: TextIO
) -> tuple[list[ServerStatus], dict[str, list[tuple[str, str]]]]:
    cfg = load_mcp_config(config_path)
    async with MCPServers(cfg, server_stderr=server_stderr) as servers:
        status = servers.status
        tools = {s.name: servers.tool_descriptions(s.name) for s in status if s.connected}
    return status, tools


@mcp_app.command("list")
def list_servers(
    config: Annotated[
        Path,
        typer.Option(
            "--mcp-config", metavar="FILE", help="JSON file with an mcpServers object (as swarm run --mcp-config)"
        ),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per server on stdout")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="show the stdio servers' own logs")] = False,
) -> None:
    """Connect to every server in CONFIG and list its tools (as agents see them: server__tool).

    Examples:

    \b
      swarm mcp list --mcp-config mcp.json
      swarm run --mcp-config mcp.json "Summarise the open issues"
    """
    try:
        with open(os.devnull, "w") if not verbose else contextlib.nullcontext(sys.stderr) as server_stderr:
            status, tools = anyio.run(_collect, config, server_stderr)
    except UserError as exc:
        _err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    if as_json:
        for s in status:  # one object per line, as every listing command's --json
            tools_of = [{"name": f"{s.name}__{n}", "description": d} for n, d in tools.get(s.name, [])]
            typer.echo(json.dumps({**s.model_dump(), "tools": tools_of}, ensure_ascii=False))
    else:
        console = Console()
        for s in status:
            if not s.connected:
                console.print(
                    f"[red]✗[/red] [bold]{escape(s.name)}[/bold] ({s.transport}): {escape(s.error or 'not connected')}"
                )
                continue
            info = f" — {escape(s.server_info)}" if s.server_info else ""
            console.print(f"[green]✓[/green] [bold]{escape(s.name)}[/bold] ({s.transport}){info}: {len(s.tools)} tools")
            table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
            table.add_column("tool")
            table.add_column("description")
            for name, desc in tools.get(s.name, []):
                table.add_row(escape(f"{s.name}__{name}"), escape(desc.strip().splitlines()[0] if desc.strip() else ""))
            console.print(table)
        if not status:
            console.print("no servers configured (or all disabled)")
    if any(not s.connected for s in status):
        raise typer.Exit(1)
