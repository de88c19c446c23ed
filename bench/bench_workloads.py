"""Workload benchmark: the gold scripted policies of every workload, swarm against single agent.

For each workload the same tasks run in both modes through ``agent_swarm.orchestrator.eval.run_eval`` with the
workload's gold policy (``FunctionBackend`` policies that act on the real tool results). Each model call
sleeps ``--latency`` seconds so wall time follows the critical path as it would with a model. Reported:
the workload metric and success in both modes (1.0 validates environment + verifier), mean critical
and total steps, wall time, and the single/swarm ratios.

    python bench/bench_workloads.py               # default settings, 10 tasks per workload
    python bench/bench_workloads.py --tasks 3 --json
    python bench/bench_workloads.py --only airline   # the rows whose label contains "airline"
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import anyio

from agent_swarm.orchestrator.eval import BackendPair, EvalReport, run_eval
from agent_swarm.swarm.records import Task
from agent_swarm.workloads import Mode, get_workload

# (label, workload, knobs): the first two rows are the settings the workloads' speed-up targets are set on.
SETTINGS: list[tuple[str, str, dict[str, Any]]] = [
    ("tau2-batch K=8 (5–6 actions/ticket)", "tau2-batch", {"k": 8}),
    ("wide-lookup N=16, M=3", "wide-lookup", {"entities": 16, "attributes": 3}),
    ("tau2-batch K=8 (1–13 actions/ticket)", "tau2-batch", {"k": 8, "min_actions": 1, "max_actions": 13}),
    ("tau2-batch K=4", "tau2-batch", {"k": 4}),
    ("tau2-batch airline K=8 (1–11 actions/ticket: every train ticket)", "tau2-batch", {"domain": "airline"}),
    ("tau2-batch airline K=8 (1–5 actions/ticket)", "tau2-batch", {"domain": "airline", "max_actions": 5}),
    (
        "wide-lookup N=16, M=6 retail, 4 distractors",
        "wide-lookup",
        {"entities": 16, "attributes": 6, "kind": "retail_user", "distractors": 4},
    ),
    ("deep-lookup B=4", "deep-lookup", {"branches": 4}),
    ("deep-lookup B=8", "deep-lookup", {"branches": 8}),
    ("bfcl parallel + parallel_multiple", "bfcl-parallel", {}),
    ("bfcl controls (simple_python, multiple)", "bfcl-parallel", {"categories": ["simple_python", "multiple"]}),
]


async def one(name: str, knobs: dict[str, Any], n: int, latency: float) -> EvalReport:
    wl = get_workload(name)
    tasks = wl.tasks(n, seed=0, **knobs)

    def gold(task: Task, mode: Mode) -> BackendPair:
        p = wl.gold_policy(task, mode, latency_s=latency)
        return p.orchestrator, p.subagent

    return await run_eval(wl, tasks, gold, backend_name="gold", knobs=knobs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=10)
    ap.add_argument("--latency", type=float, default=0.02, help="seconds per simulated model call")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", default="", help="run only the settings whose label contains this text")
    args = ap.parse_args()
    out = []
    for label, name, knobs in SETTINGS:
        if args.only not in label:
            continue
        r = anyio.run(one, name, knobs, args.tasks, args.latency)
        sw, si = r.summaries["swarm"], r.summaries["single"]
        out.append(
            {
                "setting": label,
                "workload": name,
                "metric": r.metric_name,
                "tasks": args.tasks,
                "metric_swarm": sw.metric,
                "metric_single": si.metric,
                "success_swarm": sw.success_rate,
                "success_single": si.success_rate,
                "critical_swarm": sw.critical_steps,
                "critical_single": si.critical_steps,
                "total_swarm": sw.total_steps,
                "total_single": si.total_steps,
                "critical_ratio": r.ratios["critical_steps"],
                "wall_ratio": r.ratios["wall_time_s"],
                "width": sw.mean_width,
            }
        )
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"gold policies, {args.tasks} tasks each (seed 0), {args.latency * 1000:.0f} ms per model call\n")
    print(
        "| setting | metric (swarm / single) | success (swarm / single) | critical steps swarm → single "
        "| single/swarm critical | single/swarm wall | total steps swarm / single | width |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for o in out:
        print(
            f"| {o['setting']} | {o['metric']} {o['metric_swarm']:.3f} / {o['metric_single']:.3f} "
            f"| {o['success_swarm']:.2f} / {o['success_single']:.2f} "
            f"| {o['critical_swarm']:.1f} → {o['critical_single']:.1f} | {o['critical_ratio']:.2f}× "
            f"| {o['wall_ratio']:.2f}× | {o['total_swarm']:.1f} / {o['total_single']:.1f} | {o['width']:.1f} |"
        )


if __name__ == "__main__":
    main()
