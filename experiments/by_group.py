"""Per-arm results of one ``swarm eval`` run, grouped by a task metadata key (from raw files only).

    python experiments/by_group.py RUN_DIR [--key control]

Reads the run's ``episodes.jsonl.gz`` and its tasks (``tasks.jsonl`` or ``tasks.jsonl.gz``) and prints,
per arm and group: episodes, mean quality, the share that created a sub-agent, and episodes that did not
complete. The controls workload groups its tasks as ``fact``, ``arithmetic`` and ``lookup``.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections import defaultdict
from pathlib import Path

from agent_swarm.orchestrator.eval_raw import RAW_FILE, read_raw


def _tasks(run: Path) -> dict[str, dict[str, object]]:
    plain, packed = run / "tasks.jsonl", run / "tasks.jsonl.gz"
    if plain.is_file():
        text = plain.read_text()
    else:
        with gzip.open(packed, "rt") as f:
            text = f.read()
    return {t["id"]: t for t in map(json.loads, text.splitlines()) if t}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--key", default="control", help="task metadata key to group by")
    args = ap.parse_args()
    tasks = _tasks(args.run)
    rows, _ = read_raw(args.run / RAW_FILE)
    cells: dict[tuple[str, str], list[tuple[float, bool, bool]]] = defaultdict(list)
    for r in rows:
        meta = tasks[r.task_id]["metadata"]
        group = str(meta.get(args.key) if isinstance(meta, dict) else None)
        cells[(r.arm, group)].append((r.metric, r.subagents > 0, r.status != "completed"))
    print(f"| arm | {args.key} | episodes | quality | created a sub-agent | not completed |")
    print("|---|---|---:|---:|---:|---:|")
    for (arm, group), xs in sorted(cells.items()):
        n = len(xs)
        q, d, nc = (sum(x[i] for x in xs) for i in range(3))
        print(f"| {arm} | {group} | {n} | {q / n:.3f} | {d / n:.2f} | {int(nc)} |")


if __name__ == "__main__":
    main()
