"""What the search-corpus workloads share: table columns, the researcher agent, episodes, gold policies.

``wide-lookup`` (the τ² corpus), ``wide-research`` (a generated corpus of fictional entities) and the
wide tasks of ``train-mix`` are all "N entities × M attributes, found with ``search``/``open``,
answered as one markdown table"; ``deep-lookup`` shares the researcher and the episode shape. Here:

* :class:`Attr` / :class:`Kind` — one kind of entity: its key column, how its own document's title
  starts, and per attribute the gold value (from the structured record) and how the gold policy reads
  it from the *rendered document text* (so an environment that lost information cannot reach 1);
* :func:`wide_prompt` — the task text (it never asks for sub-agents);
* :func:`table_scorer` — the strict table scorer (:func:`agent_swarm.swarm.verifiers.table.score_table`): metric
  item-F1 over the looked-up cells (keys excluded), row-F1 and success in the details, one item per
  gold cell;
* :func:`wide_episode` — the episode of a wide table task: the researcher sub-agent type
  (:meth:`~agent_swarm.workloads.base.Episode.one_agent`), the instructions of each mode, the budgets;
* :func:`wide_gold` — the gold policies of a wide table task in both modes: swarm (one researcher per
  entity, all in one stage, then the table) and single (search, open, read, entity after entity).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.function_backend import FunctionBackend, call
from agent_swarm.swarm.messages import ToolMessage
from agent_swarm.swarm.records import EpisodeRecord, Task
from agent_swarm.swarm.verifiers.table import ColumnRule, score_table
from agent_swarm.tools.registry import Tool
from agent_swarm.workloads.base import Episode, GoldPolicy, Mode, Score, tool_messages, user_text

__all__ = [
    "AGENT",
    "EXACT_NUMBER",
    "LABEL_RE",
    "NOT_FOUND",
    "WIDE_RESEARCHER",
    "Attr",
    "Kind",
    "Title",
    "own_hit",
    "parse_report",
    "rx",
    "table_scorer",
    "wide_config",
    "wide_gold",
    "wide_prompt",
    "wide_table",
]

AGENT = "researcher"
NOT_FOUND = "NOT FOUND"
LABEL_RE = re.compile(r"'([^']+)'")
"""The entity a sub-agent's task names, in single quotes."""
_HIT_RE = re.compile(r"^doc_id: (\S+) \| (.*?) \| score", re.MULTILINE)
EXACT_NUMBER = ColumnRule(preprocess=("extract_number",), metrics=("number_near",), criterion=0.001)
"""A number column: the number in the cell, equal to 0.1 % (so "4,210 people" is 4210)."""

# The steps spelled out in order: a 1.5B researcher told only to "find and open" the document opened
# ids it made up ("retail_customers_ava_lopez") before any search.
WIDE_RESEARCHER = (
    "You look things up in a document collection. First call search with the name of the entity your task "
    "names; then call open with the id of the result whose title is that entity; then report the requested "
    f"attributes as 'name: value' lines. If no result is that entity, report {NOT_FOUND}."
)
WIDE_SINGLE = (
    "You are a research assistant. Work alone: look up every entity yourself (search its name, then open the id "
    "of the result whose title is that entity), then answer with the table."
)


def rx(pattern: str, group: int = 1) -> Callable[[str], str | None]:
    """A parser of one value from a document's text: the stripped ``group`` of the first match, or None."""
    compiled = re.compile(pattern, re.MULTILINE)

    def parse(text: str) -> str | None:
        m = compiled.search(text)
        return m.group(group).strip() if m else None

    return parse


@dataclass(frozen=True)
class Attr:
    """One column: its gold value from the record, and how the gold policy reads it from the text."""

    name: str
    gold: Callable[[dict[str, Any]], str]
    parse: Callable[[str], str | None]
    rule: ColumnRule | None = None
    hint: str = ""  # what the prompt says of the column beyond its name ("how many")


@dataclass(frozen=True)
class Kind:
    """One kind of entity of a corpus."""

    name: str  # corpus record kind
    key: str  # key column
    noun: str  # plural, in the prompt ("retail customers")
    entity: str  # singular ("retail customer")
    label: Callable[[dict[str, Any]], str]
    own_title: Callable[[str], Title]  # how the entity's own document is titled
    attrs: tuple[Attr, ...]

    def attr(self, name: str) -> Attr:
        return next(a for a in self.attrs if a.name == name)


def wide_prompt(kind: Kind, labels: Sequence[str], attrs: Sequence[str]) -> str:
    """The task: a table of ``labels`` × ``attrs``, looked up with search and open. No word of sub-agents."""
    cols = " | ".join([kind.key, *attrs])
    hints = {a.name: a.hint for a in kind.attrs}
    asked = ", ".join(f"{a} ({hints[a]})" if hints.get(a) else a for a in attrs)
    return (
        f"Build a table of these {len(labels)} {kind.noun}: {', '.join(labels)}.\n"
        f"For each one give: {asked}. Look everything up in the document collection with the "
        "search and open tools; do not guess. Some names may not be in the collection: leave those out.\n"
        f"Answer with one markdown table with exactly these columns: | {cols} |, one row per "
        f"{kind.entity} found, the {kind.key} written exactly as given above."
    )


def wide_table(kind: Kind, attrs: Sequence[str], rows: Sequence[Mapping[str, str]]) -> str:
    """A markdown table with ``kind``'s key column and ``attrs``; a missing cell is ``?``."""
    lines = ["| " + " | ".join([kind.key, *attrs]) + " |", "|" + "---|" * (len(attrs) + 1)]
    lines += ["| " + " | ".join(r.get(c, "?") for c in [kind.key, *attrs]) + " |" for r in rows]
    return "\n".join(lines)


def table_scorer(args: Mapping[str, Any]) -> Callable[[EpisodeRecord], Score]:
    """The strict table scorer over a ``table`` verifier's arguments (``gold``, ``key_columns``,
    ``columns``, ``rules``): metric item-F1 over looked-up cells, row-F1 and success in the details."""
    rules = {k: ColumnRule.model_validate(v) for k, v in args.get("rules", {}).items()}

    def scorer(record: EpisodeRecord) -> Score:
        ts = score_table(
            record.answer or "", args["gold"], key_columns=args["key_columns"], columns=args["columns"], rules=rules
        )
        return Score(metric=ts.item_f1, success=ts.success, details=ts.model_dump(exclude={"items"}), items=ts.items)

    return scorer


def wide_config(n_labels: int) -> SwarmConfig:
    """Budgets of a wide table task of ``n_labels`` names: the single gold policy needs 2N + 1 steps."""
    return SwarmConfig(
        max_critical_steps=2 * n_labels + 8, max_subagent_steps=8, max_subagents_per_stage=max(16, n_labels)
    )


def wide_episode(task: Task, mode: Mode, tools: tuple[Tool, ...], swarm_instructions: str) -> Episode:
    """The episode of a wide table task (its verifier arguments hold the gold table)."""
    return Episode.one_agent(
        task,
        mode,
        tools=tools,
        agent=AGENT,
        system_prompt=WIDE_RESEARCHER,
        instructions={"swarm": swarm_instructions, "single": WIDE_SINGLE},
        scorer=table_scorer(task.verifier_args),
        config=wide_config(len(task.metadata["labels"])),
    )


# -- gold policies: search → open the entity's own document → read the attributes from its text ---------


@dataclass(frozen=True, slots=True)
class Title:
    """How an entity's own document is titled: ``text`` exactly, or (``prefix``) ``text`` and more
    (``Jane Doe (retail user jane_doe_1)``). A fictional entity's record is titled by its name alone, so
    a news item headlined "Acme Corp signs …" is not it."""

    text: str
    prefix: bool = False

    def matches(self, title: str) -> bool:
        return title.startswith(self.text) if self.prefix else title == self.text


def own_hit(msg: ToolMessage, own: Title) -> str | None:
    """The id of the first search hit titled as ``own`` (the entity's own document)."""
    hits = [] if msg.is_error else _HIT_RE.findall(msg.content)
    return next((doc_id for doc_id, title in hits if own.matches(title)), None)


def parse_report(text: str) -> dict[str, str] | None:
    """A researcher's ``name: value`` report (None when it found nothing)."""
    if NOT_FOUND in text:
        return None
    body = text.split("report:\n", 1)[-1]
    return dict(line.split(": ", 1) for line in body.splitlines() if ": " in line)


def _read(kind: Kind, attrs: Sequence[str], text: str) -> dict[str, str]:
    return {a: kind.attr(a).parse(text) or "?" for a in attrs}


def wide_gold(
    kind: Kind, labels: Sequence[str], attrs: Sequence[str], mode: Mode, *, latency_s: float = 0.0
) -> GoldPolicy:
    """The gold policies of a table of ``labels`` × ``attrs`` of ``kind`` in ``mode``."""
    if mode == "swarm":
        orch = FunctionBackend(lambda r: _swarm(r, kind, labels, attrs), model="gold-orchestrator", delay=latency_s)
    else:
        orch = FunctionBackend(lambda r: _single(r, kind, labels, attrs), model="gold-single", delay=latency_s)
    sub = FunctionBackend(lambda r: _researcher(r, kind, attrs), model="gold-subagent", delay=latency_s)
    return GoldPolicy(orch, sub)


def _researcher(request: ModelRequest, kind: Kind, attrs: Sequence[str]) -> Completion:
    m = LABEL_RE.search(user_text(request))
    if m is None:
        return Completion(text="My task names no entity in quotes; nothing done.")
    label = m.group(1)
    seen = tool_messages(request)
    if not seen:
        return Completion(tool_calls=(call("search", query=label, k=5),))
    if len(seen) == 1:
        doc_id = own_hit(seen[0], kind.own_title(label))
        if doc_id is None:
            return Completion(text=f"{kind.key}: {label}\n{NOT_FOUND}")
        return Completion(tool_calls=(call("open", doc_id=doc_id),))
    values = _read(kind, attrs, seen[-1].content)
    return Completion(text="\n".join([f"{kind.key}: {label}", *(f"{a}: {v}" for a, v in values.items())]))


def _swarm(request: ModelRequest, kind: Kind, labels: Sequence[str], attrs: Sequence[str]) -> Completion:
    reports = tool_messages(request, "assign_task")
    if reports or request.tool_choice == "none":
        rows = [r for m in reports if not m.is_error and (r := parse_report(m.content)) is not None]
        return Completion(text=wide_table(kind, attrs, rows))
    calls = [
        call("assign_task", agent=AGENT, task=f"Look up the {kind.entity} '{label}' and report: {', '.join(attrs)}.")
        for label in labels
    ]
    return Completion(text=f"{len(calls)} look-ups in parallel.", tool_calls=tuple(calls))


def _single(request: ModelRequest, kind: Kind, labels: Sequence[str], attrs: Sequence[str]) -> Completion:
    if request.parallel_tool_calls:
        return _single_parallel(request, kind, labels, attrs)
    seen = tool_messages(request)
    pos, rows = 0, []
    for label in labels:
        if pos >= len(seen):
            return Completion(tool_calls=(call("search", query=label, k=5),))
        doc_id = own_hit(seen[pos], kind.own_title(label))
        pos += 1
        if doc_id is None:
            continue
        if pos >= len(seen):
            return Completion(tool_calls=(call("open", doc_id=doc_id),))
        rows.append({kind.key: label, **_read(kind, attrs, seen[pos].content)})
        pos += 1
    return Completion(text=wide_table(kind, attrs, rows))


def _single_parallel(request: ModelRequest, kind: Kind, labels: Sequence[str], attrs: Sequence[str]) -> Completion:
    """A single agent allowed several calls per turn: every search in one turn, every open in the next,
    then the table (three critical steps at any width)."""
    seen = tool_messages(request)
    if not seen:
        return Completion(tool_calls=tuple(call("search", query=label, k=5) for label in labels))
    hits = [(label, own_hit(m, kind.own_title(label))) for label, m in zip(labels, seen[: len(labels)], strict=False)]
    found = [(label, doc_id) for label, doc_id in hits if doc_id is not None]
    opened = seen[len(labels) :]
    if found and not opened:
        return Completion(tool_calls=tuple(call("open", doc_id=doc_id) for _, doc_id in found))
    rows = [{kind.key: label, **_read(kind, attrs, m.content)} for (label, _), m in zip(found, opened, strict=False)]
    return Completion(text=wide_table(kind, attrs, rows))
