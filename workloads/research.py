"""Wide research over a user's own corpus: N fictional entities × M attributes, found only with search/open.

Every task gets its own generated document collection (:func:`agent_swarm.tools.corpora.fictional.fictional_world`):
companies, people or products with made-up names and random facts, so no model knows a single cell and
an answer written without the tools scores ≈ 0 (the no-tool ablation; tested). Beside each asked
entity the collection holds ``distractors`` documents that are not it — its near-namesake with other
facts, news items naming it beside another entity's numbers — and, with ``missing``, names that are
asked for but have only a near-namesake (their rows must be left out).

The prompt asks for one markdown table and never mentions sub-agents; whether to fan out is the
orchestrator's decision. Scored by the strict table scorer (:func:`agent_swarm.workloads.wide.table_scorer`): the
metric is item-F1 over the looked-up cells (the name column is no item: a names-only table scores 0),
with row-F1 and success (every cell right, no extra row) in the details. ``metadata["parts"]`` is the
number of names to look up (N, plus ``missing``).

The width curve (issue 26, K2.5 Fig. 8) runs N ∈ {2, 4, 8, 16}: ``--knob entities=8``.
"""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Any, ClassVar, Literal

from pydantic import Field

from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.records import Task
from agent_swarm.tools.builtin.search import SearchIndex, Snippets, search_toolset
from agent_swarm.tools.corpora.fictional import (
    ATTRIBUTES,
    FICTIONAL_KINDS,
    GENERATOR,
    FictionalKind,
    World,
    fictional_world,
)
from agent_swarm.tools.registry import Tool
from agent_swarm.workloads.base import Episode, GoldPolicy, Knobs, Mode, Workload
from agent_swarm.workloads.chains import Chain, Hop, chain_episode, chain_gold
from agent_swarm.workloads.splits import key_split, split_rng
from agent_swarm.workloads.wide import AGENT, EXACT_NUMBER, Attr, Kind, Title, rx, wide_episode, wide_gold, wide_prompt

__all__ = [
    "FICTION",
    "FICTION_CHAIN",
    "DeepResearchKnobs",
    "DeepResearchWorkload",
    "WideResearchKnobs",
    "WideResearchWorkload",
    "chain_gold_policy",
    "chain_task",
    "research_task",
    "research_tools",
    "research_world",
]

NAME = "wide-research"


def _kind(key: str, noun: str, entity: str, attrs: tuple[Attr, ...]) -> Kind:
    return Kind(
        name=key,
        key=key,
        noun=noun,
        entity=entity,
        label=lambda f: str(f["name"]),
        own_title=Title,
        attrs=attrs,
    )


def _field(name: str) -> Any:
    return lambda f: str(f[name])


FICTION: dict[str, Kind] = {
    "company": _kind(
        "company",
        "companies",
        "company",
        (
            Attr("founded", _field("founded"), rx(r"founded in (\d{4})"), hint="year"),
            Attr("headquarters", _field("headquarters"), rx(r"headquartered in ([^.\n]+)\."), hint="town"),
            Attr("ceo", _field("ceo"), rx(r"chief executive is ([^.\n]+)\."), hint="chief executive"),
            Attr("employees", _field("employees"), rx(r"employs ([\d,]+) people"), EXACT_NUMBER, "how many"),
            Attr("ticker", _field("ticker"), rx(r"ticker ([A-Z]+)")),
            Attr(
                "flagship", _field("flagship"), rx(r"best-known product is the ([^.\n]+)\."), hint="best-known product"
            ),
        ),
    ),
    "person": _kind(
        "person",
        "people",
        "person",
        (
            Attr("born", _field("born"), rx(r"\(born (\d{4})\)"), hint="year"),
            Attr("hometown", _field("hometown"), rx(r"\) is an? .+? from ([^.\n]+)\."), hint="town"),
            Attr("employer", _field("employer"), rx(r"works at ([^.\n]+)\.")),
            Attr("role", _field("role"), rx(r"\) is an? (.+?) from "), hint="occupation"),
            Attr("email", _field("email"), rx(r"^Email: (\S+)")),
        ),
    ),
    "product": _kind(
        "product",
        "products",
        "product",
        (
            Attr("maker", _field("maker"), rx(r"made by ([^,\n]+), first sold"), hint="company"),
            Attr("launched", _field("launched"), rx(r"first sold in (\d{4})"), hint="year"),
            Attr("price", lambda f: f"{f['price']:.2f}", rx(r"priced at \$([\d,.]+\d)"), EXACT_NUMBER, "in dollars"),
            Attr("weight_g", _field("weight_g"), rx(r"weighs ([\d,]+) grams"), EXACT_NUMBER, "in grams"),
            Attr("sku", _field("sku"), rx(r"SKU: (\S+)")),
        ),
    ),
}
assert all(tuple(a.name for a in FICTION[k].attrs) == ATTRIBUTES[k] for k in FICTIONAL_KINDS)


class WideResearchKnobs(Knobs):
    entities: int = Field(4, ge=1, le=32, description="N: entities per table (the width curve: 2, 4, 8, 16)")
    attributes: int = Field(2, ge=1, le=6, description="M: attributes per entity (companies 6, people/products 5)")
    distractors: int = Field(2, ge=0, le=6, description="documents per entity that are not it (near-namesake, news)")
    missing: int = Field(0, ge=0, le=8, description="names asked for that the collection lacks (rows to leave out)")
    kind: Literal["any", "company", "person", "product"] = "any"
    tool_knobs: ClassVar[frozenset[str]] = frozenset({"snippets"})
    snippets: Snippets = Field(
        "named",
        description="which search hits show a snippet: all (a record's snippet is all its facts, so one search "
        "naming every entity answers the table; task files from before this knob), named (a hit whose title the "
        "query names: one look-up per entity) or none",
    )


@lru_cache(maxsize=64)
def research_world(
    key: str, kind: FictionalKind, entities: int, distractors: int, missing: int, split: str, linked: bool = False
) -> World:
    """The generated collection of one task (asked names all in ``split``); cached per process."""
    accept = lambda name: key_split(name) == split  # noqa: E731
    return fictional_world(key, kind, entities, distractors=distractors, missing=missing, accept=accept, linked=linked)


@lru_cache(maxsize=64)
def _tools(
    key: str,
    kind: FictionalKind,
    entities: int,
    distractors: int,
    missing: int,
    split: str,
    linked: bool,
    snippets: Snippets,
) -> tuple[Tool, ...]:
    world = research_world(key, kind, entities, distractors, missing, split, linked)
    return search_toolset(SearchIndex(world.corpus()), snippets=snippets).tools


def research_task(
    workload: str,
    task_id: str,
    kind: FictionalKind,
    attrs: list[str],
    *,
    entities: int,
    distractors: int,
    missing: int,
    snippets: Snippets,
    split: str,
    seed: int,
    knobs: dict[str, Any],
) -> Task:
    """One wide-research task (its world's key is ``task_id``): the asked entities of a freshly generated
    collection as the gold table. ``train-mix`` makes its wide tasks with it too. ``snippets`` is which
    search hits show one (:data:`~agent_swarm.tools.builtin.search.Snippets`)."""
    world = research_world(task_id, kind, entities, distractors, missing, split)
    k = FICTION[kind]
    labels = [str(r["name"]) for r in world.entities] + list(world.missing)
    random.Random(f"{task_id}:order").shuffle(labels)
    gold = [{k.key: r["name"], **{a: k.attr(a).gold(r) for a in attrs}} for r in world.entities]
    rules = {a: r.model_dump() for a in attrs if (r := k.attr(a).rule) is not None}
    return Task(
        id=task_id,
        prompt=wide_prompt(k, labels, attrs),
        verifier="table",
        verifier_args={"gold": gold, "key_columns": [k.key], "columns": [k.key, *attrs], "rules": rules},
        metadata={
            "workload": workload,
            "kind": kind,
            "labels": labels,
            "attrs": attrs,
            "missing": list(world.missing),
            "parts": len(labels),
            "corpus": {
                "generator": GENERATOR,
                "key": task_id,
                "kind": kind,
                "entities": entities,
                "distractors": distractors,
                "missing": missing,
                "split": split,
                "snippets": snippets,
            },
            "split": split,
            "seed": seed,
            "knobs": knobs,
        },
    )


def research_tools(task: Task) -> tuple[Tool, ...]:
    """``search``/``open`` over the task's own generated collection (rebuilt from its metadata). A task
    whose corpus names no ``snippets`` (deep research, controls, and wide tasks generated before the knob)
    gets every hit's snippet, as it was run with them."""
    spec = task.metadata.get("corpus")
    if not isinstance(spec, dict) or spec.get("generator") != GENERATOR:
        got = spec.get("generator") if isinstance(spec, dict) else None
        raise ConfigError(
            f"task {task.id!r} was generated by corpus generator {got!r}, this code has {GENERATOR!r}; "
            "regenerate the task file with this version"
        )
    return _tools(
        str(spec["key"]),
        spec["kind"],
        int(spec["entities"]),
        int(spec["distractors"]),
        int(spec["missing"]),
        str(spec["split"]),
        bool(spec.get("linked", False)),
        spec.get("snippets", "all"),
    )


SWARM_NOTE = f"A sub-agent type '{AGENT}' is predefined with the search and open tools."
"""Swarm mode's instructions: what exists, not what to do (whether to fan out is the policy's decision)."""


class WideResearchWorkload(Workload):
    name = NAME
    metric = "item_f1"
    description = "N fictional entities × M attributes in a generated corpus (search/open); strict table item-F1"
    knobs_model = WideResearchKnobs

    def tasks(self, n: int, *, seed: int = 0, split: str = "train", **knobs: Any) -> list[Task]:
        kn = self.request(n, split, knobs, WideResearchKnobs)
        rng = split_rng(self.name, split, seed)
        out = []
        for i in range(n):
            kind: FictionalKind = rng.choice(FICTIONAL_KINDS) if kn.kind == "any" else kn.kind
            if kn.attributes > len(ATTRIBUTES[kind]):
                raise ConfigError(
                    f"{kind} has {len(ATTRIBUTES[kind])} attributes; attributes={kn.attributes} is too many"
                )
            chosen = set(rng.sample(ATTRIBUTES[kind], kn.attributes))
            attrs = [a for a in ATTRIBUTES[kind] if a in chosen]
            tid = f"{self.name}-{split}-s{seed}-{i}"
            sizes = {"entities": kn.entities, "distractors": kn.distractors, "missing": kn.missing}
            out.append(
                research_task(
                    self.name,
                    tid,
                    kind,
                    attrs,
                    **sizes,
                    snippets=kn.snippets,
                    split=split,
                    seed=seed,
                    knobs=kn.model_dump(),
                )
            )
        return out

    def episode(self, task: Task, mode: Mode) -> Episode:
        self.check_task(task)
        return wide_episode(task, mode, research_tools(task), SWARM_NOTE)

    def gold_policy(self, task: Task, mode: Mode, *, latency_s: float = 0.0) -> GoldPolicy:
        self.check_task(task)
        kind = FICTION[task.metadata["kind"]]
        return wide_gold(kind, task.metadata["labels"], task.metadata["attrs"], mode, latency_s=latency_s)


# -- deep chains over a generated collection: company → its chief executive → their birth year -----------

FICTION_CHAIN = Chain(
    key="company",
    value="ceo_born",
    task=lambda label: (
        f"Find the birth year of the chief executive of the company '{label}'. Report 'ceo_born: <year>'."
    ),
    hops=(
        Hop(query=lambda c: c, own_title=FICTION["company"].own_title, read=FICTION["company"].attr("ceo").parse),
        Hop(query=lambda p: p, own_title=FICTION["person"].own_title, read=FICTION["person"].attr("born").parse),
    ),
    largest=False,
    line=lambda company, year: f"{company}: chief executive born {year:.0f}",
    stated=lambda year: f"{year:.0f}",
)


def _chain_prompt(labels: list[str]) -> str:
    return (
        f"Each of these companies has a chief executive: {', '.join(labels)}.\n"
        "Whose chief executive was born first (the earliest birth year)? Look everything up in the document "
        "collection with the search and open tools; do not guess. End with a line "
        "'ANSWER: <the company> (<its chief executive's birth year>)'."
    )


def chain_task(
    workload: str, task_id: str, branches: int, *, distractors: int, split: str, seed: int, knobs: dict[str, Any]
) -> Task:
    """A deep question over a generated collection: which of ``branches`` companies has the earliest-born
    chief executive (two hops each, joined at the end). The world is redrawn until the answer is unique."""
    for attempt in range(100):
        key = f"{task_id}/{attempt}"
        world = research_world(key, "company", branches, distractors, 0, split, True)
        born = {str(r["name"]): _ceo_born(world, str(r["ceo"])) for r in world.entities}
        first = min(born.values())
        winners = [c for c, y in born.items() if y == first]
        if len(winners) == 1:
            break
    else:  # pragma: no cover - 100 ties in a row are practically impossible
        raise ConfigError(f"could not draw companies without a tie for {task_id}")
    labels = list(born)
    random.Random(f"{key}:order").shuffle(labels)
    corpus = {"generator": GENERATOR, "key": key, "kind": "company", "entities": branches, "distractors": distractors}
    return Task(
        id=task_id,
        prompt=_chain_prompt(labels),
        verifier="pick",
        verifier_args={"expected": winners[0], "value": first, "others": [c for c in born if c != winners[0]]},
        metadata={
            "workload": workload,
            "labels": labels,
            "parts": branches,
            "born": born,
            "corpus": corpus | {"missing": 0, "split": split, "linked": True},
            "split": split,
            "seed": seed,
            "knobs": knobs,
        },
    )


def _ceo_born(world: World, ceo: str) -> int:
    return int(next(d.fields["born"] for d in world.documents if d.kind == "person" and d.fields["name"] == ceo))


def chain_gold_policy(task: Task, mode: Mode, *, latency_s: float = 0.0) -> GoldPolicy:
    """The gold policies of a :func:`chain_task`."""
    return chain_gold(FICTION_CHAIN, list(task.metadata["labels"]), mode, latency_s=latency_s)


class DeepResearchKnobs(Knobs):
    branches: int = Field(4, ge=2, le=12, description="independent two-hop chains joined at the end")
    distractors: int = Field(2, ge=0, le=6, description="documents per company that are not it")


class DeepResearchWorkload(Workload):
    """Deep questions over a generated collection: which of B companies has the earliest-born chief
    executive (company → chief executive → birth year, B chains joined at the end). Fresh entities and
    facts for every seed, so a test seed is never seen before; scored by the ``pick`` verifier: the ANSWER
    line names the company and states its chief executive's birth year (a name alone is a guess)."""

    name = "deep-research"
    metric = "pick"
    description = "B two-hop chains (company → chief executive → birth year) in a generated corpus, joined at the end"
    knobs_model = DeepResearchKnobs

    def tasks(self, n: int, *, seed: int = 0, split: str = "train", **knobs: Any) -> list[Task]:
        kn = self.request(n, split, knobs, DeepResearchKnobs)
        return [
            chain_task(
                self.name,
                f"{self.name}-{split}-s{seed}-{i}",
                kn.branches,
                distractors=kn.distractors,
                split=split,
                seed=seed,
                knobs=kn.model_dump(),
            )
            for i in range(n)
        ]

    def episode(self, task: Task, mode: Mode) -> Episode:
        self.check_task(task)
        return chain_episode(task, mode, tools=research_tools(task), swarm=SWARM_NOTE)

    def gold_policy(self, task: Task, mode: Mode, *, latency_s: float = 0.0) -> GoldPolicy:
        self.check_task(task)
        return chain_gold_policy(task, mode, latency_s=latency_s)
