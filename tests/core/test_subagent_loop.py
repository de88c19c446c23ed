"""A sub-agent run used on its own (outside the engine) keeps every ending a result."""

from __future__ import annotations

import anyio

from agent_swarm.subagents import SubagentRun, SubagentRuntime
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.records import AgentDefinition, AgentStatus
from agent_swarm.swarm.testing import ScriptedBackend, call
from agent_swarm.swarm.tracing import Telemetry
from agent_swarm.tools import tool


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _run(backend: ScriptedBackend, timeout_s: float | None = None, step_cap: int = 4) -> SubagentRun:
    rt = SubagentRuntime(backend=backend, tools={"add": add}, telemetry=Telemetry(enabled=False))
    definition = AgentDefinition(name="w", system_prompt="p", tools=("add",))
    return SubagentRun(
        definition=definition, task="t", agent_id="w-0", stage=0, step_cap=step_cap, timeout_s=timeout_s, rt=rt
    )


async def test_standalone_run_times_out_with_its_own_deadline() -> None:
    async def slow(_: ModelRequest) -> Completion:
        await anyio.sleep(5)
        return Completion(text="late")

    backend = ScriptedBackend([[call("add", a=1, b=2)], slow])
    with anyio.fail_after(2):
        result = await _run(backend, timeout_s=0.2).run()
    assert result.status is AgentStatus.TIMEOUT and result.steps == 2  # the second, cut short, is kept
    assert result.step_records[0].tool_results[0].content == "3"
    assert "interrupted during its model call" in (result.step_records[1].error or "")


async def test_standalone_run_completes_and_reports() -> None:
    backend = ScriptedBackend([[call("add", a=1, b=2)], "three"])
    result = await _run(backend, timeout_s=5).run()
    backend.assert_consumed()
    assert result.status is AgentStatus.COMPLETED and result.report == "three" and result.steps == 2
    assert [m.role for m in result.transcript] == ["system", "user", "assistant", "tool", "assistant"]


@tool
async def explode(text: str) -> str:
    """Raise for any input."""
    raise ValueError(f"no {text}")


async def test_one_call_turns_give_the_same_results_with_and_without_spans() -> None:
    # One call per turn skips the span layer when telemetry is off: every ending must stay a result.
    from agent_swarm.subagents.turns import run_tool_calls
    from agent_swarm.tools.registry import ToolContext

    tools = {"add": add, "explode": explode}
    turns = [
        [call("add", id="a", a=1, b=2)],
        [call("explode", id="a", text="x")],
        [call("missing", id="a")],
        [call("add", id="a", a="one", b=2)],
        [call("explode", id="a", text="y"), call("add", id="b", a=2, b=2)],  # several: concurrent, in order
    ]
    seen = []
    for telemetry in (Telemetry(enabled=False), Telemetry(enabled=True)):
        for calls in turns:
            results = await run_tool_calls(calls, tools, ToolContext(), telemetry, lambda: 0.0)
            seen.append([(r.call.name, r.content, r.is_error, r.error_type) for r in results])
    off, on = seen[: len(turns)], seen[len(turns) :]
    assert off == on
    assert off[0] == [("add", "3", False, None)]
    assert off[1][0][2] and "raised ValueError: no x" in off[1][0][1]
    assert off[2][0][2] and "unknown tool 'missing'" in off[2][0][1]
    assert off[3][0][2] and "invalid arguments for tool 'add'" in off[3][0][1]
    assert [(name, ok) for name, _, ok, _ in off[4]] == [("explode", True), ("add", False)]


async def test_a_raising_model_is_a_result_with_and_without_spans() -> None:
    # With telemetry off the loops await the backend's own coroutine: a raise must still end the
    # sub-agent (or the episode) as a recorded failure, the same in both modes.
    from agent_swarm.orchestrator import Orchestrator, SwarmConfig
    from agent_swarm.swarm.errors import BackendUnavailableError

    def boom(_: ModelRequest) -> Completion:
        raise RuntimeError("model crashed")

    seen: list[tuple[object, ...]] = []
    for telemetry in (Telemetry(enabled=False), Telemetry(enabled=True)):
        for failure in (boom, BackendUnavailableError("server returned 503")):
            backend = ScriptedBackend([[call("add", a=1, b=2)], failure])
            rt = SubagentRuntime(backend=backend, tools={"add": add}, telemetry=telemetry)
            run = SubagentRun(
                definition=AgentDefinition(name="w", system_prompt="p", tools=("add",)),
                task="t",
                agent_id="w-0",
                stage=0,
                step_cap=4,
                timeout_s=5,
                rt=rt,
            )
            r = await run.run()
            seen.append((r.status, r.error, r.error_type, r.steps, r.step_records[-1].error))
        policy = ScriptedBackend([boom])
        record = await Orchestrator(
            policy, SwarmConfig(), subagent_backend=ScriptedBackend(["done"]), telemetry=telemetry
        ).run("go")
        seen.append((record.status, record.error, record.error_type, len(record.turns), record.dag.critical_steps))
    off, on = seen[:3], seen[3:]
    assert off == on
    assert off[0] == (
        AgentStatus.FAILED,
        "model backend raised: RuntimeError: model crashed",
        "RuntimeError",
        2,
        "RuntimeError: model crashed",
    )
    assert off[1][:2] == (AgentStatus.FAILED, "model call failed: BackendUnavailableError: server returned 503")
    assert "model crashed" in str(off[2][1])


async def test_a_tool_timeout_no_shorter_than_the_sub_agents_ends_it_as_its_own_timeout() -> None:
    # A tool whose timeout is no shorter than its sub-agent's runs without a deadline of its own (the
    # sub-agent's always comes first): the ending must be what it was with one, the sub-agent's timeout;
    # a shorter tool timeout still ends only the call, and the sub-agent goes on.
    from agent_swarm.tools import Tool

    async def stall() -> str:
        """Never returns in time."""
        await anyio.sleep(5)
        return "late"

    def runner(tool_timeout: float) -> SubagentRun:
        backend = ScriptedBackend([[call("stall")], "gave up on it"])
        tools = {"stall": Tool(stall, timeout_s=tool_timeout)}
        rt = SubagentRuntime(backend=backend, tools=tools, telemetry=Telemetry(enabled=False))
        definition = AgentDefinition(name="w", system_prompt="p", tools=("stall",))
        return SubagentRun(definition=definition, task="t", agent_id="w-0", stage=0, step_cap=4, timeout_s=0.3, rt=rt)

    with anyio.fail_after(3):
        for tool_timeout in (0.3, 60.0):
            r = await runner(tool_timeout).run()
            assert r.status is AgentStatus.TIMEOUT and r.error_type == "TimeoutError", tool_timeout
            assert r.steps == 1 and "interrupted while its tool calls ran" in (r.step_records[0].error or "")
            assert r.error == "sub-agent timed out after 0.3s (1 steps done)"
        r = await runner(0.05).run()
    assert r.status is AgentStatus.COMPLETED and r.report == "gave up on it"
    failed = r.step_records[0].tool_results[0]
    assert failed.is_error and failed.content == "error: tool 'stall' timed out after 0.05s; try a smaller input"
