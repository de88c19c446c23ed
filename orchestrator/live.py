"""The CLI's live view (stderr) and final summary, driven by runtime events."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from rich.console import Console, Group, RenderableType
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from swarm.events import (
    EpisodeStarted,
    Event,
    StageFinished,
    StageStarted,
    SubagentFinished,
    SubagentStarted,
    SubagentStep,
)
from swarm.records import AgentStatus, EpisodeRecord

__all__ = ["LiveState", "summary_table"]

_STATUS_STYLE = {
    AgentStatus.COMPLETED: "green",
    AgentStatus.FAILED: "red",
    AgentStatus.TIMEOUT: "yellow",
    AgentStatus.BUDGET_EXHAUSTED: "magenta",
    AgentStatus.CANCELLED: "dim",
}
_MAX_ROWS = 16


@dataclass
class _Agent:
    name: str
    task: str
    steps: int = 0
    cap: int = 0
    status: AgentStatus | None = None


@dataclass
class LiveState:
    """Folds events into what the live view shows; ``__rich__`` renders it."""

    task: str = ""
    stage: int = -1
    stage_width: int = 0
    critical: int = 0
    agents: dict[str, _Agent] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def __call__(self, event: Event) -> None:
        if isinstance(event, EpisodeStarted):
            self.task = event.task
        elif isinstance(event, StageStarted):
            self.stage, self.stage_width, self.critical = event.index, event.width, event.critical_so_far
            self.agents = {}
        elif isinstance(event, SubagentStarted):
            self.agents[event.agent_id] = _Agent(event.name, event.task, cap=event.step_cap)
        elif isinstance(event, SubagentStep):
            if a := self.agents.get(event.agent_id):
                a.steps = event.step
        elif isinstance(event, SubagentFinished):
            if a := self.agents.get(event.agent_id):
                a.status, a.steps = event.status, event.result.steps
        elif isinstance(event, StageFinished):
            self.critical = event.critical_so_far

    def __rich__(self) -> RenderableType:
        head = Text.assemble(
            ("swarm ", "bold"),
            (f"stage {max(self.stage, 0)}", "cyan"),
            f" · width {self.stage_width} · critical steps {self.critical}",
            f" · {time.monotonic() - self.started:.1f}s",
        )
        table = Table(box=None, pad_edge=False, show_header=True, header_style="dim")
        table.add_column("", width=2)
        table.add_column("agent")
        table.add_column("steps", justify="right")
        table.add_column("status")
        table.add_column("task", overflow="ellipsis", no_wrap=True, max_width=60)
        running = [(k, a) for k, a in self.agents.items() if a.status is None]
        finished = [(k, a) for k, a in self.agents.items() if a.status is not None]
        for k, a in (running + finished)[:_MAX_ROWS]:
            icon: RenderableType = Spinner("dots") if a.status is None else Text("•", _STATUS_STYLE[a.status])
            status = Text("running", "cyan") if a.status is None else Text(a.status.value, _STATUS_STYLE[a.status])
            table.add_row(icon, Text(k), f"{a.steps}/{a.cap}", status, Text(a.task))  # model-written: not markup
        hidden = len(self.agents) - _MAX_ROWS
        parts: list[RenderableType] = [head, table]
        if hidden > 0:
            counts = Counter(a.status.value if a.status else "running" for a in self.agents.values())
            parts.append(Text(f"… {hidden} more: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())), "dim"))
        return Group(*parts)


def summary_table(record: EpisodeRecord, path: str | None = None) -> Table:
    """The final summary printed after a run. Answers, errors, ids and paths are shown as written
    (Text, never Rich markup: a model may write ``[/int]`` or ``[bold]``)."""
    t = Table(title=Text(f"episode {record.episode_id}"), show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    if record.metadata.get("scripted") or record.task.metadata.get("scripted"):
        t.add_row("policy", "[yellow]SCRIPTED demo policy (no model)[/yellow]")
    t.add_row("status", record.status.value)
    answer = record.answer if record.answer is not None else "(none)"
    t.add_row("answer", Text(answer if len(answer) < 2000 else answer[:2000] + " …"))
    if record.error:
        t.add_row("error", Text(record.error, style="red"))
    d = record.dag
    t.add_row("critical steps", f"{d.critical_steps} (budget {record.config.get('max_critical_steps', '?')})")
    t.add_row("total steps", f"{d.total_steps}  (speed-up ×{d.speedup:.2f}, widths {list(d.stage_widths)})")
    counts = Counter(r.status.value for r in record.subagent_results)
    t.add_row("sub-agents", ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "none")
    tokens = record.usage + record.subagent_usage
    t.add_row(
        "tokens",
        f"{tokens.prompt_tokens} in / {tokens.completion_tokens} out (orchestrator {record.usage.total_tokens})",
    )
    t.add_row("wall time", f"{record.wall_time_s:.2f}s (critical path {d.wall_critical_path_s:.2f}s)")
    if record.drift_count:
        t.add_row("token drift", f"[yellow]{record.drift_count} turn(s) re-tokenized[/yellow]")
    if path:
        t.add_row("record", Text(path))
    return t


def stderr_console() -> Console:
    return Console(stderr=True)
