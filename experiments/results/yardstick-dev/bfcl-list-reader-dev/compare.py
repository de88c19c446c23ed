"""Per-task BFCL swarm episodes of several dev runs side by side (call-F1, sub-agents, calls emitted, wall s).

python experiments/results/yardstick-dev/bfcl-list-reader-dev/compare.py RUN_DIR...
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from pathlib import Path
from typing import Any


def rows(run: Path) -> dict[str, dict[str, Any]]:
    with gzip.open(run / "episodes.jsonl.gz", "rt", encoding="utf-8") as f:
        return {r["task_id"]: r for r in map(json.loads, f) if r["arm"] == "swarm"}


def main(dirs: list[str]) -> None:
    runs = [(Path(d).name, rows(Path(d))) for d in dirs]
    tasks = sorted(runs[0][1])
    print("| task | " + " | ".join(name for name, _ in runs) + " |")
    print("|---|" + "---|" * len(runs))
    for t in tasks:
        cells = []
        for _, r in runs:
            e = r[t]
            calls, wall = e["scores"]["emitted_calls"], e["wall_time_s"]
            cells.append(f"{e['metric']:.3f} · {e['subagents']} sub · {calls} calls · {wall:.0f} s")
        print(f"| {t} | " + " | ".join(cells) + " |")
    means = []
    for _, r in runs:
        es = [r[t] for t in tasks]
        mean = statistics.mean(e["metric"] for e in es)
        fanned = sum(e["subagents"] > 0 for e in es)
        calls = sum(e["scores"]["emitted_calls"] for e in es)
        wall = statistics.median(e["wall_time_s"] for e in es)
        means.append(f"**{mean:.3f}** · fan-out {fanned}/{len(es)} · {calls} calls · median {wall:.0f} s")
    print("| mean | " + " | ".join(means) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
