"""Collapse monitors through the public API: episodes run on scripted models land with their
monitors on the record and the episode span; a step's summary averages them."""

from __future__ import annotations

import json
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rich.console import Console
from typer.testing import CliRunner

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.cli.live import summary_table
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.errors import BackendError
from agent_swarm.swarm.messages import ToolMessage
from agent_swarm.swarm.monitors import episode_monitors, summarise_monitors
from agent_swarm.swarm.records import EpisodeRecord, Task, dump_record
from agent_swarm.swarm.testing import FunctionBackend, ScriptedBackend, call
from agent_swarm.tools import tool

CAPITALS = {"France": "Paris", "Peru": "Lima", "Japan": "Tokyo", "Kenya": "Nairobi"}
TASK = Task(id="caps", prompt="Give the capitals of France, Peru, Japan and Kenya.", metadata={"parts": 4})


@tool
def lookup(country: str) -> str:
    """Look up a country's capital."""
    return CAPITALS.get(country, "unknown")


def _worker(request: ModelRequest) -> Completion:
    """Answers 'capital of X' at once; after five lookups when the task says slow; fails when it says broken."""
    task = next(m.content for m in request.messages if m.role == "user")
    country = next(c for c in CAPITALS if c in task)
    looked = sum(isinstance(m, ToolMessage) for m in request.messages)
    if "broken" in task:
        raise BackendError("the sub-agents' server is down")
    if "slow" in task and looked < 5:
        return Completion(tool_calls=(call("lookup", country=country),))
    return Completion(text=f"The capital of {country} is {CAPITALS[country]}.")


async def _run(turns: list[object], task: Task = TASK, **kw: object) -> EpisodeRecord:
    policy = ScriptedBackend(turns)  # type: ignore[arg-type]
    orch = Orchestrator(
        policy,
        SwarmConfig(max_subagent_steps=8, max_critical_steps=40),
        tools=[lookup],
        subagent_backend=FunctionBackend(_worker),
        **kw,  # type: ignore[arg-type]
    )
    record = await orch.run(task)
    policy.assert_consumed()
    return record


def _assign(task: str) -> object:
    return call("assign_task", agent="worker", task=task)


async def test_a_healthy_fan_out_fires_no_monitor() -> None:
    record = await _run([[_assign(f"capital of {c}") for c in CAPITALS], "Paris, Lima, Tokyo, Nairobi"])
    m = record.monitors
    assert m is not None and m == episode_monitors(record)
    assert (m.parts, m.subagents, m.max_width, m.serial_collapse) == (4, 4, 4, False)
    assert (m.duplicate_tasks, m.unused_reports, m.over_width_stages, m.spurious_parallelism) == (0, 0, 0, False)
    assert m.finish_rate == 1.0 and m.straggler_ratio == 1.0 and m.flags == ()


async def test_serial_collapse_one_subagent_per_stage_on_a_task_of_parts() -> None:
    turns: list[object] = [[_assign(f"capital of {c}")] for c in CAPITALS]
    record = await _run([*turns, "Paris, Lima, Tokyo, Nairobi"])
    assert record.monitors is not None
    assert record.monitors.serial_collapse is True and record.monitors.max_width == 1
    assert "serial_collapse" in record.monitors.flags


async def test_a_wide_task_answered_without_fan_out_is_serial_collapse() -> None:
    record = await _run(["Paris, Lima, Tokyo, Nairobi"])
    assert record.monitors is not None and record.monitors.serial_collapse is True
    # a task that declares no parts is not judged
    plain = await _run(["Paris"], Task(prompt="What is the capital of France?"))
    assert plain.monitors is not None and plain.monitors.serial_collapse is None and plain.monitors.flags == ()


async def test_spurious_parallelism_duplicates_unused_reports_and_over_width() -> None:
    tasks = [
        "Find the capital of France",
        "please find the capital of France.",  # the same work, reworded
        "capital of Peru",
        "capital of Japan",
        "capital of Kenya",
        "capital of Japan, in Japan",  # the same content words again
    ]
    record = await _run([[_assign(t) for t in tasks], "Paris and Lima"])  # Tokyo and Nairobi never used
    m = record.monitors
    assert m is not None
    assert m.duplicate_tasks == 2 and m.over_width_stages == 1  # 6 sub-agents on a task of 4 parts
    assert m.unused_reports == 3  # Japan (twice) and Kenya
    assert m.spurious_parallelism and "spurious_parallelism" in m.flags


async def test_stragglers_and_the_finish_rate() -> None:
    tasks = ["capital of France", "capital of Peru", "capital of Japan", "slow: capital of Kenya"]
    record = await _run([[_assign(t) for t in tasks], "Paris, Lima, Tokyo, Nairobi"])
    m = record.monitors
    assert m is not None
    assert m.straggler_ratio == 6.0  # 6 steps against a median of 1
    assert "stragglers" in m.flags and m.finish_rate == 1.0
    broken = ["broken: capital of France", "broken: capital of Peru", "broken: capital of Japan", "capital of Kenya"]
    failing = await _run([[_assign(t) for t in broken], "Nairobi"])
    assert failing.monitors is not None and failing.monitors.finish_rate == 0.25
    assert "low_finish_rate" in failing.monitors.flags


async def test_monitors_land_on_the_episode_span_and_a_step_summary_averages_them() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    serial = await _run([[_assign("capital of France")], "Paris"], tracer_provider=provider)
    wide = await _run([[_assign(f"capital of {c}") for c in CAPITALS], "Paris, Lima, Tokyo, Nairobi"])
    episode = next(
        s for s in exporter.get_finished_spans() if s.attributes and "swarm.dag.critical_steps" in s.attributes
    )
    attrs = dict(episode.attributes or {})
    assert attrs["swarm.monitor.serial_collapse"] is True and attrs["swarm.monitor.flags"] == "serial_collapse"
    assert attrs["swarm.monitor.finish_rate"] == 1.0 and "swarm.monitor.straggler_ratio" not in attrs
    summary = summarise_monitors([serial, wide])
    assert summary["serial_collapse"] == 0.5 and summary["finish_rate"] == 1.0
    assert summary["spurious_parallelism"] == 0.0 and summary["straggler_ratio"] == 1.0
    # A record written before monitors existed is measured on the spot.
    old = serial.model_copy(update={"monitors": None})
    assert summarise_monitors([old]) == summarise_monitors([serial])


async def test_traces_show_flags_the_monitors_that_fired(tmp_path: Path) -> None:
    record = await _run([[_assign("capital of France")], "Paris"])
    path = tmp_path / "episode.json"
    path.write_text(dump_record(record))
    shown = CliRunner().invoke(app, ["traces", "show", str(path)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    line = next(x for x in shown.stdout.splitlines() if x.startswith("monitors"))
    assert "⚑ serial collapse" in line and "finish rate 1.00" in line and "parts 4" in line
    data = json.loads(CliRunner().invoke(app, ["traces", "show", str(path), "--json"]).stdout)
    assert data["monitors"]["flags"] == ["serial_collapse"]


async def test_the_run_summary_names_the_monitors_that_fired() -> None:
    record = await _run([[_assign("capital of France")], "Paris"])
    console = Console(record=True, width=160, force_terminal=False)
    console.print(summary_table(record))
    assert f"serial collapse (swarm traces show {record.episode_id[:8]})" in console.export_text()


def test_unused_reports_past_the_sample_size_are_estimated_from_an_even_sample() -> None:
    from agent_swarm.swarm.records import AgentStatus, EpisodeStatus, StageRecord, SubagentResult

    subs = tuple(
        SubagentResult(
            agent_id=f"w-0-{i}",
            name="w",
            task=f"capital of country {i}",
            status=AgentStatus.COMPLETED,
            steps=1,
            report=f"the capital is city{i}",
        )
        for i in range(200)
    )
    stage = StageRecord(index=0, kind="subagents", started=0, ended=1, orchestrator_steps=(), subagents=subs)
    answer = " ".join(f"city{i}" for i in range(0, 200, 2))  # every other report used
    record = EpisodeRecord(
        episode_id="e", task=Task(prompt="capitals"), status=EpisodeStatus.COMPLETED, answer=answer, stages=(stage,)
    )
    m = episode_monitors(record)
    assert m.reports_checked == 64 and 80 <= m.unused_reports <= 120
    small = record.model_copy(update={"stages": (stage.model_copy(update={"subagents": subs[:40]}),)})
    exact = episode_monitors(small)
    assert exact.reports_checked == 40 and exact.unused_reports == 20
