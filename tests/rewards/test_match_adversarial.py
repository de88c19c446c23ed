"""Exact, pick and numeric verifiers against answers that must not score: several final answers (a hedge
over the candidates), a candidate's name without the value that picks it, hedged or range numbers; and
right answers in other shapes that must."""

from __future__ import annotations

from typing import Any

import pytest

from agent_swarm.swarm.verifiers import verify

EXACT_BAD: list[tuple[str, dict[str, Any]]] = [
    ("ANSWER: Liam Chen\nANSWER: Ava Lopez", {"expected": "Ava Lopez", "extract": "answer"}),  # was right
    ("ANSWER: Ava Lopez\nANSWER: Liam Chen\nANSWER: Noah Kim", {"expected": "Ava Lopez", "extract": "answer"}),
    ("Answer: Lyon\nAnswer: Paris", {"expected": "Paris"}),
    ("\\boxed{3} or maybe \\boxed{4}", {"expected": "4"}),
    ("ANSWER: Ava Lopez or Liam Chen", {"expected": "Ava Lopez", "extract": "answer"}),
    ("ANSWER: Ava Lopez, Liam Chen, Noah Kim", {"expected": "Ava Lopez", "extract": "answer"}),  # the names copied
    ("Ava Lopez", {"expected": "Ava Lopez", "extract": "answer"}),  # no ANSWER line asked for
]
EXACT_GOOD: list[tuple[str, dict[str, Any]]] = [
    ("Ava: $120\nLiam: $80\nANSWER: Ava Lopez", {"expected": "Ava Lopez", "extract": "answer"}),
    ("**ANSWER:** **Ava Lopez**.", {"expected": "Ava Lopez", "extract": "answer"}),
    ("Answer: Paris\nSo, to repeat. Answer: paris", {"expected": "Paris"}),  # the same answer twice
    ("\\boxed{\\text{Paris}}", {"expected": "Paris"}),
]
PICK = {"expected": "Dulzo Textiles", "value": 1945, "others": ["Ryron Shipping", "Gillio Analytics"]}
PICK_BAD: list[tuple[str, dict[str, Any]]] = [
    ("ANSWER: Dulzo Textiles", PICK),  # a name the task lists: a guess among B is right 1 time in B
    ("Dulzo Textiles (1945)", PICK),  # no ANSWER line asked for
    ("ANSWER: Ryron Shipping (1945)", PICK),  # another candidate, with the winner's year
    ("ANSWER: Dulzo Textiles (1952)", PICK),  # the wrong value
    ("ANSWER: Dulzo Textiles (1945 or 1952)", PICK),
    ("ANSWER: Dulzo Textiles (born 1945 or 1952)", PICK),
    ("ANSWER: Dulzo Textiles (maybe 1945)", PICK),
    ("ANSWER: Dulzo Textiles or Ryron Shipping (1945)", PICK),
    ("ANSWER: Dulzo Textiles, Ryron Shipping, Gillio Analytics (1945)", PICK),  # the names copied
    ("ANSWER: Dulzo Textiles (1945)\nANSWER: Ryron Shipping (1952)", PICK),
    ("ANSWER: Ava Lopez ($1,234.5)", {"expected": "Ava Lopez", "value": 1234.56}),
    ("ANSWER: Ava Lopez Jr (512.3)", {"expected": "Ava Lopez", "value": 512.3, "others": ["Ava Lopez Jr"]}),
    ("ANSWER: Ryron Shipping (1952), not Dulzo Textiles (1945)", PICK),
]
PICK_GOOD: list[tuple[str, dict[str, Any]]] = [
    ("ANSWER: Dulzo Textiles (1945)", PICK),
    ("Ryron Shipping: born 1952\nDulzo Textiles: born 1945\nANSWER: Dulzo Textiles, 1945", PICK),
    ("**ANSWER:** **Dulzo Textiles** (born 1945).", PICK),
    ("ANSWER: Dulzo Textiles - chief executive born 1945", PICK),
    ("ANSWER: Dulzo Textiles 1945", PICK),
    ("ANSWER: Ava Lopez ($1,234.56)", {"expected": "Ava Lopez", "value": 1234.56}),
    ("ANSWER: Ava Lopez, first order total 1234.56", {"expected": "Ava Lopez", "value": 1234.56}),
    ("ANSWER: Dulzo Textiles's chief executive was born first (1945).", PICK),
    ("ANSWER: The company is Dulzo Textiles, born 1945", PICK),
    ("ANSWER: 3M (1945)", {"expected": "3M", "value": 1945, "others": ["Dulzo Textiles"]}),
    ("ANSWER: Ava Lopez Jr (512.3)", {"expected": "Ava Lopez Jr", "value": 512.3, "others": ["Ava Lopez"]}),
]
NUMERIC_BAD: list[tuple[str, dict[str, Any]]] = [
    ("Answer: 42 or 43", {"expected": 42}),
    ("Answer: 43\nAnswer: 42", {"expected": 42}),
    ("\\boxed{41} \\boxed{42}", {"expected": 42}),
    ("Answer: 40-45", {"expected": 40}),
    ("Answer: between 40 and 45", {"expected": 40}),
    ("It is maybe 41, maybe 42.", {"expected": 42}),
    ("Answer: 42?", {"expected": 42}),
]
NUMERIC_GOOD: list[tuple[str, dict[str, Any]]] = [
    ("Answer: 1,000 (from 3 crates)", {"expected": 1000}),
    ("17 * 23 = 391", {"expected": 391}),
    ("The result is -5.", {"expected": -5}),
    ("Answer: 3/4", {"expected": 0.75}),
]


@pytest.mark.parametrize(("answer", "args"), EXACT_BAD)
async def test_exact_bad_answers_do_not_score(answer: str, args: dict[str, Any]) -> None:
    assert (await verify("exact", answer, args)).score == 0.0


@pytest.mark.parametrize(("answer", "args"), EXACT_GOOD)
async def test_exact_good_answers_score(answer: str, args: dict[str, Any]) -> None:
    assert (await verify("exact", answer, args)).score == 1.0


@pytest.mark.parametrize(("answer", "args"), PICK_BAD)
async def test_pick_bad_answers_do_not_score(answer: str, args: dict[str, Any]) -> None:
    assert (await verify("pick", answer, args)).score == 0.0


@pytest.mark.parametrize(("answer", "args"), PICK_GOOD)
async def test_pick_good_answers_score(answer: str, args: dict[str, Any]) -> None:
    assert (await verify("pick", answer, args)).score == 1.0


@pytest.mark.parametrize(("answer", "args"), NUMERIC_BAD)
async def test_numeric_bad_answers_do_not_score(answer: str, args: dict[str, Any]) -> None:
    assert (await verify("numeric", answer, args)).score == 0.0


@pytest.mark.parametrize(("answer", "args"), NUMERIC_GOOD)
async def test_numeric_good_answers_score(answer: str, args: dict[str, Any]) -> None:
    assert (await verify("numeric", answer, args)).score == 1.0
