"""The `swarm` CLI as a user drives it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.store import read_episode

runner = CliRunner()


def test_demo_run_writes_a_record_and_prints_a_summary(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "--demo", "capitals", "--out", str(tmp_path), "-q"])
    assert result.exit_code == 0, result.output
    assert "SCRIPTED" in result.output and "critical steps" in result.output
    files = list(tmp_path.glob("*/episode.json"))
    assert len(files) == 1
    record = read_episode(files[0])
    assert record.status.value == "completed"
    assert sorted(r.status.value for r in record.subagent_results).count("failed") == 1
    assert record.dag.stage_widths[0] == 9


def test_json_output_is_the_record(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "--demo", "budget", "--json", "--out", str(tmp_path)])
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["status"] == "budget_exhausted"
    assert data["dag"]["critical_steps"] <= data["config"]["max_critical_steps"]


def test_budget_flags_override_the_config(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "--demo", "capitals", "--json", "--out", str(tmp_path), "--max-subagents", "4"])
    data = json.loads(result.stdout)
    assert data["dag"]["stage_widths"][0] == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--task-file", "/does/not/exist.jsonl"], "does not exist"),
        (["run", "--demo", "nope"], "demo tasks"),
        (["run"], "exactly one of"),
        (["run", "hello", "--demo", "capitals"], "exactly one of"),
    ],
)
def test_bad_input_is_a_one_line_error_with_exit_code_2(args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_invalid_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "swarm.toml"
    cfg.write_text("[swarm]\nmax_critical_steps = -3\n")
    result = runner.invoke(app, ["run", "--demo", "capitals", "--config", str(cfg)])
    assert result.exit_code == 2 and "max_critical_steps" in result.stderr
    cfg.write_text("this is = not toml [")
    result = runner.invoke(app, ["run", "--demo", "capitals", "--config", str(cfg)])
    assert result.exit_code == 2 and "not valid toml" in result.stderr


def test_malformed_task_file_names_the_line(tmp_path: Path) -> None:
    f = tmp_path / "tasks.jsonl"
    f.write_text('{"prompt": "ok"}\n{"prompt": \n')
    result = runner.invoke(app, ["run", "--task-file", str(f), "--backend", "openai"])
    assert result.exit_code == 2
    assert "tasks.jsonl:2" in result.stderr


def _sigint_ignored() -> None:
    """Start the child the way a non-interactive shell starts a background job: SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("ignored", [False, True], ids=["interactive", "sigint-ignored-at-start"])
def test_ctrl_c_still_writes_the_record(tmp_path: Path, ignored: bool) -> None:
    """Also when started with SIGINT ignored (`cmd &` in a script): the CLI installs its handler
    ."""
    env = {**os.environ, "SWARM_DEMO_LATENCY": "0.5", "PYTHONUNBUFFERED": "1"}
    events = tmp_path / "events.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator",
            "run",
            "--demo",
            "budget",
            "--out",
            str(tmp_path),
            "-q",
            "--events",
            str(events),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_sigint_ignored if ignored else None,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until sub-agents are running
        if events.exists() and '"subagent_started"' in events.read_text():
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("the run never started a sub-agent")
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr
    record = read_episode(next(tmp_path.glob("*/episode.json")))
    assert record.status.value == "cancelled"
    assert record.subagent_results and record.subagent_results[-1].status.value == "cancelled"
    lines = [json.loads(x) for x in events.read_text().splitlines()]
    assert lines[0]["type"] == "episode_started" and lines[-1] == {
        "type": "episode_finished",
        "episode_id": record.episode_id,
        "status": "cancelled",
    }
