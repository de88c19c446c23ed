"""PNG curves of a training run's ``metrics.jsonl`` (matplotlib, headless; part of the ``rl`` extra)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent_swarm.swarm.errors import ConfigError

__all__ = ["PANELS", "plot_compare", "plot_run", "read_metrics"]

PANELS: dict[str, tuple[str, tuple[str, ...]]] = {
    "reward": ("reward", ("reward", "r_perf", "r_parallel", "r_finish")),
    "lambdas": ("λ schedules", ("lambda1", "lambda2")),
    "steps": ("steps per episode", ("mean_critical_steps", "mean_total_steps")),
    "width": ("mean parallel width", ("mean_parallel_width",)),
    "finish": ("sub-agent finish rate", ("finish_rate",)),
    "loss": ("loss", ("loss", "policy_loss")),
    "offpolicy": ("off-policy diagnostics", ("masked_token_frac", "ratio_mismatch")),
    "temperature": ("sampling temperature", ("temperature",)),
}


def read_metrics(run: Path) -> list[dict[str, Any]]:
    """The per-step metrics of a run directory (or a ``metrics.jsonl`` path); bad lines are skipped."""
    path = run / "metrics.jsonl" if run.is_dir() else run
    if not path.is_file():
        raise ConfigError(f"no metrics at {path}; is {run} a `swarm train` run directory?")
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and "step" in row:
            rows.append(row)
    if not rows:
        raise ConfigError(f"{path} holds no step metrics yet")
    return sorted(rows, key=lambda r: r["step"])


def smooth(values: Sequence[float], window: int) -> list[float]:
    """Trailing moving average (window 1 = raw values)."""
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_run(run: Path, out_dir: Path | None = None, window: int = 3) -> list[Path]:
    """One PNG per panel plus ``summary.png`` (all panels), written to ``out_dir`` (default RUN/plots)."""
    plt = _plt()
    rows = read_metrics(run)
    out = out_dir or (run / "plots")
    out.mkdir(parents=True, exist_ok=True)
    steps = [r["step"] for r in rows]
    written = []
    fig_all, axes = plt.subplots(2, 4, figsize=(18, 8))
    for ax_all, (name, (title, keys)) in zip(axes.flat, PANELS.items(), strict=True):
        fig, ax = plt.subplots(figsize=(6, 4))
        for a in (ax, ax_all):
            for k in keys:
                ys = [float(r.get(k) or 0.0) for r in rows]
                a.plot(steps, smooth(ys, window), label=k)
            a.set_title(title)
            a.set_xlabel("trainer step")
            a.grid(alpha=0.3)
            a.legend(fontsize=8)
        fig.tight_layout()
        path = out / f"{name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    fig_all.suptitle(f"{run.name}: moving average over {window} steps")
    fig_all.tight_layout()
    path = out / "summary.png"
    fig_all.savefig(path, dpi=100)
    plt.close(fig_all)
    written.append(path)
    return written


def plot_compare(runs: dict[str, Path], out: Path, window: int = 3) -> Path:
    """One figure comparing runs on r_perf, λs, critical steps and parallel width."""
    plt = _plt()
    keys = [
        ("r_perf", "r_perf (task outcome)"),
        ("lambda1", "λ1 (= λ2 here)"),
        ("mean_critical_steps", "critical steps / episode"),
        ("mean_parallel_width", "mean parallel width"),
    ]
    fig, axes = plt.subplots(1, 4, figsize=(18, 4))
    for label, run in runs.items():
        rows = read_metrics(run)
        steps = [r["step"] for r in rows]
        for ax, (k, title) in zip(axes, keys, strict=True):
            ax.plot(steps, smooth([float(r.get(k) or 0.0) for r in rows], window), label=label)
            ax.set_title(title)
            ax.set_xlabel("trainer step")
            ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
