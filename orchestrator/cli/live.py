"""What the CLI shows of an episode: the live view, the final tree of stages, one line per event
without a terminal, and the summary table.

The live view and the final tree draw the same thing, a tree of stages: per stage, its actions
(sub-agent types created, tasks assigned, direct tool calls), each with its outcome (completed,
rejected and why, failed), steps, and the critical budget left after the stage. The live view folds
runtime events into :class:`StageView` objects (:class:`LiveState`); the final tree builds them from
the episode record (:func:`stages_from_record`), so what was on screen while the run went is what
stays on the terminal after it.

Everything a model or a user wrote (tasks, answers, errors, names) is shown as :class:`~rich.text.Text`,
never as Rich markup: a model may write ``[/int]`` or ``[bold]``.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from rich.console import Console, ConsoleOptions, RenderResult
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from agent_swarm.swarm.errors import ErrorType
from agent_swarm.swarm.events import (
    ActionResolved,
    EndpointRefused,
    EndpointWaiting,
    EpisodeFinished,
    EpisodeStarted,
    Event,
    StageFinished,
    StageStarted,
    SubagentFinished,
    SubagentStarted,
    SubagentStep,
    TurnFinished,
)
from agent_swarm.swarm.monitors import stage_monitors
from agent_swarm.swarm.records import (
    AgentStatus,
    BudgetLine,
    EpisodeRecord,
    EpisodeStatus,
    MonitorReport,
    StageRecord,
    SubagentResult,
    ToolResult,
)

__all__ = [
    "NO_ANSWER",
    "ActionView",
    "EventLines",
    "LiveMonitors",
    "LiveState",
    "StageView",
    "critical_text",
    "given_answer",
    "monitor_text",
    "stage_tree",
    "stages_from_record",
    "summary_table",
]

_STYLE = {
    "completed": "green",
    "created": "green",
    "ok": "green",
    "failed": "red",
    "rejected": "red",
    "timeout": "yellow",
    "budget_exhausted": "magenta",
    "context_exhausted": "magenta",
    "cancelled": "dim",
    "running": "cyan",
}
_ICON = {"create": "+", "assign": "→", "tool": "⚙"}
_GROUP = {"create": 0, "assign": 1, "tool": 2}
MAX_ROWS = 16
"""Actions listed per stage; the rest of a wide stage is summarised by outcome."""

CREATE, ASSIGN = "create_subagent", "assign_task"
ActionKind = Literal["create", "assign", "tool"]


def _short(text: str, width: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


@dataclass
class ActionView:
    """One action of a stage as shown: what it was, its outcome, and why when it did not succeed."""

    kind: ActionKind
    label: str
    """The sub-agent type (create, rejected assign), instance id (assign that ran) or tool name."""
    outcome: str = "running"
    """``running``, ``created``, ``ok``, ``rejected``, or a sub-agent's status (``completed``, ``failed``, …)."""
    detail: str = ""
    """The assigned task, or the tool's result."""
    reason: str | None = None
    """Why it was rejected or failed (the message the orchestrator saw)."""
    error_type: str | None = None
    steps: int | None = None
    cap: int | None = None
    tools: list[str] = field(default_factory=list)
    """Tools a running sub-agent called, most recent last (live view)."""
    position: int = 0
    """Its call's place in the turn (live view): direct tool calls are listed in call order, not as they resolve."""


@dataclass
class StageView:
    index: int
    kind: str
    width: int = 0
    critical_steps: int | None = None
    """Critical steps the stage cost (None while it runs)."""
    budget_left: int | None = None
    """Critical budget left after the stage (before it, while it runs)."""
    actions: list[ActionView] = field(default_factory=list)
    running: bool = False

    def ordered(self) -> list[ActionView]:
        """The rows of the stage: created types, assignments, direct tool calls. Assignments as the live
        view learns them: refusals (decided at admission) before the runs, in the order they start;
        direct tool calls in call order (a refused one resolves first, a slow one last); so the final
        tree, built from the record's call order, shows the rows where the live view had them."""
        return sorted(
            self.actions,
            key=lambda a: (
                _GROUP[a.kind],
                a.kind == "assign" and a.outcome != "rejected",
                a.position if a.kind == "tool" else 0,
            ),
        )


def _kind_of(name: str) -> ActionKind:
    return "create" if name == CREATE else "assign" if name == ASSIGN else "tool"


def _created(text: str) -> str:
    granted = re.search(r"\(([^()]*)\)$", text)  # "created sub-agent 'x' (tool, tool)"
    return f"tools: {granted.group(1)}" if granted else text


def _action_from_result(r: ToolResult) -> ActionView:
    kind = _kind_of(r.call.name)
    text = r.content[7:] if r.is_error and r.content.startswith("error: ") else r.content
    if kind == "tool":
        return ActionView(
            "tool",
            r.call.name,
            outcome="failed" if r.is_error else "ok",
            detail="" if r.is_error else text,
            reason=text if r.is_error else None,
            error_type=r.error_type,
        )
    target = r.call.arguments.get("agent" if kind == "assign" else "name", "")
    label = target if isinstance(target, str) and target else "?"
    task = r.call.arguments.get("task", "") if kind == "assign" else ""
    if r.is_error:
        return ActionView(
            kind,
            label,
            outcome="rejected",
            detail=task if isinstance(task, str) else "",
            reason=text,
            error_type=r.error_type,
        )
    return ActionView(kind, label, outcome="created", detail=_created(text))


def _action_from_subagent(r: SubagentResult) -> ActionView:
    failed = r.status is not AgentStatus.COMPLETED
    return ActionView(
        "assign",
        r.agent_id,
        outcome=r.status.value,
        detail=r.task,
        reason=(r.error or r.status.value) if failed else None,
        error_type=r.error_type,
        steps=r.steps,
        cap=r.step_cap,
    )


def _stage_actions(stage: StageRecord, call_order: list[tuple[str, str]]) -> list[ActionView]:
    """The stage's actions in call order: tool results by call id, sub-agent runs in the order of
    the ``assign_task`` calls that were admitted."""
    by_id = {r.call.id: r for r in stage.tool_results}
    subs = iter(stage.subagents)
    out: list[ActionView] = []
    for call_id, name in call_order:
        if call_id in by_id:
            out.append(_action_from_result(by_id.pop(call_id)))
        elif name == ASSIGN and (r := next(subs, None)) is not None:
            out.append(_action_from_subagent(r))
    out += [_action_from_result(r) for r in by_id.values()]
    out += [_action_from_subagent(r) for r in subs]
    return out


def stages_from_record(record: EpisodeRecord) -> list[StageView]:
    """The tree of stages of a finished episode, with the critical budget left after each stage."""
    budget = record.config.get("max_critical_steps")
    calls: dict[int, list[tuple[str, str]]] = {}
    for turn in record.turns:
        if turn.tool_calls:
            calls[turn.stage] = [(c.id, c.name) for c in turn.tool_calls]
    used = 0
    views: list[StageView] = []
    for stage in record.stages:
        used += stage.critical_steps
        views.append(
            StageView(
                index=stage.index,
                kind=stage.kind,
                width=stage.width,
                critical_steps=stage.critical_steps,
                budget_left=budget - used if isinstance(budget, int) else None,
                actions=_stage_actions(stage, calls.get(stage.index, [])),
            )
        )
    return views


# -- rendering --------------------------------------------------------------------------------------


def _action_line(a: ActionView) -> Text:
    line = Text(f"{_ICON[a.kind]} ")
    verb = {"create": "create ", "assign": "", "tool": ""}[a.kind]
    line.append(f"{verb}{a.label}", style="bold")
    line.append("  ")
    line.append(a.outcome, style=_STYLE.get(a.outcome, ""))
    if a.error_type and a.outcome in ("rejected", "failed") and a.error_type != ErrorType.TOOL:
        line.append(f" ({a.error_type})", style=_STYLE.get(a.outcome, ""))
    if a.steps is not None:
        line.append(f"  {a.steps}/{a.cap} steps", style="dim")
    if a.outcome == "running" and a.tools:
        line.append(f"  {', '.join(a.tools[-3:])}", style="cyan")
    if a.detail:
        line.append(f"  {_short(a.detail, 70)}")
    if a.reason and a.outcome != "running":
        line.append(f"\n  {_short(a.reason, 160)}", style=_STYLE.get(a.outcome, "red"))
    elif a.reason:  # a running sub-agent's latest error, as it happens
        line.append(f"\n  last error: {_short(a.reason, 150)}", style="yellow")
    return line


def critical_text(used: int, budget: int | None, added: int | None = None) -> str:
    """The one wording of the budget everywhere (live view, final tree, event lines, summary):
    ``critical steps 5/16`` (used of the budget), ``critical steps +4 → 5/16`` after a stage."""
    total = f"{used}/{budget}" if budget is not None else str(used)
    return f"critical steps +{added} → {total}" if added is not None else f"critical steps {total}"


def _stage_label(s: StageView, budget: int | None, elapsed: float | None = None) -> Text:
    parts = [f"stage {s.index}", s.kind]
    if s.kind in ("subagents", "mixed") or s.width:
        parts.append(f"{s.width} sub-agent{'s' if s.width != 1 else ''}")
    if s.budget_left is not None and budget is not None:
        parts.append(critical_text(budget - s.budget_left, budget, s.critical_steps))
    elif s.critical_steps is not None:
        parts.append(f"critical steps +{s.critical_steps}")
    if elapsed is not None:
        parts.append(f"{elapsed:.1f}s")
    return Text(" · ".join(parts), style="bold cyan" if s.running else "bold")


def stage_tree(
    stages: Iterable[StageView],
    *,
    title: Text | str = "stages",
    budget: int | None = None,
    max_rows: int = MAX_ROWS,
    elapsed: float | None = None,
    folded: frozenset[int] = frozenset(),
) -> Tree:
    """The tree of stages: a branch per stage, a leaf per action (at most ``max_rows`` per stage,
    the rest counted by outcome). Actions keep one order, live and final (:meth:`StageView.ordered`);
    in a stage listed in ``folded`` (a short terminal) finished actions become one line of counts."""
    tree = Tree(title if isinstance(title, Text) else Text(title, style="bold"), guide_style="dim")
    for s in stages:
        branch = tree.add(_stage_label(s, budget, elapsed if s.running else None))
        actions = s.ordered()
        if s.index in folded:
            done = Counter(a.outcome for a in actions if a.outcome != "running")
            actions = [a for a in actions if a.outcome == "running"]
            if done:
                summary = ", ".join(f"{n} {k}" for k, n in sorted(done.items()))
                branch.add(Text(f"✓ {sum(done.values())} finished ({summary})", style="dim"))
        for a in actions[:max_rows]:
            branch.add(_action_line(a))
        if len(actions) > max_rows:
            counts = Counter(a.outcome for a in actions)
            more = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
            branch.add(Text(f"… {len(actions) - max_rows} more ({len(actions)} actions: {more})", style="dim"))
    return tree


def _rows(s: StageView, folded: bool = False) -> int:
    """Terminal rows a stage takes in the tree (its label, its actions and their reason lines)."""
    actions = [a for a in s.ordered() if not folded or a.outcome == "running"]
    listed = actions[:MAX_ROWS]
    return 1 + len(listed) + sum(1 for a in listed if a.reason) + (len(actions) > MAX_ROWS) + folded


def _fit(stages: list[StageView], room: int) -> tuple[list[StageView], int, frozenset[int]]:
    """(stages to draw, how many earlier ones are left out, stages whose finished actions fold) so
    the tree fits ``room`` rows: the latest three stages at most, then fewer, then finished
    sub-agents folded into a line of counts."""
    shown = stages[-3:]
    while len(shown) > 1 and 1 + sum(map(_rows, shown)) > room:
        shown = shown[1:]
    folded: frozenset[int] = frozenset()
    if 1 + sum(map(_rows, shown)) > room:
        folded = frozenset(s.index for s in shown)
    return shown, len(stages) - len(shown), folded


@dataclass(slots=True)
class _FinishedStage:
    subagents: list[SubagentResult]


def monitor_text(m: MonitorReport) -> str:
    """The monitors that fired over the stages so far, with their numbers (``""`` when none): ``serial
    collapse so far (widest stage 1, task of 3 parts) · stragglers (slowest 6.0x the median steps)``."""
    out = []
    for flag in m.flags:
        if flag == "serial_collapse":
            out.append(f"serial collapse so far (widest stage {m.max_width}, task of {m.parts} parts)")
        elif flag == "spurious_parallelism":
            why = [
                f"{m.duplicate_tasks} duplicate sub-task(s)" if m.duplicate_tasks else "",
                f"{m.over_width_stages} stage(s) wider than {m.parts} parts" if m.over_width_stages else "",
                f"{m.unused_reports} unused report(s)" if m.unused_reports else "",
            ]
            out.append(f"spurious parallelism ({', '.join(w for w in why if w)})")
        elif flag == "stragglers" and m.straggler_ratio is not None:
            out.append(f"stragglers (slowest {m.straggler_ratio:.1f}x the median steps)")
        elif flag == "low_finish_rate" and m.finish_rate is not None:
            out.append(f"low finish rate ({m.finish_rate:.0%} of {m.subagents} completed)")
    return " · ".join(out)


class LiveMonitors:
    """The collapse monitors while the run goes: after each stage, :func:`agent_swarm.swarm.monitors.stage_monitors`
    over the stages finished so far (from the runtime events; unused reports need the answer, so they
    wait for the record). ``report`` is ``None`` until the first stage ends."""

    def __init__(self) -> None:
        self.parts: int | None = None
        self.report: MonitorReport | None = None
        self._stages: list[_FinishedStage] = []
        self._current: list[SubagentResult] = []

    def __call__(self, event: Event) -> bool:
        """Fold ``event``; ``True`` when a stage ended (the monitors were recomputed)."""
        if isinstance(event, EpisodeStarted):
            self.parts, self.report, self._stages, self._current = event.parts, None, [], []
        elif isinstance(event, StageStarted):
            self._current = []
        elif isinstance(event, SubagentFinished):
            self._current.append(event.result)
        elif isinstance(event, StageFinished):
            self._stages.append(_FinishedStage(self._current))
            self._current = []
            self.report = stage_monitors(self._stages, self.parts)
            return True
        return False

    def text(self) -> str:
        return "" if self.report is None else monitor_text(self.report)


@dataclass
class LiveState:
    """Folds runtime events into the live view's tree of stages; ``__rich__`` renders it.

    ``budget`` is the episode's critical-step budget (``max_critical_steps``), to show what is left.
    """

    budget: int | None = None
    task: str = ""
    stages: list[StageView] = field(default_factory=list)
    critical: int = 0
    started: float = field(default_factory=time.monotonic)
    stage_started: float = field(default_factory=time.monotonic)
    endpoint_until: float = 0.0
    """A model endpoint answered 429: requests wait until this time (shown in the header)."""
    endpoint_refused: str = ""
    model: str | None = None
    """The orchestrator's model, named in the status line."""
    turns: int = 0
    """Orchestrator turns finished so far."""
    thinking: bool = False
    """The orchestrator is generating its next turn (no stage is running)."""
    thinking_since: float = field(default_factory=time.monotonic)
    said: str = ""
    """The orchestrator's latest text between calls."""
    monitors: LiveMonitors = field(default_factory=LiveMonitors)
    """The collapse monitors over the stages finished so far (a line under the tree when one fired)."""
    _agents: dict[str, ActionView] = field(default_factory=dict)
    _call_order: dict[str, int] = field(default_factory=dict)
    """The last turn's call ids and their places in it."""

    def _stage(self, index: int) -> StageView | None:
        return self.stages[-1] if self.stages and self.stages[-1].index == index else None

    def _endpoint(self, event: Event) -> None:
        if isinstance(event, EndpointWaiting):
            self.endpoint_until = time.monotonic() + event.wait_s
        elif isinstance(event, EndpointRefused):
            self.endpoint_refused = f"endpoint refused (HTTP {event.status})"

    def _orchestrator(self, event: Event) -> None:
        if isinstance(event, EpisodeStarted):
            self.task, self.stages, self.critical, self._agents = event.task, [], 0, {}
            self.turns, self.said = 0, ""
            self._think()
        elif isinstance(event, TurnFinished):
            self.turns, self.thinking = event.index + 1, False
            self.said = " ".join(event.text.split())
            self._call_order = {}
            for i, call_id in enumerate(event.call_ids):
                self._call_order.setdefault(call_id, i)

    def __call__(self, event: Event) -> None:
        self._endpoint(event)
        self._orchestrator(event)
        self.monitors(event)
        if isinstance(event, StageStarted):
            self.critical = event.critical_so_far
            left = self.budget - event.critical_so_far if self.budget is not None else None
            self.stages.append(StageView(event.index, event.kind, event.width, budget_left=left, running=True))
            self.stage_started = time.monotonic()
            self._agents = {}
        elif isinstance(event, ActionResolved):
            if s := self._stage(event.stage):
                view = _kind_of(event.name)
                label = event.target or event.name if view != "tool" else event.name
                ok = "created" if view == "create" else "ok"
                s.actions.append(
                    ActionView(
                        view,
                        label or "?",
                        outcome=ok if event.ok else ("rejected" if view != "tool" else "failed"),
                        detail=_created(event.detail)
                        if event.ok and view == "create"
                        else event.detail
                        if event.ok
                        else "",
                        reason=None if event.ok else event.detail,
                        error_type=event.error_type,
                        position=self._call_order.get(event.call_id, len(self._call_order)),
                    )
                )
        elif isinstance(event, SubagentStarted):
            if self.stages:
                a = ActionView("assign", event.agent_id, detail=event.task, steps=0, cap=event.step_cap)
                self._agents[event.agent_id] = a
                self.stages[-1].actions.append(a)
        elif isinstance(event, SubagentStep):
            if (running := self._agents.get(event.agent_id)) is not None:
                a = running
                a.steps = event.step
                a.tools.extend(event.tools)
                if event.error:
                    a.reason = event.error
        elif isinstance(event, SubagentFinished):
            if (finished := self._agents.get(event.agent_id)) is not None:
                a = finished
                done = _action_from_subagent(event.result)
                a.outcome, a.steps, a.reason, a.error_type = done.outcome, done.steps, done.reason, done.error_type
        elif isinstance(event, StageFinished):
            self.critical = event.critical_so_far
            if s := self._stage(event.index):
                s.running, s.critical_steps = False, event.critical_steps
                if self.budget is not None:
                    s.budget_left = self.budget - event.critical_so_far
            self._think()

    def _think(self) -> None:
        self.thinking, self.thinking_since = True, time.monotonic()

    def status_line(self) -> Text:
        """What the orchestrator is doing: ``orchestrator: thinking · turn 2 · model X · 4.1s``, or the
        stage its last turn started; then its latest words."""
        model = f" · model {self.model}" if self.model else ""
        if self.thinking:
            line = Text("orchestrator: ", style="bold")
            line.append(
                f"thinking · turn {self.turns + 1}{model} · {time.monotonic() - self.thinking_since:.1f}s", style="cyan"
            )
        else:
            running = next((s for s in reversed(self.stages) if s.running), None)
            what = f"waiting for stage {running.index} ({running.kind})" if running else "done"
            line = Text.assemble(("orchestrator: ", "bold"), f"{what} · turn {self.turns}{model}")
        if self.said:
            line.append(f"\n  “{_short(self.said, 150)}”", style="dim")
        return line

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        head = Text.assemble(
            ("swarm ", "bold"),
            critical_text(self.critical, self.budget),
            f" · {time.monotonic() - self.started:.1f}s",
        )
        if (wait := self.endpoint_until - time.monotonic()) > 0 or self.endpoint_refused:
            note = self.endpoint_refused or f"waiting for rate limit, {math.ceil(wait)} s"
            head = Text.assemble(head, (f" · {note}", "yellow"))
        running = [s for s in self.stages if s.running]
        status = self.status_line()
        spinner = bool(running and any(a.outcome == "running" for a in running[-1].actions))
        fired = self.monitors.text()
        # Rows the tree may use: the screen less the status lines, the monitors, the spinner and the cursor's line.
        room = (options.height or console.height) - len(status.plain.splitlines()) - (2 if spinner else 1)
        room -= 1 if fired else 0
        shown, hidden, folded = _fit(self.stages, max(room, 4))
        tree = stage_tree(
            shown, title=head, budget=self.budget, elapsed=time.monotonic() - self.stage_started, folded=folded
        )
        if hidden:
            tree.label = Text.assemble(head, (f" · {hidden} earlier stage(s) above", "dim"))
        yield tree
        if fired:
            yield Text.assemble(("monitors: ", "bold"), (fired, "yellow"))
        yield status
        if spinner:
            yield Spinner("dots", text=Text("running", style="cyan"))


class EventLines:
    """One plain line per event for a log or a pipe (``swarm run`` without a terminal): stage
    started, action rejected or failed, sub-agent finished with its status, stage finished with the
    budget left, episode finished. ``write`` takes each line (e.g. ``print`` to stderr)."""

    def __init__(self, write: Callable[[str], None], budget: int | None = None) -> None:
        self._write = write
        self._budget = budget
        self._t0 = time.monotonic()
        self._monitors = LiveMonitors()
        self._fired = ""

    def _line(self, text: str) -> None:
        self._write(f"[{time.monotonic() - self._t0:7.2f}s] {text}")

    def _monitor_line(self) -> None:
        """A line when the monitors' flags over the stages so far changed (fired, or cleared)."""
        fired = self._monitors.text()
        if fired != self._fired:
            self._line(f"  monitors: {fired or 'none fired now'}")
            self._fired = fired

    def __call__(self, event: Event) -> None:
        self._monitors(event)
        if isinstance(event, EndpointWaiting):
            self._line(f"  {event.endpoint}: {event.message}")
        elif isinstance(event, EndpointRefused):
            self._line(f"  {event.endpoint} refused service: {_short(event.reason, 200)}")
        elif isinstance(event, EpisodeStarted):
            self._t0, self._fired = time.monotonic(), ""
            self._line(f"episode {event.episode_id} started: {_short(event.task)}")
        elif isinstance(event, TurnFinished):
            calls = f" → {len(event.tool_calls)} call(s): {', '.join(dict.fromkeys(event.tool_calls))}"
            said = f" “{_short(' '.join(event.text.split()), 100)}”" if event.text.strip() else ""
            self._line(f"orchestrator turn {event.index + 1}{said}{calls if event.tool_calls else ' → answer'}")
        elif isinstance(event, StageStarted):
            width = f", {event.width} sub-agent{'s' if event.width != 1 else ''}" if event.width else ""
            budget = critical_text(event.critical_so_far, self._budget)
            self._line(f"stage {event.index} started ({event.kind}{width}; {budget})")
        elif isinstance(event, ActionResolved):
            what = f"{event.name} {event.target}".strip()
            if event.ok:
                if event.name == CREATE:
                    self._line(f"  created sub-agent {event.target}")
                else:
                    self._line(f"  {what}: ok")
            else:
                verdict = "failed" if _kind_of(event.name) == "tool" else "rejected"
                kind = f" ({event.error_type})" if event.error_type else ""
                self._line(f"  {what} {verdict}{kind}: {_short(event.detail, 200)}")
        elif isinstance(event, SubagentFinished):
            r = event.result
            why = f": {_short(r.error, 200)}" if r.error and r.status is not AgentStatus.COMPLETED else ""
            self._line(f"  {r.agent_id} {r.status.value} after {r.steps}/{r.step_cap} steps{why}")
        elif isinstance(event, StageFinished):
            budget = critical_text(event.critical_so_far, self._budget, event.critical_steps)
            self._line(f"stage {event.index} finished: {budget}")
            self._monitor_line()
        elif isinstance(event, EpisodeFinished):
            rec = event.record
            budget = critical_text(rec.dag.critical_steps, self._budget)
            self._line(
                f"episode {rec.episode_id} {rec.status.value}: {budget}, {rec.dag.total_steps} total steps, "
                f"{rec.wall_time_s:.2f}s"
            )


NO_ANSWER = frozenset({EpisodeStatus.FAILED, EpisodeStatus.TIMEOUT, EpisodeStatus.CANCELLED})
"""Endings without an answer: the record may still hold the orchestrator's last text (e.g. its
opening line before a timeout), which is not an answer and is never shown as one."""


def given_answer(record: EpisodeRecord) -> str | None:
    """The answer the episode gave, or ``None`` when it ended without one (failed, timed out, cancelled)."""
    return None if record.status in NO_ANSWER else record.answer


def summary_table(record: EpisodeRecord, path: str | None = None, *, tools: str | None = None) -> Table:
    """The final summary printed after a run. The answer is rendered as Markdown; errors, ids and
    paths are shown as written. ``tools`` names the built-in tools and workspace the run had."""
    t = Table(title=Text(f"episode {record.episode_id}"), show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    if record.metadata.get("scripted") or record.task.metadata.get("scripted"):
        policy = record.metadata.get("policy")
        t.add_row(
            "policy", Text(policy if isinstance(policy, str) else "SCRIPTED demo policy (no model)", style="yellow")
        )
    t.add_row("status", record.status.value)
    given = given_answer(record)
    answer = given if given is not None else f"(none: the episode {record.status.value})"
    from rich.markdown import Markdown  # markdown-it, for the one answer of the summary table

    t.add_row("answer", Markdown(answer if len(answer) < 2000 else answer[:2000] + " …"))
    if record.error:
        t.add_row("error", Text(record.error, style="red"))
    if record.reward is not None:
        r = record.reward
        success = r.details.get("success")
        extra = "" if success is None else f", success {success}"
        t.add_row("score", f"{r.r_perf:.3f} (reward {r.total:.3f}{extra})")
    d = record.dag
    budget = record.config.get("max_critical_steps")
    t.add_row("critical steps", critical_text(d.critical_steps, budget if isinstance(budget, int) else None)[15:])
    t.add_row("total steps", f"{d.total_steps}  (speed-up ×{d.speedup:.2f}, widths {list(d.stage_widths)})")
    counts = Counter(r.status.value for r in record.subagent_results)
    t.add_row("sub-agents", ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "none")
    t.add_row("tokens", _tokens(record))
    t.add_row("wall time", f"{record.wall_time_s:.2f}s (critical path {d.wall_critical_path_s:.2f}s)")
    if record.budgets:
        t.add_row("budgets", Text(", ".join(_budget(k, v) for k, v in record.budgets.items())))
    if record.monitors is not None and record.monitors.flags:
        fired = ", ".join(f.replace("_", " ") for f in record.monitors.flags)
        t.add_row("monitors", Text(f"{fired} (swarm traces show {record.episode_id[:8]})", style="yellow"))
    if record.drift_count:
        t.add_row("token drift", Text(f"{record.drift_count} turn(s) re-tokenized", style="yellow"))
    if tools:
        t.add_row("tools", Text(tools))
    if path:
        t.add_row("record", Text(path))
    return t


def _budget(name: str, line: BudgetLine) -> str:
    def n(v: float) -> str:
        return f"{v:,.2f}" if name in ("cost", "wall_s") else f"{v:,.0f}"

    return f"{name} {n(line.used)}/{n(line.limit)} used ({n(line.left)} left)"


def _tokens(record: EpisodeRecord) -> str:
    if record.metadata.get("scripted") or record.task.metadata.get("scripted"):
        return "not measured (a scripted policy has no tokenizer; its counts are stand-ins)"
    tokens = record.usage + record.subagent_usage
    return f"{tokens.prompt_tokens} in / {tokens.completion_tokens} out (orchestrator {record.usage.total_tokens})"
