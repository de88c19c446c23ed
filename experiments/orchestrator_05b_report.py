"""Tables and curves of the 0.5B orchestrator run: evaluations (``swarm eval --json`` reports) and
the per-step training metrics (``RUN/metrics.jsonl``, ``RUN/sft/log.jsonl``).

    python experiments/orchestrator_05b_report.py --run experiments/runs/orchestrator-05b \\
        --eval base=experiments/results/orchestrator_05b/base-starter-s0.json ... \\
        --out experiments/orchestrator_05b_results.md
    python experiments/orchestrator_05b_report.py --run RUN --eval-dir traces/eval/i19 --out ...

Each ``--eval LABEL=FILE`` adds one report (or the ``rows.jsonl`` of an interrupted ``swarm eval``,
named ``LABEL-MODE-WORKLOAD-sSEED.rows.jsonl``: its finished episodes, test split); reports of
one label (and workload, mode) over several seeds are pooled, with the mean over seeds and a 95 %
t-interval when there are two or more. Per episode: the workload's metric, success, critical steps,
exact fan-out (sub-agents = parts the task needs: the starter's items, the wide lookup's entities),
over-assignment (more sub-agents than parts), the sub-agents' finish rate, wall time and tokens.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}


def _parts(row: dict[str, Any], report: dict[str, Any]) -> int | None:
    details = row.get("details") or {}
    if "items" in details:
        return int(details["items"])
    entities = (report.get("knobs") or {}).get("entities")
    return int(entities) if entities is not None else None


def episode_stats(report: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per mode: means over the report's episodes."""
    out: dict[str, dict[str, float]] = {}
    by_mode: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in report["rows"]:
        by_mode[row["mode"]].append(row)
    for mode, rows in by_mode.items():
        parts = [_parts(r, report) for r in rows]
        known = [(r, p) for r, p in zip(rows, parts, strict=True) if p is not None]
        finish = [r["finish_rate"] for r in rows if r.get("finish_rate") is not None]
        out[mode] = {
            "episodes": len(rows),
            "metric": statistics.fmean(r["metric"] for r in rows),
            "success": statistics.fmean(float(r["success"]) for r in rows),
            "critical_steps": statistics.fmean(r["critical_steps"] for r in rows),
            "exact_fanout": statistics.fmean(float(r["subagents"] == p) for r, p in known) if known else math.nan,
            "over_assign": statistics.fmean(float(r["subagents"] > p) for r, p in known) if known else math.nan,
            "subagents": statistics.fmean(r["subagents"] for r in rows),
            "finish_rate": statistics.fmean(finish) if finish else math.nan,
            "wall_s": statistics.median(r["wall_time_s"] for r in rows),
            "tokens": statistics.fmean(r["tokens"] for r in rows),
            "errors": sum(1 for r in rows if r["status"] != "completed"),
        }
    return out


def _ci(xs: list[float]) -> str:
    xs = [x for x in xs if not math.isnan(x)]
    if not xs:
        return "–"
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return f"{m:.2f}"
    half = T95.get(len(xs) - 1, 2.0) * statistics.stdev(xs) / math.sqrt(len(xs))
    return f"{m:.2f} ± {half:.2f}"


COLUMNS = [
    ("metric", "quality"),
    ("success", "success"),
    ("critical_steps", "critical steps"),
    ("exact_fanout", "exact fan-out"),
    ("over_assign", "over-assign"),
    ("subagents", "sub-agents"),
    ("finish_rate", "sub-agent finish"),
    ("wall_s", "median wall s"),
    ("tokens", "tokens"),
]


def eval_table(evals: list[tuple[str, dict[str, Any]]]) -> str:
    pooled: dict[tuple[str, str, str], list[tuple[int, dict[str, float]]]] = defaultdict(list)
    meta: dict[tuple[str, str, str], str] = {}
    for label, report in evals:
        for mode, stats in episode_stats(report).items():
            key = (report["workload"], label, mode)
            pooled[key].append((report["seed"], stats))
            meta[key] = f"{report['split']}, {report['metric_name']}"
    lines = [
        "| workload | orchestrator | mode | seeds | episodes | " + " | ".join(c[1] for c in COLUMNS) + " |",
        "|---" * (5 + len(COLUMNS)) + "|",
    ]
    for key in sorted(pooled, key=lambda k: (k[0], k[2] != "swarm", k[1])):
        runs = pooled[key]
        seeds = ",".join(str(s) for s, _ in sorted(runs, key=lambda x: x[0]))
        eps = sum(int(s["episodes"]) for _, s in runs)
        cells = [_ci([s[c] for _, s in runs]) for c, _ in COLUMNS]
        lines.append(f"| {key[0]} ({meta[key]}) | {key[1]} | {key[2]} | {seeds} | {eps} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def curves(run: Path) -> str:
    lines = []
    sft_log = run / "sft" / "log.jsonl"
    if sft_log.is_file():
        rows = [json.loads(x) for x in sft_log.read_text().splitlines() if x]
        lines += ["SFT (masked NLL on the orchestrator's tokens, batch of 4 gold transcripts):", ""]
        lines += ["| step | loss |", "|---|---|"] + [f"| {r['step']} | {r['loss']:.3f} |" for r in rows] + [""]
    metrics = run / "metrics.jsonl"
    if metrics.is_file():
        rows = [json.loads(x) for x in metrics.read_text().splitlines() if x]
        lines += [
            "PARL (per step: one task, K episodes):",
            "",
            "| step | r_perf | reward | λ1 | λ2 | r_parallel | r_finish | critical steps | width | finish | "
            "trained tokens | sequence tokens | masked frac | rollout s | update s |",
            "|---" * 15 + "|",
        ]
        for r in rows:
            lines.append(
                f"| {r['step']} | {r['r_perf']:.3f} | {r['reward']:.3f} | {r['lambda1']:.3f} | {r['lambda2']:.3f} | "
                f"{r['r_parallel']:.3f} | {r['r_finish']:.3f} | {r['mean_critical_steps']:.2f} | "
                f"{r['mean_parallel_width']:.2f} | {r['finish_rate']:.2f} | {r['trained_tokens']} | "
                f"{r['sequence_tokens']} | {r['masked_token_frac']:.3f} | {r['rollout_s']:.0f} | {r['update_s']:.0f} |"
            )
    return "\n".join(lines)


def _load(path: Path) -> dict[str, Any]:
    if not path.name.endswith(".rows.jsonl"):
        return dict(json.loads(path.read_text(encoding="utf-8")))
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x]
    workload, seed = path.name.removesuffix(".rows.jsonl").rsplit("-", 3)[-2:]
    metric = "item_accuracy" if workload == "starter" else "metric"
    meta = {"workload": workload, "seed": int(seed[1:]), "split": "test", "metric_name": metric, "knobs": {}}
    return {**meta, "rows": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--run", type=Path, action="append", required=True, help="a run directory (repeatable: curves of each)"
    )
    ap.add_argument("--eval", action="append", default=[], help="LABEL=report.json (repeatable)")
    ap.add_argument(
        "--eval-dir",
        type=Path,
        default=None,
        help="every LABEL-MODE-WORKLOAD-sSEED/report.json under it (eval_orchestrator_05b.sh's layout)",
    )
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    evals = []
    if args.eval_dir is not None:
        for path in sorted(args.eval_dir.glob("*-s[0-9]*/report.json")):
            evals.append((path.parent.name.split("-", 1)[0], _load(path)))
    for spec in args.eval:
        label, _, path = spec.partition("=")
        evals.append((label, _load(Path(path))))
    command = "python experiments/orchestrator_05b_report.py " + " ".join(sys.argv[1:])
    text = (
        f"# {', '.join(r.name for r in args.run)}: evaluation and training curves\n\n"
        f"Written by `{command}`; quality, success, "
        "critical steps, fan-out, finish and tokens are means per episode (median wall time), ± the 95 % "
        "t-interval over seeds.\n\n## Evaluation\n\n"
        + eval_table(evals)
        + "\n\n## Training curves\n\n"
        + "\n\n".join((f"### {r.name}\n\n" if len(args.run) > 1 else "") + curves(r) for r in args.run)
        + "\n"
    )
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
