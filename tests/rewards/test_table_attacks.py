"""The table scorer over generated wide tasks (wide-lookup, wide-research): attacks on the gold table
never score a cell, benign rewrites score every cell. Scored through the ``table`` verifier, the same
function the workloads' episodes use."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agent_swarm.swarm.records import Task
from agent_swarm.swarm.verifiers import score_table
from agent_swarm.swarm.verifiers.table import ColumnRule
from agent_swarm.workloads import get_workload

pytest.importorskip("bm25s")  # wide-lookup's corpus tools (the 'search' extra)

Rows = list[dict[str, str]]


def _tasks() -> list[Task]:
    out = []
    for name, knobs in (("wide-lookup", {"entities": 5, "attributes": 3}), ("wide-research", {})):
        out += get_workload(name).tasks(4, seed=7, split="train", **knobs)
    return out


TASKS = _tasks()


def _score(task: Task, answer: str) -> Any:
    a = task.verifier_args
    rules = {k: ColumnRule.model_validate(v) for k, v in a.get("rules", {}).items()}
    return score_table(answer, a["gold"], key_columns=a["key_columns"], columns=a["columns"], rules=rules)


def _table(cols: list[str], rows: Rows) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    return "\n".join(lines + ["| " + " | ".join(r[c] for c in cols) + " |" for r in rows])


def _shift(rows: Rows, attrs: list[str]) -> Rows:
    """Every row given the next row's attribute values."""
    return [{**r, **{a: rows[(i + 1) % len(rows)][a] for a in attrs}} for i, r in enumerate(rows)]


def _differs(rows: Rows, attrs: list[str]) -> bool:
    return all(rows[i][a] != rows[(i + 1) % len(rows)][a] for i in range(len(rows)) for a in attrs)


ATTACKS: dict[str, Callable[[list[str], str, list[str], Rows], str]] = {
    "names only": lambda cols, key, attrs, rows: _table([key], rows),
    "names in every cell": lambda cols, key, attrs, rows: _table(cols, [{c: r[key] for c in cols} for r in rows]),
    "unknown everywhere": lambda cols, key, attrs, rows: _table(
        cols, [{key: r[key], **dict.fromkeys(attrs, "?")} for r in rows]
    ),
    "values shifted a row": lambda cols, key, attrs, rows: _table(cols, _shift(rows, attrs)),
    "each cell hedged": lambda cols, key, attrs, rows: _table(
        cols, [{**r, **{a: f"{r[a]} or {s[a]}" for a in attrs}} for r, s in zip(rows, _shift(rows, attrs), strict=True)]
    ),
    "each row twice, disagreeing": lambda cols, key, attrs, rows: _table(
        cols, [x for r, s in zip(rows, _shift(rows, attrs), strict=True) for x in (r, s)]
    ),
    "the prompt copied": lambda cols, key, attrs, rows: "",  # filled in per task below
}
BENIGN: dict[str, Callable[[list[str], str, list[str], Rows], str]] = {
    "gold table": lambda cols, key, attrs, rows: _table(cols, rows),
    "rows reversed, in a code block": lambda cols, key, attrs, rows: (
        "```markdown\n" + _table(cols, rows[::-1]) + "\n```"
    ),
    "columns reordered": lambda cols, key, attrs, rows: _table([*attrs[::-1], key], rows),
    "labelled bullets": lambda cols, key, attrs, rows: "\n".join(
        f"- **{r[key]}** — " + "; ".join(f"{a}: {r[a]}" for a in attrs) for r in rows
    ),
    "name: values in order": lambda cols, key, attrs, rows: "\n".join(
        f"{r[key]}: " + ", ".join(r[a] for a in attrs) for r in rows
    ),
    "key-value blocks": lambda cols, key, attrs, rows: "\n\n".join(
        "\n".join([f"{key}: {r[key]}", *(f"{a}: {r[a]}" for a in attrs)]) for r in rows
    ),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attacks_on_the_gold_table_score_no_cell(attack: str) -> None:
    for task in TASKS:
        a = task.verifier_args
        key, cols = a["key_columns"][0], a["columns"]
        attrs = [c for c in cols if c != key]
        rows = [{c: str(r[c]) for c in cols} for r in a["gold"]]
        if attack in ("values shifted a row", "each cell hedged", "each row twice, disagreeing") and not _differs(
            rows, attrs
        ):
            continue  # two rows with one value: shifting changes nothing
        answer = task.prompt if attack == "the prompt copied" else ATTACKS[attack](cols, key, attrs, rows)
        s = _score(task, answer)
        assert s.item_f1 == 0.0 and s.row_f1 == 0.0 and not s.success, (task.id, attack, answer, s)


@pytest.mark.parametrize("rewrite", sorted(BENIGN))
def test_benign_rewrites_of_the_gold_table_score_every_cell(rewrite: str) -> None:
    for task in TASKS:
        a = task.verifier_args
        key, cols = a["key_columns"][0], a["columns"]
        attrs = [c for c in cols if c != key]
        rows = [{c: str(r[c]) for c in cols} for r in a["gold"]]
        answer = BENIGN[rewrite](cols, key, attrs, rows)
        s = _score(task, answer)
        assert s.success and s.item_f1 == 1.0, (task.id, rewrite, answer, s)
