"""Scale-out benchmark: rollouts on Ray actors against one process, and a 10,000-wide stage.

Workload (``agent_swarm.orchestrator.cluster.sim``): each task asks for the sum of ``width`` products ``a*k``; the
simulated orchestrator creates a sub-agent type with the typed tool ``add(a: int, b: int)`` and fans the
products out in one stage; the sub-agent for ``a*k`` calls ``add`` ``k - 1`` times, then reports (``k``
steps), and the orchestrator answers the sum, which the numeric verifier checks. Every model call sleeps
``--latency`` and returns a freshly built completion (new call ids, arguments read from the conversation,
token ids and logprobs from the fake template); the tool sleeps ``--tool-latency``. Tasks differ per
episode (seeded random factors).

``rollout``: ``--tasks × --k`` episodes of ``--width``-wide stages (``k = 1 + i % 3``), at most
``--concurrency`` episodes in flight, through ``collect_rollouts`` (files, rewards, trajectories and all):
in one process (``LocalExecutor``), then on Ray with 1 and with 2 episode actors. Reported: wall time,
steady throughput (episodes between the first and the last result / that time: actor start-up is not
steady state) and end-to-end throughput (everything, actor start included); ratios against in-process.

``wide``: one episode whose one stage has ``--width`` sub-agents (``k = 1 + i % 5`` steps, so the longest
branch is 5 steps), in one process and on a ``RayPlacement`` of ``--actors`` actors, at each
``--latency``. Reported: wall / ideal critical path (ideal = orchestrator call + 5 model calls + 4 tool
calls + the answer call), CPU per sub-agent step (driver + actors) and checks (every result recorded,
critical steps exactly 7, the answer right).

Each measurement runs in a fresh process, with the swarm CLI's GC settings in the driver and in the
actors. Ray runs start a local Ray of ``--cpus`` CPUs first (not timed).

    python bench/bench_ray.py rollout                      # 128 tasks × 4, 16 wide, 20 ms
    python bench/bench_ray.py wide --latency 0.5 0.02      # 10,000-wide stage
    python bench/bench_ray.py all --json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from agent_swarm.orchestrator import Orchestrator, RolloutConfig, SwarmConfig, collect_rollouts
from agent_swarm.orchestrator.cli import tune_gc
from agent_swarm.orchestrator.cluster._ray import process_usage
from agent_swarm.orchestrator.cluster.sim import (
    SimBackend,
    add_tool,
    orchestrator_policy,
    sim_factory,
    sim_subagents,
    sim_tasks,
    subagent_policy,
)


def _ray_init(cpus: int) -> Any:
    """The local Ray users get (``RayCluster``: workers at the driver's priority, results inline)."""
    import ray

    from agent_swarm.orchestrator.cluster import RayCluster

    RayCluster(num_cpus=cpus).connect()
    return ray


# -- rollouts ---------------------------------------------------------------------------------------


async def _rollout(mode: str, a: argparse.Namespace, out: Path) -> dict[str, Any]:
    from agent_swarm.orchestrator.cluster import RayExecutor

    tasks = sim_tasks(a.tasks, width=a.width, max_steps=3, seed=a.seed)
    n = a.tasks * a.k
    executor = None if mode == "inprocess" else RayExecutor(actors=int(mode[-1]))
    stamps: list[float] = []
    t0 = time.perf_counter()
    c0 = time.process_time()
    summary = await collect_rollouts(
        tasks,
        sim_factory(a.latency, a.tool_latency),
        out_dir=out,
        config=RolloutConfig(group_size=a.k, max_concurrent_episodes=a.concurrency),
        swarm_config=SwarmConfig(max_subagents_per_stage=a.width, max_concurrency=a.width * a.concurrency),
        executor=executor,
        progress=lambda p: stamps.append(time.perf_counter()),
    )
    wall = time.perf_counter() - t0
    ok = summary.episodes == n and summary.mean_r_perf == 1.0 and summary.trajectories == n
    if not ok:
        raise SystemExit(f"benchmark run went wrong: {summary.model_dump_json()}")
    steady = (len(stamps) - 1) / (stamps[-1] - stamps[0])
    return {
        "mode": mode,
        "episodes": n,
        "wall_s": wall,
        "first_result_s": stamps[0] - t0,
        "steady_eps_per_s": steady,
        "end_to_end_eps_per_s": n / wall,
        "driver_cpu_s": time.process_time() - c0,
        "driver_cpu_ms_per_episode": 1000 * (time.process_time() - c0) / n,
        "actor_cpu_ms_per_episode": (
            1000 * sum(u["cpu_s"] for u in executor.stats["actors"]) / n if executor is not None else None
        ),
        "subagent_steps_per_episode": summary.mean_total_steps - 2,
    }


# -- one wide stage ---------------------------------------------------------------------------------


async def _wide(mode: str, latency: float, a: argparse.Namespace) -> dict[str, Any]:
    from agent_swarm.orchestrator.cluster import RayPlacement

    width = a.width_wide
    task = sim_tasks(1, width=width, max_steps=5, seed=a.seed)[0]
    cfg = SwarmConfig(
        max_subagents_per_stage=width, max_concurrency=width, max_critical_steps=50, subagent_timeout_s=600
    )
    placement = None
    if mode == "ray":
        placement = RayPlacement(sim_subagents(latency, a.tool_latency), actors=a.actors, min_width=1)
        await placement.start()
    orch = Orchestrator(
        SimBackend(orchestrator_policy, model="sim-orchestrator", latency=latency),
        cfg,
        subagent_backend=SimBackend(subagent_policy, model="sim-subagent", latency=latency),
        tools=[add_tool(a.tool_latency)],
        placement=placement,
    )
    before = [await h.usage.remote() for h in placement.actors] if placement else []
    c0, t0 = time.process_time(), time.perf_counter()
    record = await orch.run(task)
    wall, driver_cpu = time.perf_counter() - t0, time.process_time() - c0
    after = [await h.usage.remote() for h in placement.actors] if placement else []
    if placement:
        placement.close()
    actor_cpu = sum(x["cpu_s"] - y["cpu_s"] for x, y in zip(after, before, strict=True))
    steps = record.dag.subagent_steps
    subs = record.stages[0].subagents if record.stages else ()
    checks = {
        "all_results": len(subs) == width,
        "all_completed": all(s.status.value == "completed" for s in subs),
        "critical_steps_exact": record.dag.critical_steps == 7,
        "subagent_steps": steps == sum(1 + i % 5 for i in range(width)),
        "answer_right": record.answer == f"The sum is {task.verifier_args['expected']}",
    }
    ideal = 7 * latency + 4 * a.tool_latency
    return {
        "mode": mode,
        "width": width,
        "latency_s": latency,
        "wall_s": wall,
        "ideal_s": ideal,
        "wall_over_ideal": wall / ideal,
        "driver_cpu_s": driver_cpu,
        "actor_cpu_s": actor_cpu,
        "cpu_us_per_step": 1e6 * (driver_cpu + actor_cpu) / max(1, steps),
        "wall_critical_path_s": record.dag.wall_critical_path_s,
        "rss_mb": process_usage()["rss_b"] / 2**20,
        "checks": checks,
        "ok": all(checks.values()),
    }


# -- driver -----------------------------------------------------------------------------------------


def _child(args: list[str]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{args} failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["rollout", "wide", "all"], nargs="?", default="all")
    p.add_argument("--tasks", type=int, default=128)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--width", type=int, default=16, help="rollout stage width")
    p.add_argument("--concurrency", type=int, default=128, help="episodes in flight (over all actors)")
    p.add_argument("--width-wide", type=int, default=10_000, help="the wide stage's width")
    p.add_argument("--latency", type=float, nargs="*", default=None, help="rollout: first value; wide: each")
    p.add_argument("--tool-latency", type=float, default=0.002)
    p.add_argument("--actors", type=int, default=2, help="wide stage: placement actors")
    p.add_argument("--cpus", type=int, default=os.cpu_count() or 2, help="CPUs of the local Ray")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    p.add_argument("--one", nargs="+", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    latencies = a.latency or ([0.02] if a.what == "rollout" else [0.5, 0.02])
    a.latency = latencies[0]
    if a.one:
        tune_gc()
        kind, mode = a.one[0], a.one[1]
        if mode != "inprocess":
            _ray_init(a.cpus)
        if kind == "rollout":
            import tempfile

            with tempfile.TemporaryDirectory() as tmp:
                r = anyio.run(_rollout, mode, a, Path(tmp))
        else:
            r = anyio.run(_wide, mode, float(a.one[2]), a)
        print(json.dumps(r))
        return 0
    common = [
        *("--tasks", str(a.tasks), "--k", str(a.k), "--width", str(a.width), "--concurrency", str(a.concurrency)),
        *("--width-wide", str(a.width_wide), "--tool-latency", str(a.tool_latency), "--actors", str(a.actors)),
        *("--cpus", str(a.cpus), "--seed", str(a.seed), "--latency", str(a.latency)),
    ]
    report: dict[str, Any] = {"load_before": os.getloadavg()}
    if a.what in ("rollout", "all"):
        rows = {m: _child([*common, "--one", "rollout", m]) for m in ("inprocess", "ray1", "ray2")}
        base = rows["inprocess"]
        for r in rows.values():
            r["steady_vs_inprocess"] = r["steady_eps_per_s"] / base["steady_eps_per_s"]
            r["end_to_end_vs_inprocess"] = r["end_to_end_eps_per_s"] / base["end_to_end_eps_per_s"]
        report["rollout"] = rows
    if a.what in ("wide", "all"):
        report["wide"] = [
            _child([*common, "--one", "wide", m, str(lat)]) for lat in latencies for m in ("inprocess", "ray")
        ]
    report["load_after"] = os.getloadavg()
    if a.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"load average before {report['load_before']}, after {report['load_after']}")
    if "rollout" in report:
        print(f"\nrollout: {a.tasks} tasks × {a.k}, {a.width} wide, {a.latency * 1000:g} ms, {a.concurrency} in flight")
        print(f"{'mode':>10} {'wall s':>8} {'steady ep/s':>12} {'× in-proc':>9} {'e2e ep/s':>9} {'× in-proc':>9}")
        for m, r in report["rollout"].items():
            print(
                f"{m:>10} {r['wall_s']:>8.2f} {r['steady_eps_per_s']:>12.1f} {r['steady_vs_inprocess']:>9.2f} "
                f"{r['end_to_end_eps_per_s']:>9.1f} {r['end_to_end_vs_inprocess']:>9.2f}"
            )
    if "wide" in report:
        print(f"\nwide stage: {a.width_wide} sub-agents, 1-5 steps, tool {a.tool_latency * 1000:g} ms")
        print(
            f"{'mode':>10} {'latency':>8} {'wall s':>7} {'ideal s':>7} {'wall/ideal':>10} {'CPU µs/step':>11} {'ok':>4}"
        )
        for r in report["wide"]:
            print(
                f"{r['mode']:>10} {r['latency_s'] * 1000:>6g}ms {r['wall_s']:>7.2f} {r['ideal_s']:>7.2f} "
                f"{r['wall_over_ideal']:>10.2f} {r['cpu_us_per_step']:>11.1f} {'yes' if r['ok'] else 'NO':>4}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
