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

import importlib
import json
import signal
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from agent_swarm.orchestrator.cli.telemetry_setup import claim_global_provider
from agent_swarm.orchestrator.process import GC_THRESHOLD, tune_gc
from agent_swarm.swarm import __version__

__all__ = ["COMMANDS", "GC_THRESHOLD", "app", "main", "optional_value", "tune_gc"]

COMMANDS: Mapping[str, str] = {
    "run": "agent_swarm.orchestrator.cli.run:run",
    "rollout": "agent_swarm.orchestrator.cli.rollout:rollout",
    "eval": "agent_swarm.orchestrator.cli.eval:eval_command",
    "models": "agent_swarm.orchestrator.cli.models:models",
    "doctor": "agent_swarm.orchestrator.cli.doctor:doctor",
    "init": "agent_swarm.orchestrator.cli.init:init",
    "serve": "agent_swarm.orchestrator.cli.serve:serve",
    "version": "agent_swarm.orchestrator.cli.app:version",
    "demo-list": "agent_swarm.orchestrator.cli.app:demo_list",
    "traces": "agent_swarm.orchestrator.cli.traces:traces_app",
    "agents": "agent_swarm.orchestrator.cli.agents:agents_app",
    "mcp": "agent_swarm.orchestrator.cli.mcp:mcp_app",
    "train": "agent_swarm.orchestrator.cli.train:train_app",
}
"""Every command in ``--help`` order: name -> ``module:attribute`` (a command function or a ``typer.Typer``
group), imported only when that command is looked up. ``swarm run`` then imports ``run``'s module and
what it uses, not every other command's (``eval``'s workloads, ``train``'s trainer, ``traces``' HTML page)."""


class _Commands(MutableMapping[str, Any]):
    """A group's click commands by name, each built on first access (``swarm --help`` builds them all)."""

    def __init__(self, built: dict[str, Any], load: Callable[[str], Any]) -> None:
        self._built = built
        self._load = load

    def _names(self) -> list[str]:
        return [*COMMANDS, *(n for n in self._built if n not in COMMANDS)]

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            if name not in COMMANDS:
                raise KeyError(name)
            self._built[name] = self._load(name)
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        del self._built[name]

    def __contains__(self, name: object) -> bool:
        return name in self._built or name in COMMANDS

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


def _build(name: str) -> Any:
    """The click command of ``COMMANDS[name]``, built as ``app.command``/``app.add_typer`` would build it."""
    module, attribute = COMMANDS[name].split(":")
    target = getattr(importlib.import_module(module), attribute)
    holder = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False, add_completion=False)
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=name)
    else:
        holder.command(name)(target)
    return typer.main.get_group(holder).commands[name]


class _LazyGroup(TyperGroup):
    """The top-level group, whose commands in :data:`COMMANDS` are imported when looked up."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _Commands(dict(self.commands), _build)


app = typer.Typer(
    cls=_LazyGroup,
    name="swarm",
    help="Run parallel agent swarms, inspect their traces, collect rollouts and train the orchestrator.\n\n"
    'Start with `swarm run --demo capitals` (no model needed), then `swarm run "your task"`; '
    "`swarm COMMAND --help` shows each command's options and examples.",
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)


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


def version() -> None:
    """Print the version (also: swarm --version).

    Examples:

    \b
      swarm version
    """
    typer.echo(f"agent-swarm {__version__}")


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
