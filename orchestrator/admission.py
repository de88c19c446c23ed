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
_SENTENCES = re.compile(r".+?(?:[.?!;](?=\s|$)|$)")  # "3.5" and "v1.2" do not end a sentence
# "these 6 customers: Ava Lopez." and "both France." misstate one item's task: the count goes.
_COUNT = re.compile(
    r"\b(these|those|the|all|following)\s+(?:\d+|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)\s+"
    r"|\bboth\s+$",
    re.I,
)
_PER_ITEM = re.compile(r"^for (?:each|every)\b", re.I)  # "For each one give: zip, orders."


def lists_items(text: str) -> bool:
    """Whether a task names several items (``France and Japan``, ``a, b, c``, a bulleted list)."""
    return _LIST.search(text) is not None


def _list_around(left: str, right: str, min_items: int) -> tuple[str, list[str], str] | None:
    """``(prefix, items, rest)`` of the list whose last separator sits between ``left`` and ``right``
    (one sentence cut at its last "and"/"&" or, for a list of commas only, at its last comma)."""
    pieces = [p.strip() for p in left.split(",")]
    head, middle = pieces[0], pieces[1:]
    if any(not p or len(p.split()) > 4 for p in middle):
        return None  # not a list of short items
    words = head[head.rfind(":") + 1 :].split()
    run: list[str] = []
    for w in reversed(words[1:] if head.rfind(":") < 0 else words):  # never the sentence's first word
        if not _ITEM_WORD.match(w):
            break
        run.insert(0, w)
    rwords = right.split()
    last: list[str] = []
    for i, w in enumerate(rwords):
        following = rwords[i + 1] if i + 1 < len(rwords) else ""
        if _ITEM_WORD.match(w) or (last and w.lower() in _CONNECTORS and _ITEM_WORD.match(following)):
            last.append(w)
        else:
            break
    if not middle and not (run and last):
        return None  # "X and Y" is a list only of names, numbers or quoted words ("write code and test it" is not)
    sizes = sorted(len(p.split()) for p in middle) or [len(rwords)]
    k = sizes[len(sizes) // 2]
    first = " ".join(run or words[-k:])
    prefix = head[: head.rfind(first)] if first else ""
    last = last or rwords[:k]
    items = [first, *middle, " ".join(last)]
    if not prefix.strip() or not first or not last or len(items) < min_items:
        return None
    return prefix, items, " ".join(rwords[len(last) :])


def _lists_in(sentence: str) -> list[tuple[str, list[str], str]]:
    """Every list in one sentence (no end mark): around each "and"/"&", and a list of commas only
    (three or more items: ``customers: Ava Lopez, Ava Hernandez, Amelia Rossi``)."""
    found = []
    for m in re.finditer(r"\s(?:and|&)\s", sentence):
        got = _list_around(sentence[: m.start()].rstrip(","), sentence[m.end() :], 2)
        if got is not None:
            found.append(got)
    if not found and sentence.count(",") >= 2:
        left, _, right = sentence.rpartition(",")
        got = _list_around(left, right, 3)
        if got is not None:
            found.append(got)
    return found


def split_items(task: str, max_items: int = 8) -> list[str] | None:
    """One self-contained task per item of the longest list in ``task``, or ``None`` when no list of
    2 to ``max_items`` items is found: ``Find the capitals of India, Kenya and Chile.`` gives ``Find
    the capitals of India.``, ``… of Kenya.``, ``… of Chile.``. The sentence holding the list is kept,
    with the sentences after it that say what to do for each item (``For each one give: zip,
    orders.``); the rest of the task (how to format the whole answer) is the orchestrator's. A
    suggestion shown to the model, never run by itself."""
    text = " ".join(task.split())
    sentences = [s for s in _SENTENCES.findall(text) if s.strip()]
    best: tuple[int, tuple[str, list[str], str], str] | None = None
    for i, sentence in enumerate(sentences):
        body = sentence.rstrip()
        mark = body[-1] if body and _SENTENCE_END.match(body[-1]) else ""
        body = body[: len(body) - len(mark)]
        for got in _lists_in(body):
            if best is None or len(got[1]) > len(best[1][1]):
                best = (i, got, mark)
    if best is None:
        return None
    i, (prefix, items, rest), mark = best
    if len(items) > max_items:
        return None
    per_item = [s.strip() for s in sentences[i + 1 :] if _PER_ITEM.match(s.strip())]
    suffix = (f" {rest}" if rest else "") + mark + "".join(f" {s}" for s in per_item)
    prefix = _COUNT.sub(lambda m: f"{m[1]} " if m[1] else "", prefix)
    return [f"{prefix}{item}{suffix}".strip() for item in items]


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
