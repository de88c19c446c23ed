"""Rollouts on a real local Ray: same files as in-process, faults rerun only what was lost, caps held
across actors, clear errors for what cannot run there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest

from agent_swarm.orchestrator import RolloutConfig, SwarmConfig, collect_rollouts
from agent_swarm.orchestrator.cluster import RayExecutor, remote_factory
from agent_swarm.orchestrator.cluster.sim import (
    SimBackend,
    orchestrator_policy,
    sim_factory,
    sim_tasks,
    subagent_policy,
)
from agent_swarm.orchestrator.rollout.collection import RolloutProgress
from agent_swarm.orchestrator.rollout.episodes import EpisodeFactory, orchestrator_factory
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.backends.openai_http import OpenAIBackend
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.messages import ToolMessage

pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.fixture(autouse=True)
def _ship_this_module(ray: Any) -> None:
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def keys(rows: list[dict[str, Any]]) -> Counter[tuple[str, int]]:
    return Counter((r["group_id"], r["sample_index"]) for r in rows)


CFG = RolloutConfig(group_size=3, max_concurrent_episodes=8)
SWARM = SwarmConfig(max_subagents_per_stage=8, max_concurrency=64)


async def test_ray_rollout_writes_what_an_in_process_rollout_writes(tmp_path: Path) -> None:
    tasks = sim_tasks(4, width=6)
    factory = sim_factory(latency=0.01, tool_latency=0.0)
    here = await collect_rollouts(tasks, factory, out_dir=tmp_path / "local", config=CFG, swarm_config=SWARM)
    ex = RayExecutor(actors=2)
    seen: list[RolloutProgress] = []
    there = await collect_rollouts(
        tasks, factory, out_dir=tmp_path / "ray", config=CFG, swarm_config=SWARM, executor=ex, progress=seen.append
    )
    assert there.episodes == here.episodes == 12 and there.trajectories == 12
    assert there.mean_r_perf == here.mean_r_perf == 1.0  # every sub-agent's report came back right
    assert there.mean_critical_steps == here.mean_critical_steps
    assert [p.done for p in seen] == list(range(1, 13)) and all(p.last is None for p in seen)
    a = {(t["group_id"], t["sample_index"]): t for t in lines(tmp_path / "local" / "trajectories.jsonl")}
    b = {(t["group_id"], t["sample_index"]): t for t in lines(tmp_path / "ray" / "trajectories.jsonl")}
    assert a.keys() == b.keys()
    for k in a:
        assert a[k]["response_ids"] == b[k]["response_ids"] and a[k]["advantage"] == b[k]["advantage"]
    assert ex.stats["limits"]  # the sub-agent cap was leased from the pool


async def test_episodes_come_back_in_batches_each_written_once_and_a_cancelled_run_resumes(tmp_path: Path) -> None:
    tasks = sim_tasks(8, width=4)
    out = tmp_path / "o"
    factory = sim_factory(latency=0.01, tool_latency=0.0)
    config = RolloutConfig(group_size=3, max_concurrent_episodes=12)
    ex = RayExecutor(actors=2, linger_s=0.1)
    seen: list[int] = []
    with anyio.CancelScope() as scope:  # the driver stops half-way, as on Ctrl-C

        def stop_half_way(p: RolloutProgress) -> None:
            seen.append(p.done)
            if p.done == 12:
                scope.cancel()

        await collect_rollouts(
            tasks, factory, out_dir=out, config=config, swarm_config=SWARM, executor=ex, progress=stop_half_way
        )
    assert seen[:12] == list(range(1, 13))
    # Each round trip brought back several finished episodes, not one.
    assert ex.stats["round_trips"] < len(seen)
    kept = keys(lines(out / "episodes.jsonl"))
    assert len(kept) == len(seen) >= 12 and max(kept.values()) == 1
    again = RayExecutor(actors=2, linger_s=0.1)
    s = await collect_rollouts(tasks, factory, out_dir=out, config=config, swarm_config=SWARM, executor=again)
    assert (s.episodes_resumed, s.episodes_run, s.trajectories) == (len(kept), 24 - len(kept), 24)
    assert keys(lines(out / "episodes.jsonl")) == Counter({(t.id, j): 1 for t in tasks for j in range(3)})
    assert keys(lines(out / "trajectories.jsonl")) == keys(lines(out / "episodes.jsonl"))
    assert again.stats["round_trips"] < s.episodes_run


# -- faults -----------------------------------------------------------------------------------------


def crashing_factory(marker: str, target_seed: int, every_time: bool) -> EpisodeFactory:
    """The sim workload, except that the process running episode ``target_seed`` dies in its second
    orchestrator turn (after its sub-agents ran): once (a marker file remembers), or every time."""

    def policy(request: ModelRequest) -> Completion:
        mid = any(isinstance(m, ToolMessage) and m.name == "assign_task" for m in request.messages)
        if mid and request.sampling.seed == target_seed and (every_time or not os.path.exists(marker)):
            Path(marker).touch()
            os._exit(1)
        return orchestrator_policy(request)

    return orchestrator_factory(
        SimBackend(policy, model="sim-orchestrator", latency=0.02),
        subagent_backend=SimBackend(subagent_policy, model="sim-subagent", latency=0.01),
        tools=[__import__("agent_swarm.orchestrator.cluster.sim", fromlist=["add_tool"]).add_tool(0.0)],
    )


def seed_of(task_id: str, j: int, run_seed: int = 0) -> int:
    from agent_swarm.orchestrator.rollout.episodes import episode_seed

    return episode_seed(run_seed, task_id, j)


async def test_an_actor_dying_mid_episode_loses_only_that_episode_which_is_rerun(tmp_path: Path) -> None:
    tasks = sim_tasks(4, width=4)
    marker = str(tmp_path / "died")
    factory = remote_factory(crashing_factory, marker, seed_of(tasks[2].id, 1), False)
    ex = RayExecutor(actors=2)
    s = await collect_rollouts(tasks, factory, out_dir=tmp_path / "o", config=CFG, swarm_config=SWARM, executor=ex)
    assert await anyio.Path(marker).exists()  # the process really died
    assert ex.stats["actor_errors"] >= 1 and ex.stats["reruns"] >= 1 and ex.stats["actors_lost"] == 0
    episodes = lines(tmp_path / "o" / "episodes.jsonl")
    assert keys(episodes) == Counter({(t.id, j): 1 for t in tasks for j in range(3)})  # all, each once
    assert keys(lines(tmp_path / "o" / "trajectories.jsonl")) == keys(episodes)
    assert not lines(tmp_path / "o" / "failures.jsonl")
    assert s.groups_complete == 4 and s.mean_r_perf == 1.0


async def test_an_actor_killed_from_outside_loses_nothing_finished(tmp_path: Path, ray: Any) -> None:
    tasks = sim_tasks(6, width=4)
    handles: list[Any] = []
    killed: list[int] = []

    def kill_after_four(p: RolloutProgress) -> None:
        if p.done == 4 and not killed:
            killed.append(p.done)
            ray.kill(handles[0], no_restart=False)  # Ray restarts it; its running episodes are lost

    ex = RayExecutor(actors=2, on_started=handles.extend)
    slow = sim_factory(latency=0.03, tool_latency=0.0)
    s = await collect_rollouts(
        tasks, slow, out_dir=tmp_path / "o", config=CFG, swarm_config=SWARM, executor=ex, progress=kill_after_four
    )
    assert killed and ex.stats["actor_errors"] >= 1
    episodes = lines(tmp_path / "o" / "episodes.jsonl")
    assert keys(episodes) == Counter({(t.id, j): 1 for t in tasks for j in range(3)})
    assert s.groups_complete == 6 and s.trajectories == 18


async def test_an_episode_that_always_kills_its_actor_is_recorded_and_a_resume_reruns_it(tmp_path: Path) -> None:
    tasks = sim_tasks(2, width=3)
    target = (tasks[0].id, 0)
    factory = remote_factory(crashing_factory, str(tmp_path / "m"), seed_of(*target), True)
    ex = RayExecutor(actors=2, max_attempts=2)
    s = await collect_rollouts(tasks, factory, out_dir=tmp_path / "o", config=CFG, swarm_config=SWARM, executor=ex)
    assert s.crashed_episodes == 1 and s.episodes == 5 and s.groups_complete == 1
    (failure,) = lines(tmp_path / "o" / "failures.jsonl")
    assert (failure["group_id"], failure["sample_index"]) == target and "died 2 time(s)" in failure["error"]
    # Fixed code, same directory: only the crashed episode runs again.
    again = await collect_rollouts(
        tasks, sim_factory(0.01, 0.0), out_dir=tmp_path / "o", config=CFG, swarm_config=SWARM, executor=RayExecutor()
    )
    assert again.episodes_run == 1 and again.episodes == 6 and again.groups_complete == 2
    assert keys(lines(tmp_path / "o" / "episodes.jsonl")) == Counter({(t.id, j): 1 for t in tasks for j in range(3)})


# -- cluster-wide caps ------------------------------------------------------------------------------


class Gauge:
    """A Ray actor counting calls in flight across every process."""

    def __init__(self) -> None:
        self.now = self.peak = self.total = 0

    async def enter(self) -> None:
        self.now += 1
        self.total += 1
        self.peak = max(self.peak, self.now)

    async def leave(self) -> None:
        self.now -= 1

    async def read(self) -> tuple[int, int]:
        return self.peak, self.total


def gauged_factory(gauge_name: str) -> EpisodeFactory:
    import ray as ray_

    gauge = ray_.get_actor(gauge_name)

    async def worker(request: ModelRequest) -> Completion:
        await gauge.enter.remote()
        try:
            await anyio.sleep(0.03)
        finally:
            await gauge.leave.remote()
        return subagent_policy(request)

    class Gauged(SimBackend):
        async def complete(self, request: ModelRequest) -> Completion:
            from agent_swarm.swarm.function_backend import complete_with_tokens

            return complete_with_tokens(request, await worker(request), self.model)

    return orchestrator_factory(
        SimBackend(orchestrator_policy, model="sim-orchestrator", latency=0.0),
        subagent_backend=Gauged(subagent_policy, model="sim-subagent", latency=0.0),
        tools=[__import__("agent_swarm.orchestrator.cluster.sim", fromlist=["add_tool"]).add_tool(0.0)],
    )


@pytest.mark.parametrize("cluster_limits", [True, False])
async def test_the_subagent_cap_holds_across_all_actors(tmp_path: Path, ray: Any, cluster_limits: bool) -> None:
    name = f"gauge-{cluster_limits}"
    gauge = ray.remote(Gauge).options(name=name, num_cpus=0).remote()
    try:
        ex = RayExecutor(actors=2, cluster_limits=cluster_limits)
        s = await collect_rollouts(
            sim_tasks(8, width=8, max_steps=2),
            remote_factory(gauged_factory, name),
            out_dir=tmp_path / "o",
            config=RolloutConfig(group_size=1, max_concurrent_episodes=8),
            swarm_config=SwarmConfig(max_subagents_per_stage=8, max_concurrency=5),
            executor=ex,
        )
        peak, total = await gauge.read.remote()
    finally:
        ray.kill(gauge)
    assert s.mean_r_perf == 1.0 and total == 8 * (4 * 1 + 4 * 2)
    if cluster_limits:
        assert peak == 5  # one cap for the cluster, and it is used in full
    else:
        assert peak > 5  # each process alone would keep only its own cap of 5


class _Counting(BaseHTTPRequestHandler):
    now = peak = hits = 0
    lock = threading.Lock()

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        cls = type(self)
        with cls.lock:
            cls.now += 1
            cls.hits += 1
            cls.peak = max(cls.peak, cls.now)
        time.sleep(0.03)
        with cls.lock:
            cls.now -= 1
        body = {
            "model": "m",
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Answer: 1"}}
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        }
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def counting_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def http_factory(url: str, cap: int) -> EpisodeFactory:
    return orchestrator_factory(OpenAIBackend(url, "m", max_concurrency=cap, flavour="openai"))


async def test_an_endpoints_request_cap_holds_across_all_actors(tmp_path: Path, counting_server: str) -> None:
    s = await collect_rollouts(
        sim_tasks(24, width=1),
        remote_factory(http_factory, counting_server, 3),
        out_dir=tmp_path / "o",
        config=RolloutConfig(group_size=1, max_concurrent_episodes=16),
        executor=RayExecutor(actors=2),
    )
    assert s.episodes == 24 and _Counting.hits == 24
    assert _Counting.peak == 3


# -- what cannot run there ----------------------------------------------------------------------------


async def test_a_factory_holding_a_live_object_is_refused_with_the_fix(tmp_path: Path) -> None:
    lock = threading.Lock()

    def factory(job: Any, config: SwarmConfig, reward: Any) -> Any:
        with lock:
            return sim_factory()(job, config, reward)

    with pytest.raises(ConfigError, match="remote_factory"):
        await collect_rollouts(sim_tasks(1), factory, out_dir=tmp_path, executor=RayExecutor())
    assert not (tmp_path / "episodes.jsonl").exists()


def broken_build() -> EpisodeFactory:
    raise RuntimeError("model weights not found at /nowhere")


async def test_a_factory_that_cannot_be_built_on_the_actors_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="model weights not found"):
        await collect_rollouts(sim_tasks(1), remote_factory(broken_build), out_dir=tmp_path, executor=RayExecutor())


def test_without_ray_installed_the_error_says_how_to_install_it() -> None:
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "from agent_swarm.orchestrator.cluster import RayExecutor\n"
        "from agent_swarm.orchestrator.cluster.sim import sim_factory\n"
        "from agent_swarm.orchestrator.rollout.config import RolloutConfig\n"
        "from agent_swarm.orchestrator.rollout.executors import EpisodeRunner\n"
        "from orchestrator import SwarmConfig, PARLReward\n"
        "try:\n"
        "    RayExecutor().check(EpisodeRunner(sim_factory(), SwarmConfig(), PARLReward(), RolloutConfig()))\n"
        "except Exception as e:\n"
        "    print(type(e).__name__, e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("ConfigError") and "pip install 'agent-swarm[ray]'" in out
