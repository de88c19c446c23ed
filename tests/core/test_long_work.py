"""Long work on a compute-bound engine: a sub-agent's clock runs only while it holds one of the
engine's slots, and one that times out reports what it found."""

from __future__ import annotations

import anyio

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.subagents import SubagentRun, SubagentRuntime
from agent_swarm.subagents.loop import partial_report
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.messages import AssistantMessage, ToolMessage
from agent_swarm.swarm.records import AgentDefinition, AgentStatus
from agent_swarm.swarm.testing import FunctionBackend, ScriptedBackend, call
from agent_swarm.swarm.tracing import Telemetry
from agent_swarm.tools import tool


@tool
def lookup(n: int) -> str:
    """Look item n up."""
    return f"item {n}: value {n * 7} " + "detail " * 400


def _researcher(request: ModelRequest) -> Completion:
    """Three lookups, then an answer naming the values it read."""
    seen = [m.content.split(":")[0] for m in request.messages if isinstance(m, ToolMessage)]
    if len(seen) < 3:
        return Completion(tool_calls=(call("lookup", n=len(seen)),))
    return Completion(text="found " + ", ".join(seen))


async def test_a_timed_out_subagent_reports_its_latest_tool_results() -> None:
    async def hang(_: ModelRequest) -> Completion:
        await anyio.sleep(30)
        return Completion(text="late")

    backend = ScriptedBackend([[call("lookup", n=1)], [call("lookup", n=2)], hang])
    rt = SubagentRuntime(backend=backend, tools={"lookup": lookup}, telemetry=Telemetry(enabled=False))
    definition = AgentDefinition(name="r", system_prompt="p", tools=("lookup",))
    run = SubagentRun(definition=definition, task="t", agent_id="r-0", stage=0, step_cap=8, timeout_s=0.5, rt=rt)
    with anyio.fail_after(10):
        result = await run.run()
    assert result.status is AgentStatus.TIMEOUT
    assert "item 1: value 7" in result.report and "item 2: value 14" in result.report
    assert "ended timeout before its answer" in result.report
    assert "characters cut" in result.report  # each result kept as a head/tail excerpt
    assert len(result.report) < 3 * 1400


def test_a_partial_report_is_never_empty() -> None:
    assert "no findings" in partial_report([], AgentStatus.CANCELLED)
    said = AssistantMessage(content="so far: Acme is in Oslo", tool_calls=(call("lookup", n=3),))
    tool_msg = ToolMessage(tool_call_id="x", name="lookup", content="item 3")
    report = partial_report([said, tool_msg], AgentStatus.TIMEOUT)
    assert report.startswith("so far: Acme is in Oslo") and report.endswith("[lookup result]\nitem 3")


async def test_subagents_wait_unstarted_for_the_engines_slots_and_all_finish() -> None:
    # 4 researchers, 4 calls of 0.3 s each, on an engine with 2 slots: 1.2 s of own work each, but
    # 2.4 s of wall time each if all four start at once and share the slots, past the 1.8 s timeout.
    sub = FunctionBackend(_researcher, model="sub", delay=0.3, parallel_slots=2)
    orch_turns: list[object] = [[call("assign_task", agent="worker", task=f"research {i}") for i in range(4)], "done"]
    cfg = SwarmConfig(subagent_timeout_s=1.8)
    orch = Orchestrator(ScriptedBackend(orch_turns, model="orch"), cfg, tools=[lookup], subagent_backend=sub)  # type: ignore[arg-type]
    record = await orch.run("research four items")
    subs = record.subagent_results
    assert [s.status for s in subs] == [AgentStatus.COMPLETED] * 4
    assert all(s.report == "found item 0, item 1, item 2" for s in subs)
    assert max(s.ended - s.started for s in subs) < 1.8


async def test_subagents_still_queued_when_the_episode_ends_say_they_never_started() -> None:
    sub = FunctionBackend(_researcher, model="sub", delay=0.4, parallel_slots=1)
    orch_turns: list[object] = [[call("assign_task", agent="worker", task=f"research {i}") for i in range(3)], "done"]
    cfg = SwarmConfig(episode_timeout_s=1.0, subagent_timeout_s=30)
    orch = Orchestrator(ScriptedBackend(orch_turns, model="orch"), cfg, tools=[lookup], subagent_backend=sub)  # type: ignore[arg-type]
    record = await orch.run("research three items")
    first, *queued = record.subagent_results
    assert first.status is AgentStatus.CANCELLED and "item 0: value 0" in first.report  # its one lookup kept
    assert [q.status for q in queued] == [AgentStatus.CANCELLED] * 2
    assert all(q.report.startswith("(not started: it was queued") and q.steps == 0 for q in queued)
