"""BFCL parallel: Berkeley Function Calling Leaderboard v4 items, scored by call-level F1.

Each task is one BFCL item: a user request and the functions it may call. The functions do nothing but
record the call (BFCL's AST categories never execute them). The score reads **every call any agent
attempted from the episode record** (:func:`attempted_calls`): the orchestrator's or single agent's
direct calls, every sub-agent's calls, the calls one-call-per-turn held back ("not run") and the calls
of assignments admission dropped as duplicates — so neither arm is scored on a subset the runtime
chose for it. The pooled calls are matched order-free against the gold calls with BFCL's AST matching
rules, reimplemented here (no upstream code):

* the function name must be equal;
* every argument given must be a parameter of the function and must have the declared type (an
  integer is accepted where a float is declared, never the reverse; booleans are not numbers);
* its value must equal one of the gold allowed values — strings compared after BFCL's
  standardisation (lower-case; spaces and ``, . / - _ * ^`` removed), lists element-wise, dicts key-wise
  with the same rules;
* a parameter missing from the call is accepted only when ``""`` is among its allowed values
  (BFCL's marker for an optional parameter that may be omitted).

Call-level precision/recall/F1 use a maximum one-to-one matching between emitted and gold calls;
success = every gold call matched and no extra call. Categories: ``parallel`` and
``parallel_multiple`` (2–8 independent calls), with ``simple_python`` and ``multiple`` (one call) as
controls where spawning sub-agents is spurious parallelism. Split: ``sha1(id) % 4 == 0`` is held out
(``test``); the rest is ``train``.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Literal

from pydantic import Field

from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import ConfigError, ErrorType, ToolError
from agent_swarm.swarm.function_backend import FunctionBackend, call
from agent_swarm.swarm.records import EpisodeRecord, SubagentResult, Task
from agent_swarm.tools.registry import Tool
from agent_swarm.workloads.base import Episode, GoldPolicy, Knobs, Mode, Score, Workload, tool_messages, user_text
from agent_swarm.workloads.splits import pool_splits

__all__ = [
    "CATEGORIES",
    "Attempts",
    "BfclItem",
    "BfclKnobs",
    "BfclWorkload",
    "attempted_calls",
    "call_f1",
    "call_matches",
    "gold_matched",
    "score_calls",
]

NAME = "bfcl-parallel"
AGENT = "caller"
Category = Literal["parallel", "parallel_multiple", "simple_python", "multiple"]
CATEGORIES: tuple[Category, ...] = ("parallel", "parallel_multiple", "simple_python", "multiple")
_STD_RE = re.compile(r"[ ,./\-_*^]")
_CALL_RE = re.compile(r"Call `([^`]+)` with arguments (\{.*\})\s*$", re.DOTALL)


@dataclass(frozen=True)
class BfclItem:
    id: str
    category: str
    question: str
    functions: tuple[dict[str, Any], ...]
    gold: tuple[dict[str, dict[str, list[Any]]], ...]  # [{name: {param: allowed values}}]


def _lines(path: str) -> list[dict[str, Any]]:
    text = (resources.files("agent_swarm.workloads") / "data" / "bfcl_v4" / path).read_text("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@cache
def _items(category: str) -> tuple[BfclItem, ...]:
    if category not in CATEGORIES:
        raise ConfigError(f"unknown BFCL category {category!r}; known: {', '.join(CATEGORIES)}")
    name = f"BFCL_v4_{category}.json"
    answers = {a["id"]: a["ground_truth"] for a in _lines(f"possible_answer/{name}")}
    out = []
    for raw in _lines(name):
        turn = raw["question"][0]
        question = "\n".join(m["content"] for m in turn if m["role"] == "user")
        out.append(BfclItem(raw["id"], category, question, tuple(raw["function"]), tuple(answers[raw["id"]])))
    return tuple(out)


def split_of(item_id: str) -> str:
    """``test`` (held out) when ``sha1(id) % 4 == 0``, else ``dev`` for a quarter of the rest
    (:func:`~agent_swarm.workloads.splits.pool_splits`), else ``train``."""
    return _split_map()[item_id]


@cache
def _split_map() -> dict[str, str]:
    ids = [it.id for c in CATEGORIES for it in _items(c)]
    held = [int(hashlib.sha1(i.encode()).hexdigest(), 16) % 4 == 0 for i in ids]
    return dict(zip(ids, pool_splits(ids, held), strict=True))


@cache
def _by_id() -> dict[str, BfclItem]:
    return {it.id: it for c in CATEGORIES for it in _items(c)}


def tool_name(name: str) -> str:
    """BFCL names may contain dots, which tool names cannot: ``spotify.play`` → ``spotify_play``."""
    return name.replace(".", "_")


# -- matching -------------------------------------------------------------------------------------------


def _std(s: str) -> str:
    return _STD_RE.sub("", s).lower().replace("'", '"')


def _type_ok(value: Any, typ: str | None) -> bool:
    is_num = isinstance(value, int | float) and not isinstance(value, bool)
    checks: dict[str, bool] = {
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "float": is_num,
        "number": is_num,
        "string": isinstance(value, str),
        "boolean": isinstance(value, bool),
        "array": isinstance(value, list | tuple),
        "tuple": isinstance(value, list | tuple),
        "dict": isinstance(value, dict),
        "object": isinstance(value, dict),
    }
    return checks.get(typ or "any", True)


def _equal(value: Any, cand: Any) -> bool:
    if isinstance(cand, dict):
        if not isinstance(value, dict) or set(value) - set(cand):
            return False
        return all(
            (k in value and any(_equal(value[k], c) for c in allowed)) or (k not in value and "" in allowed)
            for k, allowed in cand.items()
        )
    if isinstance(cand, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(cand)
            and all(_equal(v, c) for v, c in zip(value, cand, strict=True))
        )
    if isinstance(cand, str):
        return isinstance(value, str) and _std(value) == _std(cand)
    if isinstance(cand, bool):
        return isinstance(value, bool) and value is cand
    if isinstance(cand, int | float):
        return isinstance(value, int | float) and not isinstance(value, bool) and float(value) == float(cand)
    return bool(value == cand)


def call_matches(
    name: str,
    arguments: Mapping[str, Any],
    gold: Mapping[str, Mapping[str, Sequence[Any]]],
    functions: Sequence[Mapping[str, Any]],
) -> bool:
    """Whether one emitted call matches one gold call ``{name: {param: allowed values}}``."""
    ((gname, gargs),) = gold.items()
    if name != gname:
        return False
    doc = next((f for f in functions if f["name"] == gname), None)
    props: Mapping[str, Any] = doc["parameters"].get("properties", {}) if doc else {}
    for param, value in arguments.items():
        if param not in props or param not in gargs:
            return False
        typ = props[param].get("type")
        # Some gold answers break their own schema (a string for an array); then the gold decides.
        if not _type_ok(value, typ) and all(_type_ok(c, typ) for c in gargs[param] if c != ""):
            return False
        if not any(_equal(value, c) for c in gargs[param]):
            return False
    return all(p in arguments or "" in allowed for p, allowed in gargs.items())


def _max_matching_pairs(adj: list[list[int]], n_right: int) -> list[int]:
    """For each right vertex (gold call), the left vertex (emitted call) matched to it, or -1."""
    match_right = [-1] * n_right

    def augment(u: int, seen: set[int]) -> bool:
        for v in adj[u]:
            if v not in seen:
                seen.add(v)
                if match_right[v] < 0 or augment(match_right[v], seen):
                    match_right[v] = u
                    return True
        return False

    for u in range(len(adj)):
        augment(u, set())
    return match_right


def gold_matched(calls: Sequence[tuple[str, Mapping[str, Any]]], item: BfclItem) -> list[bool]:
    """Per gold call, whether a maximum one-to-one matching pairs it with an emitted call."""
    adj = [[j for j, g in enumerate(item.gold) if call_matches(n, a, g, item.functions)] for n, a in calls]
    return [m >= 0 for m in _max_matching_pairs(adj, len(item.gold))]


def call_f1(calls: Sequence[tuple[str, Mapping[str, Any]]], item: BfclItem) -> tuple[float, float, float, int]:
    """Precision, recall, F1 and true positives of emitted ``(bfcl name, arguments)`` calls."""
    tp = sum(gold_matched(calls, item))
    if not calls and not item.gold:
        return 1.0, 1.0, 1.0, 0
    p = tp / len(calls) if calls else 0.0
    r = tp / len(item.gold) if item.gold else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0), tp


# -- what the agents attempted ---------------------------------------------------------------------------

_ASSIGN = (
    "assign_task"  # the orchestrator's action (agent_swarm.orchestrator.admission.ASSIGN; workloads may not import it)
)
_DUPLICATES = (ErrorType.DUPLICATE_TASK, ErrorType.ALREADY_DONE)


@dataclass(frozen=True, slots=True)
class Attempts:
    """Every BFCL call any agent of an episode attempted, read from its record (see :func:`attempted_calls`).

    ``calls`` are ``(bfcl name, arguments, parsed)``; ``held`` counts sub-agent calls that one-call-per-turn
    did not run, ``duplicates`` the calls counted again for assignments admission dropped as duplicates."""

    calls: tuple[tuple[str, dict[str, Any], bool], ...]
    held: int
    duplicates: int


def _task_key(agent: object, task: object) -> tuple[str, str]:
    return str(agent).strip().casefold(), str(task).strip().casefold()


def _subagent_calls(
    sub: SubagentResult, names: Mapping[str, str]
) -> tuple[list[tuple[str, dict[str, Any], bool]], int]:
    """A sub-agent's attempted calls in order, and how many of them one-call-per-turn held back. A held
    call the agent made again later, identically (as the notice asks), is that later call, not a second."""
    results = [r for step in sub.step_records for r in step.tool_results if r.call.name in names]
    out: list[tuple[str, dict[str, Any], bool]] = []
    held = 0
    for n, r in enumerate(results):
        if r.error_type == ErrorType.ONE_CALL_PER_TURN:
            again = any(
                later.error_type != ErrorType.ONE_CALL_PER_TURN
                and later.call.name == r.call.name
                and later.call.arguments == r.call.arguments
                for later in results[n + 1 :]
            )
            if again:
                continue
            held += 1
        out.append((names[r.call.name], dict(r.call.arguments), r.call.error is None))
    return out, held


def attempted_calls(record: EpisodeRecord, item: BfclItem) -> Attempts:
    """The calls to score: every call of the item's functions that any agent emitted, run or not.

    * direct calls of the orchestrator (or the single agent) and every sub-agent step's calls, including
      calls one-call-per-turn held back (``ErrorType.ONE_CALL_PER_TURN``: "not run" results; one the agent
      then made again identically is that call, not a second), calls whose
      arguments did not parse or failed the schema, and calls of steps the budget cut short;
    * an ``assign_task`` that admission dropped as a duplicate (``DuplicateTask`` in one message,
      ``AlreadyDone`` across stages) counts as its twin's calls once more: running it would have made
      them again, as a single agent's repeated call is scored as made twice.

    Assignments refused for width or budget never formed a call and count for nothing. The score is a
    function of the record alone (a stored episode rescored gives the same number); the one call it
    cannot see is one whose step was cancelled while it ran (that step keeps no results), a window of
    one scheduling point, since the recorder functions return at once."""
    names = {tool_name(f["name"]): f["name"] for f in item.functions}
    calls: list[tuple[str, dict[str, Any], bool]] = []
    held = 0
    twins: dict[tuple[str, str], list[tuple[str, dict[str, Any], bool]]] = {}
    for stage in record.stages:
        results = [r for step in stage.orchestrator_steps for r in step.tool_results]
        for sub in stage.subagents:
            mine, n_held = _subagent_calls(sub, names)
            twins.setdefault(_task_key(sub.name, sub.task), mine)
            twins.setdefault(_task_key("", sub.task), mine)
            held += n_held
            calls += mine
        calls += [
            (names[r.call.name], dict(r.call.arguments), r.call.error is None) for r in results if r.call.name in names
        ]
    duplicates = 0
    for stage in record.stages:
        for r in (r for step in stage.orchestrator_steps for r in step.tool_results):
            if r.call.name == _ASSIGN and r.error_type in _DUPLICATES:
                args = r.call.arguments
                twin = twins.get(_task_key(args.get("agent", ""), args.get("task", "")))
                twin = twin if twin is not None else twins.get(_task_key("", args.get("task", "")), [])
                calls += twin
                duplicates += len(twin)
    return Attempts(tuple(calls), held, duplicates)


def score_calls(record: EpisodeRecord, item: BfclItem) -> Score:
    """Call-level P/R/F1 of every call any agent attempted (:func:`attempted_calls`) against the gold
    calls; success = every gold call matched and no other call. A call that did not parse matches
    nothing. ``items``: one per gold call (``"<i>:<name>"``), 1 when the matching pairs it."""
    attempts = attempted_calls(record, item)
    scored = [(name, args if ok else {"\x00unparsed": True}) for name, args, ok in attempts.calls]
    matched = gold_matched(scored, item)
    p, r, f, tp = call_f1(scored, item)
    return Score(
        metric=f,
        success=tp == len(item.gold) == len(scored),
        details={
            "call_precision": p,
            "call_recall": r,
            "call_f1": f,
            "emitted_calls": len(scored),
            "held_calls": attempts.held,
            "dropped_duplicate_calls": attempts.duplicates,
            "gold_calls": len(item.gold),
            "matched_calls": tp,
            "category": item.category,
        },
        items={f"{j}:{next(iter(g))}": float(ok) for j, (g, ok) in enumerate(zip(item.gold, matched, strict=True))},
    )


# -- environment ----------------------------------------------------------------------------------------


def _schema(node: Any) -> Any:
    """BFCL's schema dialect → JSON Schema (dict→object, float→number, tuple→array, any→no type)."""
    if isinstance(node, list):
        return [_schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _schema(v) for k, v in node.items()}
    typ = out.get("type")
    mapping = {"dict": "object", "float": "number", "tuple": "array"}
    if typ == "any":
        out.pop("type")
    elif isinstance(typ, str) and typ in mapping:
        out["type"] = mapping[typ]
    return out


@dataclass
class CallLog:
    """Every BFCL function call any agent emitted, in order: ``(bfcl name, arguments, agent id)``."""

    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def _recorder(log: CallLog, fn: Mapping[str, Any]) -> Tool:
    params = fn["parameters"]
    props = params.get("properties", {})
    required = list(params.get("required", []))
    bfcl_name = fn["name"]

    def record(**arguments: Any) -> str:
        log.calls.append((bfcl_name, dict(arguments)))
        unknown = sorted(set(arguments) - set(props))
        missing = [p for p in required if p not in arguments]
        if unknown or missing:
            raise ToolError(f"call recorded but malformed: unknown parameters {unknown}, missing required {missing}")
        # The result depends on the call alone: a call made again returns what it returned before, so the
        # coach's repeat detection sees it (a running count made every result new, and a single agent
        # sent the same calls to its budget), and a frozen sub-agent's result does not depend on its siblings.
        return json.dumps({"recorded": bfcl_name, "arguments": arguments})

    return Tool(
        record,
        name=tool_name(bfcl_name),
        description=fn.get("description", ""),
        parameters=_schema(params),
        blocking=False,
        timeout_s=10.0,
    )


class BfclKnobs(Knobs):
    categories: tuple[Category, ...] = Field(
        ("parallel", "parallel_multiple"), min_length=1, description="BFCL categories to draw items from"
    )


_HARNESS = (
    "Answer the user's request by calling the available functions with the right arguments. Each function call "
    "is recorded and final (the functions only record calls, they return no real data). Make each call the "
    "request needs exactly once and make no other call. Then say which calls you made."
)
"""How calls are taken, told every arm in its instructions (the system prompt), never in the task: the task is
the user's request as BFCL gives it. Written into the task, as it was until 2026-11-28, it was quoted back by
the small-model coach's task-again notice ("answer it now, in the form it asks for": the form was calling the
functions, and single-parallel sent its batch again in 27 of 30 test episodes), and its "the request needs,
each exactly once, and no other call" read as a list of three items, so the swarm was shown one assign_task per
phrase ("Make every call each exactly once;") on 302 of the 305 train and dev items."""


def _prompt(item: BfclItem) -> str:
    return item.question


class BfclWorkload(Workload):
    name = NAME
    metric = "call_f1"
    description = "BFCL v4 parallel / parallel_multiple items (simple/multiple as controls); call-level F1"
    knobs_model = BfclKnobs

    def tasks(self, n: int, *, seed: int = 0, split: str = "train", **knobs: Any) -> list[Task]:
        kn = self.request(n, split, knobs, BfclKnobs)
        pool = [it for c in kn.categories for it in _items(c) if split_of(it.id) == split]
        if n > len(pool):
            raise ConfigError(f"only {len(pool)} {split} items in {list(kn.categories)}; asked for {n}")
        picked = random.Random(f"{NAME}:{split}:{seed}").sample(pool, n)
        return [
            Task(
                id=it.id,
                prompt=_prompt(it),
                metadata={
                    "workload": NAME,
                    "item": it.id,
                    "category": it.category,
                    "split": split,
                    "seed": seed,
                    "gold_calls": len(it.gold),
                    "parts": len(it.gold),
                },
            )
            for it in picked
        ]

    def _item(self, task: Task) -> BfclItem:
        self.check_task(task)
        try:
            return _by_id()[str(task.metadata["item"])]
        except KeyError as exc:
            raise ConfigError(f"task {task.id!r} names unknown BFCL item {exc}") from None

    def episode(self, task: Task, mode: Mode) -> Episode:
        item = self._item(task)
        log = CallLog()
        names = [tool_name(f["name"]) for f in item.functions]
        if len(set(names)) != len(names):
            raise ConfigError(f"BFCL item {item.id} has functions whose tool names collide: {names}")
        tools = tuple(_recorder(log, f) for f in item.functions)
        instructions: dict[Mode, str] = {
            "swarm": f"{_HARNESS}\n\nA sub-agent type '{AGENT}' is predefined with all the request's functions. When "
            "the request needs several independent calls, assign each call to its own instance (all assign_task "
            "calls in one message). When it needs a single call, make it yourself directly.",
            "single": f"{_HARNESS}\n\nYou are a function-calling assistant. Work alone: make every call the request "
            "needs yourself (independent calls may go in one message), then say which calls you made.",
        }

        def scorer(record: EpisodeRecord) -> Score:
            return score_calls(record, item)

        return Episode.one_agent(
            task,
            mode,
            tools=tools,
            agent=AGENT,
            system_prompt="You make function calls. Make exactly the call(s) your task asks for, with the "
            "right argument values, then report the call(s) you made in one line.",
            instructions=instructions,
            scorer=scorer,
            config=SwarmConfig(max_critical_steps=12, max_subagent_steps=4),
        )

    def gold_policy(self, task: Task, mode: Mode, *, latency_s: float = 0.0) -> GoldPolicy:
        item = self._item(task)
        gold_calls = [_gold_call(g, item) for g in item.gold]
        if mode == "swarm":
            orch = FunctionBackend(
                lambda r: _swarm_orchestrator(r, gold_calls), model="gold-orchestrator", delay=latency_s
            )
        else:
            orch = FunctionBackend(lambda r: _single_agent(r, gold_calls), model="gold-single", delay=latency_s)
        return GoldPolicy(orch, FunctionBackend(_caller, model="gold-subagent", delay=latency_s))


# -- gold policies -----------------------------------------------------------------------------------------


def _pick(allowed: Sequence[Any]) -> tuple[bool, Any]:
    """The first allowed value; (False, None) when the parameter should be omitted."""
    if not allowed or allowed[0] == "":
        return False, None
    return True, _concrete(allowed[0])


def _concrete(v: Any) -> Any:
    """A gold candidate with its nested allowed-value lists resolved to their first choice."""
    if isinstance(v, dict):
        out = {}
        for k, sub in v.items():
            keep, val = _pick(sub)
            if keep:
                out[k] = val
        return out
    if isinstance(v, list):
        return [_concrete(x) for x in v]
    return v


def _gold_call(gold: Mapping[str, Mapping[str, Sequence[Any]]], item: BfclItem) -> tuple[str, dict[str, Any]]:
    ((name, params),) = gold.items()
    doc = next((f for f in item.functions if f["name"] == name), {})
    props = doc.get("parameters", {}).get("properties", {})
    args = {}
    for p, allowed in params.items():
        if p not in props and "" in allowed:  # a gold quirk: an optional parameter the function lacks
            continue
        keep, val = _pick(allowed)
        if keep:
            args[p] = val
    return tool_name(name), args


def _swarm_orchestrator(request: ModelRequest, gold: Sequence[tuple[str, dict[str, Any]]]) -> Completion:
    seen = tool_messages(request)
    if seen or request.tool_choice == "none":
        lines = [m.content.split("report:\n", 1)[-1] for m in seen]
        return Completion(text="Calls made:\n" + "\n".join(lines))
    if len(gold) == 1:  # a control item: one call, no sub-agent
        name, args = gold[0]
        return Completion(tool_calls=(call(name, **args),))
    if request.allowed_tools is not None and "assign_task" not in request.allowed_tools:
        # delegation withheld this turn (the small coach: a request that lists no items is done directly first)
        return Completion(tool_calls=tuple(call(n, **a) for n, a in gold))
    calls = [
        call("assign_task", agent=AGENT, task=f"Call `{n}` with arguments {json.dumps(a, sort_keys=True)}")
        for n, a in gold
    ]
    return Completion(text=f"{len(calls)} independent calls; one sub-agent each.", tool_calls=tuple(calls))


def _single_agent(request: ModelRequest, gold: Sequence[tuple[str, dict[str, Any]]]) -> Completion:
    seen = tool_messages(request)
    if seen or request.tool_choice == "none":
        return Completion(text="Calls made:\n" + "\n".join(m.content for m in seen))
    return Completion(tool_calls=tuple(call(n, **a) for n, a in gold))


def _caller(request: ModelRequest) -> Completion:
    m = _CALL_RE.search(user_text(request))
    if m is None:
        return Completion(text="My task does not say which call to make; nothing done.")
    seen = tool_messages(request)
    if not seen:
        return Completion(tool_calls=(call(m.group(1), **json.loads(m.group(2))),))
    last = seen[-1]
    return Completion(text=f"{'FAILED' if last.is_error else 'done'}: {last.content}")
