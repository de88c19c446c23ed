"""Rollout executors: prepared episodes are exactly what the driver used to write; any executor that
follows the protocol (deliver once per job) yields the same files."""

from __future__ import annotations

import json
import random
from pathlib import Path

import anyio

from agent_swarm.orchestrator import RolloutConfig, SwarmConfig, collect_rollouts, orchestrator_factory
from agent_swarm.orchestrator.rollout.episodes import (
    EpisodeEntry,
    EpisodeFactory,
    EpisodeJob,
    EpisodeOutcome,
    PreparedEpisode,
    prepare_episode,
)
from agent_swarm.orchestrator.rollout.executors import EpisodeBatch, EpisodeRunner, LocalExecutor
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.messages import ToolMessage
from agent_swarm.swarm.records import Task
from agent_swarm.swarm.rl.rewards import PARLReward
from agent_swarm.swarm.rl.trajectory import build_trajectory
from agent_swarm.swarm.testing import FunctionBackend, call


def policy(request: ModelRequest) -> Completion:
    if not any(isinstance(m, ToolMessage) for m in request.messages):
        return Completion(
            text="splitting",
            tool_calls=(
                call("create_subagent", name="w", system_prompt="s"),
                call("assign_task", agent="w", task="a"),
                call("assign_task", agent="w", task="b"),
            ),
        )
    return Completion(text=f"Answer: {(request.sampling.seed or 0) % 2}")


def factory() -> EpisodeFactory:
    return orchestrator_factory(
        FunctionBackend(policy, model="policy"),
        subagent_backend=FunctionBackend(lambda r: Completion(text="done"), model="worker"),
    )


TASKS = [Task(id=f"t{i}", prompt=f"task {i}", verifier="numeric", verifier_args={"expected": i % 2}) for i in range(3)]


async def test_a_prepared_trajectory_line_is_the_trajectory_dump_byte_for_byte() -> None:
    orch = factory()(EpisodeJob(TASKS[0], 1, 7), SwarmConfig(), PARLReward())
    record = await orch.run(TASKS[0], episode_id="e")
    entry = EpisodeEntry(group_id="t0", sample_index=1, seed=7, record=record)
    prepared = prepare_episode(entry)
    assert prepared.entry_json == entry.model_dump_json()
    assert prepared.trajectory is not None
    for adv in (0.0, -0.5, 1e-7, 123.456, 1 / 3):
        expected = build_trajectory(
            record, group_id="t0", sample_index=1, advantage=adv, metadata={"seed": 7}
        ).model_dump_json()
        assert prepared.trajectory.line(adv) == expected


class ShuffledExecutor:
    """Delivers outcomes in a random order, all at the end (a cluster's streaming order is arbitrary)."""

    def __init__(self) -> None:
        self.checked = 0

    def check(self, runner: EpisodeRunner) -> None:
        self.checked += 1
        runner.check()

    async def run(self, batch: EpisodeBatch) -> None:
        outcomes = [await batch.runner.run(j) for j in batch.jobs]
        random.Random(0).shuffle(outcomes)
        for o in outcomes:
            assert isinstance(o, PreparedEpisode) and o.record is None  # no progress callback: no records kept
            batch.deliver(o)


def by_key(path: Path) -> dict[tuple[str, int], dict[str, object]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    out = {}
    for r in rows:
        for volatile in ("wall_time_s", "started_at"):
            r.pop(volatile, None)
            r.get("record", {}).pop(volatile, None)
        out[(r["group_id"], r["sample_index"])] = r
    return out


async def test_any_executor_following_the_protocol_writes_the_same_rollout(tmp_path: Path) -> None:
    cfg = RolloutConfig(group_size=3)
    here = await collect_rollouts(TASKS, factory(), out_dir=tmp_path / "local", config=cfg)
    shuffled = ShuffledExecutor()
    there = await collect_rollouts(
        TASKS,
        factory(),
        out_dir=tmp_path / "other",
        config=cfg,
        executor=shuffled,
    )
    assert shuffled.checked == 1
    assert here.trajectories == there.trajectories == 9
    assert here.mean_reward == there.mean_reward and here.statuses == there.statuses
    a, b = by_key(tmp_path / "local" / "trajectories.jsonl"), by_key(tmp_path / "other" / "trajectories.jsonl")
    assert a.keys() == b.keys()
    for k in a:
        assert a[k]["advantage"] == b[k]["advantage"]
        assert a[k]["response_ids"] == b[k]["response_ids"]


async def test_the_local_executor_keeps_to_its_concurrency(tmp_path: Path) -> None:
    now = peak = 0

    async def slow(request: ModelRequest) -> Completion:
        nonlocal now, peak
        now += 1
        peak = max(peak, now)
        await anyio.sleep(0.01)
        now -= 1
        return Completion(text="Answer: 0")

    runner = EpisodeRunner(
        orchestrator_factory(FunctionBackend(slow)), SwarmConfig(), PARLReward(), RolloutConfig(group_size=1)
    )
    got: list[EpisodeOutcome] = []
    jobs = [EpisodeJob(Task(id=f"x{i}", prompt="p"), 0, i) for i in range(9)]
    await LocalExecutor().run(EpisodeBatch(runner, jobs, got.append, max_concurrent=2))
    assert peak == 2 and len(got) == 9
    assert sorted(o.episode_id for o in got) == sorted(j.episode_id for j in jobs)
