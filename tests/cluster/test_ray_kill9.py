"""Ray under `kill -9` from outside (issue 29): the operating system kills an actor's worker process in
the middle of a rollout and in the middle of a wide stage. Nothing finished is lost, nothing is written
or reported twice, and the episode's record says which sub-agents ran again (``attempts`` 2; in a
rerun episode, all of them, and ``metadata["attempts"]``) and where every placed one ran (``ran_in``)."""

from __future__ import annotations

import os
import signal
import sys
from collections import Counter
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
    sim_factory,
    sim_tasks,
    subagent_policy,
)
from agent_swarm.orchestrator.placement import SubagentKit
from agent_swarm.orchestrator.rollout.collection import RolloutProgress
from agent_swarm.orchestrator.rollout.episodes import EpisodeFactory
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.records import AgentStatus, EpisodeStatus

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(autouse=True)
def _ship_this_module(ray: Any) -> None:
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _note_pid(directory: str) -> None:
    Path(directory, str(os.getpid())).touch()


def _pids(directory: Path) -> set[int]:
    return {int(p.name) for p in directory.iterdir()} - {os.getpid()}


async def _wait_for(check: Any, what: str, timeout_s: float = 60.0) -> None:
    with anyio.fail_after(timeout_s):
        while not check():  # noqa: ASYNC110 - files other processes write: nothing to wait on
            await anyio.sleep(0.02)
    assert check(), what


# -- mid-wide-stage ---------------------------------------------------------------------------------


def noting_kit(pid_dir: str, done_dir: str) -> SubagentKit:
    """The sim sub-agents (0.15 s a step), noting the actor's pid and each sub-agent's answer
    (``DONE/<pid>-<agent id>``)."""
    _note_pid(pid_dir)

    def policy(request: ModelRequest) -> Completion:
        out = subagent_policy(request)
        if not out.tool_calls:
            Path(done_dir, f"{os.getpid()}-{request.agent_id}").touch()
        return out

    return {"sim-subagent": SimBackend(policy, model="sim-subagent", latency=0.15)}, [add_tool(0.0)]


async def test_kill_9_of_a_subagent_actor_mid_stage_reruns_exactly_its_unfinished_subagents(tmp_path: Path) -> None:
    width = 120
    task = sim_tasks(1, width=width, max_steps=5)[0]
    pid_dir, done = tmp_path / "pids", tmp_path / "done"
    pid_dir.mkdir()
    done.mkdir()
    orch_kw: dict[str, Any] = {"max_subagents_per_stage": width, "max_concurrency": width}
    killed: list[int] = []
    async with RayPlacement(Recipe(noting_kit, str(pid_dir), str(done)), actors=2, min_width=10) as placement:
        first_pids = _pids(pid_dir)
        assert len(first_pids) == 2
        orch = Orchestrator(
            SimBackend(orchestrator_policy, model="sim-orchestrator", latency=0.0),
            SwarmConfig(**orch_kw),
            subagent_backend=SimBackend(subagent_policy, model="sim-subagent", latency=0.0),
            tools=[add_tool(0.0)],
            placement=placement,
        )
        record: Any = None

        async def run() -> None:
            nonlocal record
            record = await orch.run(task)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            # kill one actor once some of its sub-agents have answered (one-step ones, 0.15 s) and before
            # the five-step ones can have (0.75 s)
            victim = min(first_pids)
            await _wait_for(lambda: any(p.name.startswith(f"{victim}-") for p in done.iterdir()), "an answer")
            await anyio.sleep(0.2)  # its result leaves the actor within the 0.02 s linger
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)
        stats = dict(placement.stats)
    assert record is not None and record.status is EpisodeStatus.COMPLETED
    assert record.answer == f"The sum is {task.verifier_args['expected']}"  # every report came back right
    subs = record.stages[0].subagents
    assert Counter(s.agent_id for s in subs) == Counter({s.agent_id: 1 for s in subs}) and len(subs) == width
    assert all(s.status is AgentStatus.COMPLETED for s in subs)
    assert stats["actor_errors"] == 1 and stats["failed_runs"] == 0
    ran_in = {s.agent_id: int(s.ran_in.split()[1]) for s in subs}
    rerun = {s.agent_id for s in subs if s.attempts == 2}
    # the record names the re-run ones: as many as the placement re-ran, none of them finished in the
    # killed process, and every result that did come back from it before the kill stands (attempts 1)
    assert 0 < len(rerun) == stats["reruns"] < width
    assert all(ran_in[a] != killed[0] for a in rerun)
    from_victim = {a for a, pid in ran_in.items() if pid == killed[0]}
    assert from_victim and all(a not in rerun for a in from_victim)
    assert set(ran_in.values()) <= first_pids | _pids(pid_dir)  # actor processes only, never this one
    assert os.getpid() not in set(ran_in.values())


# -- mid-rollout ------------------------------------------------------------------------------------


def noting_factory(pid_dir: str) -> EpisodeFactory:
    _note_pid(pid_dir)
    return sim_factory(latency=0.03, tool_latency=0.0)


async def test_kill_9_of_a_rollout_actor_mid_rollout_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    tasks = sim_tasks(6, width=4)
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    killed: list[int] = []

    def kill_after_four(p: RolloutProgress) -> None:
        if p.done >= 4 and not killed:
            victim = min(_pids(pid_dir))
            os.kill(victim, signal.SIGKILL)  # the worker process, from outside; Ray restarts the actor
            killed.append(victim)

    ex = RayExecutor(actors=2)
    cfg = RolloutConfig(group_size=3, max_concurrent_episodes=8)
    swarm = SwarmConfig(max_subagents_per_stage=8, max_concurrency=64)
    s = await collect_rollouts(
        tasks,
        remote_factory(noting_factory, str(pid_dir)),
        out_dir=tmp_path / "o",
        config=cfg,
        swarm_config=swarm,
        executor=ex,
        progress=kill_after_four,
    )
    assert killed and ex.stats["actor_errors"] >= 1 and ex.stats["reruns"] >= 1 and ex.stats["actors_lost"] == 0
    from agent_swarm.orchestrator.rollout.episodes import EpisodeEntry
    from agent_swarm.swarm.rl.export import read_jsonl

    entries = read_jsonl(tmp_path / "o" / "episodes.jsonl", EpisodeEntry)
    assert Counter((e.group_id, e.sample_index) for e in entries) == Counter(
        {(t.id, j): 1 for t in tasks for j in range(3)}
    )
    assert not (tmp_path / "o" / "failures.jsonl").exists() or not (tmp_path / "o" / "failures.jsonl").read_text()
    assert s.groups_complete == 6 and s.trajectories == 18 and s.mean_r_perf == 1.0
    assert all(e.record.status is EpisodeStatus.COMPLETED for e in entries)
    # the records of the episodes the dead actor was running say they ran again, and so does each of
    # their sub-agents; every other record says one run
    attempts = {e.record.episode_id: e.record.metadata.get("attempts", 1) for e in entries}
    rerun = {eid for eid, n in attempts.items() if n != 1}
    assert rerun and len(rerun) == ex.stats["reruns"] and all(attempts[eid] == 2 for eid in rerun)
    for e in entries:
        subs = e.record.subagent_results
        assert subs and {r.attempts for r in subs} == {attempts[e.record.episode_id]}
