"""τ²-batch: K real τ²-bench retail or airline tickets that touch disjoint records, on one shared database.

* **Domains** (knob ``domain``): ``retail`` (default; ``workloads/tau2_retail.py``) and ``airline``
  (``workloads/tau2_airline.py``), each with its own reimplemented tools, database and policy.
* **Tickets** are τ²-bench tasks that work one-shot, with at least one database write in the gold
  actions. Retail also leaves out tasks whose text matches "if (the) agent" or "confirm" (they depend on
  the dialogue). Airline keeps them: its "if the agent says …" clauses are the customer's decision
  rules, which the database and policy settle (checked by hand on all 13 train tickets; the test split
  was not read). The text is ``reason_for_call`` + ``known_info`` + ``task_instructions`` plus one fixed
  rule: nobody answers questions, act on the stated preferences.
* **A job** holds K tickets of one domain whose touched records (users and orders or reservations,
  new reservations and the flights a booking takes seats on, taken from the gold actions and their
  results, never from the ticket text) are pairwise disjoint, and whose gold replay commutes:
  replaying the batch forward and backward gives the same database (checked at generation time).
* **Gold** = each ticket's gold actions replayed on a fresh database (tool errors tolerated, as in
  τ²-bench). **Reward**: item-level precision/recall/F1 of the episode's database changes against the
  gold changes, where an item is ``(table, record id, field path, value)``; exact-DB success; and
  per-ticket success (every record the ticket touches equals the gold record).
* **Splits**: τ²'s official train split for development, the test split held out.

Difficulty knobs: ``k`` tickets per job, and the band ``[min_actions, max_actions]`` of gold-action
counts a ticket may have (default 5–6 for retail; 1–20, every ticket, for airline, whose train split has
only 13 tickets). With one tool call per step, the gold critical steps are ``Σ n_i + 1`` (single agent)
against ``max n_i + 3`` (swarm), so a narrow band keeps the batch balanced.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from pydantic import Field, model_validator

from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import ConfigError, ToolError
from agent_swarm.swarm.function_backend import FunctionBackend, call
from agent_swarm.swarm.messages import ToolMessage
from agent_swarm.swarm.records import Task
from agent_swarm.tools.registry import Tool
from agent_swarm.workloads.base import Episode, GoldPolicy, Knobs, Mode, Score, Workload, tool_messages, user_text
from agent_swarm.workloads.splits import check_split, pool_splits
from agent_swarm.workloads.tau2_airline import WRITE_TOOLS as AIRLINE_WRITES
from agent_swarm.workloads.tau2_airline import AirlineDB, airline_tools
from agent_swarm.workloads.tau2_common import Record, Tau2DB, data_file
from agent_swarm.workloads.tau2_retail import WRITE_TOOLS as RETAIL_WRITES
from agent_swarm.workloads.tau2_retail import RetailDB, retail_tools

__all__ = ["DOMAINS", "Domain", "Tau2BatchKnobs", "Tau2BatchWorkload", "Ticket", "db_diff", "diff_f1", "replay"]

NAME = "tau2-batch"
RULE = (
    "No one will answer questions: the customer has already confirmed everything stated here, so act "
    "directly on the stated preferences (the policy's confirmation step is done)."
)
_TICKET_RE = re.compile(r"Ticket ((?:retail|airline)-\d+)")
_ABSENT = "<absent>"


@dataclass(frozen=True)
class Domain:
    """What τ²-batch needs to know of one τ² domain."""

    name: str
    db_class: type[Tau2DB]
    tools: Callable[[Any], tuple[Tool, ...]]  # binds the domain's tools to a database of db_class
    write_tools: frozenset[str]
    business: tuple[str, str]  # ("a retail store", "the retail store")
    how: str  # the agent's procedure for one ticket
    changes: str  # what the agent's report names
    band: tuple[int, int]  # default [min_actions, max_actions]
    dialogue: re.Pattern[str] | None  # tickets whose text matches depend on the dialogue: left out

    @property
    def agent(self) -> str:
        return f"{self.name}_agent"

    def new_db(self) -> Tau2DB:
        return self.db_class()

    def policy(self) -> str:
        return _policy(self.name)


DOMAINS: dict[str, Domain] = {
    "retail": Domain(
        name="retail",
        db_class=RetailDB,
        tools=retail_tools,
        write_tools=RETAIL_WRITES,
        business=("a retail store", "the retail store"),
        how=(
            "authenticate the customer (find their user id by email or name + zip), look up the orders and "
            "products you need, then make the changes the ticket asks for."
        ),
        changes="order ids, new statuses",
        band=(5, 6),
        dialogue=re.compile(r"if (the )?agent|confirm", re.IGNORECASE),
    ),
    "airline": Domain(
        name="airline",
        db_class=AirlineDB,
        tools=airline_tools,
        write_tools=AIRLINE_WRITES,
        business=("an airline", "the airline"),
        how=(
            "look up the customer's profile (the ticket gives their user id) and the reservations and flights "
            "you need, check what the policy allows, then make the changes the ticket asks for."
        ),
        changes="reservation ids, what changed",
        band=(1, 20),
        dialogue=None,
    ),
}


def _domain(name: str) -> Domain:
    try:
        return DOMAINS[name]
    except KeyError:
        raise ConfigError(f"unknown τ² domain {name!r} for {NAME}; use one of {sorted(DOMAINS)}") from None


@dataclass(frozen=True)
class Ticket:
    """One τ² task usable as a one-shot ticket."""

    id: str  # "<domain>-<τ² task id>", e.g. "retail-12"
    text: str
    actions: tuple[tuple[str, dict[str, Any]], ...]
    records: frozenset[Record]  # (table, id) the gold run reads or writes

    @property
    def n_actions(self) -> int:
        return len(self.actions)

    @property
    def domain(self) -> Domain:
        return _domain(self.id.split("-", 1)[0])


def _data(domain: str, name: str) -> Any:
    return json.loads(data_file(domain, name))


@cache
def _policy(domain: str) -> str:
    return data_file(domain, "policy.md")


def _tools_by_name(db: Tau2DB) -> dict[str, Tool]:
    return {t.name: t for t in _domain(db.domain).tools(db)}


def _apply(tools: dict[str, Tool], name: str, args: dict[str, Any]) -> tuple[bool, str]:
    """Run one action synchronously; returns (ok, output). Tool errors are tolerated."""
    t = tools[name]
    try:
        out = t.fn(**t.validate(args))
    except ToolError as exc:
        return False, str(exc)
    return True, out if isinstance(out, str) else json.dumps(out)


def _batch_domain(tickets: Sequence[Ticket]) -> Domain:
    domains = {t.domain.name for t in tickets}
    if len(domains) > 1:
        raise ConfigError(f"a batch holds tickets of one τ² domain, got {sorted(domains)}")
    return _domain(domains.pop() if domains else "retail")


def replay(tickets: Iterable[Ticket], db: Tau2DB | None = None) -> Tau2DB:
    """Replay the tickets' gold actions in order on ``db`` (default: a fresh database of their domain)."""
    tickets = list(tickets)
    db = db or _batch_domain(tickets).new_db()
    tools = _tools_by_name(db)
    for t in tickets:
        for name, args in t.actions:
            _apply(tools, name, args)
    return db


def _records_of(domain: Domain, actions: Sequence[tuple[str, dict[str, Any]]]) -> frozenset[Record]:
    """Records one ticket's gold run touches (see :meth:`~agent_swarm.workloads.tau2_common.Tau2DB.touched`)."""
    db = domain.new_db()
    tools = _tools_by_name(db)
    recs: set[Record] = set()
    for name, args in actions:
        ok, out = _apply(tools, name, args)
        recs |= db.touched(name, args, out if ok else None)
    return frozenset(recs)


@cache
def _tickets(split: str, domain: str = "retail") -> tuple[Ticket, ...]:
    dom = _domain(domain)
    splits = _data(domain, "split_tasks.json")
    check_split(split, NAME)
    by_id = {t["id"]: t for t in _data(domain, "tasks.json")}
    out = []
    for tid in splits["test"] if split == "test" else splits["train"]:
        raw = by_id[tid]
        ins = raw["user_scenario"]["instructions"]
        said = " ".join(str(ins.get(k) or "") for k in ("reason_for_call", "task_instructions"))
        actions = tuple((a["name"], dict(a["arguments"])) for a in raw["evaluation_criteria"]["actions"] or ())
        if (dom.dialogue and dom.dialogue.search(said)) or not any(n in dom.write_tools for n, _ in actions):
            continue
        parts = [ins.get("reason_for_call"), ins.get("known_info"), ins.get("task_instructions")]
        text = " ".join(str(p).strip() for p in parts if p and str(p).strip() not in ("", "."))
        out.append(
            Ticket(id=f"{domain}-{tid}", text=f"{text} {RULE}", actions=actions, records=_records_of(dom, actions))
        )
    if split == "test":  # τ²'s own test split, held out
        return tuple(out)
    # τ²'s train split, less a quarter of its usable tickets: those are dev (pool_splits)
    dev_or_train = pool_splits([t.id for t in out], [False] * len(out))
    return tuple(t for t, s in zip(out, dev_or_train, strict=True) if s == split)


def _ticket_map(split: str, domain: str) -> dict[str, Ticket]:
    return {t.id: t for t in _tickets(split, domain)}


def _db_hash(db: Tau2DB) -> str:
    return hashlib.sha256(json.dumps(db.data, sort_keys=True).encode()).hexdigest()


def commutes(tickets: Sequence[Ticket]) -> bool:
    """Whether replaying the batch forward and backward yields the same database."""
    return _db_hash(replay(tickets)) == _db_hash(replay(reversed(tickets)))


# -- scoring --------------------------------------------------------------------------------------------


def _flatten(obj: Any, prefix: str, out: dict[str, str]) -> None:
    if isinstance(obj, dict) and obj:
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(obj, list) and obj:
        for i, v in enumerate(obj):
            _flatten(v, f"{prefix}[{i}]", out)
    else:
        out[prefix] = json.dumps(obj, sort_keys=True)


def db_diff(before: dict[str, Any], after: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    """Changed items ``(table, record id, field path, new value)`` from ``before`` to ``after``."""
    items: set[tuple[str, str, str, str]] = set()
    for table in before.keys() | after.keys():
        b, a = before.get(table, {}), after.get(table, {})
        for rid in b.keys() | a.keys():
            rb, ra = b.get(rid), a.get(rid)
            if rb == ra:
                continue
            fb: dict[str, str] = {}
            fa: dict[str, str] = {}
            if rb is not None:
                _flatten(rb, "", fb)
            if ra is not None:
                _flatten(ra, "", fa)
            for path in fb.keys() | fa.keys():
                if fb.get(path) != fa.get(path):
                    items.add((table, rid, path, fa.get(path, _ABSENT)))
    return items


def diff_f1(pred: set[Any], gold: set[Any]) -> tuple[float, float, float]:
    """Precision, recall, F1 of ``pred`` against ``gold`` (1, 1, 1 when both are empty)."""
    if not pred and not gold:
        return 1.0, 1.0, 1.0
    tp = len(pred & gold)
    p = tp / len(pred) if pred else 0.0
    r = tp / len(gold) if gold else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return p, r, f


@cache
def _initial(domain: str) -> dict[str, Any]:
    return _domain(domain).new_db().data


def _score(db: Tau2DB, tickets: Sequence[Ticket]) -> Score:
    initial = _initial(db.domain)
    gold = replay(tickets).data
    pred_items = db_diff(initial, db.data)
    gold_items = db_diff(initial, gold)
    p, r, f = diff_f1(pred_items, gold_items)
    per_ticket: dict[str, bool] = {}
    for t in tickets:
        per_ticket[t.id] = all(db.data[tb].get(rid) == gold[tb].get(rid) for tb, rid in t.records)
    exact = db.data == gold
    return Score(
        metric=f,
        success=exact,
        details={
            "item_precision": p,
            "item_recall": r,
            "item_f1": f,
            "exact_db": exact,
            "ticket_success_rate": sum(per_ticket.values()) / len(per_ticket),
            "per_ticket": per_ticket,
            "pred_items": len(pred_items),
            "gold_items": len(gold_items),
        },
        items={tid: float(ok) for tid, ok in per_ticket.items()},
    )


# -- the workload ---------------------------------------------------------------------------------------


class Tau2BatchKnobs(Knobs):
    k: int = Field(8, ge=1, le=16, description="tickets per job")
    min_actions: int = Field(5, ge=1, description="fewest gold actions a ticket may have (airline default: 1)")
    max_actions: int = Field(6, ge=1, description="most gold actions a ticket may have (airline default: 20)")
    domain: Literal["retail", "airline"] = Field("retail", description="the τ² domain of the tickets")

    @model_validator(mode="before")
    @classmethod
    def _domain_band(cls, data: Any) -> Any:
        """An unset band defaults to the domain's."""
        if isinstance(data, dict) and data.get("domain") in DOMAINS:
            lo, hi = DOMAINS[data["domain"]].band
            return {"min_actions": lo, "max_actions": hi, **data}
        return data

    @model_validator(mode="after")
    def _band(self) -> Tau2BatchKnobs:
        if self.min_actions > self.max_actions:
            raise ValueError(f"min_actions ({self.min_actions}) exceeds max_actions ({self.max_actions})")
        return self


def _job_prompt(dom: Domain, tickets: Sequence[Ticket]) -> str:
    head = (
        f"Handle this batch of {len(tickets)} customer-service tickets for {dom.business[1]}. Each ticket "
        "comes from a different customer and touches different records. Handle every ticket completely "
        f"with the {dom.name} tools, following the {dom.name} policy. " + RULE + "\n"
        "When all tickets are handled, answer with a markdown table with one row per ticket: "
        "| ticket | outcome |."
    )
    body = "\n\n".join(f"### Ticket {t.id}\n{t.text}" for t in tickets)
    return f"{head}\n\n{body}"


def _agent_prompt(dom: Domain) -> str:
    return (
        f"You are a customer-service agent of {dom.business[0]}. You handle ONE ticket with the {dom.name} "
        f"tools, one tool call at a time: {dom.how} "
        f"{RULE} When done, report what you changed ({dom.changes}) in one short paragraph.\n\n"
        f"# Policy\n{dom.policy()}"
    )


class Tau2BatchWorkload(Workload):
    name = NAME
    metric = "item_f1"
    description = (
        "K real τ²-bench retail or airline tickets (knob domain) on disjoint records, one shared DB; "
        "item-F1 of DB changes"
    )
    knobs_model = Tau2BatchKnobs

    def tasks(self, n: int, *, seed: int = 0, split: str = "train", **knobs: Any) -> list[Task]:
        kn = self.request(n, split, knobs, Tau2BatchKnobs)
        dom = _domain(kn.domain)
        pool = [t for t in _tickets(split, dom.name) if kn.min_actions <= t.n_actions <= kn.max_actions]
        if len(pool) < kn.k:
            raise ConfigError(
                f"only {len(pool)} {dom.name} {split} tickets have {kn.min_actions}–{kn.max_actions} gold actions; "
                f"k={kn.k} needs at least that many. Widen the band or lower k"
            )
        # Retail task ids (and seeds) predate the domain knob and stay as they were.
        stem = NAME if dom.name == "retail" else f"{NAME}-{dom.name}"
        rng = random.Random(f"{stem}:{split}:{seed}")
        out: list[Task] = []
        for i in range(n):
            batch = self._draw(rng, pool, kn.k)
            out.append(
                Task(
                    id=f"{stem}-{split}-s{seed}-{i}",
                    prompt=_job_prompt(dom, batch),
                    metadata={
                        "workload": NAME,
                        "domain": dom.name,
                        "split": split,
                        "seed": seed,
                        "knobs": kn.model_dump(),
                        "tickets": [t.id for t in batch],
                        "parts": len(batch),
                    },
                )
            )
        return out

    @staticmethod
    def _draw(rng: random.Random, pool: Sequence[Ticket], k: int) -> list[Ticket]:
        for _ in range(200):
            order = list(pool)
            rng.shuffle(order)
            batch: list[Ticket] = []
            used: set[tuple[str, str]] = set()
            for t in order:
                if not (t.records & used):
                    batch.append(t)
                    used |= t.records
                if len(batch) == k:
                    break
            if len(batch) == k and commutes(batch):
                return batch
        raise ConfigError(f"could not draw {k} tickets on disjoint records that commute; lower k")

    def _tickets_of(self, task: Task) -> list[Ticket]:
        self.check_task(task)
        tmap = _ticket_map(str(task.metadata.get("split", "train")), str(task.metadata.get("domain", "retail")))
        try:
            return [tmap[t] for t in task.metadata["tickets"]]
        except KeyError as exc:
            raise ConfigError(f"task {task.id!r} names unknown ticket {exc}") from None

    def episode(self, task: Task, mode: Mode) -> Episode:
        tickets = self._tickets_of(task)
        dom = _batch_domain(tickets)
        kn = Tau2BatchKnobs.model_validate(task.metadata.get("knobs", {"domain": dom.name}))
        db = dom.new_db()
        tools = dom.tools(db)
        instructions: dict[Mode, str] = {
            "swarm": f"A sub-agent type '{dom.agent}' is predefined: a {dom.name} customer-service agent with all "
            f"{dom.name} tools and the {dom.name} policy. The tickets are independent: assign each ticket to "
            f"its own instance with assign_task(agent='{dom.agent}', task=<the ticket id and full ticket "
            "text>), all in one message, then answer with the table from their reports.",
            "single": f"You are a customer-service agent of {dom.business[0]}. Work alone: handle every ticket "
            f"yourself with the {dom.name} tools, one tool call at a time, then answer with the table.\n\n"
            f"# Policy\n{dom.policy()}",
        }
        budget = kn.k * (kn.max_actions + 2) + 4
        return Episode.one_agent(
            task,
            mode,
            tools=tools,
            agent=dom.agent,
            system_prompt=_agent_prompt(dom),
            instructions=instructions,
            scorer=lambda record: _score(db, tickets),
            config=SwarmConfig(
                max_critical_steps=budget, max_subagent_steps=kn.max_actions + 6, max_subagents_per_stage=max(16, kn.k)
            ),
        )

    def gold_policy(self, task: Task, mode: Mode, *, latency_s: float = 0.0) -> GoldPolicy:
        tickets = self._tickets_of(task)
        tmap = {t.id: t for t in tickets}
        if mode == "swarm":
            orch = FunctionBackend(
                lambda r: _swarm_orchestrator(r, tickets), model="gold-orchestrator", delay=latency_s
            )
        else:
            orch = FunctionBackend(lambda r: _single_agent(r, tickets), model="gold-single", delay=latency_s)
        sub = FunctionBackend(lambda r: _ticket_agent(r, tmap), model="gold-subagent", delay=latency_s)
        return GoldPolicy(orchestrator=orch, subagent=sub)


# -- gold policies: replay the gold actions one call per step, report what the tools really returned -----


def _outcome(name: str, msg: ToolMessage) -> str:
    if msg.is_error:
        return f"{name} failed: {msg.content}"
    try:
        obj = json.loads(msg.content)
    except json.JSONDecodeError:
        return f"{name}: {msg.content}"
    if isinstance(obj, dict) and "order_id" in obj:
        return f"{name} {obj['order_id']} -> {obj.get('status')}"
    if isinstance(obj, dict) and "reservation_id" in obj:
        state = obj.get("status") or f"{obj.get('cabin')}, {len(obj.get('flights', []))} flights"
        return f"{name} {obj['reservation_id']} -> {state}"
    if isinstance(obj, dict) and "user_id" in obj:
        return f"{name} {obj['user_id']} -> address {obj.get('address', {}).get('address1')}"
    return f"{name}: ok"


def _report(dom: Domain, results: Sequence[ToolMessage]) -> str:
    writes = [_outcome(m.name, m) for m in results if m.name in dom.write_tools]
    return "; ".join(writes) or "no changes made"


def _ticket_agent(request: ModelRequest, tickets: dict[str, Ticket]) -> Completion:
    m = _TICKET_RE.search(user_text(request))
    if m is None or m.group(1) not in tickets:
        return Completion(text="I could not find a ticket id in my task; nothing done.")
    ticket = tickets[m.group(1)]
    results = tool_messages(request)
    if len(results) < ticket.n_actions:
        name, args = ticket.actions[len(results)]
        return Completion(tool_calls=(call(name, **args),))
    return Completion(text=f"Ticket {ticket.id}: {_report(ticket.domain, results)}")


def _table(rows: Iterable[tuple[str, str]]) -> str:
    lines = ["| ticket | outcome |", "|---|---|"]
    lines += [f"| {t} | {o.replace('|', '/')} |" for t, o in rows]
    return "\n".join(lines)


def _swarm_orchestrator(request: ModelRequest, tickets: Sequence[Ticket]) -> Completion:
    reports = tool_messages(request, "assign_task")
    if reports or request.tool_choice == "none":
        rows = []
        for m in reports:
            body = m.content.split("report:\n", 1)[-1] if "report:\n" in m.content else m.content
            tid = _TICKET_RE.search(body)
            rows.append((tid.group(1) if tid else "?", body.split(": ", 1)[-1]))
        return Completion(text=_table(rows))
    calls = [call("assign_task", agent=t.domain.agent, task=f"Ticket {t.id}\n{t.text}") for t in tickets]
    return Completion(text=f"Assigning {len(calls)} tickets in parallel.", tool_calls=tuple(calls))


def _signature(action: tuple[str, dict[str, Any]]) -> str:
    return json.dumps(action, sort_keys=True)


def _single_agent(request: ModelRequest, tickets: Sequence[Ticket]) -> Completion:
    """Every ticket's actions in turn, one call per turn; an action an earlier ticket already made (the
    same read twice) is not repeated: the protocol stops an agent that repeats finished work."""
    results = tool_messages(request)
    plan = list({_signature(a): a for t in tickets for a in t.actions}.values())
    if len(results) < len(plan) and request.tool_choice != "none":
        name, args = plan[len(results)]
        return Completion(tool_calls=(call(name, **args),))
    by_call = {_signature(a): m for a, m in zip(plan, results, strict=False)}
    rows = [
        (t.id, _report(t.domain, [by_call[k] for a in t.actions if (k := _signature(a)) in by_call])) for t in tickets
    ]
    return Completion(text=_table(rows))
