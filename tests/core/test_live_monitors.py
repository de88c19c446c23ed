"""The collapse monitors show while ``swarm run`` goes: after each stage, the live view and the plain
event lines flag serial collapse, spurious parallelism and stragglers over the stages so far."""

from __future__ import annotations

from rich.console import Console

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.orchestrator.cli.live import EventLines, LiveState
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.events import EpisodeStarted, Event, StageFinished
from agent_swarm.swarm.messages import ToolMessage
from agent_swarm.swarm.records import Task
from agent_swarm.swarm.testing import FunctionBackend, ScriptedBackend, call
from agent_swarm.tools import tool

CAPITALS = {"France": "Paris", "Peru": "Lima", "Japan": "Tokyo", "Kenya": "Nairobi"}
TASK = Task(id="caps", prompt="Give the capitals of France, Peru, Japan and Kenya.", metadata={"parts": 4})


@tool
def lookup(country: str) -> str:
    """Look up a country's capital."""
    return CAPITALS.get(country, "unknown")


def _worker(request: ModelRequest) -> Completion:
    """Answers at once; a task that says slow looks its country up five times first."""
    task = next(m.content for m in request.messages if m.role == "user")
    country = next(c for c in CAPITALS if c in task)
    if "slow" in task and sum(isinstance(m, ToolMessage) for m in request.messages) < 5:
        return Completion(tool_calls=(call("lookup", country=country),))
    return Completion(text=f"The capital of {country} is {CAPITALS[country]}.")


def _assign(task: str) -> object:
    return call("assign_task", agent="worker", task=task)


def _render(state: LiveState) -> str:
    console = Console(record=True, width=200, height=100, force_terminal=False)
    console.print(state)
    return console.export_text()


def _run(*observers: object) -> None:
    turns = [
        [_assign("capital of France")],
        [_assign("capital of Peru"), _assign("please the capital of Peru"), _assign("slow: capital of Japan")],
        "Paris, Lima, Tokyo",
    ]
    orch = Orchestrator(
        ScriptedBackend(turns),  # type: ignore[arg-type]
        SwarmConfig(max_subagent_steps=8, max_critical_steps=40),
        tools=[lookup],
        subagent_backend=FunctionBackend(_worker),
        observers=list(observers),  # type: ignore[arg-type]
    )
    orch.run_sync(TASK)


def test_the_live_view_flags_the_monitors_after_each_stage() -> None:
    state = LiveState(budget=40)
    screens: list[str] = []

    def after_stage(event: Event) -> None:
        if isinstance(event, EpisodeStarted):
            screens.append(_render(state))
        if isinstance(event, StageFinished):
            screens.append(_render(state))

    _run(state, after_stage)
    first, one, two = screens
    assert "monitors:" not in first  # nothing is known before a stage ends
    assert "monitors: serial collapse so far (widest stage 1, task of 4 parts)" in one
    line = next(x for x in two.splitlines() if x.startswith("monitors:"))
    assert "serial collapse" not in line  # the second stage fanned out: the provisional flag cleared
    assert "spurious parallelism (1 duplicate sub-task(s))" in line
    assert "stragglers (slowest 6.0x the median steps)" in line


def test_the_event_lines_say_when_the_monitors_change() -> None:
    lines: list[str] = []
    _run(EventLines(lines.append, budget=40))
    text = [x.split("] ", 1)[1] for x in lines]
    first = next(i for i, x in enumerate(text) if x.startswith("stage 0 finished"))
    assert text[first + 1] == "  monitors: serial collapse so far (widest stage 1, task of 4 parts)"
    after = next(i for i, x in enumerate(text) if x.startswith("stage 1 finished"))
    assert text[after + 1] == (
        "  monitors: spurious parallelism (1 duplicate sub-task(s)) · stragglers (slowest 6.0x the median steps)"
    )
    assert sum(x.startswith("  monitors:") for x in text) == 2
