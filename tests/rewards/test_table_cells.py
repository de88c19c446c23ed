"""The table scorer cell by cell: each preprocessing step and metric on one looked-up cell, the table
parser's edge rows, the scorer's argument errors with their exact messages, abstaining rows, and the
``table`` verifier's verdict. Written against the surviving mutants of ``bench/mutation.py table``."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest

from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.verifiers import VerifierContext, verify
from agent_swarm.swarm.verifiers.table import (
    ColumnRule,
    TableArgs,
    TableScore,
    extract_markdown_table,
    norm_column,
    parse_date,
    score_table,
)

GOLD = [{"k": "a", "v": "x"}]


def table(*rows: tuple[str, str], header: tuple[str, str] = ("k", "v")) -> str:
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)]
    return "\n".join(lines)


def one(resp: str, gold: str, rule: ColumnRule) -> TableScore:
    return score_table(table(("a", resp)), [{"k": "a", "v": gold}], key_columns=["k"], rules={"v": rule})


def cell(resp: str, gold: str, rule: ColumnRule) -> float:
    return one(resp, gold, rule).items["a|v"]


TIME = ColumnRule(preprocess=("extract_time",))
NUMBER = ColumnRule(metrics=("number_near",))
EXTRACT = ColumnRule(preprocess=("extract_number",))
DATE = ColumnRule(preprocess=(), metrics=("date_near",))
URL = ColumnRule(preprocess=(), metrics=("url_match",))

CELLS: list[tuple[str, str, ColumnRule, float]] = [
    # clock times: 12-hour forms, a.m./p.m. with dots, noon and midnight, the next-day mark
    ("10:00 pm", "22:00", TIME, 1.0),
    ("10:00 p.m.", "22:00", TIME, 1.0),
    ("12:15 pm", "12:15", TIME, 1.0),
    ("12:30 am", "00:30", TIME, 1.0),
    ("9:30 am", "09:30", TIME, 1.0),
    ("12:15", "00:15", TIME, 0.0),
    ("23:00 +2", "23:00 +1", TIME, 0.0),
    # numbers: thousands separators and spaces, percentages, the tolerance and its bound
    ("1,200", "1200", NUMBER, 1.0),
    ("1 200", "1200", EXTRACT, 1.0),
    ("1,200", "1200", EXTRACT, 1.0),
    ("about 12 units", "12", EXTRACT, 1.0),
    ("50%", "0.5", ColumnRule(metrics=("number_near",), criterion=0.001), 1.0),
    ("150", "100", ColumnRule(metrics=("number_near",), criterion=0.5), 1.0),
    ("150", "100", NUMBER, 0.0),
    ("12", "10", ColumnRule(metrics=("number_near",), criterion=0.2), 1.0),
    ("abc", "abc", NUMBER, 1.0),  # no number on either side: equal text
    ("abc", "xyz", NUMBER, 0.0),
    # three numbers in a number column are a dump, not a value
    ("10; 20; 30", "10", EXTRACT, 0.0),
    ("1; 2; 3", "1", NUMBER, 0.0),
    ("10; 20", "10", EXTRACT, 1.0),
    # dates: the day window and its bound, unparseable text, an ISO time suffix
    ("2024-04-05", "2024-03-05", DATE, 1.0),
    ("2024-04-06", "2024-03-05", DATE, 0.0),
    ("2024-03-20", "2024-03-05", ColumnRule(preprocess=(), metrics=("date_near",), criterion=10), 0.0),
    ("soon", "soon", DATE, 1.0),
    ("2024-03-05t10:00", "2024-03-05T10:00", DATE, 0.0),  # lower-case t: no date, so no match
    ("5 March 2024", "2024-03-05", ColumnRule(preprocess=("norm_date",)), 1.0),
    ("soon", "soon", ColumnRule(preprocess=("norm_date",)), 1.0),
    # URLs: hosts compared, else the text
    ("abc", "abc", URL, 1.0),
    ("abc", "xyz", URL, 0.0),
    ("https://Example.com/a", "example.com", URL, 1.0),
    # a markdown link is its text, except in a URL column
    ("[Paris](https://en.wikipedia.org/wiki/Paris)", "Paris", ColumnRule(), 1.0),
    ("[site](https://example.com/x)", "example.com", URL, 1.0),
]


@pytest.mark.parametrize(("resp", "gold", "rule", "score"), CELLS, ids=[f"{c[0]}~{c[1]}" for c in CELLS])
def test_one_looked_up_cell(resp: str, gold: str, rule: ColumnRule, score: float) -> None:
    assert cell(resp, gold, rule) == score


def test_an_unknown_metric_on_an_unvalidated_rule_is_named() -> None:
    bogus = ColumnRule.model_construct(preprocess=("norm_str",), metrics=("bogus",), criterion=None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as info:
        one("x", "x", bogus)
    assert str(info.value) == "unknown cell metric 'bogus'"


def test_parsing_names_dates_and_tables() -> None:
    assert norm_column("  User \t Name ") == "username"
    assert parse_date("2024-03-05T10:30:00Z") == date(2024, 3, 5)
    assert parse_date("March 5th, 2024") == date(2024, 3, 5)
    stray = "intro a|b\n```MD\n| k | v |\n|---|---|\n| x | 1 |\n```\nafter c|d"
    assert extract_markdown_table(stray) == (["k", "v"], [["x", "1"]])
    assert extract_markdown_table("| k | v\n| x | 1") == (["k", "v"], [["x", "1"]])
    assert extract_markdown_table("| k | v |\n| x | a\\|") == (["k", "v"], [["x", "a|"]])


def test_argument_errors_say_what_is_wrong() -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"gold": GOLD, "key_columns": []}, "key_columns must name at least one column (the table's primary key)"),
        ({"gold": " ", "key_columns": ["k"]}, "gold table is empty; give a markdown table, CSV text or a list of rows"),
        ({"gold": "k,v", "key_columns": ["k"]}, "gold table lacks rows or required columns []"),
        (
            {"gold": GOLD, "key_columns": ["k"], "columns": ["k", "v", "w"]},
            "gold table lacks rows or required columns ['w']",
        ),
    ]
    for kwargs, message in cases:
        with pytest.raises(ConfigError) as info:
            score_table(table(("a", "x")), **kwargs)
        assert str(info.value) == message


def test_wrong_columns_and_no_table_score_nothing_but_say_why() -> None:
    gold = [{"k": "a", "v": "x", "notes": "n"}]
    judged = {"v": ColumnRule(metrics=("llm_judge",))}
    extra = score_table(table(("a", "x")), [*GOLD, {"k": "b", "v": "y"}], key_columns=["k"], rules=judged)
    assert extra.success is False
    wrong = score_table(table(("a", "x"), header=("k", "w")), GOLD, key_columns=["k"], rules=judged)
    assert wrong == TableScore(
        gold_rows=1,
        pred_rows=1,
        judge_fallback_columns=("v",),
        error="response columns ['k', 'w'] differ from the required ['k', 'v'] (missing ['v'], extra ['w'])",
    )
    three = "| k | v | w |\n|---|---|---|\n| a | x | z |"
    assert score_table(three, GOLD, key_columns=["k"]).error is not None
    assert score_table(three, GOLD, key_columns=["k"], allow_extra_columns=True).success
    assert score_table(table(("a", "x")), gold, key_columns=["k"], columns=["k", "v"]).success
    assert score_table("no table here", GOLD, key_columns=["k"]) == TableScore(
        gold_rows=1, error="no markdown table found in the response"
    )


def test_rows_are_joined_on_keys_with_aliases_and_two_key_columns() -> None:
    gold = [{"k": "New York", "v": "x"}, {"k": "Paris", "v": "y"}]
    aliases = {"k": {"Big  APPLE": "New York"}}
    s = score_table(table(("big apple", "x"), ("Paris", "y")), gold, key_columns=["k"], key_aliases=aliases)
    assert s.success and s.column_scores == {"k": 1.0, "v": 1.0}
    # an unmatched row first does not stop the rows after it from matching
    s = score_table(table(("Rome", "z"), ("Paris", "y")), gold, key_columns=["k"])
    assert (s.matched_rows, s.column_scores, s.row_precision) == (1, {"k": 0.5, "v": 0.5}, 0.5)
    two: list[dict[str, str]] = [{"k1": "a", "k2": "b", "v": "1"}, {"k1": "c", "v": "2"}]  # the second lacks k2
    resp = "| k1 | k2 | v |\n|---|---|---|\n| a | b | 1 |"
    s = score_table(resp, two, key_columns=["k1", "k2"])
    assert s.items == {"a / b|v": 1.0, "c / |v": 0.0}


def test_rows_that_claim_nothing_are_left_out_unless_the_gold_has_nothing_either() -> None:
    gold: list[dict[str, str | None]] = [{"k": "a", "v": "x"}, {"k": "b", "v": None}]
    s = score_table(table(("a", "`n/a`"), ("b", "")), gold, key_columns=["k"])
    assert (s.abstained_rows, s.pred_rows, s.row_precision, s.item_precision) == (1, 1, 1.0, 1.0)
    assert s.items == {"a|v": 0.0, "b|v": 1.0}
    linked = score_table(table(("a", "[n/a](https://example.com)")), GOLD, key_columns=["k"])
    assert (linked.abstained_rows, linked.pred_rows, linked.row_precision, linked.item_precision) == (1, 0, 0.0, 0.0)
    # a gold cell with no time says nothing, so an "n/a" answer to it is right, not an abstention
    timed = score_table(table(("a", "none")), [{"k": "a", "v": "not known"}], key_columns=["k"], rules={"v": TIME})
    assert (timed.abstained_rows, timed.items) == (0, {"a|v": 1.0})
    counted = score_table(table(("a", "none")), [{"k": "a", "v": "unknown"}], key_columns=["k"], rules={"v": EXTRACT})
    assert (counted.abstained_rows, counted.items) == (0, {"a|v": 1.0})
    short = score_table(table(("a", "")), "k,v\na", key_columns=["k"])  # a CSV row without its last cell
    assert (short.abstained_rows, short.items) == (0, {"a|v": 1.0})


async def test_the_verifier_passes_every_argument_and_reports_json_details() -> None:
    gold = [{"key": "New York", "val": "x", "notes": "n"}]
    args = TableArgs(
        gold=gold,
        key_columns=["key"],
        columns=["key", "val"],
        column_aliases={"city": "key"},
        key_aliases={"key": {"NYC": "New York"}},
        allow_extra_columns=True,
        score="success",
    )
    answer = "| city | val | extra |\n|---|---|---|\n| NYC | x | 1 |"
    v = await verify("table", answer, args, VerifierContext())
    assert (v.score, v.passed, v.error) == (1.0, True, None)
    assert v.details == score_table(
        answer,
        gold,
        key_columns=["key"],
        columns=["key", "val"],
        column_aliases={"city": "key"},
        key_aliases={"key": {"NYC": "New York"}},
        allow_extra_columns=True,
    ).model_dump(mode="json", exclude={"error"})
    assert v.details["scored_columns"] == ["val"] and "error" not in v.details and "problem" not in v.details
    missing = await verify("table", "no table", args, VerifierContext())
    assert (missing.score, missing.passed) == (0.0, False)
    assert missing.details["problem"] == "no markdown table found in the response"


def test_a_list_answer_is_read_entry_by_entry() -> None:
    gold = [{"name": "Ava Lopez", "v": "Xenia"}, {"name": "Ben Wu", "v": "b"}]

    def score(answer: str) -> TableScore:
        return score_table(answer, gold, key_columns=["name"])

    s = score("ava lopez: Xenia\nAva Lopez and Ben Wu are both customers.\nb")
    assert (s.pred_rows, s.matched_rows, s.row_precision, s.items) == (1, 1, 1.0, {"Ava Lopez|v": 1.0, "Ben Wu|v": 0.0})
    assert score("Ava Lopez and Ben Wu: Xenia").error == "no markdown table found in the response"
    found = score("Ava Lopez: v: not found yet\nBen Wu: v: b")
    assert (found.pred_rows, found.row_precision, found.items["Ben Wu|v"]) == (1, 1.0, 1.0)


def test_list_labels_name_columns_through_aliases_underscores_and_the_longest_match() -> None:
    cols = ["name", "email", "phone", "user_id", "order_count", "backup_email", "city", "town"]
    gold = [dict.fromkeys(cols, "") | {"name": "Ava Lopez", "email": "a@x.com", "phone": "555"}]
    gold[0] |= {"user_id": "7", "order_count": "3", "backup_email": "b@x.com", "city": "Paris", "town": "Lyon"}

    def items(answer: str, **aliases: str) -> dict[str, float]:
        s = score_table(answer, gold, key_columns=["name"], column_aliases=aliases)
        return {k.split("|")[1]: v for k, v in s.items.items()}

    got = items(
        "Ava Lopez\nEmail (not the phone): a@x.com\nPhone: 555\nuser_id: 7\nOrders: 3\nBackup email: b@x.com\n"
        "City: Paris\nTown: Lyon",
        orders="order_count",
    )
    assert got == dict.fromkeys(cols[1:], 1.0)
    assert items("Ava Lopez\nMail: a@x.com", mail="email")["email"] == 1.0
    # a label naming two columns equally well (City/Town) names neither
    assert items("Ava Lopez\nCity/Town: Paris\nEmail: a@x.com")["city"] == 0.0


def test_list_fields_that_conflict_repeat_the_key_or_say_nothing() -> None:
    gold = [{"name": "Ava Lopez", "v": "y"}, {"name": "Ben Wu", "v": "b"}]

    def score(answer: str) -> TableScore:
        return score_table(answer, gold, key_columns=["name"])

    assert score("Ava Lopez\nv: x; v: y").items["Ava Lopez|v"] == 0.0  # two answers for one cell
    assert score("Ava Lopez\nv: y; v: **y**").items["Ava Lopez|v"] == 1.0  # the same answer, bold
    assert score("Ava Lopez\nname: Ava Lopez\ny").items["Ava Lopez|v"] == 1.0  # the key restated is no value
    silent = score("Ava Lopez: y\nBen Wu: n/a")
    assert (silent.pred_rows, silent.abstained_rows) == (1, 0)  # "n/a" is no entry at all
    other = score("Ava Lopez: y\nname: Mia Park\nz")  # another person's entry, not in the gold
    assert (other.pred_rows, other.row_precision) == (2, 0.5)


def test_gold_cells_are_taken_as_written() -> None:
    # a gold row without a column has that cell empty; a gold cell is never read as a hedge or a dump
    gold: list[dict[str, str]] = [{"k": "a", "v": "1; 2; 3"}, {"k": "b"}]
    s = score_table(table(("a", "1"), ("b", "")), gold, key_columns=["k"], rules={"v": NUMBER})
    assert (s.abstained_rows, s.items) == (0, {"a|v": 1.0, "b|v": 1.0})


def test_a_list_entry_goes_on_over_lines_naming_its_key_again() -> None:
    gold = [{"name": "Ava Lopez", "v": "y"}, {"name": "Ben Wu", "v": "b"}]
    s = score_table("Ava Lopez\nv: y\nAva Lopez is a customer", gold, key_columns=["name"])
    assert (s.pred_rows, s.items["Ava Lopez|v"]) == (1, 1.0)
    first = score_table("Ben Wu: b", gold, key_columns=["name"])  # the second key first
    assert (first.pred_rows, first.items["Ben Wu|v"]) == (1, 1.0)


def test_rows_given_as_dicts() -> None:
    s = score_table([{"k": "a", "v": None}], [{"k": "a", "v": ""}], key_columns=["k"])
    assert (s.success, s.items) == (True, {"a|v": 1.0})
    empty = score_table([], GOLD, key_columns=["k"])
    assert (empty.error, empty.pred_rows, empty.row_recall) == (None, 0, 0.0)
    assert score_table([{"k": "a", "w": "x"}], GOLD, key_columns=["k"]).error == (
        "response columns ['k', 'w'] differ from the required ['k', 'v'] (missing ['v'], extra ['w'])"
    )
