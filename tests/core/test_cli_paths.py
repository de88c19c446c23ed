"""The paths around `swarm run`'s main one, as a user drives them: endings without an answer, bad
models, an unreachable server, standard input."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app

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


def test_a_known_model_that_is_not_installed_names_its_pip_command_before_any_record(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from agent_swarm.swarm.backends.local import LOCAL_MODELS

    model = LOCAL_MODELS["qwen2.5-coder-0.5b"]
    shadow = tmp_path / "shadow"  # empty packages named like its data wheels hide any installed ones
    for module, _ in model.parts:
        (shadow / module).mkdir(parents=True)
        (shadow / module / "__init__.py").write_text("")
    cache = tmp_path / "cache"
    cache.mkdir()
    out = tmp_path / "records"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(shadow), str(Path.cwd()), os.environ.get("PYTHONPATH", "")]),
        "SWARM_CACHE_DIR": str(cache),
    }
    r = subprocess.run(
        [sys.executable, "-m", "orchestrator", "run", "-m", model.name, "hi", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr == f"error: local model {model.name} is not installed; install it with: {model.install}\n"
    assert r.stdout == ""
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


def _gold(tmp_path: Path, *extra: str) -> list[str]:
    return ["run", "-w", "deep-lookup", "-b", "gold", "-q", "-o", str(tmp_path / "rec"), *extra]


def test_workload_run_print_gives_only_the_answer(tmp_path: Path) -> None:
    result = runner.invoke(app, _gold(tmp_path, "-p"))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1].startswith("ANSWER: ")
    assert "┌" not in result.stdout and "episode" not in result.stdout


def test_workload_run_picks_tasks_by_split_index_and_count(tmp_path: Path) -> None:
    result = runner.invoke(app, _gold(tmp_path, "--json-summary", "--split", "test", "--index", "3", "-n", "2"))
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["task_id"] for r in rows] == ["deep-lookup-test-s0-3", "deep-lookup-test-s0-4"]
    assert all(r["answer"] and r["status"] == "completed" for r in rows)


def test_workload_runs_write_a_fresh_record_each_time(tmp_path: Path) -> None:
    for _ in range(2):
        assert runner.invoke(app, _gold(tmp_path, "-p")).exit_code == 0
    assert len(list((tmp_path / "rec").glob("*/episode.json"))) == 2


def test_workload_run_marks_the_gold_policy_and_invents_no_token_counts(tmp_path: Path) -> None:
    result = runner.invoke(app, _gold(tmp_path), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "SCRIPTED gold policy of deep-lookup (no model)" in result.stdout
    assert "not measured" in result.stdout and " in / " not in result.stdout
    assert "score" in result.stdout and "success True" in result.stdout


def test_workload_run_honours_events_trace_file_and_tools(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    result = runner.invoke(app, _gold(tmp_path, "--events", str(events), "--tools", "files"), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    kinds = [json.loads(line)["type"] for line in events.read_text().splitlines()]
    assert kinds[0] == "episode_started" and kinds[-1] == "episode_finished"
    (episode,) = (tmp_path / "rec").glob("*/episode.json")
    assert (episode.parent / "trace.jsonl").is_file()
    assert "files (workspace" in result.stdout
    off = runner.invoke(app, [*_gold(tmp_path / "off"), "--no-trace-file", "-p"])
    assert off.exit_code == 0
    assert not list((tmp_path / "off").rglob("trace.jsonl"))


@pytest.mark.parametrize("extra", [["-n", "2"], ["--index", "1"]])
def test_task_picking_flags_need_a_workload(tmp_path: Path, extra: list[str]) -> None:
    result = runner.invoke(app, ["run", "--demo", "capitals", "-o", str(tmp_path), *extra])
    assert result.exit_code == 2 and "--workload" in result.stderr


def test_an_index_past_the_last_task_is_bad_input(tmp_path: Path) -> None:
    tasks = tmp_path / "t.jsonl"
    export = runner.invoke(app, ["eval", "-w", "deep-lookup", "-n", "1", "--export-tasks", str(tasks)])
    assert export.exit_code == 0
    result = runner.invoke(app, _gold(tmp_path, "-t", str(tasks), "--index", "5"))
    assert result.exit_code == 2 and "past the last task" in result.stderr


def test_swarm_models_reads_at_80_columns_with_full_names_adapters_and_gguf_paths() -> None:
    from agent_swarm.swarm.backends.local import LOCAL_MODELS

    result = runner.invoke(app, ["models"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(len(line.rstrip()) <= 80 for line in lines), [line for line in lines if len(line.rstrip()) > 80]
    for name in LOCAL_MODELS:  # each name whole at the start of its own line, never "qwen2.5-code…"
        assert any(line.startswith(f"{name}  ") for line in lines), name
    assert "…" not in result.stdout
    assert "-m path/to/model.gguf" in result.stdout
    assert "orchestrator adapter" in result.stdout and "--orchestrator-adapter shipped" in result.stdout


def test_workload_run_with_a_model_server_scores_the_answer(tmp_path: Path, openai_script: Callable[..., Any]) -> None:
    with openai_script(lambda body: ("ANSWER: nobody", [])) as srv:
        args = ["run", "-w", "deep-lookup", "-b", "openai", "--base-url", srv.url, "-m", "m"]
        result = runner.invoke(app, [*args, "-q", "-o", str(tmp_path), "--json-summary", "--temperature", "0.3"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["task_id"] == "deep-lookup-train-s0-0" and summary["answer"] == "ANSWER: nobody"
    record = json.loads(Path(summary["record"]).read_text())
    assert record["reward"]["verifier"] == "workload:deep-lookup" and record["reward"]["r_perf"] == 0.0
    assert record["config"]["orchestrator_sampling"]["temperature"] == 0.3
    assert "scripted" not in record["metadata"]  # a model ran: no gold label
    assert srv.requests and "Aarav" in json.dumps(srv.requests[0])  # the workload's own task reached the model


def test_a_list_knob_takes_comma_separated_values(tmp_path: Path) -> None:
    args = ["run", "-w", "bfcl-parallel", "-b", "gold", "-q", "-o", str(tmp_path), "--json-summary", "-n", "3"]
    result = runner.invoke(app, [*args, "--knob", "categories=parallel_multiple"])
    assert result.exit_code == 0, result.output
    assert all(json.loads(line)["task_id"].startswith("parallel_multiple_") for line in result.stdout.splitlines())
    bad = runner.invoke(app, [*args, "--knob", "categories=nope"])
    assert bad.exit_code == 2 and "categories" in bad.stderr
    rollout = ["rollout", "-w", "bfcl-parallel", "-b", "gold", "-n", "1", "-k", "1", "-q", "-o", str(tmp_path / "r")]
    r = runner.invoke(app, [*rollout, "--knob", "categories=simple_python,multiple"])
    assert r.exit_code == 0, r.output


def test_an_index_far_past_what_can_be_generated_is_refused_at_once(tmp_path: Path) -> None:
    t0 = time.monotonic()
    result = runner.invoke(app, _gold(tmp_path, "--index", "99999999", "-p"))
    assert result.exit_code == 2 and "at most 100000" in result.stderr
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("task", ["", "   \n"])
def test_an_empty_task_is_bad_input_in_one_line(tmp_path: Path, task: str) -> None:
    result = runner.invoke(app, ["run", "-m", "x.gguf", task, "-o", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # no traceback
    assert result.stderr.strip() == 'error: the TASK argument is empty; give the task in words: swarm run "your task"'


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--demo", "capitals", "-q"],
        ["eval", "-w", "starter", "-b", "gold", "-n", "1", "-q"],
        ["rollout", "-w", "starter", "-b", "gold", "-n", "1", "-k", "2", "-q"],
    ],
)
def test_an_output_folder_that_cannot_be_written_is_bad_input_before_any_episode(
    tmp_path: Path, command: list[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a folder under a regular file cannot be made, whoever runs the test
    out = blocker / "records"
    result = runner.invoke(app, [*command, "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    said = " ".join(result.stderr.split())
    assert f"error: cannot write results to {out}" in said and "choose a writable folder with --out" in said


def test_swarm_eval_probes_an_unreachable_server_once_and_runs_no_episode(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"
    out = tmp_path / "results"
    t0 = time.monotonic()
    args = ["eval", "-w", "starter", "-b", "openai", "--base-url", url, "-m", "x", "-n", "3", "-o", str(out), "-q"]
    result = runner.invoke(app, args)
    assert time.monotonic() - t0 < 5  # not the backend's retries for each of 6 episodes
    assert result.exit_code == 1, result.output
    assert result.stderr.count("could not be reached") == 1 and "check --base-url" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("run_id", ["../elsewhere", "a/b", "..", "."])
def test_a_run_id_is_one_folder_name(tmp_path: Path, run_id: str) -> None:
    out = tmp_path / "results"
    args = ["eval", "-w", "starter", "-b", "gold", "-n", "1", "-q", "-o", str(out), "--run-id", run_id]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "a run id names one folder under the results directory" in " ".join(result.stderr.split())
    assert not (tmp_path / "elsewhere").exists() and not (out / "a").exists()
