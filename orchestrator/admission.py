"""Admission: what one orchestrator turn's calls become, decided before anything runs.

A pure function of the turn's calls and the episode's state (sub-agent types, remaining critical
budget, width limit), so every rule is tested on its own. Each ``assign_task`` is admitted as a
sub-agent run (with a step cap from the remaining critical budget, which keeps one critical step for the
orchestrator's next turn) or refused with a message that tells the model what to do instead; other calls run
as direct tools. Refusals cost nothing but the orchestrator's own step: a stage never starts a sub-agent that
cannot take a step.

Where the intent is unambiguous a call is corrected and the model told so (:func:`resolve_agent`).
Tactics for weak models (refusing a finished task assigned again, copies within a turn, a whole list
given to one sub-agent) are the coach's (:mod:`agent_swarm.orchestrator.coach`), which reviews a turn's calls
before they reach admission.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agent_swarm.swarm.errors import ErrorType
from agent_swarm.swarm.messages import ToolCall
from agent_swarm.swarm.records import AgentDefinition

__all__ = [
    "ASSIGN",
    "CREATE",
    "Admission",
    "Assignment",
    "admit",
    "resolve_agent",
]

CREATE = "create_subagent"
ASSIGN = "assign_task"

_INSTANCE_ID = re.compile(r"^(?P<name>.+)-\d+-\d+$")


@dataclass(frozen=True, slots=True)
class Assignment:
    """An admitted ``assign_task``: which type runs which task as which instance, with its step cap."""

    call: ToolCall
    definition: AgentDefinition
    task: str
    agent_id: str
    step_cap: int
    note: str | None = None  # a correction the model is told about (e.g. an instance id used as agent)


@dataclass(slots=True)
class Admission:
    """The turn's calls sorted: sub-agent runs, direct tool calls, and refusals (call id ->
    (message for the model, error type))."""

    assignments: list[Assignment] = field(default_factory=list)
    direct: list[ToolCall] = field(default_factory=list)
    refused: dict[str, tuple[str, str]] = field(default_factory=dict)


def resolve_agent(name: object, agents: Mapping[str, AgentDefinition]) -> tuple[str | None, str | None]:
    """(the sub-agent type ``name`` means, a note for the model) — ``(None, None)`` when unknown.

    Unambiguous slips are corrected: an instance id (``worker-1-0``, as progress views show them)
    names its type; a name that differs only in case or surrounding spaces names the one type it
    matches.
    """
    if not isinstance(name, str):
        return None, None
    if name in agents:
        return name, None
    m = _INSTANCE_ID.match(name.strip())
    if m is not None and m.group("name") in agents:
        base = m.group("name")
        return base, f"{name!r} is a sub-agent instance id; ran it as type {base!r} (pass the type name as agent)"
    folded = [a for a in agents if a.casefold() == name.strip().casefold()]
    if len(folded) == 1:
        return folded[0], f"there is no type {name!r}; ran it as {folded[0]!r}"
    return None, None


def _agent_as_tool(c: ToolCall) -> tuple[str, str]:
    """The refusal of a sub-agent type called as if it were a tool, with the call to make instead."""
    task = c.arguments.get("task")
    example = json.dumps(
        {"name": ASSIGN, "arguments": {"agent": c.name, "task": task if isinstance(task, str) else "..."}},
        ensure_ascii=False,
    )
    return (
        f"{c.name!r} is a sub-agent type, not a tool. Run it with assign_task: {example}",
        ErrorType.AGENT_CALLED_AS_TOOL,
    )


def _no_room(step_cap: int, admitted: int, max_width: int, budget_note: str) -> tuple[str, str] | None:
    """The refusal of an assignment the budget or the stage's width leaves no room for, if any."""
    if step_cap < 1:
        return (
            f"no critical-step budget is left to run a sub-agent{budget_note}; this task was not run. "
            "Answer the user now with what you have, in the form the task asks for.",
            ErrorType.BUDGET_EXHAUSTED,
        )
    if admitted >= max_width:
        return (
            f"stage width limit of {max_width} sub-agents reached; this assignment was not run. "
            "Assign it in a later stage.",
            ErrorType.WIDTH_LIMIT,
        )
    return None


def admit(
    calls: Sequence[ToolCall],
    agents: Mapping[str, AgentDefinition],
    *,
    stage: int,
    step_cap: int,
    max_width: int,
    subagents: bool = True,
    budget_note: str = "",
) -> Admission:
    """Sort one turn's calls (``create_subagent`` calls are handled before, and skipped here).

    ``step_cap`` is ``min(max_subagent_steps, remaining critical budget - 1)``: below 1 no sub-agent
    could take a step, so ``assign_task`` is refused (with ``budget_note`` saying how much was used)
    rather than run as a 0-step sub-agent. In single-agent mode (``subagents=False``) every call is
    a direct tool call (the actions are then unknown tools to the tool layer).

    Identical assignments within one turn all run (several samples of one task are a legitimate use
    of parallelism); the coach refuses calls before admission where a model needs that.
    """
    out = Admission()
    known = ", ".join(sorted(agents)) or "(none yet: create one with create_subagent)"
    for c in calls:
        # Single-agent mode: the actions are unknown tools. An unparsed call gets its error there.
        if not subagents or c.error is not None:
            out.direct.append(c)
            continue
        if c.name == CREATE:
            continue
        if c.name != ASSIGN:
            if c.name in agents:
                out.refused[c.id] = _agent_as_tool(c)
            else:
                out.direct.append(c)
            continue
        agent, task = c.arguments.get("agent"), c.arguments.get("task")
        name, note = resolve_agent(agent, agents)
        if name is None:
            out.refused[c.id] = (
                f"unknown sub-agent {agent!r}. Pass one of these types as agent: {known}.",
                ErrorType.INVALID_ACTION,
            )
            continue
        if not isinstance(task, str) or not task.strip():
            out.refused[c.id] = ("assign_task needs a non-empty string 'task'", ErrorType.INVALID_ACTION)
            continue
        full = _no_room(step_cap, len(out.assignments), max_width, budget_note)
        if full is not None:
            out.refused[c.id] = full
            continue
        definition = agents[name]
        agent_id = f"{definition.name}-{stage}-{len(out.assignments)}"
        out.assignments.append(Assignment(c, definition, task, agent_id, step_cap, note))
    return out
