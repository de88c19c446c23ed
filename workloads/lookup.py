"""Wide and deep lookup over the offline τ² search corpus (``agent_swarm.tools.corpora``: BM25 ``search``/``open``).

**Wide lookup** (Kimi K2.5's "breadth" prompts): a table of N entities × M attributes. The entities
are retail customers, airline customers, flights or products of the corpus, named in the prompt; the
answer is one markdown table scored by the strict WideSearch-style table scorer
(:func:`agent_swarm.swarm.verifiers.table.score_table`): the metric is item-F1 over the *looked-up* cells (the
name column is no item, so copying the names scores 0), row-F1 and success (every cell right, no
extra row) are reported beside it, and ``Score.items`` holds each gold cell's score. The
difficulty knobs are N, M and ``distractors``: names that are *not* in the corpus (customers whose
first and last names come from two different people, unused flight numbers, products the store does
not sell) which must be left out of the table; a hallucinated row lowers precision.

**Deep lookup** (K2.5's "depth" prompts): B independent branches, each a multi-hop chain through the
corpus — customer name → profile → the first order listed there → that order's total — joined at
the end (which customer's first order has the largest total). Scored by the ``pick`` verifier on
the ``ANSWER:`` line, which names the customer and states that total (a name alone is right 1 time in B
by guessing) — the same function for task files and episodes; several different ``ANSWER:`` lines (a
hedge over the candidates) score 0.

Gold answers are computed from the corpus's structured records (``fields``); the gold policies read
the *rendered document text* returned by the real ``search``/``open`` tools, so an environment that
lost information cannot reach reward 1. Tasks carry the ``table``/``pick`` verifier and its arguments,
so their task files score with the plain verifier registry (the search tools must be granted).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, ClassVar, Literal

from pydantic import Field

from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.records import Task
from agent_swarm.swarm.verifiers.table import ColumnRule
from agent_swarm.tools.builtin.search import Snippets
from agent_swarm.tools.corpora import tau2_records, tau2_search_toolset
from agent_swarm.tools.registry import Tool
from agent_swarm.workloads.base import Episode, GoldPolicy, Knobs, Mode, Workload
from agent_swarm.workloads.chains import Chain, Hop, chain_episode, chain_gold
from agent_swarm.workloads.research import SWARM_NOTE
from agent_swarm.workloads.splits import Split, pool_splits
from agent_swarm.workloads.wide import (
    AGENT,
    EXACT_NUMBER,
    Attr,
    Kind,
    Title,
    wide_episode,
    wide_gold,
    wide_prompt,
)
from agent_swarm.workloads.wide import rx as _rx

__all__ = [
    "KINDS",
    "DeepLookupKnobs",
    "DeepLookupWorkload",
    "WideLookupKnobs",
    "WideLookupWorkload",
    "deep_episode",
    "deep_gold",
]


def _address_part(index: int) -> Callable[[str], str | None]:
    def parse(text: str) -> str | None:
        m = re.search(r"^Address: (.+)$", text, re.MULTILINE)
        if not m:
            return None
        parts = m.group(1).split(", ")
        return parts[index] if len(parts) >= -index else None

    return parse


def _list_count(label: str, sep: str) -> Callable[[str], str | None]:
    def parse(text: str) -> str | None:
        m = re.search(rf"^{label}: (.*)$", text, re.MULTILINE)
        if not m:
            return None
        body = m.group(1).strip()
        return "0" if body in ("", "none") else str(len(body.split(sep)))

    return parse


def _count_lines(suffix: str) -> Callable[[str], str | None]:
    def parse(text: str) -> str | None:
        return str(sum(1 for line in text.splitlines() if line.startswith("- item ") and line.endswith(suffix)))

    return parse


def _min_price(text: str) -> str | None:
    prices = [float(p) for p in re.findall(r"price \$([0-9.]+)", text)]
    return f"{min(prices):.2f}" if prices else None


def _full_name(f: dict[str, Any]) -> str:
    return f"{f['name']['first_name']} {f['name']['last_name']}"


_NUM = EXACT_NUMBER
# "22:00:00 EST", "22:00" and "10:00 pm" are the document's "arrival 22:00:00 EST"; "00:00:00+1" stays a day later
_TIME = ColumnRule(preprocess=("extract_time",), metrics=("exact_match",))
_COUNT = "how many"  # a count column: "payment_methods" alone reads as the list of them

KINDS: dict[str, Kind] = {
    "retail_user": Kind(
        "retail_user",
        "customer",
        "retail customers",
        "retail customer",
        _full_name,
        lambda label: Title(f"{label} (retail user ", prefix=True),
        (
            Attr("user_id", lambda f: f["user_id"], _rx(r"\(user id ([^)]+)\)")),
            Attr("email", lambda f: f["email"], _rx(r"^Email: (\S+)")),
            Attr("city", lambda f: f["address"]["city"], _address_part(-4)),
            Attr("zip", lambda f: f["address"]["zip"], _address_part(-2)),
            Attr("orders", lambda f: str(len(f["orders"])), _list_count("Orders", ", "), _NUM, _COUNT),
            Attr(
                "payment_methods",
                lambda f: str(len(f["payment_methods"])),
                _list_count("Payment methods", "; "),
                _NUM,
                _COUNT,
            ),
        ),
    ),
    "airline_user": Kind(
        "airline_user",
        "customer",
        "airline customers",
        "airline customer",
        _full_name,
        lambda label: Title(f"{label} (airline user ", prefix=True),
        (
            Attr("user_id", lambda f: f["user_id"], _rx(r"\(user id ([^)]+)\)")),
            Attr("membership", lambda f: f["membership"], _rx(r", (\w+) member, born")),
            Attr("email", lambda f: f["email"], _rx(r"^Email: (\S+)")),
            Attr("birth_date", lambda f: f["dob"], _rx(r" member, born (\d{4}-\d{2}-\d{2})")),
            Attr(
                "reservations", lambda f: str(len(f["reservations"])), _list_count("Reservations", ", "), _NUM, _COUNT
            ),
        ),
    ),
    "airline_flight": Kind(
        "airline_flight",
        "flight",
        "flights",
        "flight",
        lambda f: f["flight_number"],
        lambda label: Title(f"Flight {label} ", prefix=True),
        (
            Attr("origin", lambda f: f["origin"], _rx(r" from (\w{3}) to \w{3}")),
            Attr("destination", lambda f: f["destination"], _rx(r" from \w{3} to (\w{3})")),
            Attr(
                "departure", lambda f: f["scheduled_departure_time_est"], _rx(r"scheduled departure (\S+) EST"), _TIME
            ),
            Attr("arrival", lambda f: f["scheduled_arrival_time_est"], _rx(r", arrival (\S+) EST"), _TIME),
        ),
    ),
    "retail_product": Kind(
        "retail_product",
        "product",
        "store products",
        "product",
        lambda f: f["name"],
        lambda label: Title(f"{label} (product ", prefix=True),
        (
            Attr("product_id", lambda f: f["product_id"], _rx(r"\(product id (\d+)\)")),
            Attr("variants", lambda f: str(len(f["variants"])), _rx(r", (\d+) variants:"), _NUM, _COUNT),
            Attr(
                "available_variants",
                lambda f: str(sum(v["available"] for v in f["variants"].values())),
                _count_lines("; available"),
                _NUM,
                _COUNT,
            ),
            Attr("min_price", lambda f: f"{min(v['price'] for v in f['variants'].values()):.2f}", _min_price, _NUM),
        ),
    ),
}
_FAKE_PRODUCTS = (
    "Espresso Grinder",
    "Rowing Machine",
    "Snow Globe",
    "Bird Feeder",
    "Wine Rack",
    "Ski Goggles",
    "Label Printer",
    "Bread Maker",
    "Fishing Rod",
    "Standing Desk",
    "Pressure Washer",
    "Telescope",
)


@cache
def _entities(kind: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    """(label, record) of every entity of ``kind`` whose label is unique within the kind."""
    recs = tau2_records(kind)
    k = KINDS[kind]
    labels = [k.label(r) for r in recs]
    return tuple(sorted((lab, r) for lab, r in zip(labels, recs, strict=True) if labels.count(lab) == 1))


@cache
def _entity_splits(kind: str) -> tuple[Split, ...]:
    """The split of each of :func:`_entities`: every 4th held out for test, a quarter of the rest dev."""
    labels = [lab for lab, _ in _entities(kind)]
    return pool_splits(labels, [j % 4 == 0 for j in range(len(labels))])


@cache
def _all_user_names() -> frozenset[str]:
    return frozenset(_full_name(r) for kind in ("retail_user", "airline_user") for r in tau2_records(kind))


def _distractors(kind: str, rng: random.Random, n: int) -> list[str]:
    out: list[str] = []
    if kind in ("retail_user", "airline_user"):
        recs = [r for _, r in _entities(kind)]
        taken = _all_user_names()
        while len(out) < n:
            a, b = rng.sample(recs, 2)
            name = f"{a['name']['first_name']} {b['name']['last_name']}"
            if name not in taken and name not in out:
                out.append(name)
    elif kind == "airline_flight":
        used = {lab for lab, _ in _entities(kind)}
        while len(out) < n:
            num = f"HAT{rng.randint(400, 999)}"
            if num not in used and num not in out:
                out.append(num)
    else:
        names = {lab for lab, _ in _entities(kind)}
        out = rng.sample([p for p in _FAKE_PRODUCTS if p not in names], n)
    return out


@cache
def _search_tools(snippets: Snippets = "all") -> tuple[Tool, ...]:
    return tau2_search_toolset(snippets=snippets).tools


# -- wide lookup --------------------------------------------------------------------------------------------


class WideLookupKnobs(Knobs):
    entities: int = Field(16, ge=1, le=50, description="N: entities per table")
    attributes: int = Field(3, ge=1, le=6, description="M: attributes per entity (at most the kind's attributes)")
    distractors: int = Field(0, ge=0, le=12, description="named entities that are not in the corpus")
    kind: Literal["any", "retail_user", "airline_user", "airline_flight", "retail_product"] = "any"
    tool_knobs: ClassVar[frozenset[str]] = frozenset({"snippets"})
    snippets: Snippets = Field(
        "named",
        description="which search hits show a snippet: all (most of a record: one search naming every entity "
        "shows their facts; task files from before this knob), named (a hit whose title the query names) or none",
    )


def _lookup_task(
    workload: str,
    where: tuple[str, int, int],
    kn: Knobs,
    *,
    prompt: str,
    verifier: str,
    verifier_args: dict[str, Any],
    metadata: dict[str, Any],
) -> Task:
    """Task ``i`` of a look-up request (``where`` = split, seed, i), framed alike for the wide and the deep
    look-up: its id, and metadata that start with the workload and end with what drew the task."""
    split, seed, i = where
    return Task(
        id=f"{workload}-{split}-s{seed}-{i}",
        prompt=prompt,
        verifier=verifier,
        verifier_args=verifier_args,
        metadata={"workload": workload, **metadata, "split": split, "seed": seed, "knobs": kn.model_dump()},
    )


def _pool(kind: Kind, split: str) -> list[tuple[str, dict[str, Any]]]:
    return [e for e, s in zip(_entities(kind.name), _entity_splits(kind.name), strict=True) if s == split]


def _fits(kind: Kind, split: str, kn: WideLookupKnobs) -> bool:
    return kn.entities <= len(_pool(kind, split)) and kn.attributes <= len(kind.attrs)


class WideLookupWorkload(Workload):
    name = "wide-lookup"
    metric = "item_f1"
    description = "N entities × M attributes from the offline τ² corpus; WideSearch table item-F1"
    knobs_model = WideLookupKnobs

    def tasks(self, n: int, *, seed: int = 0, split: str = "train", **knobs: Any) -> list[Task]:
        kn = self.request(n, split, knobs, WideLookupKnobs)
        rng = random.Random(f"{self.name}:{split}:{seed}")
        out = []
        for i in range(n):
            kind = KINDS[kn.kind] if kn.kind != "any" else KINDS[rng.choice(sorted(KINDS))]
            if kn.kind == "any" and not _fits(kind, split, kn):  # small split pools: draw among kinds that fit
                fitting = [k for k in sorted(KINDS) if _fits(KINDS[k], split, kn)]
                kind = KINDS[rng.choice(fitting)] if fitting else kind
            pool = _pool(kind, split)
            if kn.entities > len(pool):
                raise ConfigError(
                    f"only {len(pool)} {split} {kind.noun} in the corpus; entities={kn.entities} is too many"
                )
            if kn.attributes > len(kind.attrs):
                raise ConfigError(
                    f"{kind.noun} have {len(kind.attrs)} attributes; attributes={kn.attributes} is too many"
                )
            picked = rng.sample(pool, kn.entities)
            chosen = {x.name for x in rng.sample(kind.attrs, kn.attributes)}
            attrs = [a.name for a in kind.attrs if a.name in chosen]
            fakes = _distractors(kind.name, rng, kn.distractors)
            labels = [lab for lab, _ in picked] + fakes
            rng.shuffle(labels)
            by_name = {a.name: a for a in kind.attrs}
            gold = [{kind.key: lab, **{a: by_name[a].gold(rec) for a in attrs}} for lab, rec in picked]
            rules = {a: r.model_dump() for a in attrs if (r := by_name[a].rule) is not None}
            args = {"gold": gold, "key_columns": [kind.key], "columns": [kind.key, *attrs], "rules": rules}
            out.append(
                _lookup_task(
                    self.name,
                    (split, seed, i),
                    kn,
                    prompt=wide_prompt(kind, labels, attrs),
                    verifier="table",
                    verifier_args=args,
                    metadata={
                        "kind": kind.name,
                        "labels": labels,
                        "parts": len(labels),
                        "attrs": attrs,
                        "distractors": fakes,
                    },
                )
            )
        return out

    def episode(self, task: Task, mode: Mode) -> Episode:
        self.check_task(task)
        # A task file from before the snippets knob ran with snippets; it keeps them.
        snippets = task.metadata.get("knobs", {}).get("snippets", "all")
        return wide_episode(task, mode, _search_tools(snippets), SWARM_NOTE)

    def gold_policy(self, task: Task, mode: Mode, *, latency_s: float = 0.0) -> GoldPolicy:
        self.check_task(task)
        kind = KINDS[task.metadata["kind"]]
        return wide_gold(kind, task.metadata["labels"], task.metadata["attrs"], mode, latency_s=latency_s)


# -- deep lookup --------------------------------------------------------------------------------------------


class DeepLookupKnobs(Knobs):
    branches: int = Field(4, ge=2, le=12, description="independent multi-hop branches joined at the end")


def _order_total(order: dict[str, Any]) -> float:
    return round(sum(float(it["price"]) for it in order["items"]), 2)


@cache
def _orders() -> dict[str, dict[str, Any]]:
    return {o["order_id"]: o for o in tau2_records("retail_order")}


def _deep_prompt(labels: Sequence[str]) -> str:
    return (
        f"Each of these retail customers has a profile that lists their orders: {', '.join(labels)}.\n"
        "For each customer, take the FIRST order listed in their profile and find that order's total. "
        "Which customer's first order has the largest total? Look everything up in the document collection "
        "with the search and open tools; do not guess. End with a line "
        "'ANSWER: <the customer's full name> (<that order's total>)'."
    )


class DeepLookupWorkload(Workload):
    name = "deep-lookup"
    metric = "pick"
    description = "multi-hop questions (customer → profile → first order → total) in B branches joined at the end"
    knobs_model = DeepLookupKnobs

    def tasks(self, n: int, *, seed: int = 0, split: str = "train", **knobs: Any) -> list[Task]:
        kn = self.request(n, split, knobs, DeepLookupKnobs)
        orders = _orders()
        pool = [
            (lab, rec)
            for (lab, rec), s in zip(_entities("retail_user"), _entity_splits("retail_user"), strict=True)
            if rec["orders"] and rec["orders"][0] in orders and s == split
        ]
        if kn.branches > len(pool):
            raise ConfigError(f"only {len(pool)} {split} customers qualify; branches={kn.branches} is too many")
        rng = random.Random(f"{self.name}:{split}:{seed}")
        out = []
        for i in range(n):
            for _ in range(100):
                picked = rng.sample(pool, kn.branches)
                totals = {lab: _order_total(orders[rec["orders"][0]]) for lab, rec in picked}
                best = max(totals.values())
                winners = [lab for lab, t in totals.items() if t == best]
                if len(winners) == 1:
                    break
            else:  # pragma: no cover - ties on every draw are practically impossible
                raise ConfigError("could not draw customers without a tie; try another seed")
            labels = [lab for lab, _ in picked]
            out.append(
                _lookup_task(
                    self.name,
                    (split, seed, i),
                    kn,
                    prompt=_deep_prompt(labels),
                    verifier="pick",
                    verifier_args={
                        "expected": winners[0],
                        "value": best,
                        "others": [lab for lab in totals if lab != winners[0]],
                    },
                    metadata={"labels": labels, "parts": len(labels), "totals": totals},
                )
            )
        return out

    def episode(self, task: Task, mode: Mode) -> Episode:
        self.check_task(task)
        return deep_episode(task, mode)

    def gold_policy(self, task: Task, mode: Mode, *, latency_s: float = 0.0) -> GoldPolicy:
        self.check_task(task)
        return deep_gold(task, mode, latency_s=latency_s)


DEEP_SWARM = (
    f"A sub-agent type '{AGENT}' is predefined with the search and open tools. The customers are independent: "
    "give each one to its own instance (all assign_task calls in one message), then compare their reports and answer."
)


def deep_episode(
    task: Task, mode: Mode, *, swarm_instructions: str = DEEP_SWARM, tools: tuple[Tool, ...] | None = None
) -> Episode:
    """The episode of a deep question: over the τ² corpus by default, or over ``tools`` (a generated
    collection); ``train-mix`` passes instructions that say what exists, not what to do."""
    return chain_episode(task, mode, tools=_search_tools() if tools is None else tools, swarm=swarm_instructions)


def deep_gold(task: Task, mode: Mode, *, latency_s: float = 0.0) -> GoldPolicy:
    """The gold policies of a deep-lookup task: one researcher per branch (swarm), or every chain in turn."""
    return chain_gold(DEEP_CHAIN, list(task.metadata["labels"]), mode, latency_s=latency_s)


_FIRST_ORDER = re.compile(r"^Orders: (#W\d+)", re.MULTILINE)
_TOTAL = re.compile(r"total \$([0-9.]+)\)")


def _match(pattern: re.Pattern[str]) -> Callable[[str], str | None]:
    return lambda text: m.group(1) if (m := pattern.search(text)) else None


# One branch: search the name → open the profile → search its first order → open it → its total.
DEEP_CHAIN = Chain(
    key="customer",
    value="first_order_total",
    task=lambda label: (
        f"Find the total of the first order listed in the profile of the retail customer '{label}'. "
        "Report 'first_order_total: <amount>'."
    ),
    hops=(
        Hop(query=lambda name: name, own_title=KINDS["retail_user"].own_title, read=_match(_FIRST_ORDER)),
        Hop(
            query=lambda order: f"Order {order}",
            own_title=lambda order: Title(f"Order {order}", prefix=True),
            read=_match(_TOTAL),
        ),
    ),
    largest=True,
    line=lambda name, total: f"{name}: first order total ${total:.2f}",
    stated=lambda total: f"${total:.2f}",
)
