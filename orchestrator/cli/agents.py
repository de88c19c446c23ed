"""``swarm agents list``: the sub-agent types that agent files define (``--agents DIR``, default
``./.swarm/agents/``), as ``swarm run`` would offer them to the orchestrator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from agent_swarm.orchestrator.agent_files import DEFAULT_AGENTS_DIR
from agent_swarm.orchestrator.cli.discovery import agent_dirs
from agent_swarm.orchestrator.cli.tools import agent_files
from agent_swarm.swarm.errors import UserError

__all__ = ["agents_app"]

agents_app = typer.Typer(
    name="agents",
    help="Sub-agent types from agent files (front matter name/description/tools/model; body: system prompt)."
    "\n\nExamples:\n\n\b\n  swarm agents list\n  swarm agents list --agents ./my-agents",
    no_args_is_help=True,
)
_err = Console(stderr=True)


@agents_app.command("list")
def list_agents(
    agents_dirs: Annotated[
        list[Path] | None,
        typer.Option(
            "--agents",
            metavar="DIR",
            help="agent file directory, repeatable (default: .swarm/agents/ from here up to the repository root, "
            "then the user config directory's agents/)",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="one JSON object per agent on stdout")] = False,
) -> None:
    """List the agent types `swarm run` offers the orchestrator: name, description, tools, model, file.

    Examples:

    \b
      swarm agents list
      swarm agents list --agents ~/my-agents --json
    """
    try:
        found = agent_files(agents_dirs)
    except UserError as exc:
        _err.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None
    if json_out:
        for a in found:
            d = a.definition
            row = {"name": d.name, "description": d.description, "tools": list(d.tools), "model": d.model}
            typer.echo(json.dumps({**row, "system_prompt": d.system_prompt, "path": str(a.path)}, ensure_ascii=False))
        return
    if not found:
        where = (
            ", ".join(map(str, agents_dirs))
            if agents_dirs
            else "the discovered directories ("
            + (", ".join(map(str, agent_dirs())) or f"none: no ./{DEFAULT_AGENTS_DIR}/")
            + ")"
        )
        _err.print(f"no agent files in {escape(where)} (write NAME.md: front matter, then the system prompt)")
        return
    table = Table(show_header=True, header_style="bold", box=None)
    for col in ("name", "description", "tools", "model", "file"):
        table.add_column(col, overflow="fold")
    for a in found:
        d = a.definition
        table.add_row(
            Text(d.name),
            Text(d.description),
            Text(", ".join(d.tools) or "-"),
            Text(d.model or "default"),
            Text(str(a.path)),
        )
    Console().print(table)
