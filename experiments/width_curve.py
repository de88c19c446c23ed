"""The width curve (issue 26 item 7, the K2.5 Fig. 8 analogue) from ``swarm eval`` raw files only.

    python experiments/width_curve.py RUN_DIR [RUN_DIR ...] --out experiments/results/width_curve

Each RUN_DIR is one ``swarm eval`` run (or a directory of runs) of the same workload at one width
(knob ``entities`` by default). Writes ``OUT.md`` (the curve table, then the full report with the paired
comparisons at each width) and ``OUT.png`` (quality, critical steps, wall time and tokens against the
width, one line per arm). ``experiments/width_curve.sh`` makes the runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

from agent_swarm.orchestrator.eval_report import curve, load_runs, render_curve, render_report

PANELS = (
    ("quality", "quality (mean)"),
    ("critical_steps", "critical steps (median)"),
    ("wall_time_s", "wall time, s (median)"),
    ("tokens", "tokens (median)"),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--knob", default="entities")
    ap.add_argument("--out", type=Path, required=True, help="OUT.md and OUT.png are written")
    args = ap.parse_args()
    runs = load_runs(args.runs)
    points = curve(runs, args.knob)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    md, png = Path(f"{args.out}.md"), Path(f"{args.out}.png")  # OUT may hold dots (latency0.05)
    text = f"# Width curve over {args.knob}\n\n{render_curve(runs, args.knob)}\n{render_report(runs)}"
    md.write_text(text, encoding="utf-8")
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4 * len(PANELS), 3.4))
    for ax, (field, label) in zip(axes, PANELS, strict=True):
        for arm in dict.fromkeys(p.arm for p in points):
            mine = [p for p in points if p.arm == arm]
            xy = [(p.value, getattr(p, field)) for p in mine if getattr(p, field) is not None]
            ax.plot([x for x, _ in xy], [y for _, y in xy], marker="o", label=arm)
        ax.set_xlabel(args.knob)
        ax.set_title(label, fontsize=10)
        ax.set_xscale("log", base=2)
        widths = sorted({p.value for p in points})
        ax.set_xticks(widths, [str(w) for w in widths])
        ax.minorticks_off()
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    print(f"wrote {md} and {png}")


if __name__ == "__main__":
    main()
