"""``swarm run`` tracing flags and ``swarm traces list/show`` as a user drives them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.cli.telemetry_setup import TRACE_FILE
from agent_swarm.orchestrator.store import read_episode, write_episode

runner = CliRunner()


pytestmark = pytest.mark.usefixtures("cli_env")


def value(v: Any) -> Any:
    if v.array_value is not None:
        return tuple(value(x) for x in v.array_value.values)
    return next(x for x in (v.string_value, v.int_value, v.bool_value, v.double_value) if x is not None)


def attrs(span: Any) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in span.attributes}


def run_demo(out: Path, *args: str, name: str = "capitals") -> Any:
    result = runner.invoke(app, ["run", "--demo", name, "--out", str(out), "--json", *args])
    assert result.exit_code in (0, 1), result.output
    return read_episode(out / json.loads(result.stdout.splitlines()[-1])["episode_id"])


def test_run_writes_the_trace_file_beside_the_record(file_spans: Callable[[Path], list[Any]], tmp_path: Path) -> None:
    record = run_demo(tmp_path)
    spans = file_spans(tmp_path / record.episode_id / TRACE_FILE)
    root = next(s for s in spans if not s.parent_span_id)
    assert root.trace_id.hex() == record.trace_id
    assert attrs(root)["gen_ai.conversation.id"] == record.episode_id
    assert len([s for s in spans if s.name == "invoke_agent researcher"]) == 9
    assert not any("gen_ai.input.messages" in attrs(s) for s in spans)  # content is opt-in


def test_trace_content_and_no_trace_file_flags(
    file_spans: Callable[[Path], list[Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = run_demo(tmp_path / "a", "--trace-content")
    spans = file_spans(tmp_path / "a" / record.episode_id / TRACE_FILE)
    chat = next(s for s in spans if s.name == "chat scripted-subagent")
    assert "Find the capital of" in attrs(chat)["gen_ai.input.messages"]
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")  # even if a Jaeger listens on this machine
    record = run_demo(tmp_path / "b", "--no-trace-file")
    assert record.trace_id is None  # nothing to export to: no SDK installed, no spans
    assert not list((tmp_path / "b").rglob(TRACE_FILE))


def test_trace_subagents_samples_wide_stages_and_keeps_every_span_with_its_parent(
    file_spans: Callable[[Path], list[Any]], tmp_path: Path
) -> None:
    record = run_demo(tmp_path, "--trace-subagents", "2")
    spans = file_spans(tmp_path / record.episode_id / TRACE_FILE)
    widths = [len(stage.subagents) for stage in record.stages if stage.subagents]
    agents = [s for s in spans if s.name == "invoke_agent researcher"]
    strides = [-(-w // 2) if w > 2 else 1 for w in widths]  # at most two per stage, spread over it
    assert len(agents) == sum(len(range(0, w, k)) for w, k in zip(widths, strides, strict=True)) < sum(widths)
    ids = {s.span_id for s in spans}
    assert all(s.parent_span_id in ids for s in spans if s.parent_span_id)
    assert all(any(k.parent_span_id == a.span_id for k in spans) for a in agents)  # each traced in full
    assert len(record.subagent_results) == sum(widths)  # the record keeps them all


def test_bad_otlp_endpoint_is_exit_code_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "--demo", "capitals", "--out", str(tmp_path), "--otlp-endpoint", "jaeger"])
    assert result.exit_code == 2 and "must be a URL" in result.stderr
    assert not list(tmp_path.iterdir())


def test_episode_timeout_still_flushes_its_spans(
    file_spans: Callable[[Path], list[Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWARM_DEMO_LATENCY", "0.2")
    result = runner.invoke(
        app, ["run", "--demo", "budget", "--out", str(tmp_path), "--json", "--episode-timeout", "0.5"]
    )
    assert result.exit_code == 1
    record = read_episode(next(tmp_path.glob("*/episode.json")))
    assert record.status.value == "timeout"
    spans = file_spans(tmp_path / record.episode_id / TRACE_FILE)
    root = next(s for s in spans if not s.parent_span_id)
    assert attrs(root)["swarm.episode.status"] == "timeout" and attrs(root)["error.type"] == "TimeoutError"
    assert root.status.code == 2  # STATUS_CODE_ERROR


def _sigint_ignored() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # how a non-interactive shell starts `cmd &`


@pytest.mark.parametrize("ignored", [False, True], ids=["interactive", "sigint-ignored-at-start"])
def test_ctrl_c_flushes_spans_to_the_file_and_the_otlp_receiver(
    file_spans: Callable[[Path], list[Any]], tmp_path: Path, otlp_http: Any, ignored: bool
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {
        "SWARM_DEMO_LATENCY": "0.5",
        "PYTHONUNBUFFERED": "1",
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_http.url,
        "OTEL_BSP_SCHEDULE_DELAY": "50",  # export finished spans quickly, so the test sees progress
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", "--demo", "budget", "--out", str(tmp_path), "-q"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_sigint_ignored if ignored else None,
    )
    deadline = time.monotonic() + 60
    while not any(s.name == "execute_tool lookup_capital" for _, s in otlp_http.received.spans()):
        assert proc.poll() is None and time.monotonic() < deadline, "the run never got to its sub-agent"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # mid-run: the surveyor sub-agent has made a tool call and goes on
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    record = read_episode(next(tmp_path.glob("*/episode.json")))
    assert record.status.value == "cancelled"
    spans = file_spans(tmp_path / record.episode_id / TRACE_FILE)
    root = next(s for s in spans if not s.parent_span_id)
    assert root.trace_id.hex() == record.trace_id and attrs(root)["swarm.episode.status"] == "cancelled"
    agent = next(s for s in spans if s.name == "invoke_agent surveyor")
    assert attrs(agent)["swarm.agent.status"] == "cancelled"
    wire = otlp_http.received.spans()
    assert {s.span_id for _, s in wire} == {s.span_id for s in spans}  # nothing lost on either path


# -- swarm traces -----------------------------------------------------------------------------------


def test_traces_list(tmp_path: Path) -> None:
    a = run_demo(tmp_path)
    b = run_demo(tmp_path, name="budget")
    result = runner.invoke(app, ["traces", "list", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert {r["episode_id"] for r in rows} == {a.episode_id, b.episode_id}
    row = next(r for r in rows if r["episode_id"] == a.episode_id)
    assert (row["status"], row["critical_steps"], row["total_steps"]) == (
        "completed",
        a.dag.critical_steps,
        a.dag.total_steps,
    )
    assert row["trace_id"] == a.trace_id and row["wall_time_s"] == pytest.approx(a.wall_time_s)
    text = runner.invoke(app, ["traces", "list", "--out", str(tmp_path)])
    assert a.episode_id in text.stdout and "budget_exhausted" in text.stdout
    assert f"{a.dag.critical_steps}/{a.dag.total_steps}" in text.stdout


def test_traces_list_skips_unreadable_records(tmp_path: Path) -> None:
    good = run_demo(tmp_path)
    bad = tmp_path / "broken"
    bad.mkdir()
    (bad / "episode.json").write_text('{"episode_id": "broken", "status": ')
    result = runner.invoke(app, ["traces", "list", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0
    assert [json.loads(line)["episode_id"] for line in result.stdout.splitlines()] == [good.episode_id]
    assert "skipped unreadable record" in result.stderr and "broken" in result.stderr
    shown = runner.invoke(app, ["traces", "show", str(bad / "episode.json")])
    assert shown.exit_code == 2 and "not a readable episode record" in shown.stderr


def test_traces_show_json_timeline(tmp_path: Path) -> None:
    record = run_demo(tmp_path)
    result = runner.invoke(app, ["traces", "show", record.episode_id[:6], "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["episode_id"] == record.episode_id
    assert data["trace_file"] == str(tmp_path / record.episode_id / TRACE_FILE)
    assert data["subagent_statuses"] == {"completed": 8, "failed": 1}
    flagged = {
        f"{row['agent_id']}#{step['index']}"
        for stage in data["stages"]
        for row in stage["rows"]
        for step in row["steps"]
        if step["critical"]
    }
    assert flagged == set(record.dag.critical_path) and len(flagged) == record.dag.critical_steps
    stage0 = data["stages"][0]
    assert stage0["width"] == 9 and len(stage0["rows"]) == 10  # the orchestrator's step + 9 sub-agents
    failed = [r for r in stage0["rows"] if r["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["error_type"] == "ModelOutputError"
    # the failed agent is the longest (3 steps) so the critical path runs through it
    assert all(s["critical"] for s in failed[0]["steps"])
    assert data["dag"]["critical_steps"] == record.dag.critical_steps


def test_traces_show_draws_the_gantt_with_the_critical_path(tmp_path: Path) -> None:
    record = run_demo(tmp_path)
    result = runner.invoke(app, ["traces", "show", record.episode_id, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "stage 0 · subagents · width 9" in out and "stage 1 · answer" in out
    lines = out.splitlines()
    failed = next(
        line
        for line in lines
        if line.startswith(next(r.agent_id for r in record.subagent_results if r.status.value == "failed"))
    )
    ok = next(
        line
        for line in lines
        if line.startswith(next(r.agent_id for r in record.subagent_results if r.status.value == "completed"))
    )
    assert "█" in failed and "░" not in failed and "ModelOutputError" in failed
    assert "░" in ok and "█" not in ok
    assert f"critical steps {record.dag.critical_steps}" in out and "8 completed, 1 failed" in out
    assert record.trace_id is not None and record.trace_id in out


def test_traces_show_finds_runs_by_trace_id_and_path(tmp_path: Path) -> None:
    record = run_demo(tmp_path)
    assert record.trace_id is not None
    by_trace = runner.invoke(app, ["traces", "show", record.trace_id, "--out", str(tmp_path), "--json"])
    assert json.loads(by_trace.stdout)["episode_id"] == record.episode_id
    by_path = runner.invoke(app, ["traces", "show", str(tmp_path / record.episode_id), "--json"])
    assert json.loads(by_path.stdout)["episode_id"] == record.episode_id


def test_traces_show_unknown_and_ambiguous_ids(tmp_path: Path) -> None:
    record = run_demo(tmp_path)
    for suffix in ("1", "2"):
        write_episode(record.model_copy(update={"episode_id": f"twin{suffix}", "trace_id": None}), tmp_path)
    unknown = runner.invoke(app, ["traces", "show", "nope", "--out", str(tmp_path)])
    assert unknown.exit_code == 2 and "no episode matches 'nope'" in unknown.stderr
    ambiguous = runner.invoke(app, ["traces", "show", "twin", "--out", str(tmp_path)])
    assert ambiguous.exit_code == 2 and "matches 2 episodes" in ambiguous.stderr
    exact = runner.invoke(app, ["traces", "show", "twin2", "--out", str(tmp_path), "--json"])
    assert exact.exit_code == 0 and json.loads(exact.stdout)["trace_file"] is None


def test_an_events_file_that_fails_mid_run_ends_neither_the_run_nor_its_spans(tmp_path: Path, otlp_http: Any) -> None:
    """The events file is /dev/full, so every write fails (ENOSPC): the file stops, the run goes on to its
    answer and record, one warning says so, and the spans reach the receiver."""
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full")
    args = ["run", "--demo", "capitals", "--out", str(tmp_path), "-q", "-p", "--events", "/dev/full"]
    result = runner.invoke(app, [*args, "--otlp-endpoint", otlp_http.url])
    assert result.exit_code == 0, result.output
    assert "Paris" in result.stdout and len(list(tmp_path.glob("*/episode.json"))) == 1
    said = " ".join(result.stderr.split())
    assert said.count("warning: events to /dev/full stopped at event episode_started") == 1
    names = [s.name for _, s in otlp_http.received.spans()]
    assert "invoke_agent orchestrator" in names and names.count("invoke_agent researcher") == 9
