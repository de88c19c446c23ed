"""What starting ``swarm`` costs (issue 30): a command imports its own module and what it uses, not every
other command's. ``swarm run`` is what a user waits for; its import time is part of every run's wall time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.core import TyperCommand, TyperGroup

from agent_swarm.orchestrator.cli.app import COMMANDS, app

NOT_ON_THE_RUN_PATH = [
    # other commands and what only they use
    "agent_swarm.orchestrator.cli.eval",
    "agent_swarm.orchestrator.cli.rollout",
    "agent_swarm.orchestrator.cli.traces",
    "agent_swarm.orchestrator.cli.train",
    "agent_swarm.orchestrator.eval",
    "agent_swarm.orchestrator.rollout.collection",
    "agent_swarm.workloads",
    # what a run uses only when asked for: a reward's verifiers, MCP servers, agent files (YAML), a trace
    # file's exporter (it loads the metrics SDK), the sub-agent cache, the summary's Markdown
    "agent_swarm.swarm.verifiers",
    "agent_swarm.tools.mcp",
    "yaml",
    "opentelemetry.exporter.otlp.json.file",
    "opentelemetry.sdk.metrics",
    "agent_swarm.swarm.backends.replay_cache",
    "markdown_it",
    # the trainer's and the cluster's
    "torch",
    "transformers",
    "ray",
    "numpy",
]


def _modules_after(args: list[str], cwd: Path) -> set[str]:
    code = (
        "import json, sys\nfrom agent_swarm.orchestrator.cli import main\n"
        f"sys.argv = ['swarm', *{args!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write('\\nMODULES ' + json.dumps(sorted(sys.modules)) + '\\n')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=cwd, check=False)
    line = next((x for x in r.stderr.splitlines() if x.startswith("MODULES ")), None)
    assert line is not None, r.stderr[-2000:]
    return set(json.loads(line.removeprefix("MODULES ")))


def test_a_run_imports_neither_the_other_commands_nor_what_it_was_not_asked_for(tmp_path: Path) -> None:
    args = ["run", "--demo", "capitals", "-q", "-p", "-o", str(tmp_path / "out"), "--no-trace-file"]
    loaded = _modules_after(args, tmp_path)
    assert "agent_swarm.orchestrator.engine" in loaded  # it did run an episode
    assert list((tmp_path / "out").glob("*/episode.json"))
    assert sorted(m for m in NOT_ON_THE_RUN_PATH if m in loaded) == []


def test_run_help_imports_no_other_command(tmp_path: Path) -> None:
    loaded = _modules_after(["run", "--help"], tmp_path)
    assert "agent_swarm.orchestrator.cli.run" in loaded
    others = {m.split(":")[0] for name, m in COMMANDS.items() if name != "run"} - {"agent_swarm.orchestrator.cli.app"}
    assert sorted(others & loaded) == []


def test_every_command_is_listed_in_its_order_and_builds_when_looked_up() -> None:
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    ctx = typer.Context(group)
    assert group.list_commands(ctx) == list(COMMANDS)
    for name in COMMANDS:
        command = group.get_command(ctx, name)
        assert isinstance(command, TyperCommand | TyperGroup) and command.name == name
        assert command.help  # its docstring, as before
    assert group.get_command(ctx, "no-such-command") is None
    assert "run" in group.commands and "no-such-command" not in group.commands
    subgroups = {n for n in COMMANDS if isinstance(group.get_command(ctx, n), TyperGroup)}
    assert subgroups == {"traces", "agents", "mcp", "train"}


def test_the_orchestrator_package_names_resolve_on_first_use(tmp_path: Path) -> None:
    code = (
        "import sys\nimport agent_swarm.orchestrator as o\n"
        "print('engine' , 'agent_swarm.orchestrator.engine' in sys.modules)\n"
        "print('rollout', 'agent_swarm.orchestrator.rollout.collection' in sys.modules)\n"
        "from agent_swarm.orchestrator import Orchestrator, collect_rollouts\n"
        "from agent_swarm.orchestrator.engine import Orchestrator as O\n"
        "print('same', Orchestrator is O and o.Orchestrator is O)\n"
        "print('all', all(hasattr(o, n) for n in o.__all__), sorted(set(o.__all__) - set(dir(o))))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False
    )
    assert r.stdout.split("\n")[:4] == ["engine False", "rollout False", "same True", "all True []"], r.stderr
    import agent_swarm.orchestrator as o

    with pytest.raises(AttributeError, match="no_such_name"):
        o.no_such_name  # noqa: B018
