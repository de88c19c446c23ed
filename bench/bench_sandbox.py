"""Sandbox overhead: ``run_python`` (isolated and plain) against a bare ``python -I -c`` subprocess.

Each variant runs the same trivial program (``print(1)``) ``--runs`` times, sequentially and then
``--parallel`` at a time; the report is the median latency per run and its ratio to the bare
subprocess, so the numbers travel between machines. The isolated run (bubblewrap: namespaces, the
root stage and the unprivileged stage when run as root, cgroup, seccomp, supervisor) must stay under
150 ms median for ``print(1)``; the report says whether it does, with the load average.

    python bench/bench_sandbox.py                 # table
    python bench/bench_sandbox.py --runs 20 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from agent_swarm.swarm.sandbox import SandboxLimits, isolation_available, run_python

CODE = "print(1)"


async def _bare(_: Path) -> None:
    await anyio.run_process([sys.executable, "-I", "-c", CODE], stdout=subprocess.PIPE, check=True)


def _sandboxed(isolation: str) -> Callable[[Path], Awaitable[None]]:
    limits = SandboxLimits(isolation=isolation)  # type: ignore[arg-type]

    async def run(ws: Path) -> None:
        res = await run_python(CODE, workspace=ws, limits=limits)
        if res.status != "ok" or res.stdout.strip() != "1":
            raise RuntimeError(f"sandbox run failed: {res}")

    return run


async def _measure(fn: Callable[[Path], Awaitable[None]], ws: Path, runs: int, parallel: int) -> dict[str, float]:
    await fn(ws)  # warm-up (isolation probe, page cache)
    seq: list[float] = []
    for _ in range(runs):
        t = time.perf_counter()
        await fn(ws)
        seq.append(time.perf_counter() - t)
    limiter = anyio.CapacityLimiter(parallel)

    async def one() -> None:
        async with limiter:
            await fn(ws)

    t = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(runs):
            tg.start_soon(one)
    par = (time.perf_counter() - t) / runs
    return {"median_s": statistics.median(seq), "parallel_per_run_s": par}


async def main(runs: int, parallel: int) -> dict[str, object]:
    variants: dict[str, Callable[[Path], Awaitable[None]]] = {"bare": _bare, "plain": _sandboxed("none")}
    iso, why = isolation_available()
    if iso:
        variants["isolated"] = _sandboxed("required")
    with tempfile.TemporaryDirectory() as d:
        out = {name: await _measure(fn, Path(d), runs, parallel) for name, fn in variants.items()}
    base = out["bare"]
    for row in out.values():
        row["ratio_seq"] = row["median_s"] / base["median_s"]
        row["ratio_parallel"] = row["parallel_per_run_s"] / base["parallel_per_run_s"]
    target = out["isolated"]["median_s"] < 0.150 if "isolated" in out else None
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return {
        "runs": runs,
        "parallel": parallel,
        "isolation_available": iso,
        "why_not": why,
        "load_average": load,
        "isolated_under_150ms": target,
        "results": out,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    report = anyio.run(main, args.runs, args.parallel)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"runs={args.runs} parallel={args.parallel} isolation_available={report['isolation_available']} "
            f"load={report['load_average']} isolated_under_150ms={report['isolated_under_150ms']}"
        )
        print(f"{'variant':<10} {'median ms':>10} {'x bare':>7} {'par ms/run':>11} {'x bare':>7}")
        for name, r in report["results"].items():  # type: ignore[attr-defined]
            print(
                f"{name:<10} {r['median_s'] * 1e3:>10.1f} {r['ratio_seq']:>7.2f} "
                f"{r['parallel_per_run_s'] * 1e3:>11.1f} {r['ratio_parallel']:>7.2f}"
            )
