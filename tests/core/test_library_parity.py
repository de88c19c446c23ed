"""What a library user gets matches what the CLI does: the same backends, records `swarm traces`
opens, and a clear word when `run_sync` is called inside a running event loop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent_swarm import orchestrator
from agent_swarm.orchestrator import Orchestrator, RecordWriter, SwarmConfig, build_backends
from agent_swarm.orchestrator.cli import app
from agent_swarm.swarm.errors import ConfigError, UserError
from agent_swarm.swarm.testing import ScriptedBackend

runner = CliRunner()


async def test_run_sync_inside_a_running_loop_says_to_await_run() -> None:
    orch = Orchestrator(ScriptedBackend(["done"]), SwarmConfig())
    with pytest.raises(UserError, match=r"await orch\.run\(task\)"):
        orch.run_sync("hi")


def test_record_writer_writes_where_swarm_traces_finds_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SWARM_RECORDS_DIR", str(tmp_path / "records"))
    writer = RecordWriter()
    record = Orchestrator(ScriptedBackend(["4"]), SwarmConfig(), observers=[writer]).run_sync("2+2?")
    assert writer.paths[record.episode_id] == tmp_path / "records" / record.episode_id / "episode.json"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # traces list finds the default records directory from anywhere
    listed = runner.invoke(app, ["traces", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    assert [json.loads(line)["episode_id"] for line in listed.stdout.splitlines()] == [record.episode_id]
    shown = runner.invoke(app, ["traces", "show", record.episode_id[:6], "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["episode_id"] == record.episode_id


def test_the_library_builds_backends_as_the_cli_does(tmp_path: Path) -> None:
    assert orchestrator.build_backends is build_backends
    missing = str(tmp_path / "no.gguf")
    with pytest.raises(ConfigError, match="model file not found") as lib:
        build_backends("local", missing)
    cli = runner.invoke(app, ["run", "-m", missing, "hi", "-o", str(tmp_path)])
    assert cli.exit_code == 2 and str(lib.value) in " ".join(cli.stderr.split())


async def test_the_live_view_attaches_to_a_library_run_as_the_readme_shows(tmp_path: Path) -> None:
    from rich.console import Console
    from rich.live import Live

    from agent_swarm.orchestrator.cli.live import LiveState

    config = SwarmConfig(max_critical_steps=8)
    backend = ScriptedBackend(["4"])
    state = LiveState(budget=config.max_critical_steps, model=backend.model)
    orch = Orchestrator(backend, config, observers=[state, RecordWriter(tmp_path)])
    console = Console(record=True, width=100, force_terminal=False)
    with Live(state, console=console, refresh_per_second=8):
        record = await orch.run("2+2?")
    assert record.answer == "4" and (tmp_path / record.episode_id / "episode.json").is_file()
    assert "orchestrator:" in console.export_text()


def test_a_record_that_cannot_be_written_is_kept_and_said_not_raised(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    writer = RecordWriter(blocker / "records")  # cannot be made: a regular file is in the way
    record = Orchestrator(ScriptedBackend(["4"]), SwarmConfig(), observers=[writer]).run_sync("2+2?")
    assert record.answer == "4"
    assert writer.records == [record] and writer.paths == {}
    assert list(writer.failures) == [record.episode_id] and "a-file" in writer.failures[record.episode_id]


_NONE: Any = None
_DICT: Any = {"max_critical_steps": 3}
_TEXT: Any = "m"
_INT: Any = 123


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: Orchestrator(_NONE, SwarmConfig()), "^backend must be a model backend .* got NoneType;"),
        (lambda: Orchestrator(ScriptedBackend(["4"]), _DICT), "config must be a SwarmConfig, got dict"),
        (lambda: Orchestrator(ScriptedBackend(["4"]), subagent_backend=_TEXT), "subagent_backend must be a model"),
        (lambda: Orchestrator(ScriptedBackend(["4"])).run_sync(""), "task is empty"),
        (lambda: Orchestrator(ScriptedBackend(["4"])).run_sync("  \n"), "task is empty"),
        (lambda: Orchestrator(ScriptedBackend(["4"])).run_sync(_INT), "task must be a str or a Task, got int"),
    ],
)
def test_library_misuse_is_one_user_error_naming_the_argument(make: Any, says: str) -> None:
    with pytest.raises(UserError, match=says) as caught:
        make()
    assert "\n" not in str(caught.value)
