"""Per-episode timing breakdown (agent_swarm.swarm.timings) and old records without timings."""

from __future__ import annotations

import json
from pathlib import Path

from agent_swarm.swarm.backend import Completion, Timings
from agent_swarm.swarm.messages import ToolCall
from agent_swarm.swarm.records import (
    AgentStatus,
    EpisodeRecord,
    EpisodeStatus,
    StageRecord,
    StepRecord,
    SubagentResult,
    Task,
    ToolResult,
    dump_record,
)
from agent_swarm.swarm.timings import episode_timings

T0 = Timings(
    call_s=3.0,
    startup_s=2.0,
    hash_check_s=0.1,
    model_load_s=1.9,
    prefill_tokens=40,
    cached_tokens=1400,
    restored_tokens=1400,
    prefill_s=0.5,
    decode_tokens=30,
    decode_s=2.4,
)
T1 = Timings(call_s=1.0, queue_s=0.2, prefill_tokens=300, prefill_s=0.3, decode_tokens=5, decode_s=0.4)


def _record() -> EpisodeRecord:
    orch = StepRecord(
        agent_id="orchestrator", index=0, kind="orchestrator", stage=0, started=0.5, ended=3.5, timings=T0
    )
    sub_steps = tuple(
        StepRecord(agent_id=f"w{i}", index=0, kind="subagent", stage=0, started=4.0, ended=5.0, timings=T1)
        for i in range(2)
    )
    subs = tuple(
        SubagentResult(agent_id=f"w{i}", name="w", task="t", status=AgentStatus.COMPLETED, step_records=(s,))
        for i, s in enumerate(sub_steps)
    )
    tool = ToolResult(call=ToolCall(id="c", name="search", arguments={}), content="x", started=4.5, ended=6.0)
    answer = StepRecord(agent_id="orchestrator", index=1, kind="orchestrator", stage=1, started=6.5, ended=7.5)
    return EpisodeRecord(
        episode_id="e",
        task=Task(prompt="p"),
        status=EpisodeStatus.COMPLETED,
        wall_time_s=8.0,
        stages=(
            StageRecord(
                index=0,
                kind="subagents",
                started=0.5,
                ended=6.0,
                orchestrator_steps=(orch,),
                subagents=subs,
                tool_results=(tool,),
            ),
            StageRecord(index=1, kind="answer", started=6.5, ended=7.5, orchestrator_steps=(answer,)),
        ),
    )


def test_episode_timings_sum_the_measured_calls_and_find_the_runtimes_own_time() -> None:
    t = episode_timings(_record())
    assert (t.calls, t.measured_calls) == (4, 3)  # the answer step's backend measured nothing
    assert (t.startup_s, t.hash_check_s, t.model_load_s) == (2.0, 0.1, 1.9)
    assert (t.prefill_tokens, t.cached_tokens, t.restored_tokens, t.decode_tokens) == (640, 1400, 1400, 40)
    assert abs(t.prefill_s - 1.1) < 1e-9 and abs(t.decode_s - 3.2) < 1e-9 and abs(t.queue_s - 0.4) < 1e-9
    assert t.model_s == 5.0
    # Busy: [0.5, 3.5] + [4.0, 6.0] (sub-agents, then the tool) + [6.5, 7.5] = 6.0 s of 8.0.
    assert abs(t.runtime_s - 2.0) < 1e-9
    assert abs(t.decode_tok_s - 40 / 3.2) < 1e-9


def test_timings_round_trip_and_old_records_without_them_still_load() -> None:
    record = _record()
    data = json.loads(dump_record(record))
    again = EpisodeRecord.model_validate(data)
    assert again.stages[0].orchestrator_steps[0].timings == T0
    for stage in data["stages"]:  # a record written before timings existed
        for step in stage["orchestrator_steps"]:
            step.pop("timings")
        for sub in stage["subagents"]:
            for step in sub["step_records"]:
                step.pop("timings")
    old = EpisodeRecord.model_validate(data)
    assert old.stages[0].orchestrator_steps[0].timings is None
    assert episode_timings(old).measured_calls == 0


def test_a_completion_validates_timings_built_from_json() -> None:
    c = Completion(text="x", timings={"call_s": 1, "prefill_tokens": 3})  # type: ignore[arg-type]
    assert c.timings == Timings(call_s=1.0, prefill_tokens=3)
    assert Timings(call_s=2.0, queue_s=0.5, prefill_s=0.5, decode_s=0.5).other_s == 0.5


def test_traces_show_prints_where_the_time_went(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agent_swarm.orchestrator.cli import app
    from agent_swarm.orchestrator.store import write_episode

    record = _record()
    write_episode(record, tmp_path)
    shown = CliRunner().invoke(app, ["traces", "show", "e", "--out", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert "engine start 2.00s (model check 0.10s, load 1.90s)" in text
    assert "runtime's own 2.00s" in text and "prefill 640 tok in 1.10s" in text
    assert "cached 1400 tok (1400 restored from disk)" in text
    assert "turn 0: prefill 40 tok 0.50s, cached 1400, decode 30 tok 2.40s" in text
    data = json.loads(CliRunner().invoke(app, ["traces", "show", "e", "--out", str(tmp_path), "--json"]).stdout)
    assert data["timings"]["restored_tokens"] == 1400
    assert data["stages"][0]["rows"][0]["steps"][0]["timings"]["decode_tokens"] == 30
