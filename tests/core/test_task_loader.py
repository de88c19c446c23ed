"""One task loader, one rule (issue 27): the same task file loads to the same tasks (ids, prompts,
metadata) and fails with the same error whichever command reads it: ``swarm run --tasks``, ``swarm
rollout --tasks`` and ``swarm train``'s ``tasks_file`` (``swarm eval`` reads no task file; the files
its ``--export-tasks`` writes are read back by run and rollout, ``tests/core/test_cli_task_files.py``).
Each command is driven through its public CLI or function and the tasks read back from what it
recorded."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.rl.config import TrainConfig
from agent_swarm.orchestrator.rl.environment import training_environment
from agent_swarm.orchestrator.tasks import load_task_file
from agent_swarm.swarm.errors import TaskFileError

runner = CliRunner()
LINE = {"id": "a", "prompt": "hi", "difficulty": "easy", "metadata": {"source": "me", "difficulty": "hard"}}
# Line 2 is blank: an id-less task's id is its line (t-1, t-4), not its place among the tasks (t-0, t-2).
MIXED = [
    {"prompt": "one", "difficulty": "easy"},
    None,
    {"id": "x", "task": "two", "metadata": {"k": 1}},
    {"prompt": "3"},
]


def _write(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join("\n" if row is None else json.dumps(row) + "\n" for row in rows))
    return path


def _run_tasks(argv: list[str], out: Path) -> list[dict[str, Any]]:
    """The tasks ``swarm run`` recorded, one per ``--json`` line, by id."""
    r = runner.invoke(app, ["run", *argv, "--json", "-q", "-o", str(out)])
    assert r.exit_code == 0, r.output
    return _by_id(json.loads(line)["task"] for line in r.stdout.splitlines() if line.strip())


def _rollout_tasks(argv: list[str], out: Path) -> list[dict[str, Any]]:
    """The tasks ``swarm rollout -k 1`` recorded, by id."""
    r = runner.invoke(app, ["rollout", *argv, "-k", "1", "--json", "-q", "-o", str(out)])
    assert r.exit_code == 0, r.output
    return _by_id(json.loads(line)["record"]["task"] for line in (out / "episodes.jsonl").read_text().splitlines())


def _train_tasks(tasks_file: Path, run_dir: Path) -> list[dict[str, Any]]:
    """The tasks of the environment a training config with ``tasks_file`` names, in file order."""
    env = training_environment(TrainConfig(run_dir=run_dir, tasks_file=tasks_file), tokenizer=None)
    return [t.model_dump(mode="json") for t in env.tasks]


def _by_id(tasks: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(tasks, key=lambda t: str(t["id"]))


def _train_error(tasks_file: Path, run_dir: Path) -> str:
    with pytest.raises(TaskFileError) as exc:
        training_environment(TrainConfig(run_dir=run_dir, tasks_file=tasks_file), tokenizer=None)
    return str(exc.value)


def test_every_command_loads_a_task_file_to_the_same_tasks(tmp_path: Path, openai_script: Callable[..., Any]) -> None:
    f = _write(tmp_path / "t.jsonl", MIXED)
    train = _train_tasks(f, tmp_path / "train")
    with openai_script(lambda body: ("hello", [])) as srv:
        backend = ["-b", "openai", "--base-url", f"{srv.url}/v1", "-m", "served-model"]
        run = _run_tasks(["--tasks", str(f), *backend], tmp_path / "run")
        rollout = _rollout_tasks(["--tasks", str(f), *backend], tmp_path / "rollout")
    assert [t["id"] for t in train] == ["t-1", "x", "t-4"]
    assert run == rollout == _by_id(train)
    assert train[0]["metadata"] == {"difficulty": "easy"} and train[1]["metadata"] == {"k": 1}
    assert train[1]["prompt"] == "two"  # "task" is an alias of "prompt"


@pytest.mark.parametrize(
    ("rows", "error"),
    [
        ([{"id": "a", "prompt": "p"}, {"id": "a", "prompt": "q"}], "t.jsonl:2: duplicate task id 'a'"),
        ([{"prompt": "p", "verifier": "exact", "verifier_args": {"nope": 1}}], "t.jsonl:1: invalid arguments"),
        ([{"prompt": "p", "verifier": "exact_match"}], "t.jsonl:1: unknown verifier 'exact_match'"),
        ([{"prompt": "p"}, {"id": "b"}], "t.jsonl:2: invalid task"),
    ],
    ids=["duplicate-id", "bad-verifier-args", "unknown-verifier", "no-prompt"],
)
def test_every_command_refuses_a_bad_task_with_the_same_error(rows: list[Any], error: str, tmp_path: Path) -> None:
    f = _write(tmp_path / "t.jsonl", rows)
    expected = _train_error(f, tmp_path / "train")
    assert error in expected
    env = {"SWARM_BACKEND": "openai", "SWARM_BASE_URL": "http://127.0.0.1:9/v1", "SWARM_MODEL": "m"}
    for argv in (["run", "--tasks", str(f)], ["rollout", "--tasks", str(f), "--on-malformed", "fail"]):
        r = runner.invoke(app, [*argv, "-o", str(tmp_path / argv[0])], env=env)
        assert r.exit_code == 2, (argv, r.output)
        assert expected in " ".join(r.stderr.split()), (argv, r.stderr)


def test_unknown_keys_go_into_metadata_and_an_explicit_entry_wins(tmp_path: Path) -> None:
    tasks, problems = load_task_file(_write(tmp_path / "t.jsonl", [LINE]), on_malformed="fail")
    assert not problems
    assert tasks[0].metadata == {"difficulty": "hard", "source": "me"}


def test_a_json_list_numbers_its_tasks_and_names_the_line_of_a_bad_one(tmp_path: Path) -> None:
    f = tmp_path / "t.json"
    f.write_text('[\n  {"prompt": "a"},\n  {"id": "b", "prompt": "b"},\n  {"prompt": "c"}\n]\n')
    tasks, _ = load_task_file(f, on_malformed="fail")
    assert [t.id for t in tasks] == ["t-1", "b", "t-3"]
    f.write_text('[\n  {"prompt": "a"},\n\n  {"id": "b", "prompt": ""}\n]\n')
    with pytest.raises(TaskFileError, match=r"t\.json:4: invalid task"):
        load_task_file(f, on_malformed="fail")
    tasks, problems = load_task_file(f)
    assert [t.id for t in tasks] == ["t-1"] and [(p.line, p.path) for p in problems] == [(4, str(f))]
    f.write_text('{"prompt": "one"}')
    assert [t.id for t in load_task_file(f)[0]] == ["t-1"]


def test_a_text_file_is_one_prompt_named_by_its_stem(tmp_path: Path) -> None:
    f = tmp_path / "question.md"
    f.write_text("\n  What is 2 + 2?\n\n")
    tasks, problems = load_task_file(f)
    assert [(t.id, t.prompt) for t in tasks] == [("question", "What is 2 + 2?")] and not problems


def test_skipped_lines_keep_the_ids_of_the_others(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_bytes(b'{"prompt": "a"}\n{"prompt": \n\xff\n{"prompt": "d"}\n')
    tasks, problems = load_task_file(f)
    assert [t.id for t in tasks] == ["t-1", "t-4"]
    assert [(p.line, p.error.split(" (")[0]) for p in problems] == [(2, "invalid JSON"), (3, "line is not UTF-8 text")]


def test_a_workload_run_and_rollout_refuse_another_workloads_task_alike(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    r = runner.invoke(app, ["eval", "-w", "deep-lookup", "--split", "train", "-n", "2", "--export-tasks", str(f)])
    assert r.exit_code == 0, r.output
    f.write_text(f.read_text() + json.dumps({"id": "stray", "prompt": "hi"}) + "\n")
    expected = f"{f}:3: task 'stray' is not a deep-lookup task (metadata.workload=None)"
    gold = ["-w", "deep-lookup", "-b", "gold", "--tasks", str(f)]
    for argv in (["run", *gold], ["rollout", *gold, "-k", "1", "--on-malformed", "fail"]):
        r = runner.invoke(app, [*argv, "-q", "-o", str(tmp_path / argv[0])])
        assert r.exit_code == 2, (argv, r.output)
        assert expected in " ".join(r.stderr.split()), (argv, r.stderr)
    skipped = runner.invoke(app, ["rollout", *gold, "-k", "1", "-q", "--json", "-o", str(tmp_path / "skip")])
    assert skipped.exit_code == 0, skipped.output
    assert "t.jsonl:3: task 'stray' is not a deep-lookup task" in " ".join(skipped.stderr.split())


def test_a_file_with_no_usable_task_says_why_the_first_was_skipped(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_text('{"prompt": \n{"id": "b"}\n')
    with pytest.raises(TaskFileError, match=r"no usable tasks \(2 malformed; line 1: invalid JSON"):
        load_task_file(f)
