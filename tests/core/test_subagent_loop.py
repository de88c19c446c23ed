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
