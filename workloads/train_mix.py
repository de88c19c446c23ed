"""``train-mix``: the procedural training-task generator in the K2.5 recipe (issue 28).

An unlimited stream of training tasks, mixed by weight:

* **wide** — a ``wide-research`` table: N fictional entities (N drawn from ``min_entities`` to
  ``max_entities``, 2 to 16 by default) × 1–3 attributes, in a freshly generated collection with 0–3
  distractor documents per entity and now and then a missing name;
* **deep** — 2–5 independent multi-hop chains joined at the end: half of them (knob ``fiction_deep``)
  over a generated collection (company → its chief executive → their birth year: whose was born
  first?), the others ``deep-lookup`` questions over the τ² corpus (customer → profile → first order →
  its total: whose is largest?);
* **control** — a single-fact ``controls`` question (a fact, a sum, one look-up), where fanning out is wrong.

No prompt and no instruction asks for sub-agents: swarm mode is told that a ``researcher`` type exists,
never what to do with it, so the policy has to learn *when* to parallelise. Tasks are built by the
same functions as the yardstick's workloads (:func:`agent_swarm.workloads.research.research_task`,
:func:`agent_swarm.workloads.controls.control_task`, deep-lookup's generator) and scored by the same scorers.

**Train split only.** Every entity name, fact, expression and customer of a train-mix task belongs to
the train split (generated names by :func:`agent_swarm.workloads.splits.key_split`, pools by their partition), so
no train-mix task shares anything with a dev or test task of ``wide-research``, ``controls`` or
``deep-lookup``, whatever the seeds (tested). ``metadata["family"]`` is ``wide``, ``deep`` or
``control`` for per-family curves; ``metadata["parts"]`` is N, the branches, or 1.
"""

from __future__ import annotations

import random
from typing import Any, Literal

from pydantic import Field, model_validator

from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.records import Task
from agent_swarm.tools.corpora.fictional import ATTRIBUTES, FICTIONAL_KINDS, FictionalKind
from agent_swarm.workloads.base import Episode, GoldPolicy, Knobs, Mode, Workload
from agent_swarm.workloads.controls import CONTROL_KINDS, control_episode, control_gold, control_task
from agent_swarm.workloads.lookup import DeepLookupWorkload, deep_episode, deep_gold
from agent_swarm.workloads.research import (
    FICTION,
    SWARM_NOTE,
    chain_gold_policy,
    chain_task,
    research_task,
    research_tools,
)
from agent_swarm.workloads.splits import split_rng
from agent_swarm.workloads.wide import wide_episode, wide_gold

__all__ = ["FAMILIES", "TrainMixKnobs", "TrainMixWorkload"]

NAME = "train-mix"
Family = Literal["wide", "deep", "control"]
FAMILIES: tuple[Family, ...] = ("wide", "deep", "control")
_DEEP = DeepLookupWorkload()


class TrainMixKnobs(Knobs):
    wide: float = Field(0.5, ge=0.0, description="weight of wide tasks")
    deep: float = Field(0.2, ge=0.0, description="weight of deep (multi-hop) tasks")
    control: float = Field(0.3, ge=0.0, description="weight of single-fact controls")
    min_entities: int = Field(2, ge=1, le=32, description="fewest entities of a wide task")
    max_entities: int = Field(16, ge=1, le=32, description="most entities of a wide task")
    max_branches: int = Field(5, ge=2, le=8, description="most chains of a deep task")
    fiction_deep: float = Field(0.5, ge=0.0, le=1.0, description="share of deep tasks over generated collections")

    @model_validator(mode="after")
    def _check(self) -> TrainMixKnobs:
        if self.wide + self.deep + self.control <= 0:
            raise ValueError("at least one of wide, deep, control needs a positive weight")
        if self.min_entities > self.max_entities:
            raise ValueError(f"min_entities={self.min_entities} is more than max_entities={self.max_entities}")
        return self


def _wide(tid: str, rng: random.Random, kn: TrainMixKnobs, seed: int) -> Task:
    kind: FictionalKind = rng.choice(FICTIONAL_KINDS)
    chosen = set(rng.sample(ATTRIBUTES[kind], rng.randint(1, 3)))
    attrs = [a for a in ATTRIBUTES[kind] if a in chosen]
    sizes = {
        "entities": rng.randint(kn.min_entities, kn.max_entities),
        "distractors": rng.randint(0, 3),
        "missing": 1 if rng.random() < 0.2 else 0,
    }
    # As wide-research's tasks: a snippet only for a hit the query names (one look-up per entity).
    knobs = kn.model_dump()
    return research_task(NAME, tid, kind, attrs, **sizes, snippets="named", split="train", seed=seed, knobs=knobs)


def _deep(tid: str, rng: random.Random, kn: TrainMixKnobs, seed: int) -> Task:
    branches = rng.randint(2, kn.max_branches)
    if rng.random() < kn.fiction_deep:
        knobs = kn.model_dump()
        return chain_task(NAME, tid, branches, distractors=rng.randint(0, 2), split="train", seed=seed, knobs=knobs)
    task = _DEEP.tasks(1, seed=rng.randrange(2**31), split="train", branches=branches)[0]
    md = {**task.metadata, "workload": NAME, "seed": seed, "knobs": kn.model_dump()}
    return task.model_copy(update={"id": tid, "metadata": md})


class TrainMixWorkload(Workload):
    name = NAME
    metric = "r_perf"
    description = "training stream: wide (N 2-16, generated corpus), deep (multi-hop) and single-fact controls"
    knobs_model = TrainMixKnobs

    def tasks(self, n: int, *, seed: int = 0, split: str = "train", **knobs: Any) -> list[Task]:
        kn = self.request(n, split, knobs, TrainMixKnobs)
        if split != "train":
            raise ConfigError(
                f"{NAME} generates training tasks only (split 'train'), got {split!r}; measure on the dev or test "
                "split of wide-research, controls and deep-lookup"
            )
        rng = split_rng(self.name, split, seed)
        weights = [kn.wide, kn.deep, kn.control]
        out = []
        for i in range(n):
            tid = f"{self.name}-{split}-s{seed}-{i}"
            family = rng.choices(FAMILIES, weights)[0]
            if family == "wide":
                task = _wide(tid, rng, kn, seed)
            elif family == "deep":
                task = _deep(tid, rng, kn, seed)
            else:
                kind = rng.choice(CONTROL_KINDS)
                task = control_task(NAME, tid, kind, rng, split=split, seed=seed, knobs=kn.model_dump())
            out.append(task.model_copy(update={"metadata": {**task.metadata, "family": family}}))
        return out

    def episode(self, task: Task, mode: Mode) -> Episode:
        self.check_task(task)
        family = task.metadata.get("family")
        if family == "wide":
            return wide_episode(task, mode, research_tools(task), SWARM_NOTE)
        if family == "deep":
            tools = research_tools(task) if "corpus" in task.metadata else None  # a generated collection
            return deep_episode(task, mode, swarm_instructions=SWARM_NOTE, tools=tools)
        if family == "control":
            return control_episode(task, mode)
        raise ConfigError(f"task {task.id!r} has family {family!r}; a {NAME} task is one of {list(FAMILIES)}")

    def gold_policy(self, task: Task, mode: Mode, *, latency_s: float = 0.0) -> GoldPolicy:
        self.check_task(task)
        family = task.metadata.get("family")
        if family == "wide":
            kind = FICTION[task.metadata["kind"]]
            return wide_gold(kind, task.metadata["labels"], task.metadata["attrs"], mode, latency_s=latency_s)
        if family == "deep":
            gold = chain_gold_policy if "corpus" in task.metadata else deep_gold
            return gold(task, mode, latency_s=latency_s)
        if family == "control":
            return control_gold(task, mode, latency_s=latency_s)
        raise ConfigError(f"task {task.id!r} has family {family!r}; a {NAME} task is one of {list(FAMILIES)}")
