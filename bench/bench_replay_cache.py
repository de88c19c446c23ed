"""Rollout throughput with and without the sub-agent replay cache (issue 28), on a real local model.

The rollout: ``T`` starter tasks × ``K`` samples (a GRPO group), the starter workload's scripted gold
orchestrator (so the K samples of a group assign the same sub-tasks, the sharing the cache exists for)
and real sub-agents on the local model (default ``qwen2.5-coder-0.5b``, greedy, ``--max-tokens`` per
turn). Three arms, run in turn round by round in one process on one engine (its load is not timed):

* ``off``: no cache, every sub-agent call reaches the engine;
* ``cold``: a fresh cache directory; identical calls in flight at once are computed once, the K
  samples of a group share them;
* ``warm``: the directory the same round's ``cold`` run filled: the rollout a later trainer step or
  epoch replays.

Each run writes every episode (task, sample, answer, sub-agent reports, r_perf, status, steps, tokens,
wall time, cache counts) into ``--out`` with the commit, model sha256, config and load average before
and after. The report gives, per arm, the speed-up over the same round's uncached run (geometric mean,
bootstrap CI, sign test), the share of sub-agent reports equal to that run's and r_perf against it
episode by episode; and, as the yardstick for those, how far uncached runs agree with each other
(llama.cpp's greedy decoding of concurrent, batched requests is not bit-reproducible) and whether each
warm run replayed its cold run exactly. The committed files are gzipped (``gzip -9``)::

    flock -w 1200 /work/heavy.lock python bench/bench_replay_cache.py --tasks 4 -k 8 --items 4 --rounds 5 \\
        --out bench/results/replay_cache_t4k8.json
    python bench/bench_replay_cache.py --report bench/results/replay_cache_t4k8.json.gz   # the table again

``--backend gold`` runs the same harness on the gold sub-agents (no model: a check of the script).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agent_swarm.orchestrator.backend_factory import build_backends, model_identity  # noqa: E402
from agent_swarm.orchestrator.eval import workload_orchestrator_factory  # noqa: E402
from agent_swarm.orchestrator.rollout.collection import collect_rollouts  # noqa: E402
from agent_swarm.orchestrator.rollout.config import RolloutConfig  # noqa: E402
from agent_swarm.swarm.backend import ModelBackend, ModelRequest, SamplingParams  # noqa: E402
from agent_swarm.swarm.backends.replay_cache import CachedBackend, ReplayCache  # noqa: E402
from agent_swarm.swarm.config import SwarmConfig  # noqa: E402
from agent_swarm.swarm.messages import UserMessage  # noqa: E402
from agent_swarm.swarm.records import Task  # noqa: E402
from agent_swarm.swarm.rl.export import read_jsonl  # noqa: E402
from agent_swarm.swarm.rl.rewards import PARLReward  # noqa: E402
from agent_swarm.workloads import get_workload  # noqa: E402

ARMS = ("off", "cold", "warm")


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False).stdout.strip()


def _loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def _episodes(out: Path) -> list[dict[str, Any]]:
    rows = []
    for entry in read_jsonl(out / "episodes.jsonl"):
        rec = entry["record"]
        reward = rec.get("reward") or {}
        subs = [r for s in rec["stages"] for r in s["subagents"]]
        rows.append(
            {
                "task_id": entry["group_id"],
                "sample": entry["sample_index"],
                "answer": rec.get("answer"),
                "reports": [r["report"] for r in subs],
                "subagent_steps": [r["steps"] for r in subs],
                "subagent_statuses": [r["status"] for r in subs],
                "r_perf": reward.get("r_perf"),
                "status": rec["status"],
                "critical_steps": rec["dag"]["critical_steps"],
                "total_steps": rec["dag"]["total_steps"],
                "subagent_tokens": rec["subagent_usage"],
                "wall_time_s": rec["wall_time_s"],
                "subagent_cache": rec["metadata"].get("subagent_cache", {}),
            }
        )
    return sorted(rows, key=lambda r: (r["task_id"], r["sample"]))


async def _run(
    arm: str, tasks: list[Task], engine: ModelBackend, cache_dir: Path | None, model_id: str, args: argparse.Namespace
) -> dict[str, Any]:
    """One rollout of ``tasks`` × K; the sub-agents on ``engine``, behind the cache in ``cache_dir``."""
    wl = get_workload("starter")
    cache = ReplayCache(cache_dir) if cache_dir is not None else None
    sub: ModelBackend = CachedBackend(engine, cache, model_id=model_id) if cache is not None else engine
    before = len(cache) if cache is not None else 0

    def backends(task: Task, mode: Any) -> tuple[ModelBackend, ModelBackend]:
        policy = wl.gold_policy(task, mode)
        if args.backend != "gold":
            return policy.orchestrator, sub
        gold = policy.subagent  # per task: the gold worker knows its task's answers
        return policy.orchestrator, CachedBackend(gold, cache, model_id=model_id) if cache is not None else gold

    sampling = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    swarm_cfg = SwarmConfig(subagent_sampling=sampling)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        summary = await collect_rollouts(
            tasks,
            workload_orchestrator_factory(backends, mode="swarm", overrides={"max_subagent_steps": args.steps}),
            out_dir=Path(tmp),
            config=RolloutConfig(group_size=args.k, max_concurrent_episodes=len(tasks) * args.k, seed=0),
            swarm_config=swarm_cfg,
            reward=PARLReward(),
        )
        wall = time.perf_counter() - started
        episodes = _episodes(Path(tmp))
    stored = len(cache) if cache is not None else 0
    if cache is not None:
        cache.close()
    return {
        "arm": arm,
        "wall_s": round(wall, 3),
        "episodes": summary.episodes,
        "episodes_per_min": round(60 * summary.episodes / wall, 2) if wall else None,
        "subagent_calls": sum(len(e["reports"]) for e in episodes),
        "subagent_cache": summary.subagent_cache,
        "stored_before": before,
        "stored_after": stored,
        "mean_r_perf": summary.mean_r_perf,
        "crashed": summary.crashed_episodes,
        "rows": episodes,
    }


async def _bench(args: argparse.Namespace) -> dict[str, Any]:
    tasks = get_workload("starter").tasks(args.tasks, seed=args.seed, split="train", max_items=args.items)
    if args.backend == "gold":
        engine: ModelBackend | None = None
        model_id = "gold"
    else:
        options: dict[str, Any] = {"slots": args.slots} if args.slots else {}
        engine, _ = build_backends("local", model=args.model, **options)
        model_id = model_identity("local", args.model)
        warm_up = ModelRequest(messages=(UserMessage(content="Say hi."),), sampling=SamplingParams(max_tokens=2))
        await engine.complete(warm_up)  # the engine starts (loads the model) before any timed run
    runs: list[dict[str, Any]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as caches:
        for rnd in range(args.rounds):
            per_round = (time.perf_counter() - started) / rnd if rnd else 0.0
            if rnd and time.perf_counter() - started + per_round > 60 * args.max_minutes:
                print(f"stopping after {rnd} rounds: another would pass --max-minutes", file=sys.stderr)
                break
            cold = Path(caches) / f"round{rnd}"
            for arm in ARMS:
                load = _loadavg()
                run = await _run(arm, tasks, engine, None if arm == "off" else cold, model_id, args)  # type: ignore[arg-type]
                runs.append({"round": rnd, "loadavg_before": load, "loadavg_after": _loadavg(), **run})
                print(
                    f"round {rnd} {arm:<4} {run['wall_s']:8.2f} s  {run['subagent_cache'] or '-'}",
                    file=sys.stderr,
                    flush=True,
                )
    close = getattr(engine, "aclose", None)
    if close is not None:
        await close()
    return {
        "bench": "replay_cache",
        "commit": _git("rev-parse", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "backend": args.backend,
        "model": args.model if args.backend != "gold" else "gold",
        "model_id": model_id,
        "config": {k: v for k, v in vars(args).items() if k not in ("out", "report")},
        "cpus": os.cpu_count(),
        "command": " ".join(sys.argv),
        "tasks": [t.id for t in tasks],
        "runs": runs,
    }


def _reports(r: dict[str, Any]) -> list[str]:
    return [x for e in r["rows"] for x in e["reports"]]


def _agreement(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The share of sub-agent reports two runs of the same rollout have in common, position by position."""
    pairs = list(zip(_reports(a), _reports(b), strict=True))
    return sum(x == y for x, y in pairs) / len(pairs) if pairs else 1.0


def _model_calls(arm: str, r: dict[str, Any]) -> int:
    # a sub-agent step is one model call; with the cache only misses (and bypassed calls) reach the model
    if arm == "off":
        return sum(sum(e["subagent_steps"]) for e in r["rows"])
    return int(r["subagent_cache"].get("misses", 0) + r["subagent_cache"].get("bypassed", 0))


def _bootstrap(xs: list[float], stat: Any, n: int = 2000) -> tuple[float, float]:
    """95 % percentile bootstrap interval of ``stat`` over ``xs`` (seeded: the report is reproducible)."""
    rng = random.Random(0)
    boots = sorted(stat([rng.choice(xs) for _ in xs]) for _ in range(n))
    return boots[int(0.025 * n)], boots[int(0.975 * n) - 1]


def _sign_p(diffs: list[float]) -> float:
    """Two-sided exact sign test of ``diffs`` against 0 (ties dropped)."""
    pos, neg = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
    n, k = pos + neg, min(pos, neg)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n) if n else 1.0


def _geomean(xs: list[float]) -> float:
    return math.exp(statistics.mean(math.log(x) for x in xs))


def _paired(arm: str, by_arm: dict[str, list[dict[str, Any]]], off: dict[int, dict[str, Any]]) -> list[str]:
    """Speed-up over the same round's uncached run and r_perf against it, episode by episode."""
    rs = by_arm[arm]
    ratios = [off[r["round"]]["wall_s"] / r["wall_s"] for r in rs if r["wall_s"]]
    lo, hi = _bootstrap(ratios, _geomean)
    base = {(r["round"], e["task_id"], e["sample"]): e["r_perf"] or 0.0 for r in off.values() for e in r["rows"]}
    diffs = [(e["r_perf"] or 0.0) - base[(r["round"], e["task_id"], e["sample"])] for r in rs for e in r["rows"]]
    dlo, dhi = _bootstrap(diffs, statistics.mean)
    return [
        f"- {arm}: speed-up {_geomean(ratios):.2f}× (geometric mean, 95 % CI {lo:.2f}–{hi:.2f}, n = {len(ratios)} "
        f"rounds, faster in {sum(x > 1 for x in ratios)}, sign test p = {_sign_p([x - 1 for x in ratios]):.3f}); "
        f"r_perf − off's {statistics.mean(diffs):+.3f} (95 % CI {dlo:+.3f} to {dhi:+.3f}, n = {len(diffs)} "
        f"episodes, sign test p = {_sign_p(diffs):.2f})"
    ]


def report(data: dict[str, Any]) -> str:
    """The markdown table of a results file: per arm, median wall time and range over the rounds,
    episodes/min, model calls, the speed-up over the same round's uncached run, the share of sub-agent
    reports equal to that run's, and the mean r_perf; then how far uncached runs agree with each other
    and whether each warm run replayed its cold run exactly."""
    runs = data["runs"]
    by_arm = {a: [r for r in runs if r["arm"] == a] for a in ARMS}
    off = {r["round"]: r for r in by_arm["off"]}
    cfg = data["config"]
    lines = [
        f"{len(data['tasks'])} tasks × K = {cfg['k']}, {data['model']} sub-agents (greedy, {cfg['max_tokens']} "
        f"tokens per turn), n = {len(by_arm['off'])} rounds, commit {data['commit'][:10]}",
        "",
        "| arm | wall s, median (range) | episodes/min | model calls / run | speed-up vs off, per round | "
        "reports equal to off's | mean r_perf |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for arm, rs in by_arm.items():
        walls = [r["wall_s"] for r in rs]
        ratios = [off[r["round"]]["wall_s"] / r["wall_s"] for r in rs if r["wall_s"]]
        agree = statistics.mean(_agreement(r, off[r["round"]]) for r in rs)
        lines.append(
            f"| {arm} | {statistics.median(walls):.1f} ({min(walls):.1f}–{max(walls):.1f}) | "
            f"{statistics.median(r['episodes_per_min'] or 0 for r in rs):.1f} | "
            f"{statistics.median(_model_calls(arm, r) for r in rs):.0f} | "
            f"{', '.join(f'{x:.2f}×' for x in ratios)} | {agree:.1%} | "
            f"{statistics.mean(r['mean_r_perf'] for r in rs):.3f} |"
        )
    offs = by_arm["off"]
    cold = {r["round"]: r for r in by_arm["cold"]}
    replayed = sum(_reports(r) == _reports(cold[r["round"]]) for r in by_arm["warm"])
    between = [_agreement(a, b) for i, a in enumerate(offs) for b in offs[i + 1 :]]
    loads = [r["loadavg_before"].split()[0] for r in runs] + [r["loadavg_after"].split()[0] for r in runs]
    lines += ["", *_paired("cold", by_arm, off), *_paired("warm", by_arm, off)]
    lines += [
        "",
        f"Uncached runs agree with each other on {statistics.mean(between):.1%} of reports "
        f"(range {min(between):.1%}–{max(between):.1%}, {len(between)} pairs)"
        if between
        else "One uncached run.",
        f"Warm runs equal to their round's cold run, report for report: {replayed}/{len(by_arm['warm'])}.",
        f"1-min load average over the runs: {min(loads)}–{max(loads)} ({data['cpus']} CPUs)",
    ]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--backend", choices=("local", "gold"), default="local")
    p.add_argument("--tasks", type=int, default=2, help="starter tasks (T)")
    p.add_argument("-k", type=int, default=4, help="samples per task (K)")
    p.add_argument("--items", type=int, default=3, help="most items (sub-tasks) per task")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=2, help="step cap of one sub-agent")
    p.add_argument("--max-tokens", type=int, default=48, help="sub-agent tokens per turn")
    p.add_argument("--slots", type=int, default=0, help="local engine slots (0: the engine's choice)")
    p.add_argument("--seed", type=int, default=28)
    p.add_argument("--max-minutes", type=float, default=8.0, help="start no round that would end past this")
    p.add_argument("--out", type=Path, help="write the raw results (JSON) here")
    p.add_argument("--report", type=Path, help="print the table of a results file and exit")
    args = p.parse_args()
    if args.report:
        raw = gzip.decompress(args.report.read_bytes()) if args.report.suffix == ".gz" else args.report.read_bytes()
        print(report(json.loads(raw)))
        return
    data = anyio.run(_bench, args)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(report(data))


if __name__ == "__main__":
    main()
