"""One task loader rule: a key a task does not have goes into its metadata, whichever command reads the
task file (``swarm run --tasks``, ``swarm rollout --tasks``, ``swarm train``'s tasks_file)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.tasks import load_task_file, load_tasks
from agent_swarm.swarm.errors import TaskFileError

runner = CliRunner()
LINE = {"id": "a", "prompt": "hi", "difficulty": "easy", "metadata": {"source": "me", "difficulty": "hard"}}


def test_both_file_readers_apply_the_same_rule(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps(LINE) + "\n" + json.dumps({"task": "alias", "level": 2}) + "\n")
    run_tasks = load_tasks(f)
    rollout_tasks, problems = load_task_file(f, on_malformed="fail")
    assert not problems
    # an explicit metadata entry wins over a top-level key of the same name
    assert run_tasks[0] == rollout_tasks[0]
    assert run_tasks[0].metadata == {"difficulty": "hard", "source": "me"}
    assert run_tasks[1].metadata == rollout_tasks[1].metadata == {"level": 2}
    assert run_tasks[1].prompt == rollout_tasks[1].prompt == "alias"


def test_a_task_with_no_prompt_fails_alike(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"id": "a", "difficulty": "easy"}) + "\n")
    with pytest.raises(TaskFileError, match="prompt"):
        load_tasks(f)
    with pytest.raises(TaskFileError, match="prompt"):
        load_task_file(f, on_malformed="fail")


def test_run_and_rollout_load_the_same_task_file(tmp_path: Path, openai_script: Callable[..., Any]) -> None:
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"id": "a", "prompt": "hi", "difficulty": "easy"}) + "\n")
    with openai_script(lambda body: ("hello", [])) as srv:
        env = {"SWARM_BACKEND": "openai", "SWARM_BASE_URL": f"{srv.url}/v1", "SWARM_MODEL": "served-model"}
        r = runner.invoke(app, ["run", "--tasks", str(f), "--json", "-q", "-o", str(tmp_path / "run")], env=env)
        assert r.exit_code == 0, r.output
        run_task = json.loads(r.stdout)["task"]
        ro = tmp_path / "rollout"
        r = runner.invoke(app, ["rollout", "-t", str(f), "-k", "1", "--json", "-q", "-o", str(ro)], env=env)
        assert r.exit_code == 0, r.output
    rollout_task = json.loads((ro / "episodes.jsonl").read_text().splitlines()[0])["record"]["task"]
    assert run_task == rollout_task
    assert run_task["metadata"] == {"difficulty": "easy"}
