"""bench_runtime's realistic workload on two checkouts, interleaved: does a change keep the runtime's
overhead (issue 32: "with no new budget set, the realistic workload stays within 3 % of today")?

Each run is one fresh process of ``bench/bench_runtime.py --one runtime N 3 LAT realistic`` (library
defaults, no budget set) from that checkout's own tree; rounds alternate which checkout goes first.
Raw per-run JSON (with commit, load before/after, start time) goes to ``--out``; ``--report`` prints
the table from it (median and range over runs, head/base ratio of the medians).

    flock -w 600 /work/heavy.lock python bench/runtime_vs_commit.py --base ../base --head . --rounds 5 \\
        --out bench/results/runtime_vs_commit.json
    python bench/runtime_vs_commit.py --report bench/results/runtime_vs_commit.json

``--peers RAW`` prints the same kind of table (median [range] per implementation) from a run of the
outside peer suite (its ``raw.json``; our runtime plugged in through ``bench/peer_adapter.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _commit(tree: Path) -> str:
    return subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


def _one(tree: Path, n: int, latency: bool) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "bench/bench_runtime.py",
        "--one",
        "runtime",
        str(n),
        "3",
        "1" if latency else "0",
        "realistic",
    ]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before, t0 = _load(), time.time()
    out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=True).stdout
    m: dict[str, Any] = json.loads(out)
    m.update(started=t0, load_before=before, load_after=_load())
    m["cpu_us_per_step"] = 1e6 * m["cpu_s"] / max(1, m["subagent_steps"])
    m["wall_over_ideal"] = m["wall_s"] / m["ideal_s"] if m["ideal_s"] else None
    return m


def run(base: Path, head: Path, rounds: int, n: int) -> dict[str, Any]:
    trees = {"base": base.resolve(), "head": head.resolve()}
    runs: list[dict[str, Any]] = []
    for r in range(rounds):
        order = ["base", "head"] if r % 2 == 0 else ["head", "base"]
        for latency in (False, True):
            for label in order:
                m = _one(trees[label], n, latency)
                m.update(label=label, round=r)
                runs.append(m)
                print(f"round {r} {label} latency={latency}: {m['cpu_us_per_step']:.1f} µs/step", file=sys.stderr)
    commits = {k: _commit(v) for k, v in trees.items()}
    return {"n": n, "stages": 3, "workload": "realistic", "commits": commits, "runs": runs}


def report(data: dict[str, Any]) -> str:
    lines = [
        f"N={data['n']}, {data['stages']} stages, realistic, runtime, library defaults; "
        f"base {data['commits']['base'][:7]}, head {data['commits']['head'][:7]}",
        f"{'measure':<22} {'base median [range]':>28} {'head median [range]':>28} {'head/base':>9} {'n':>3}",
    ]
    for latency, key in ((False, "cpu_us_per_step"), (True, "wall_over_ideal"), (True, "cpu_us_per_step")):
        cells, med = [], {}
        for label in ("base", "head"):
            xs = [r[key] for r in data["runs"] if r["label"] == label and r["latency"] == latency]
            med[label] = statistics.median(xs)
            cells.append(f"{med[label]:.3f} [{min(xs):.3f}, {max(xs):.3f}]")
        name = f"{key} ({'20ms' if latency else '0 ms'})"
        lines.append(f"{name:<22} {cells[0]:>28} {cells[1]:>28} {med['head'] / med['base']:>9.3f} {len(xs):>3}")
    loads = [r["load_before"] for r in data["runs"]] + [r["load_after"] for r in data["runs"]]
    lines.append(f"load (1/5/15 min) first {loads[0]}, last {loads[-1]}")
    return "\n".join(lines)


def peers_report(data: dict[str, Any], ratio_to: str | None = None) -> str:
    """The table of a peer-suite run (its ``raw.json``: ``run_suite.py --out DIR``): per implementation
    and N, median [range] over the repetitions of wall/ideal and CPU µs per sub-agent step (latency
    variant), and CPU µs per step of the 0-latency variant; with ``ratio_to``, each median over that
    implementation's."""
    meta = data["meta"]
    lines = [
        f"peer suite, {meta['reps']} reps, started {meta['started']}, load {meta['load_before']} -> "
        f"{meta['load_after']}",
        f"{'implementation':<22} {'N':>5} {'wall/ideal 20 ms':>24} {'CPU us/step 20 ms':>24} "
        f"{'CPU us/step 0 ms':>24} {'n':>3}",
    ]
    medians: dict[tuple[str, int], list[float]] = {}
    for impl in meta["impls"]:
        for n in sorted({r["n"] for r in data["records"] if r["impl"] == impl}):
            rs = [r for r in data["records"] if r["impl"] == impl and r["n"] == n and "wall_s" in r]
            lat = [r for r in rs if r["variant"] == "lat"]
            columns = (
                [r["wall_s"] / r["ideal_s"] for r in lat],
                [1e6 * r["cpu_s"] / r["steps"] for r in lat],
                [1e6 * r["cpu_s"] / r["steps"] for r in rs if r["variant"] == "zero"],
            )
            medians[impl, n] = [statistics.median(xs) if xs else float("nan") for xs in columns]
            cells = [f"{statistics.median(xs):.3f} [{min(xs):.3f}, {max(xs):.3f}]" if xs else "-" for xs in columns]
            lines.append(f"{impl:<22} {n:>5} {cells[0]:>24} {cells[1]:>24} {cells[2]:>24} {len(lat):>3}")
    if ratio_to is not None:
        lines.append(f"medians over {ratio_to}'s (wall/ideal 20 ms, CPU 20 ms, CPU 0 ms):")
        for (impl, n), ms in medians.items():
            ref = medians.get((ratio_to, n))
            if ref is not None and impl != ratio_to:
                lines.append(f"  {impl:<20} {n:>5} " + " ".join(f"{m / r:.3f}" for m, r in zip(ms, ref, strict=True)))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", type=Path)
    p.add_argument("--head", type=Path)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--out", type=Path)
    p.add_argument("--report", type=Path, help="print the table of a results file and exit")
    p.add_argument("--peers", type=Path, help="print the table of a peer-suite raw.json and exit")
    p.add_argument("--ratio-to", help="with --peers: also each median over this implementation's")
    args = p.parse_args(argv)
    if args.report:
        print(report(json.loads(args.report.read_text())))
        return 0
    if args.peers:
        print(peers_report(json.loads(args.peers.read_text()), args.ratio_to))
        return 0
    if args.base is None or args.head is None or args.out is None:
        p.error("--base, --head and --out are needed to run (or --report FILE)")
    data = run(args.base, args.head, args.rounds, args.n)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(report(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
