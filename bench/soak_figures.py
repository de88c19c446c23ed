"""The soak's figures in bench/README.md, from a committed run directory (one command):

    python bench/soak.py --keep OUT bench/results/soak-30min      # after a run: the raw files, compressed
    python bench/soak_figures.py bench/results/soak-30min          # the table in bench/README.md

The directory holds the run's ``report.json`` (command, commit, load, lifetimes, the checks' problems),
``server.jsonl.gz`` (every request the fault server answered: time, agent kind, episode seed, fault),
``probe.jsonl.gz`` (RSS, fds, threads and tasks by kind every 2 s inside the rollout process) and
``episodes.jsonl.gz`` (one line per recorded episode: status, reward, steps, tokens, wall time, sub-agent
statuses; the full records are hundreds of MB at 1,024-way fan-out and are not kept). Every figure below
is recomputed from those files, not copied from the report.
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any


def _lines(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(x) for x in f if x.strip()]


def _slope(points: list[tuple[float, float]]) -> float | None:
    n = len(points)
    if n < 3:
        return None
    mx, my = sum(p[0] for p in points) / n, sum(p[1] for p in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return None if var == 0 else 60 * sum((x - mx) * (y - my) for x, y in points) / var


def figures(run: Path, warmup_s: float = 60.0) -> dict[str, Any]:
    report = json.loads((run / "report.json").read_text(encoding="utf-8"))
    reqs = [r for r in _lines(run / "server.jsonl.gz") if "f" in r]
    by_hash: dict[str, list[float]] = {}
    for r in reqs:
        by_hash.setdefault(r["h"], []).append(r["t"])
    retryable = [r for r in reqs if r["f"] in ("500", "429", "body", "hang")]
    retried = Counter(r["f"] for r in retryable if any(t > r["t"] for t in by_hash[r["h"]]))
    episodes = _lines(run / "episodes.jsonl.gz")
    samples = _lines(run / "probe.jsonl.gz")
    lives: list[list[dict[str, Any]]] = []
    for s in samples:
        if not lives or s["up_s"] < lives[-1][-1]["up_s"]:
            lives.append([])
        lives[-1].append(s)
    processes = []
    for life in lives:
        warm = [(s["up_s"], s["rss_mb"]) for s in life if s["up_s"] >= warmup_s]
        slope = _slope(warm)
        processes.append(
            {
                "minutes": round(life[-1]["up_s"] / 60, 1),
                "rss_mb_max": max(s["rss_mb"] for s in life),
                "rss_slope_mb_per_min_after_warmup": None if slope is None else round(slope, 2),
                "fds_min_max": [min(s["fds"] for s in life), max(s["fds"] for s in life)],
                "tasks_max": max(s["tasks"] for s in life),
            }
        )
    return {
        "command": report["command"],
        "commit": report.get("commit"),
        "load_before_after": report.get("load_before_after", report.get("load_average")),
        "processes": [life["stopped_by"] for life in report["lifetimes"]],
        "requests": len(reqs),
        "faults": {
            k: {"injected": n, "retried": retried.get(k, 0)} for k, n in Counter(r["f"] for r in reqs).items() if k
        },
        "episodes_recorded": len(episodes),
        "distinct_episodes": len({(e["group_id"], e["sample_index"]) for e in episodes}),
        "statuses": dict(Counter(e["status"] for e in episodes)),
        "r_perf_1_fraction": round(sum(e["r_perf"] == 1.0 for e in episodes) / len(episodes), 4) if episodes else None,
        "subagents": dict(sum((Counter(e["subagents"]) for e in episodes), Counter())),
        "per_process": processes,
        "problems": report["problems"],
    }


def main() -> None:
    run = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/soak-30min")
    print(json.dumps(figures(run), indent=1))


if __name__ == "__main__":
    main()
