"""The ``swarm`` command line (typer): the app, its command groups and the console-script entry point.

One module per command group (:mod:`.run`, :mod:`.eval`, :mod:`.rollout`, :mod:`.traces`,
:mod:`.agents`, :mod:`.mcp`, :mod:`.models`, :mod:`.train`); imports point one way, from this module
to the commands and from the commands to their helpers. The CLI is the only place that installs
OpenTelemetry's SDK (:mod:`.telemetry_setup`) and sets process-wide GC settings (:func:`tune_gc`).

Machine output goes to stdout (``--json``, ``--json-summary``, ``-p``); progress, the live view and
errors go to stderr. Exit codes: 0 answered (or forced to answer by the budget), 1 the episode failed
or timed out, 2 bad input (missing task file, invalid config, unknown backend), 130 interrupted.
"""

from __future__ import annotations

import json
import signal
import sys
from typing import Annotated

import typer

from agent_swarm.orchestrator.cli.agents import agents_app
from agent_swarm.orchestrator.cli.doctor import doctor
from agent_swarm.orchestrator.cli.eval import eval_command
from agent_swarm.orchestrator.cli.init import init
from agent_swarm.orchestrator.cli.mcp import mcp_app
from agent_swarm.orchestrator.cli.models import models
from agent_swarm.orchestrator.cli.rollout import rollout
from agent_swarm.orchestrator.cli.run import run
from agent_swarm.orchestrator.cli.serve import serve
from agent_swarm.orchestrator.cli.telemetry_setup import claim_global_provider
from agent_swarm.orchestrator.cli.traces import traces_app
from agent_swarm.orchestrator.cli.train import train_app
from agent_swarm.orchestrator.process import GC_THRESHOLD, tune_gc
from agent_swarm.swarm import __version__

__all__ = ["GC_THRESHOLD", "app", "main", "optional_value", "tune_gc"]

app = typer.Typer(
    name="swarm",
    help="Run parallel agent swarms, inspect their traces, collect rollouts and train the orchestrator.\n\n"
    'Start with `swarm run --demo capitals` (no model needed), then `swarm run "your task"`; '
    "`swarm COMMAND --help` shows each command's options and examples.",
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)
app.add_typer(traces_app, name="traces")
app.add_typer(agents_app, name="agents")
app.add_typer(mcp_app, name="mcp")
app.add_typer(train_app, name="train")
app.command("run")(run)
app.command("rollout")(rollout)
app.command("eval")(eval_command)
app.command("models")(models)
app.command("doctor")(doctor)
app.command("init")(init)
app.command("serve")(serve)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"agent-swarm {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", "-V", callback=_print_version, is_eager=True, help="print the version and exit"),
    ] = False,
) -> None:
    """The options every command shares (``--version``)."""


@app.command()
def version() -> None:
    """Print the version (also: swarm --version).

    Examples:

    \b
      swarm version
    """
    typer.echo(f"agent-swarm {__version__}")


@app.command("demo-list")
def demo_list(
    json_out: Annotated[bool, typer.Option("--json", help="one JSON object per demo on stdout")] = False,
) -> None:
    """List the built-in scripted demo tasks.

    Examples:

    \b
      swarm demo-list
      swarm run --demo capitals
    """
    from agent_swarm.orchestrator.demo import DEMO_TASKS

    if json_out:  # one object per line, as every listing command's --json
        for name, t in DEMO_TASKS.items():
            typer.echo(json.dumps({"name": name, "prompt": t.prompt}, ensure_ascii=False))
        return
    for name, t in DEMO_TASKS.items():
        typer.echo(f"{name}\t{t.prompt}")


def optional_value(argv: list[str], command: str, option: str, value: str) -> list[str]:
    """``swarm COMMAND ... OPTION`` with no value after it means ``OPTION value`` (click cannot say
    "this option's value is optional"): ``swarm rollout --ray`` is ``--ray local``."""
    if len(argv) < 2 or argv[1] != command:
        return argv
    out = list(argv)
    for i, arg in enumerate(argv):
        if arg == option and (i + 1 == len(argv) or argv[i + 1].startswith("-")):
            out.insert(i + 1 + (len(out) - len(argv)), value)
    return out


def main() -> None:
    """Console-script entry point."""
    sys.argv = optional_value(sys.argv, "rollout", "--ray", "local")
    # Ctrl-C must stop a run even when the CLI was started with SIGINT ignored (a non-interactive
    # shell starts `swarm … &` that way, and Python then keeps SIG_IGN): install the handler that
    # raises KeyboardInterrupt ourselves, which is also what asyncio's runner needs to see to cancel
    # the main task on Ctrl-C.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    tune_gc()
    claim_global_provider()
    app()
