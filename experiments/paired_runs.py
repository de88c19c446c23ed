"""One arm of two eval runs, compared task by task (a dev-split change measured before and after).

    python experiments/paired_runs.py BEFORE_DIR AFTER_DIR [--arm swarm] [--after-arm ARM]

Each directory is a ``swarm eval`` run (``manifest.json`` and ``episodes.jsonl.gz``, or ``episodes.jsonl``).
Only the tasks both runs finished are paired. Prints one markdown row: n, both means, the mean difference
with its 95 % bootstrap CI, wins/losses/ties, the sign and Wilcoxon p-values, the share of answers that hold
a markdown table, and median tokens and wall time of each side.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path

from agent_swarm.orchestrator.eval_raw import RawEpisode, read_raw
from agent_swarm.orchestrator.eval_stats import paired


def _rows(run: Path, arm: str) -> dict[str, RawEpisode]:
    path = run / "episodes.jsonl.gz"
    if not path.exists():
        path = run / "episodes.jsonl"
    rows, _ = read_raw(path)
    return {r.task_id: r for r in rows if r.arm == arm and r.sample == 0}


def _tokens(r: RawEpisode) -> int:
    return sum(u.prompt + u.completion for u in r.tokens.values())


def _wall(r: RawEpisode) -> float:
    return r.wall_time_s


def _table(r: RawEpisode) -> bool:
    return "|" in (r.answer or "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--arm", default="swarm", help="the arm to compare (default swarm)")
    ap.add_argument("--after-arm", default=None, help="the after run's arm, when it differs")
    args = ap.parse_args()
    a, b = _rows(args.before, args.arm), _rows(args.after, args.after_arm or args.arm)
    tasks = sorted(set(a) & set(b))
    if not tasks:
        raise SystemExit(f"no task finished in both runs for arm {args.arm!r}")
    p = paired([a[t].metric for t in tasks], [b[t].metric for t in tasks])

    def share(rows: dict[str, RawEpisode]) -> int:
        return sum(_table(rows[t]) for t in tasks)

    def med(f: Callable[[RawEpisode], float], rows: dict[str, RawEpisode]) -> float:
        return statistics.median(f(rows[t]) for t in tasks)

    print(
        "| n | before | after | after − before [95 % CI] | wins/losses/ties | sign p | Wilcoxon p "
        "| tables before/after | tokens before/after | wall s before/after |"
    )
    print("|---:|---:|---:|---|---|---:|---:|---|---|---|")
    print(
        f"| {p.n} | {p.cells()} | {share(a)}/{share(b)} | {med(_tokens, a):.0f}/{med(_tokens, b):.0f} "
        f"| {med(_wall, a):.0f}/{med(_wall, b):.0f} |"
    )


if __name__ == "__main__":
    main()
