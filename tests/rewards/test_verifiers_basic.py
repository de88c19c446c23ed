"""Verifier registry, exact/numeric match with answer extraction, instruction constraints."""

from __future__ import annotations

import pytest

from agent_swarm.swarm.errors import ConfigError, UnknownNameError
from agent_swarm.swarm.verifiers import (
    Verdict,
    VerifierArgs,
    VerifierContext,
    extract_answer,
    parse_number,
    register_verifier,
    verifier_names,
    verify,
)


async def test_unknown_verifier_fails_loudly_listing_known_names() -> None:
    with pytest.raises(UnknownNameError) as info:
        await verify("exatc", "x", {"expected": "x"})
    msg = str(info.value)
    assert "unknown verifier 'exatc'" in msg
    for name in ("code", "exact", "instructions", "numeric", "rubric", "rubric_pairwise", "table"):
        assert name in msg
    assert verifier_names() == sorted(verifier_names())


async def test_bad_verifier_arguments_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"numeric.*expected: Field required"):
        await verify("numeric", "1", {})
    with pytest.raises(ConfigError, match="tolerance"):
        await verify("numeric", "1", {"expected": 1, "tolerance": 0.1})


def test_registering_a_name_twice_is_an_error_unless_replaced() -> None:
    class Args(VerifierArgs):
        pass

    def always(answer: str, args: Args, ctx: VerifierContext) -> Verdict:
        return Verdict(score=1.0, passed=True)

    with pytest.raises(ConfigError, match="already registered"):
        register_verifier("exact", Args)(always)


@pytest.mark.parametrize(
    ("text", "mode", "want"),
    [
        ("so x = \\boxed{\\frac{1}{2}} done", "auto", "\\frac{1}{2}"),
        ("work...\nAnswer: Paris.\n", "auto", "Paris."),
        ("**Final Answer:** 42", "auto", "42"),
        ("first 3 then 4,500.5 units", "last_number", "4,500.5"),
        ("no box here", "boxed", None),
        ("\\boxed{unclosed", "boxed", None),
        ("  plain  ", "auto", "plain"),
    ],
)
def test_answer_extraction(text: str, mode: str, want: str | None) -> None:
    assert extract_answer(text, mode) == want  # type: ignore[arg-type]


def test_parse_number_handles_separators_signs_fractions_and_percent() -> None:
    assert parse_number("1,234.5") == 1234.5
    assert parse_number("−3") == -3
    assert parse_number("3/4") == 0.75
    assert parse_number("12%") == 12
    assert parse_number("1e-3") == 0.001
    assert parse_number("n/a") is None


@pytest.mark.parametrize(
    ("answer", "expected", "ok"),
    [
        ("The capital is **Paris**.", "paris", False),  # whole text is not the answer
        ("Answer: **Paris**.", "paris", True),
        ("\\boxed{\\text{Paris}}", "Paris", True),
        ("Answer: Lyon", ["Paris", "Lyon"], True),
        ("Answer: Lyon", "Paris", False),
    ],
)
async def test_exact_match(answer: str, expected: str | list[str], ok: bool) -> None:
    v = await verify("exact", answer, {"expected": expected})
    assert v.passed is ok and v.score == float(ok)


async def test_exact_match_can_be_case_sensitive() -> None:
    assert (await verify("exact", "Answer: paris", {"expected": "Paris"})).passed
    assert not (await verify("exact", "Answer: paris", {"expected": "Paris", "case_sensitive": True})).passed


@pytest.mark.parametrize(
    ("answer", "args", "ok"),
    [
        ("so the total is 41.9 apples", {"expected": 42, "rel_tol": 0.01}, True),
        ("so the total is 41.9 apples", {"expected": 42}, False),
        ("Answer: 1,000 (from 3 crates)", {"expected": 1000}, True),  # Answer line beats last number
        ("\\boxed{-2.5} but earlier 7", {"expected": -2.5}, True),
        ("0.30000000000000004", {"expected": 0.3}, True),
        ("about 10", {"expected": 10.4, "abs_tol": 0.5}, True),
        ("no digits at all", {"expected": 1}, False),
    ],
)
async def test_numeric_match(answer: str, args: dict[str, object], ok: bool) -> None:
    v = await verify("numeric", answer, args)
    assert v.passed is ok


async def test_numeric_reports_what_it_extracted() -> None:
    v = await verify("numeric", "no digits at all", {"expected": 1})
    assert v.score == 0.0 and v.details["reason"] == "no number found" and v.error is None


# -- instruction constraints ------------------------------------------------------------------------

REPORT = """## Summary
The plan has three parts.

## Risks
- budget overrun
- staff turnover
- vendor lock-in
"""


async def test_instruction_constraints_score_the_fraction_satisfied() -> None:
    args = {
        "constraints": [
            {"type": "word_count", "max": 30},
            {"type": "sections", "required": ["Summary", "Risks"], "in_order": True},
            {"type": "bullets", "min": 3, "max": 3},
            {"type": "forbids", "phrases": ["great question"]},
            {"type": "format", "format": "json"},
        ]
    }
    v = await verify("instructions", REPORT, args)
    assert v.score == pytest.approx(4 / 5) and not v.passed
    failed = [c for c in v.details["checks"] if not c["ok"]]
    assert [c["type"] for c in failed] == ["format"]
    strict = await verify("instructions", REPORT, {**args, "all_or_nothing": True})
    assert strict.score == 0.0


@pytest.mark.parametrize(
    ("constraint", "text", "ok"),
    [
        ({"type": "sections", "required": ["Risks", "Summary"], "in_order": True}, REPORT, False),
        ({"type": "sections", "required": ["Budget"]}, REPORT, False),
        ({"type": "bullets", "min": 4}, REPORT, False),
        ({"type": "bullets", "min": 2, "numbered": True}, "1. a\n2) b\n", True),
        ({"type": "line_count", "max": 2}, "a\n\nb\n", True),
        ({"type": "char_count", "min": 5}, "abc", False),
        ({"type": "format", "format": "json"}, '```json\n{"a": 1}\n```', True),
        ({"type": "format", "format": "markdown_table"}, "| a | b |\n|---|---|\n| 1 | 2 |", True),
        ({"type": "format", "format": "bullet_list"}, "- a\nnot a bullet", False),
        ({"type": "contains", "phrases": ["Vendor"]}, REPORT, True),
        ({"type": "contains", "phrases": ["Vendor"], "case_sensitive": True}, REPORT, False),
        ({"type": "starts_with", "text": "Great"}, "Great question! ...", True),
        ({"type": "ends_with", "text": "?"}, "Any questions?", True),
        ({"type": "regex", "pattern": r"^## ", "must_match": True}, REPORT, True),
        ({"type": "regex", "pattern": r"\d", "must_match": False}, "no digits", True),
    ],
)
async def test_each_constraint(constraint: dict[str, object], text: str, ok: bool) -> None:
    v = await verify("instructions", text, {"constraints": [constraint]})
    assert v.passed is ok


async def test_invalid_constraints_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="min 5 is greater than max 2"):
        await verify("instructions", "x", {"constraints": [{"type": "word_count", "min": 5, "max": 2}]})
    with pytest.raises(ConfigError, match="does not compile"):
        await verify("instructions", "x", {"constraints": [{"type": "regex", "pattern": "("}]})
    with pytest.raises(ConfigError, match="constraints"):
        await verify("instructions", "x", {"constraints": [{"type": "shouting"}]})
