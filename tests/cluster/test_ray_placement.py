"""Very wide stages on a real local Ray: the same record as in-process, a dead actor's unfinished
sub-agents rerun, cancellation reaches the actors, and placements work inside rollout actors."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from agent_swarm.orchestrator import Orchestrator, RolloutConfig, SwarmConfig, collect_rollouts
from agent_swarm.orchestrator.cluster import RayExecutor, RayPlacement, Recipe, remote_factory
from agent_swarm.orchestrator.cluster.sim import (
    SimBackend,
    add_tool,
    orchestrator_policy,
    sim_subagents,
    sim_tasks,
    subagent_policy,
)
from agent_swarm.orchestrator.placement import SubagentKit
from agent_swarm.orchestrator.rollout.episodes import EpisodeFactory, orchestrator_factory
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.messages import ToolMessage
from agent_swarm.swarm.records import AgentStatus, EpisodeStatus

pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.fixture(autouse=True)
def _ship_this_module(ray: Any) -> None:
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def orchestrator(placement: RayPlacement | None, width: int, **cfg: Any) -> Orchestrator:
    return Orchestrator(
        SimBackend(orchestrator_policy, model="sim-orchestrator", latency=0.0),
        SwarmConfig(**{"max_subagents_per_stage": width, "max_concurrency": width, **cfg}),
        subagent_backend=SimBackend(subagent_policy, model="sim-subagent", latency=0.0),
        tools=[add_tool(0.0)],
        placement=placement,
    )


async def test_a_wide_stage_on_two_actors_gives_the_in_process_record() -> None:
    task = sim_tasks(1, width=300, max_steps=5)[0]
    local = await orchestrator(None, 300).run(task)
    async with RayPlacement(sim_subagents(latency=0.01, tool_latency=0.0), actors=2, min_width=100) as placement:
        placed = await orchestrator(placement, 300).run(task)
        assert placement.stats["batches"] == 1 and len(placement.actors) == 2
    assert placed.status is EpisodeStatus.COMPLETED and placed.answer == local.answer
    assert placed.dag.critical_steps == local.dag.critical_steps == 7
    assert placed.dag.total_steps == local.dag.total_steps
    assert [s.report for s in placed.stages[0].subagents] == [s.report for s in local.stages[0].subagents]
    stage = placed.stages[0]
    # they ran in the two actors, not in this process: each result names its process
    assert {s.ran_in for s in local.stages[0].subagents} == {""}
    pids = {int(s.ran_in.split()[1]) for s in stage.subagents}
    assert len(pids) == 2 and os.getpid() not in pids
    assert all(s.attempts == 1 for s in stage.subagents)
    assert all(stage.started <= s.started <= s.ended <= stage.ended + 0.05 for s in stage.subagents)


def dying_kit(marker: str, victim: str) -> SubagentKit:
    """The sim sub-agents, except that the process running sub-agent ``victim`` dies at its second step
    (once: a marker file remembers)."""

    def policy(request: ModelRequest) -> Completion:
        steps = sum(isinstance(m, ToolMessage) for m in request.messages)
        if request.agent_id == victim and steps == 1 and not os.path.exists(marker):
            Path(marker).touch()
            os._exit(1)
        return subagent_policy(request)

    return {"sim-subagent": SimBackend(policy, model="sim-subagent", latency=0.02)}, [add_tool(0.0)]


async def test_an_actor_dying_mid_stage_reruns_only_the_unfinished_subagents(tmp_path: Path) -> None:
    task = sim_tasks(1, width=40, max_steps=5)[0]
    marker = str(tmp_path / "died")
    async with RayPlacement(Recipe(dying_kit, marker, "multiplier-0-3"), actors=2, min_width=10) as placement:
        record = await orchestrator(placement, 40).run(task)
        stats = dict(placement.stats)
    assert await anyio.Path(marker).exists()
    assert stats["actor_errors"] == 1 and 0 < stats["reruns"] <= 20 and stats["failed_runs"] == 0
    subs = record.stages[0].subagents
    assert len({s.agent_id for s in subs}) == 40 and all(s.status is AgentStatus.COMPLETED for s in subs)
    # the record says which ran again: exactly the ones the dead actor had not sent back, the victim among them
    rerun = {s.agent_id for s in subs if s.attempts == 2}
    assert len(rerun) == stats["reruns"] and "multiplier-0-3" in rerun
    assert {s.attempts for s in subs} == {1, 2}
    assert record.answer == f"The sum is {task.verifier_args['expected']}"
    assert record.dag.critical_steps == 7


class Counter:
    def __init__(self) -> None:
        self.n = 0

    async def hit(self) -> None:
        self.n += 1

    async def read(self) -> int:
        return self.n


def counted_kit(name: str) -> SubagentKit:
    import ray

    counter = ray.get_actor(name)

    class Counted(SimBackend):
        async def complete(self, request: ModelRequest) -> Completion:
            await counter.hit.remote()
            return await super().complete(request)

    return {"sim-subagent": Counted(subagent_policy, model="sim-subagent", latency=0.2)}, [add_tool(0.0)]


async def test_cancelling_the_episode_stops_the_placed_subagents(ray: Any) -> None:
    counter = ray.remote(Counter).options(name="placement-counter", num_cpus=0).remote()
    try:
        async with RayPlacement(Recipe(counted_kit, "placement-counter"), actors=2, min_width=2) as placement:
            record = await orchestrator(placement, 20, episode_timeout_s=0.5).run(
                sim_tasks(1, width=20, max_steps=5)[0]
            )
            assert record.status is EpisodeStatus.TIMEOUT
            statuses = [s.status for s in record.stages[0].subagents]
            # One-step sub-agents (every fifth) answer in 0.2 s; the longer ones were cut off.
            assert statuses.count(AgentStatus.CANCELLED) >= 12 and set(statuses) <= {
                AgentStatus.CANCELLED,
                AgentStatus.COMPLETED,
            }
            # calls sent before the cancellation reached the actors may still land (a loaded machine delays
            # them): let those settle, then any sub-agent still running would call again every 0.2 s
            await anyio.sleep(1.0)
            calls = await counter.read.remote()
            await anyio.sleep(1.0)
            assert await counter.read.remote() == calls
    finally:
        ray.kill(counter)


def placed_factory() -> EpisodeFactory:
    # One placement per process, shared by every episode that process runs.
    placement = RayPlacement(sim_subagents(0.01, 0.0), actors=1, num_cpus=0.5, min_width=4)
    return orchestrator_factory(
        SimBackend(orchestrator_policy, model="sim-orchestrator", latency=0.0),
        subagent_backend=SimBackend(subagent_policy, model="sim-subagent", latency=0.0),
        tools=[add_tool(0.0)],
        placement=placement,
    )


async def test_rollout_actors_place_wide_stages_on_actors_of_their_own(tmp_path: Path) -> None:
    ex = RayExecutor(actors=1, num_cpus=0.5)
    s = await collect_rollouts(
        sim_tasks(3, width=8),
        remote_factory(placed_factory),
        out_dir=tmp_path,
        config=RolloutConfig(group_size=2),
        swarm_config=SwarmConfig(max_subagents_per_stage=8, max_concurrency=6),
        executor=ex,
    )
    assert s.episodes == 6 and s.mean_r_perf == 1.0
    (pool,) = ex.stats["limits"].values()  # the placement leased from the rollout's pool
    assert pool["capacity"] == 6 and pool["peak"] == 6 and pool["granted"] >= 6  # 8-wide stages under a cap of 6
