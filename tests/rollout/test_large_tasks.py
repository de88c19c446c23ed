"""A very large task makes every orchestrator turn's record carry its whole prompt's token ids (exact
ids for RL): the runtime says so, once per task, instead of silently writing tens of MB per episode
."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator import Orchestrator
from agent_swarm.orchestrator.cli import app
from agent_swarm.swarm.errors import LargeInputWarning
from agent_swarm.swarm.records import Task
from agent_swarm.swarm.testing import ScriptedBackend

BIG = "capitals " + "word " * 120_000  # 600 KB of task text


async def test_the_library_warns_about_a_task_whose_prompt_is_copied_into_every_turn() -> None:
    with pytest.warns(LargeInputWarning, match=r"task 'big' is 0\.6 MB of text.*every orchestrator turn"):
        record = await Orchestrator(ScriptedBackend(["done"])).run(Task(id="big", prompt=BIG))
    assert record.answer == "done"


async def test_small_tasks_do_not_warn() -> None:
    await Orchestrator(ScriptedBackend(["done"])).run(Task(id="small", prompt="hello"))  # warnings are errors


def test_swarm_rollout_says_so_on_stderr_in_one_line(tmp_path: Path) -> None:
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"id": "big", "prompt": BIG, "metadata": {"demo": "capitals"}}) + "\n")
    r = CliRunner().invoke(
        app, ["rollout", "-b", "scripted", "-t", str(tasks), "-o", str(tmp_path / "o"), "-k", "2", "-q"]
    )
    assert r.exit_code == 0, r.output
    lines = [line for line in r.stderr.splitlines() if "0.6 MB" in line]
    assert len(lines) == 1 and lines[0].startswith("warning: task 'big'")
