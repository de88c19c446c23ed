"""Straggler hedging benchmark: episode wall time with and without ``SwarmConfig.hedge`` on a workload
whose sub-agent latency is heavy-tailed.

The workload: each episode is one fan-out stage of ``--width`` sub-agents (one ``assign_task`` each,
distinct tasks), then the answer. Every sub-agent takes ``--steps`` steps (a tool call per step, an
answer at the last); each model call sleeps a latency drawn from a Pareto distribution (scale
``--scale`` s, shape ``--alpha``, capped at ``--cap`` s) from a hash of (episode seed, agent id, step):
the draw is the same in every arm for the same agent and step, so arms are paired per episode, and a
backup copy (agent id ``…-b``) draws its own. The orchestrator is scripted (no model).

Arms: ``off`` (every stage waits for all), ``quorum`` (``quorum=0.875``: 7 of 8), ``cut``
(``straggler_factor=3``), ``backup`` (``straggler_factor=3, backup=True``). Raw per-episode data
(arm, episode, seed, wall time, critical steps, sub-agent statuses and steps) plus the commit and the
config go to ``--out`` (gzipped JSON); ``--report FILE`` prints the table from a raw file alone, with
each arm paired against ``off``: mean wall-time difference, its seeded bootstrap 95 % interval, and
sign and Wilcoxon signed-rank p-values (``agent_swarm.orchestrator.eval_stats``).

    flock /work/heavy.lock python bench/bench_hedging.py --episodes 40 --out bench/results/hedging.json.gz
    python bench/bench_hedging.py --report bench/results/hedging.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.orchestrator.eval_stats import paired
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.config import Hedge
from agent_swarm.swarm.messages import ToolMessage
from agent_swarm.swarm.testing import FunctionBackend, call
from agent_swarm.tools import tool

ARMS: dict[str, Hedge | None] = {
    "off": None,
    "quorum": Hedge(quorum=0.875),
    "cut": Hedge(straggler_factor=3.0),
    "backup": Hedge(straggler_factor=3.0, backup=True),
}


@tool
def fetch(item: int) -> str:
    """Fetch one item."""
    return f"item {item}"


def latency(seed: int, agent_id: str, step: int, args: argparse.Namespace) -> float:
    """A Pareto draw (heavy tail), the same for the same (seed, agent, step) in every arm."""
    h = hashlib.sha256(f"{seed}/{agent_id}/{step}".encode()).digest()
    u = (int.from_bytes(h[:8], "big") + 1) / (2**64 + 2)
    return float(min(args.scale / u ** (1.0 / args.alpha), args.cap))


def _backends(seed: int, args: argparse.Namespace) -> tuple[FunctionBackend, FunctionBackend]:
    def policy(request: ModelRequest) -> Completion:
        if any(isinstance(m, ToolMessage) for m in request.messages):
            return Completion(text="done")
        calls = tuple(call("assign_task", agent="worker", task=f"part {i} of job {seed}") for i in range(args.width))
        return Completion(tool_calls=calls)

    async def worker(request: ModelRequest) -> Completion:
        step = sum(isinstance(m, ToolMessage) for m in request.messages)
        await anyio.sleep(latency(seed, request.agent_id, step, args))
        if step + 1 >= args.steps:
            return Completion(text=f"{request.agent_id}: finished")
        return Completion(text=f"step {step}", tool_calls=(call("fetch", item=step),))

    return FunctionBackend(policy, model="scripted-orchestrator"), FunctionBackend(worker, model="pareto-worker")


async def episode(arm: str, index: int, args: argparse.Namespace) -> dict[str, Any]:
    seed = args.seed * 1_000_003 + index
    orch_b, sub_b = _backends(seed, args)
    cfg = SwarmConfig(hedge=ARMS[arm], max_subagent_steps=args.steps + 2, max_subagents_per_stage=args.width)
    t0 = time.perf_counter()
    record = await Orchestrator(orch_b, cfg, tools=[fetch], subagent_backend=sub_b).run(
        f"job {seed}", episode_id=f"{arm}-{index}"
    )
    wall = time.perf_counter() - t0
    subs = record.stages[0].subagents
    return {
        "arm": arm,
        "episode": index,
        "seed": seed,
        "status": record.status.value,
        "answer": record.answer,
        "wall_s": wall,
        "record_wall_s": record.wall_time_s,
        "critical_steps": record.dag.critical_steps,
        "total_steps": record.dag.total_steps,
        "subagents": [
            {"agent_id": r.agent_id, "status": r.status.value, "steps": r.steps, "error_type": r.error_type}
            for r in subs
        ],
        # one completed run at most per call (a backup's loser is cut): completed runs = completed calls
        "calls_completed": sum(r.status.value == "completed" for r in subs),
    }


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


async def run_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for i in range(args.episodes):  # arms interleaved per episode: drift in machine load hits all alike
        for arm in ARMS:
            rows.append(await episode(arm, i, args))
    return rows


def report(path: Path) -> str:
    data = json.loads(gzip.decompress(path.read_bytes()))
    rows = data["episodes"]
    by_arm: dict[str, dict[int, dict[str, Any]]] = {}
    for r in rows:
        by_arm.setdefault(r["arm"], {})[r["episode"]] = r
    base = by_arm["off"]
    eps = sorted(base)
    cfg = data["config"]
    lines = [
        f"Straggler hedging, {cfg['width']} sub-agents x {cfg['steps']} steps per episode, Pareto latency "
        f"(scale {cfg['scale']} s, alpha {cfg['alpha']}, cap {cfg['cap']} s); n = {len(eps)} episodes per arm, "
        f"paired with `off`; commit {data['commit'][:12]}; load {data['load_before']} -> {data['load_after']}",
        "",
        "| arm | mean wall s | median wall s | diff vs off (95% CI) | sign p | Wilcoxon p | calls completed | "
        "steps (all agents) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    a = [base[e]["wall_s"] for e in eps]
    for arm, got in by_arm.items():
        b = [got[e]["wall_s"] for e in eps]
        done = sum(got[e]["calls_completed"] for e in eps) / (len(eps) * cfg["width"])
        steps = sum(got[e]["total_steps"] for e in eps) / len(eps)
        med = sorted(b)[len(b) // 2]
        if arm == "off":
            lines.append(f"| off | {sum(b) / len(b):.3f} | {med:.3f} | - | - | - | {done:.3f} | {steps:.1f} |")
            continue
        p = paired(a, b, seed=0)
        lines.append(
            f"| {arm} | {p.mean_b:.3f} | {med:.3f} | {p.diff:+.3f} ({p.ci_low:+.3f}, {p.ci_high:+.3f}) | "
            f"{p.sign_p:.2g} | {p.wilcoxon_p:.2g} ({p.wilcoxon_method}) | {done:.3f} | {steps:.1f} |"
        )
    lines.append("")
    lines.append(
        "calls completed: share of assign_task calls whose result was a completed sub-agent (a cut straggler's "
        "call is not); steps: per episode, the orchestrator's and every sub-agent's (backups and cut stragglers "
        "included)."
    )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=40)
    p.add_argument("--width", type=int, default=8)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--scale", type=float, default=0.02, help="Pareto scale (the fastest step), seconds")
    p.add_argument("--alpha", type=float, default=1.3, help="Pareto shape (smaller: heavier tail)")
    p.add_argument("--cap", type=float, default=3.0, help="longest step, seconds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path)
    p.add_argument("--report", type=Path, help="print the table from a raw file and exit")
    args = p.parse_args()
    if args.report is not None:
        print(report(args.report))
        return
    load_before = " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "?"
    rows = anyio.run(run_all, args)
    load_after = " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "?"
    data = {
        "commit": _commit(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_after": load_after,
        "config": {k: v for k, v in vars(args).items() if k not in ("out", "report")},
        "arms": {k: (v.model_dump() if v is not None else None) for k, v in ARMS.items()},
        "episodes": rows,
    }
    out = args.out or Path("bench/results/hedging.json.gz")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(gzip.compress(json.dumps(data, indent=1).encode(), mtime=0))
    print(report(out))


if __name__ == "__main__":
    main()
