"""The paths around `swarm run`'s main one, as a user drives them: endings without an answer, bad
models, an unreachable server, standard input."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app

runner = CliRunner()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.parametrize("output", ["-p", "--json-summary"])
def test_a_timed_out_episode_prints_no_answer(tmp_path: Path, output: str) -> None:
    # The demo's opening line ("I will look up every country in parallel.") is in the record; it is no answer.
    args = ["run", "--demo", "capitals", "--episode-timeout", "0.3", "-q", "-o", str(tmp_path), output]
    result = runner.invoke(app, args, env={"SWARM_DEMO_LATENCY": "0.2"})
    assert result.exit_code == 1, result.output
    if output == "-p":
        assert result.stdout == ""
    else:
        summary = json.loads(result.stdout)
        assert summary["status"] == "timeout" and summary["answer"] is None


def test_a_timed_out_episode_shows_no_answer_in_the_summary(tmp_path: Path) -> None:
    args = ["run", "--demo", "capitals", "--episode-timeout", "0.3", "-q", "-o", str(tmp_path)]
    result = runner.invoke(app, args, env={"SWARM_DEMO_LATENCY": "0.2", "COLUMNS": "200"})
    assert result.exit_code == 1
    assert "in parallel" not in result.stdout
    assert "(none: the episode timeout)" in result.stdout


@pytest.mark.parametrize(
    ("model", "says"),
    [
        ("/nonexistent/model.gguf", "model file not found: /nonexistent/model.gguf"),
        ("nosuchmodel", "unknown local model 'nosuchmodel'"),
        ("qwen2.5-coder-05b", "did you mean 'qwen2.5-coder-0.5b'?"),
    ],
)
def test_a_bad_model_is_exit_2_one_line_and_no_record(tmp_path: Path, model: str, says: str) -> None:
    out = tmp_path / "records"
    result = runner.invoke(app, ["run", "-m", model, "hi", "-o", str(out)])
    assert result.exit_code == 2
    assert says in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stdout == ""  # no stage tree, no summary
    assert not out.exists()


def test_an_unreachable_server_is_probed_once_before_the_first_task(tmp_path: Path) -> None:
    tasks = tmp_path / "t.jsonl"
    tasks.write_text('{"prompt": "a"}\n{"prompt": "b"}\n')
    url = f"http://127.0.0.1:{_free_port()}/v1"
    out = tmp_path / "records"
    t0 = time.monotonic()
    result = runner.invoke(app, ["run", "-b", "openai", "--base-url", url, "-m", "x", "-t", str(tasks), "-o", str(out)])
    assert time.monotonic() - t0 < 5  # not the backend's retries per task
    assert result.exit_code == 1
    assert result.stderr.count("could not be reached") == 1
    assert "check --base-url" in result.stderr
    assert not out.exists()


def test_dash_reads_the_task_from_stdin(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "-b", "scripted", "-", "-q", "-o", str(tmp_path), "-p"], input="capitals\n")
    assert result.exit_code == 0, result.output
    assert "Paris" in result.stdout


def test_dash_with_empty_stdin_is_bad_input(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "-m", "x.gguf", "-", "-o", str(tmp_path)], input="")
    assert result.exit_code == 2
    assert "standard input is empty" in result.stderr


def test_tasks_dash_reads_a_task_file_from_stdin(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"
    base = ["run", "-b", "openai", "--base-url", url, "-m", "x", "--tasks", "-", "-o", str(tmp_path)]
    bad = runner.invoke(app, base, input='{"prompt": "a"}\n{"prompt": \n')
    assert bad.exit_code == 2
    assert "<stdin>:2:" in bad.stderr
    good = runner.invoke(app, base, input='{"prompt": "a"}\n{"prompt": "b"}\n')
    assert good.exit_code == 1  # read both tasks, then found no server: not "the file does not exist"
    assert "could not be reached" in good.stderr


def test_events_dash_writes_events_to_stdout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["run", "--demo", "capitals", "--events", "-", "-q", "-o", "records", "-p"])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    events = [json.loads(line) for line in lines if line.startswith("{")]
    assert events[0]["type"] == "episode_started" and events[-1]["type"] == "episode_finished"
    assert "Paris" in lines[-1] or any("Paris" in line for line in lines if not line.startswith("{"))
    assert not (tmp_path / "-").exists()
