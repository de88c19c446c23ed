"""One task loader, one rule for unknown keys, whichever command reads a task file (issue 27 item 4).

``swarm run --tasks`` and ``swarm rollout --tasks`` read a task file through :mod:`agent_swarm.orchestrator.tasks`
(``task_from``: a key a task does not have goes into its ``metadata``); ``swarm eval`` reads none, but
the task files it writes (``--export-tasks``) are read back by ``run -w`` and ``rollout -w`` by the same
rule. Each test reads the task back from what the command recorded.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app

runner = CliRunner()
LINE = {"id": "a", "prompt": "hi", "difficulty": "easy"}


def _recorded_task(command: str, argv: list[str], out: Path) -> dict[str, Any]:
    """The task of the first episode ``swarm COMMAND ARGV`` recorded (``--json`` and ``-o OUT`` added)."""
    r = runner.invoke(app, [command, *argv, "--json", "-q", "-o", str(out)])
    assert r.exit_code == 0, r.output
    if command == "run":
        task: dict[str, Any] = json.loads(r.stdout.splitlines()[0])["task"]
        return task
    return json.loads((out / "episodes.jsonl").read_text().splitlines()[0])["record"]["task"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("command", ["run", "rollout"])
def test_a_task_files_unknown_key_goes_into_metadata_in_every_command(
    command: str, tmp_path: Path, openai_script: Callable[..., Any]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(LINE) + "\n")
    with openai_script(lambda body: ("ANSWER: hello", [])) as srv:
        backend = ["-b", "openai", "--base-url", f"{srv.url}/v1", "-m", "served-model"]
        group = ["-k", "1"] if command == "rollout" else []
        task = _recorded_task(command, ["--tasks", str(tasks), *backend, *group], tmp_path / command)
    assert (task["id"], task["prompt"], task["metadata"]) == ("a", "hi", {"difficulty": "easy"})


@pytest.mark.parametrize("command", ["run", "rollout"])
def test_eval_exported_tasks_with_an_unknown_key_load_by_the_same_rule(command: str, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    r = runner.invoke(app, ["eval", "-w", "deep-lookup", "--split", "train", "-n", "1", "--export-tasks", str(tasks)])
    assert r.exit_code == 0, r.output
    rows = [{**json.loads(line), "difficulty": "easy"} for line in tasks.read_text().splitlines()]
    tasks.write_text("".join(json.dumps(row) + "\n" for row in rows))
    group = ["-k", "1"] if command == "rollout" else []
    argv = ["-w", "deep-lookup", "--tasks", str(tasks), "-b", "gold", *group]
    task = _recorded_task(command, argv, tmp_path / command)
    assert task["id"] == rows[0]["id"]
    assert task["metadata"] == {**rows[0]["metadata"], "difficulty": "easy"}
