"""The episode actor's protocol, run in this process (no Ray): ``exchange`` hands episodes to the run's
``serve`` and brings back, in one call, every episode finished meanwhile; ``finish`` ends the run."""

from __future__ import annotations

import anyio
import pytest

from agent_swarm.orchestrator import RolloutConfig, SwarmConfig
from agent_swarm.orchestrator.cluster.executor import EpisodeWorker
from agent_swarm.orchestrator.cluster.sim import sim_factory, sim_tasks
from agent_swarm.orchestrator.cluster.slots import Outbox
from agent_swarm.orchestrator.rollout.episodes import EpisodeEntry, EpisodeJob, EpisodeOutcome, PreparedEpisode
from agent_swarm.orchestrator.rollout.executors import EpisodeRunner
from agent_swarm.swarm.errors import ClusterError
from agent_swarm.swarm.rl.rewards import PARLReward


def worker() -> EpisodeWorker:
    runner = EpisodeRunner(
        sim_factory(latency=0.01, tool_latency=0.0),
        SwarmConfig(max_subagents_per_stage=4, max_concurrency=64),
        PARLReward(),
        RolloutConfig(group_size=2),
        keep_records=False,
    )
    return EpisodeWorker(runner, None, "episodes-0", gc_freeze=False)


async def test_one_exchange_starts_episodes_and_returns_those_finished_meanwhile() -> None:
    w = worker()
    jobs = [EpisodeJob(t, j, 100 * i + j) for i, t in enumerate(sim_tasks(3, width=4)) for j in range(2)]
    got: list[EpisodeOutcome] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(w.serve, "run")
        first = await w.exchange("run", jobs[:4], 0.5)  # long enough for all four to finish
        assert len(first) == 4  # one reply, several episodes
        got += first
        while len(got) < len(jobs):
            got += await w.exchange("run", jobs[4:] if len(got) == 4 else [], 0.0)
        await w.finish("run")  # serve returns: the task group can close
    assert sorted(o.episode_id for o in got) == sorted(j.episode_id for j in jobs)
    assert all(isinstance(o, PreparedEpisode) and o.digest.r_perf == 1.0 and o.entry_json for o in got)


async def test_a_finish_that_arrives_before_serve_still_ends_the_run() -> None:
    w = worker()
    await w.finish("early")
    with anyio.fail_after(5):
        await w.serve("early")


async def test_an_outbox_whose_producer_failed_hands_over_what_it_holds_then_raises() -> None:
    box: Outbox[int] = Outbox()
    box.put(1)
    box.fail(ClusterError("the limit service is gone"))
    assert await box.take(0.0) == ([1], False)
    with pytest.raises(ClusterError, match="limit service"):
        await box.take(0.0)


async def test_the_record_of_an_episodes_second_run_says_it_and_its_subagents_ran_again() -> None:
    runner = worker().runner
    task = sim_tasks(1, width=3)[0]
    first, again = [await runner.run(EpisodeJob(task, 0, 7, attempt=n)) for n in (1, 2)]
    assert isinstance(first, PreparedEpisode) and isinstance(again, PreparedEpisode)
    entries = [EpisodeEntry.model_validate_json(o.entry_json) for o in (first, again)]
    assert [e.record.metadata.get("attempts") for e in entries] == [None, 2]
    assert [{s.attempts for s in e.record.subagent_results} for e in entries] == [{1}, {2}]
    assert len(entries[1].record.subagent_results) == 3 and again.digest == first.digest  # nothing else changed


def test_an_actors_episodes_share_its_subagent_cap() -> None:
    w = worker()
    shipped = EpisodeRunner(w.runner.factory, w.runner.swarm_config, w.runner.reward_fn, w.runner.config)
    here = EpisodeWorker(shipped, None, "episodes-1", gc_freeze=False)
    assert here.runner.subagent_limit is here.subagent_limit is not shipped.subagent_limit
    assert here.subagent_limit is not w.subagent_limit  # without a pool, each actor's cap is its own
