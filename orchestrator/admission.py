"""Admission: what one orchestrator turn's calls become, decided before anything runs.

A pure function of the turn's calls and the episode's state (sub-agent types, remaining critical
budget, width limit), so every rule is tested on its own. Each ``assign_task`` is admitted as a
sub-agent run (with a step cap from the remaining critical budget, which keeps one critical step for the
orchestrator's next turn) or refused with a message that tells the model what to do instead; other calls run
as direct tools. Refusals cost nothing but the orchestrator's own step: a stage never starts a sub-agent that
cannot take a step.

Small models make a few mistakes again and again; where the intent is unambiguous the call is
corrected and the model told so (:func:`resolve_agent`), and a call that repeats an earlier
failure verbatim is flagged (:func:`repeat_notice`) so the engine can stop a loop of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from subagents.loop import call_signature, repeat_notice
from swarm.errors import ErrorType
from swarm.messages import ToolCall
from swarm.records import AgentDefinition

__all__ = [
    "ASSIGN",
    "CREATE",
    "SPLIT_NOTICE",
    "Admission",
    "Assignment",
    "admit",
    "call_signature",
    "lists_items",
    "repeat_notice",
    "resolve_agent",
    "split_items",
    "split_notice",
]

CREATE = "create_subagent"
ASSIGN = "assign_task"

_INSTANCE_ID = re.compile(r"^(?P<name>.+)-\d+-\d+$")
# "France and Japan", "a, b, c", "x & y", or a bulleted/numbered list of two or more lines.
_LIST = re.compile(r"\S\s+(?:and|&)\s+\S|,[^,]+,|^\s*(?:[-*•]|\d+[.)])\s+.+\n\s*(?:[-*•]|\d+[.)])\s+", re.I | re.M)

SPLIT_NOTICE = (
    "not run yet: this task lists several items, and one sub-agent would do them one after another. "
    "Give each item its own assign_task call, all in one message (they run in parallel), each task "
    "complete on its own. If the task really cannot be split, assign it again unchanged."
)

_ITEM_WORD = re.compile(r"^(?:[A-Z0-9'\"‘“(]|[-+*/×=]$)")  # a name, a number, a quoted word, an operator
_CONNECTORS = frozenset({"and", "of", "the", "de", "la", "du", "y"})  # inside names: Crime and Punishment
_SENTENCE_END = re.compile(r"[.?!;]")


def lists_items(text: str) -> bool:
    """Whether a task names several items (``France and Japan``, ``a, b, c``, a bulleted list)."""
    return _LIST.search(text) is not None


def split_items(task: str, max_items: int = 8) -> list[str] | None:
    """One self-contained task per item of the list in ``task``, or ``None`` when no list of 2 to
    ``max_items`` items is found: ``Find the capitals of India, Kenya and Chile.`` gives ``Find the
    capitals of India.``, ``… of Kenya.``, ``… of Chile.``; only the sentence holding the list is
    kept. A suggestion shown to the model, never run by itself."""
    text = " ".join(task.split())
    for m in re.finditer(r"\s(?:and|&)\s", text):
        left, right = text[: m.start()].rstrip(","), text[m.end() :]
        left = left[max((e.end() for e in _SENTENCE_END.finditer(left)), default=0) :]
        end = _SENTENCE_END.search(right)
        mark = right[end.start()] if end else ""
        right = right[: end.start()] if end else right
        pieces = [p.strip() for p in left.split(",")]
        head, middle = pieces[0], pieces[1:]
        if any(not p or len(p.split()) > 4 for p in middle):
            continue  # not a list of short items: try a later "and"
        words = head[head.rfind(":") + 1 :].split()
        run: list[str] = []
        for w in reversed(words[1:] if head.rfind(":") < 0 else words):  # never the sentence's first word
            if not _ITEM_WORD.match(w):
                break
            run.insert(0, w)
        sizes = sorted(len(p.split()) for p in middle) or [len(right.split())]
        k = sizes[len(sizes) // 2]
        first = " ".join(run or words[-k:])
        prefix = head[: head.rfind(first)] if first else ""
        rwords = right.split()
        last: list[str] = []
        for i, w in enumerate(rwords):
            following = rwords[i + 1] if i + 1 < len(rwords) else ""
            if _ITEM_WORD.match(w) or (last and w.lower() in _CONNECTORS and _ITEM_WORD.match(following)):
                last.append(w)
            else:
                break
        last = last or rwords[:k]
        if not prefix.strip() or not first or not last:
            continue
        rest = " ".join(rwords[len(last) :])
        items = [first, *middle, " ".join(last)]
        if not 2 <= len(items) <= max_items:
            return None
        suffix = (f" {rest}" if rest else "") + mark
        return [f"{prefix}{item}{suffix}".strip() for item in items]
    return None


def split_notice(task: str, agent: str) -> str:
    """The refusal of a whole list task given to one sub-agent, with the calls to send instead when
    the list can be read from the task (small models copy a concrete call far better than they
    follow a description)."""
    parts = split_items(task)
    if parts is None:
        return SPLIT_NOTICE
    calls = "\n".join(
        json.dumps({"name": ASSIGN, "arguments": {"agent": agent, "task": p}}, ensure_ascii=False) for p in parts
    )
    return f"{SPLIT_NOTICE}\nFor this task, send these calls in one message:\n{calls}"


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


def admit(
    calls: Sequence[ToolCall],
    agents: Mapping[str, AgentDefinition],
    *,
    stage: int,
    step_cap: int,
    max_width: int,
    subagents: bool = True,
    budget_note: str = "",
    completed: Mapping[tuple[str, str], str] | None = None,
    split_task: str | None = None,
    distinct: bool = False,
) -> Admission:
    """Sort one turn's calls (``create_subagent`` calls are handled before, and skipped here).

    ``step_cap`` is ``min(max_subagent_steps, remaining critical budget - 1)``: below 1 no sub-agent
    could take a step, so ``assign_task`` is refused (with ``budget_note`` saying how much was used)
    rather than run as a 0-step sub-agent. In single-agent mode (``subagents=False``) every call is
    a direct tool call (the actions are then unknown tools to the tool layer).

    A completed assignment is not run again: one that ``completed`` holds (``(type, task) -> what
    the model was told``: a finished sub-agent's report) is refused with that report, so a small
    model that re-issues its last stage is told to answer instead of paying for the same work again.
    Identical assignments within one turn all run (several samples of one task are a legitimate
    use of parallelism) unless ``distinct`` is set: then only the first runs and the copies are
    refused (a small model's degenerate loop writes the same call until its token cap).

    ``split_task`` (the user's task, passed while the episode has run no sub-agent and has not been
    nudged yet) refuses a turn's *only* assignment when both it and the user's task list several
    items: a small model tends to hand a whole list to one sub-agent, one item after another, where
    one sub-agent per item would run in parallel. The model is told how to split (or to assign the
    same task again, which is then run).
    """
    out = Admission()
    completed = completed or {}
    seen: set[tuple[str, str]] = set()
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
                task = c.arguments.get("task")
                example = json.dumps(
                    {"name": ASSIGN, "arguments": {"agent": c.name, "task": task if isinstance(task, str) else "..."}},
                    ensure_ascii=False,
                )
                out.refused[c.id] = (
                    f"{c.name!r} is a sub-agent type, not a tool. Run it with assign_task: {example}",
                    ErrorType.AGENT_CALLED_AS_TOOL,
                )
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
        key = (name, task.strip())
        if distinct:
            if (name, task.strip().casefold()) in seen:
                out.refused[c.id] = (
                    "the same task was already assigned in this message and runs once; this copy was not run.",
                    ErrorType.DUPLICATE_TASK,
                )
                continue
            seen.add((name, task.strip().casefold()))
        if key in completed:
            out.refused[c.id] = (
                f"this exact task already completed; its result: {completed[key]}\n"
                "Do not assign it again: answer the user now if you have every part.",
                ErrorType.ALREADY_DONE,
            )
            continue
        if step_cap < 1:
            out.refused[c.id] = (
                f"no critical-step budget is left to run a sub-agent{budget_note}; this task was not run. "
                "Answer the user now in plain text with what you have.",
                ErrorType.BUDGET_EXHAUSTED,
            )
            continue
        if len(out.assignments) >= max_width:
            out.refused[c.id] = (
                f"stage width limit of {max_width} sub-agents reached; this assignment was not run. "
                "Assign it in a later stage.",
                ErrorType.WIDTH_LIMIT,
            )
            continue
        definition = agents[name]
        agent_id = f"{definition.name}-{stage}-{len(out.assignments)}"
        out.assignments.append(Assignment(c, definition, task, agent_id, step_cap, note))
    if (
        split_task is not None
        and len(out.assignments) == 1
        and lists_items(split_task)
        and lists_items(out.assignments[0].task)
    ):
        only = out.assignments.pop()
        out.refused[only.call.id] = (split_notice(split_task, only.definition.name), ErrorType.SPLIT_TASK)
    return out
