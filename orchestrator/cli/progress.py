"""The local model's start-up progress on the terminal: a ``rich`` bar while the model is assembled
from its wheels (first run only) and a line while it loads."""

from __future__ import annotations

import sys
from typing import Any

from agent_swarm.swarm.backends.local.catalogue import Progress

__all__ = ["rich_progress", "terminal_progress"]


def terminal_progress() -> Progress | None:
    """:func:`rich_progress` when stderr is a terminal, else ``None`` (no bar in logs and pipes)."""
    return rich_progress() if sys.stderr.isatty() else None


def rich_progress() -> Progress:
    """A progress callback that draws on stderr with ``rich`` (what the CLI uses)."""
    from rich.progress import BarColumn, DownloadColumn, TextColumn
    from rich.progress import Progress as RichProgress

    bar = RichProgress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), transient=True)
    tasks: dict[str, Any] = {}

    def report(stage: str, done: int, total: int) -> None:
        if stage == "load":
            if done == 0:
                print("loading the local model…", file=sys.stderr, flush=True)
            return
        if stage not in tasks:
            bar.start()
            tasks[stage] = bar.add_task("assembling the local model (first run only)", total=total)
        bar.update(tasks[stage], completed=done)
        if done >= total:
            bar.stop()

    return report
