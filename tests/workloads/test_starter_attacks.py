"""The starter scorer over every kind: attacks on the gold answer never score, benign rewrites always do.

Each task's gold answer (one ``key: value`` line per item, as the gold policy writes it) is rewritten
by transforms a policy could learn: attacks (hedge every value with another of its kind, give every
value to every key, copy the keys, swap the values round, dump every value of the kind) must score no
item; benign rewrites (bullets, a table, sentences, reversed order, an extra fact of another key,
values in the asked order without keys) must score every item.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agent_swarm.workloads import get_workload
from agent_swarm.workloads.starter import _KIND, KINDS, score_answer

STARTER = get_workload("starter")
TASKS = [t for kind in KINDS for t in STARTER.tasks(6, seed=11, split="train", kinds=[kind], min_items=2, max_items=5)]

Items = list[dict[str, Any]]


def _value(it: dict[str, Any]) -> str:
    return str(it["answer"][0])


def _other(items: Items, kind: str, i: int) -> str:
    """A value of the kind that is no answer of item ``i`` (another item's, or any other fact's)."""
    own = {a.casefold() for a in items[i]["answer"]}
    pool = [_value(it) for it in items] + ([] if kind == "arithmetic" else [v[0] for v in _KIND[kind].facts.values()])
    if kind == "arithmetic":
        return str(int(_value(items[i])) + 1)
    return next(
        v for v in pool if v.casefold() not in own and not any(v.casefold() in o or o in v.casefold() for o in own)
    )


ATTACKS: dict[str, Callable[[Items, str], str]] = {
    "hedge with or": lambda items, kind: "\n".join(
        f"{it['key']}: {_value(it)} or {_other(items, kind, i)}" for i, it in enumerate(items)
    ),
    "hedge with maybe": lambda items, kind: "\n".join(f"{it['key']}: maybe {_value(it)}?" for it in items),
    "every value to every key": lambda items, kind: "\n".join(
        f"{it['key']}: {', '.join(_value(x) for x in items)}" for it in items
    ),
    "keys copied": lambda items, kind: "\n".join(f"{it['key']}: {it['key']}" for it in items),
    "values swapped round": lambda items, kind: "\n".join(
        f"{it['key']}: {_value(items[(i + 1) % len(items)])}" for i, it in enumerate(items)
    ),
    "all values, no keys": lambda items, kind: " ".join([_value(it) for it in items] + [_other(items, kind, 0)]),
    "a heading with every value under it": lambda items, kind: "\n".join(
        f"**{it['key']}**:\n" + "\n".join(f"- {_value(x)}" for x in items) for it in items
    ),
    "a second answer later": lambda items, kind: "\n".join(
        [f"{it['key']}: {_value(it)}" for it in items]
        + [f"{it['key']}: {_other(items, kind, i)}" for i, it in enumerate(items)]
    ),
}
BENIGN: dict[str, Callable[[Items, str], str]] = {
    "gold lines": lambda items, kind: "\n".join(f"{it['key']}: {_value(it)}" for it in items),
    "bullets, bold keys": lambda items, kind: "\n".join(f"- **{it['key']}**: {_value(it)}" for it in items),
    "a table": lambda items, kind: (
        "| item | answer |\n|---|---|\n" + "\n".join(f"| {it['key']} | {_value(it)} |" for it in items)
    ),
    "sentences": lambda items, kind: " ".join(f"For {it['key']}, it is {_value(it)}." for it in items),
    "reversed": lambda items, kind: "\n".join(f"{it['key']}: {_value(it)}" for it in reversed(items)),
    "in order, no keys": lambda items, kind: "\n".join(_value(it) for it in items),
    "keys then values": lambda items, kind: (
        f"The answers for {', '.join(it['key'] for it in items)} are "
        + ", ".join(_value(it) for it in items)
        + ", respectively."
    ),
    "numbered": lambda items, kind: "\n".join(f"{n}. {it['key']} - {_value(it)}" for n, it in enumerate(items, 1)),
    # one sentence of clauses, each key with its value (case kept for symbols; titles hold "and")
    "clauses of one sentence": lambda items, kind: (
        ", while ".join(f"the answer for {it['key']} is {_value(it)}" for it in items[:-1])
        + f", and the answer for {items[-1]['key']} is {_value(items[-1])}."
    ),
    # a heading per key, its value on the lines under it
    "headings with details": lambda items, kind: "\n".join(
        f"{n}. **{it['key']}**:\n   - Answer: {_value(it)}\n   - Source: memory" for n, it in enumerate(items, 1)
    ),
}


def _ids(tasks: list[Any]) -> list[str]:
    return [t.id + ":" + t.metadata["kind"] for t in tasks]


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attacks_on_the_gold_answer_score_no_item(attack: str) -> None:
    for task in TASKS:
        items, kind = task.metadata["items"], task.metadata["kind"]
        if attack in SHARING and not _distinct(items):
            continue  # two items with one answer (Japan and India: Asia): moving values round changes nothing
        answer = ATTACKS[attack](items, kind)
        assert not any(score_answer(answer, items, kind)), (attack, kind, answer)


SHARING = {"every value to every key", "values swapped round", "a heading with every value under it"}


def _distinct(items: Items) -> bool:
    answers = [{a.casefold() for a in it["answer"]} for it in items]
    return all(not (a & b) for i, a in enumerate(answers) for b in answers[i + 1 :])


@pytest.mark.parametrize("rewrite", sorted(BENIGN))
def test_benign_rewrites_of_the_gold_answer_score_every_item(rewrite: str) -> None:
    for task in TASKS:
        items, kind = task.metadata["items"], task.metadata["kind"]
        answer = BENIGN[rewrite](items, kind)
        assert all(score_answer(answer, items, kind)), (rewrite, kind, answer, score_answer(answer, items, kind))
