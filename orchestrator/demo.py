"""The built-in demo: a SCRIPTED orchestrator/sub-agent policy (no model needed).

It shows the runtime working before any model is installed: a wide fan-out of sub-agents that use a
real tool, one sub-agent that fails (its model keeps emitting broken tool-call JSON), and an episode
that runs out of critical-step budget and is forced to answer. The policies are ordinary
:class:`~agent_swarm.swarm.function_backend.FunctionBackend` functions of the request, so they react to what the
runtime actually returns; nothing in the episode record is pre-baked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import ToolError, UnknownNameError
from agent_swarm.swarm.function_backend import FunctionBackend, call, malformed
from agent_swarm.swarm.messages import ToolMessage, UserMessage
from agent_swarm.swarm.records import Task
from agent_swarm.tools.registry import Tool

__all__ = ["DEMO_TASKS", "Demo", "demo", "demo_names"]

# Capitals of a few countries (public knowledge); "Atlantis" is deliberately missing.
_CAPITALS = {
    "France": "Paris",
    "Japan": "Tokyo",
    "Kenya": "Nairobi",
    "Brazil": "Brasília",
    "Canada": "Ottawa",
    "India": "New Delhi",
    "Norway": "Oslo",
    "Peru": "Lima",
    "Egypt": "Cairo",
    "Vietnam": "Hanoi",
    "Chile": "Santiago",
    "Ghana": "Accra",
    "Poland": "Warsaw",
    "Nepal": "Kathmandu",
    "Spain": "Madrid",
    "Mexico": "Mexico City",
}
_FANOUT = ["France", "Japan", "Kenya", "Brazil", "Canada", "India", "Norway", "Peru", "Atlantis"]
_REGIONS = {
    "Europe": ["France", "Norway", "Poland", "Spain"],
    "Asia": ["Japan", "India", "Nepal", "Vietnam"],
    "Americas": ["Brazil", "Canada", "Peru", "Chile", "Mexico"],
    "Africa": ["Kenya", "Egypt", "Ghana"],
}


def lookup_capital(country: str) -> str:
    """Look up the capital city of a country in the demo atlas.

    Args:
        country: the country's English name, e.g. "France".
    """
    try:
        return _CAPITALS[country]
    except KeyError:
        raise ToolError(f"no country named {country!r} in the atlas") from None


_TOOL = Tool(lookup_capital, blocking=False)

DEMO_TASKS: dict[str, Task] = {
    "capitals": Task(
        id="demo-capitals",
        prompt="Find the capital city of each of these countries and answer with a table: " + ", ".join(_FANOUT) + ".",
        metadata={"demo": True, "scripted": True},
    ),
    "budget": Task(
        id="demo-budget",
        prompt="Survey the capitals of every region of the atlas, one region at a time: " + ", ".join(_REGIONS) + ".",
        metadata={"demo": True, "scripted": True},
    ),
}


def demo_names() -> list[str]:
    return sorted(DEMO_TASKS)


def _task_of(request: ModelRequest) -> str:
    return next((m.content for m in request.messages if isinstance(m, UserMessage)), "")


def _tool_messages(request: ModelRequest) -> list[ToolMessage]:
    return [m for m in request.messages if isinstance(m, ToolMessage)]


def _orchestrator(request: ModelRequest) -> Completion:
    task = _task_of(request)
    observations = [m for m in _tool_messages(request) if m.name == "assign_task"]
    if task.startswith("Survey"):
        return _survey_orchestrator(request, observations)
    if request.tool_choice == "none" or observations:
        rows = []
        for obs in observations:
            status = re.search(r"status: (\w+)", obs.content)
            report = obs.content.split("report:\n", 1)[-1] if "report:\n" in obs.content else "—"
            rows.append(
                f"| {report if status and status.group(1) == 'completed' else 'unknown'} |"
                f" {status.group(1) if status else '?'} |"
            )
        table = "\n".join(["| result | status |", "|---|---|", *rows])
        return Completion(text=f"Capitals found by {len(observations)} parallel researchers:\n{table}")
    calls = [
        call(
            "create_subagent",
            name="researcher",
            system_prompt="You look up one capital city with the lookup_capital tool and report it.",
            tools=["lookup_capital"],
        )
    ]
    calls += [call("assign_task", agent="researcher", task=f"Find the capital of {c}.") for c in _FANOUT]
    return Completion(text="I will look up every country in parallel.", tool_calls=tuple(calls))


def _survey_orchestrator(request: ModelRequest, observations: list[ToolMessage]) -> Completion:
    if request.tool_choice == "none":
        return Completion(text=f"Budget spent after surveying {len(observations)} region(s); partial survey.")
    regions = list(_REGIONS)
    calls = []
    if not observations:
        calls.append(
            call(
                "create_subagent",
                name="surveyor",
                system_prompt="You look up the capital of every country of one region, one by one.",
                tools=["lookup_capital"],
            )
        )
    region = regions[len(observations) % len(regions)]
    calls.append(call("assign_task", agent="surveyor", task=f"Survey region {region}."))
    return Completion(text=f"Next: {region}.", tool_calls=tuple(calls))


def _subagent(request: ModelRequest) -> Completion:
    task = _task_of(request)
    results = _tool_messages(request)
    if m := re.match(r"Find the capital of (.+)\.", task):
        country = m.group(1)
        if not results:
            return Completion(tool_calls=(call("lookup_capital", country=country),))
        if results[-1].is_error:
            # A small model that got an error back and now emits broken tool-call JSON.
            return malformed('<tool_call>{"name": "lookup_capital", "arguments": {"country": ', "unterminated JSON")
        return Completion(text=f"{country}: {results[-1].content}")
    if m := re.match(r"Survey region (.+)\.", task):
        countries = _REGIONS.get(m.group(1), [])
        if len(results) < len(countries):
            return Completion(tool_calls=(call("lookup_capital", country=countries[len(results)]),))
        return Completion(text="; ".join(f"{c}: {r.content}" for c, r in zip(countries, results, strict=True)))
    return Completion(text="I do not understand this task.")


@dataclass(frozen=True)
class Demo:
    """Everything needed to run one demo task."""

    task: Task
    config: SwarmConfig
    orchestrator_backend: FunctionBackend
    subagent_backend: FunctionBackend
    tools: tuple[Tool, ...]


def demo(name: str, *, latency_s: float = 0.05) -> Demo:
    """Build a demo by name (see :data:`DEMO_TASKS`); ``latency_s`` simulates model latency."""
    if name not in DEMO_TASKS:
        raise UnknownNameError("demo task", name, DEMO_TASKS)
    config = (
        SwarmConfig(max_critical_steps=12, max_subagent_steps=5)
        if name == "budget"
        else SwarmConfig(max_critical_steps=16, max_subagent_steps=6, max_malformed_retries=1)
    )
    return Demo(
        task=DEMO_TASKS[name],
        config=config,
        orchestrator_backend=FunctionBackend(_orchestrator, model="scripted-orchestrator", delay=latency_s),
        subagent_backend=FunctionBackend(_subagent, model="scripted-subagent", delay=latency_s),
        tools=(_TOOL,),
    )
