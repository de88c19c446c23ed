"""Placements: a stage handed to a placement gives the record, DAG and observations an in-process stage
gives, with the same budgets; what cannot run where it was placed is a failed result, not a crash."""

from __future__ import annotations

from typing import Any

import anyio

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.orchestrator.cluster.sim import SimBackend, add_tool, orchestrator_policy, sim_tasks, subagent_policy
from agent_swarm.orchestrator.placement import Finished, StageBatch, run_batch
from agent_swarm.swarm.backend import Completion, ModelBackend, ModelRequest
from agent_swarm.swarm.limits import CapacityLimit
from agent_swarm.swarm.messages import ToolMessage
from agent_swarm.swarm.records import AgentStatus, EpisodeRecord, EpisodeStatus
from agent_swarm.swarm.testing import FunctionBackend
from agent_swarm.tools.registry import Tool, ToolRegistry


class HerePlacement:
    """Runs placed batches in this process with backends and tools of its own (what an actor does)."""

    def __init__(self, backends: dict[str, ModelBackend], tools: list[Tool], min_width: int = 1) -> None:
        self.backends, self.tools, self.min_width = backends, ToolRegistry(tools), min_width
        self.batches: list[StageBatch] = []
        self.limit = CapacityLimit()  # the sub-agent cap every batch placed here shares

    def takes(self, width: int) -> bool:
        return width >= self.min_width

    async def run(self, batch: StageBatch, finished: Finished) -> None:
        self.batches.append(batch)
        await run_batch(batch, self.backends, self.tools, finished, limit=self.limit)


def sim_orchestrator(latency: float = 0.0, placement: HerePlacement | None = None, **cfg: Any) -> Orchestrator:
    config = SwarmConfig(**{"max_subagents_per_stage": 64, "max_concurrency": 64, **cfg})
    return Orchestrator(
        SimBackend(orchestrator_policy, model="sim-orchestrator", latency=latency),
        config,
        subagent_backend=SimBackend(subagent_policy, model="sim-subagent", latency=latency),
        tools=[add_tool(0.0)],
        placement=placement,
    )


def here(latency: float = 0.0) -> HerePlacement:
    return HerePlacement(
        {"sim-subagent": SimBackend(subagent_policy, model="sim-subagent", latency=latency)}, [add_tool(0.0)]
    )


def observations(record: EpisodeRecord) -> list[str]:
    return [s.report for st in record.stages for s in st.subagents]


async def test_a_placed_stage_gives_the_same_record_as_an_in_process_one() -> None:
    task = sim_tasks(1, width=40, max_steps=5)[0]
    local = await sim_orchestrator().run(task)
    placement = here()
    placed = await sim_orchestrator(placement=placement).run(task)
    assert len(placement.batches) == 1 and len(placement.batches[0].runs) == 40
    assert placed.status is local.status is EpisodeStatus.COMPLETED
    assert placed.answer == local.answer == f"The sum is {task.verifier_args['expected']}"
    assert placed.dag.critical_steps == local.dag.critical_steps == 1 + 5 + 1
    assert placed.dag.total_steps == local.dag.total_steps
    assert [s.agent_id for s in placed.stages[0].subagents] == [s.agent_id for s in local.stages[0].subagents]
    assert observations(placed) == observations(local)
    # Steps are timed on the episode's clock: each sub-agent lies inside its stage.
    stage = placed.stages[0]
    assert all(stage.started <= s.started <= s.ended <= stage.ended for s in stage.subagents)


async def test_budgets_hold_on_a_placement() -> None:
    task = sim_tasks(1, width=10, max_steps=5)[0]
    # 1 + 3 critical steps left for sub-agents: their cap is min(max_subagent_steps=8, 5 - 1 - 1) = 3.
    record = await sim_orchestrator(placement=here(), max_critical_steps=5).run(task)
    subs = record.stages[0].subagents
    assert {s.step_cap for s in subs} == {3}
    assert all(s.steps <= 3 for s in subs)
    assert {s.status for s in subs if s.steps == 3 and "=" not in s.report} <= {AgentStatus.BUDGET_EXHAUSTED}
    assert record.dag.critical_steps <= 5


async def test_a_placed_subagent_times_out_like_a_local_one() -> None:
    slow = SimBackend(subagent_policy, model="sim-subagent", latency=0.3)
    placement = HerePlacement({"sim-subagent": slow}, [add_tool(0.0)])
    task = sim_tasks(1, width=4, max_steps=1)[0]
    record = await sim_orchestrator(placement=placement, subagent_timeout_s=0.05).run(task)
    assert [s.status for s in record.stages[0].subagents] == [AgentStatus.TIMEOUT] * 4


async def test_what_does_not_exist_where_it_was_placed_is_a_failed_result() -> None:
    placement = HerePlacement({"other-model": SimBackend(subagent_policy, model="other", latency=0.0)}, [])
    record = await sim_orchestrator(placement=placement).run(sim_tasks(1, width=3)[0])
    subs = record.stages[0].subagents
    assert [s.status for s in subs] == [AgentStatus.FAILED] * 3
    assert all(s.error_type == "PlacementError" and "sim-subagent" in (s.error or "") for s in subs)
    assert record.status is EpisodeStatus.COMPLETED  # the orchestrator saw the failures and answered

    no_tools = HerePlacement({"sim-subagent": SimBackend(subagent_policy, model="sim-subagent", latency=0.0)}, [])
    record = await sim_orchestrator(placement=no_tools).run(sim_tasks(1, width=2)[0])
    assert all("do not exist where the sub-agent was placed" in (s.error or "") for s in record.stages[0].subagents)


async def test_narrow_stages_stay_in_process() -> None:
    placement = here()
    placement.min_width = 100
    record = await sim_orchestrator(placement=placement).run(sim_tasks(1, width=8)[0])
    assert not placement.batches and record.dag.subagent_steps > 0


async def test_cancelling_the_episode_cancels_the_placed_runs() -> None:
    placement = here(latency=0.5)
    orch = sim_orchestrator(placement=placement, episode_timeout_s=0.2)
    record = await orch.run(sim_tasks(1, width=5)[0])
    assert record.status is EpisodeStatus.TIMEOUT
    assert [s.status for s in record.stages[0].subagents] == [AgentStatus.CANCELLED] * 5


async def test_the_subagent_cap_applies_to_placed_runs() -> None:
    now = peak = 0

    async def work(request: ModelRequest) -> Completion:
        nonlocal now, peak
        now += 1
        peak = max(peak, now)
        await anyio.sleep(0.01)
        now -= 1
        return subagent_policy(request)

    placement = HerePlacement({"sim-subagent": FunctionBackend(work, model="sim-subagent")}, [add_tool(0.0)])
    record = await sim_orchestrator(placement=placement, max_concurrency=3).run(sim_tasks(1, width=12)[0])
    assert peak == 3 and record.status is EpisodeStatus.COMPLETED


def test_placed_results_are_the_orchestrators_observations_in_call_order() -> None:
    seen: list[list[str]] = []

    def policy(request: ModelRequest) -> Completion:
        msgs = [m.content for m in request.messages if isinstance(m, ToolMessage) and m.name == "assign_task"]
        if msgs:
            seen.append(msgs)
        return orchestrator_policy(request)

    orch = Orchestrator(
        SimBackend(policy, model="o", latency=0.0),
        SwarmConfig(max_subagents_per_stage=16),
        subagent_backend=SimBackend(subagent_policy, model="sim-subagent", latency=0.0),
        tools=[add_tool(0.0)],
        placement=here(),
    )
    task = sim_tasks(1, width=6, max_steps=3)[0]
    record = orch.run_sync(task)
    assert len(seen) == 1 and len(seen[0]) == 6
    assert [m.splitlines()[-1] for m in seen[0]] == [r.report for r in record.stages[0].subagents]
