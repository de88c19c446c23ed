"""Issue 27's gate for the one deadline primitive: ``bench/bench_runtime.py`` (realistic workload, 20 ms
model latency, N = 1,024, runtime and bare anyio in fresh processes) before (``DeadlineWatch``, main at
2b31f7d) and after (anyio cancel scopes), six interleaved rounds each on the shared 2-core machine.

Raw data: ``experiments/results/deadline_gate/{before,after}-<round>.json`` (one ``bench_runtime.py --json``
output per round: rounds 1-3 ran before then after, rounds 4-6 after then before). Regenerate a round with
``python bench/bench_runtime.py --n 1024 --latency 20ms --impl anyio runtime --repeat 1 --json`` on each
commit. This script prints the table: ``python experiments/deadline_gate.py``.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

RAW = Path(__file__).resolve().parent / "results" / "deadline_gate"
COLUMNS = ("wall_over_ideal", "cpu_us_per_step", "x_anyio_wall", "x_anyio_cpu", "rss_kib_per_subagent")


def rows(side: str) -> list[dict[str, float]]:
    out = []
    for path in sorted(RAW.glob(f"{side}-*.json")):
        (cell,) = json.loads(path.read_text())
        out.append({c: float(cell["runtime"][c]) for c in COLUMNS})
    return out


def main() -> None:
    print("| side | n | " + " | ".join(f"{c} (median, min-max)" for c in COLUMNS) + " |")
    print("| --- | --- |" + " --- |" * len(COLUMNS))
    for side in ("before", "after"):
        data = rows(side)
        cells = []
        for c in COLUMNS:
            xs = [r[c] for r in data]
            cells.append(f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})")
        print(f"| {side} | {len(data)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
