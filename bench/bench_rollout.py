"""Rollout collection benchmark: concurrency speed-up and the cost of rewards + trajectory export.

Workload: ``T`` tasks × ``K`` samples; each episode is one orchestrator fan-out turn to ``W`` sub-agents
(one step each) and an answer turn; every LLM call is a simulated ``--latency`` (default 20 ms) sleep.
Reported:

* ``speedup`` = wall time with ``max_concurrent_episodes=1`` / wall time with the limit set to
  ``T·K`` (ideal: ``T·K``; the bound is CPU overhead per episode);
* ``export_share`` = (time spent scoring, building trajectories and writing JSONL, measured by
  re-running exactly that work on the collected episodes) / concurrent wall time;
* ``table_scorer_rows_per_s`` for a 500-row WideSearch-style table (numbers, dates, URLs).

    python bench/bench_rollout.py            # T=4, K=8, W=4
    python bench/bench_rollout.py --json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from agent_swarm.orchestrator import PARLReward, RolloutConfig, SwarmConfig, collect_rollouts, orchestrator_factory
from agent_swarm.orchestrator.rollout.episodes import EpisodeEntry
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.messages import ToolMessage
from agent_swarm.swarm.records import Task
from agent_swarm.swarm.rl.export import JsonlWriter, read_jsonl
from agent_swarm.swarm.rl.rewards import group_mean_baseline
from agent_swarm.swarm.rl.trajectory import build_trajectory
from agent_swarm.swarm.testing import FunctionBackend, call
from agent_swarm.swarm.verifiers import ColumnRule, score_table


def _backends(width: int, latency: float) -> tuple[FunctionBackend, FunctionBackend]:
    def policy(request: ModelRequest) -> Completion:
        if not any(isinstance(m, ToolMessage) for m in request.messages):
            calls = [call("create_subagent", name="w", system_prompt="s")]
            calls += [call("assign_task", agent="w", task=f"part {i}") for i in range(width)]
            return Completion(tool_calls=tuple(calls))
        return Completion(text=f"Answer: {(request.sampling.seed or 0) % 3}")

    return (
        FunctionBackend(policy, delay=latency),
        FunctionBackend(lambda r: Completion(text="partial result"), delay=latency),
    )


async def _collect(tasks: list[Task], k: int, width: int, latency: float, limit: int, out: Path) -> float:
    orch, sub = _backends(width, latency)
    t0 = time.perf_counter()
    await collect_rollouts(
        tasks,
        orchestrator_factory(orch, subagent_backend=sub),
        out_dir=out,
        config=RolloutConfig(group_size=k, max_concurrent_episodes=limit),
        swarm_config=SwarmConfig(max_concurrency=1024),
    )
    return time.perf_counter() - t0


async def _export_cost(out: Path, k: int) -> float:
    entries = read_jsonl(out / "episodes.jsonl", EpisodeEntry)
    reward = PARLReward()
    t0 = time.perf_counter()
    with JsonlWriter(out / "bench-trajectories.jsonl") as w:
        for e in entries:
            await reward(e.record)
        groups: dict[str, list[EpisodeEntry]] = {}
        for e in entries:
            groups.setdefault(e.group_id, []).append(e)
        for g in groups.values():
            rewards = [e.record.reward.total if e.record.reward else 0.0 for e in g]
            advs = group_mean_baseline(rewards, [e.group_id for e in g])
            for e, a in zip(g, advs, strict=True):
                w.write(build_trajectory(e.record, group_id=e.group_id, sample_index=e.sample_index, advantage=a))
    return time.perf_counter() - t0


def _table_rate(rows: int = 500) -> float:
    gold = [
        {
            "id": str(i),
            "value": f"{i * 1.5:.1f}",
            "date": f"2024-{1 + i % 12:02d}-{1 + i % 28:02d}",
            "url": f"https://site{i}.example/page",
        }
        for i in range(rows)
    ]
    lines = ["| id | value | date | url |", "|---|---|---|---|"]
    lines += [
        f"| {g['id']} | {float(g['value']) * 1.02:.2f} | {g['date']} | http://site{g['id']}.example/x |" for g in gold
    ]
    rules = {
        "value": ColumnRule(preprocess=("extract_number",), metrics=("number_near",), criterion=0.05),
        "date": ColumnRule(preprocess=(), metrics=("date_near",)),
        "url": ColumnRule(preprocess=(), metrics=("url_match",)),
    }
    t0 = time.perf_counter()
    s = score_table("\n".join(lines), gold, key_columns=["id"], rules=rules)
    dt = time.perf_counter() - t0
    assert s.success, s
    return rows / dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--width", type=int, default=4)
    ap.add_argument("--latency", type=float, default=0.020)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    tasks = [
        Task(id=f"t{i}", prompt=f"task {i}", verifier="numeric", verifier_args={"expected": 1}) for i in range(a.tasks)
    ]
    n = a.tasks * a.k
    with tempfile.TemporaryDirectory() as tmp:
        serial = anyio.run(_collect, tasks, a.k, a.width, a.latency, 1, Path(tmp) / "serial")
        concurrent = anyio.run(_collect, tasks, a.k, a.width, a.latency, n, Path(tmp) / "concurrent")
        export = anyio.run(_export_cost, Path(tmp) / "concurrent", a.k)
    result: dict[str, Any] = {
        "episodes": n,
        "serial_s": round(serial, 3),
        "concurrent_s": round(concurrent, 3),
        "speedup": round(serial / concurrent, 2),
        "ideal_speedup": n,
        "export_share": round(export / concurrent, 3),
        "export_ms_per_episode": round(1000 * export / n, 2),
        "table_scorer_rows_per_s": round(_table_rate()),
    }
    if a.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>26}: {value}")


if __name__ == "__main__":
    main()
