"""The WideSearch-compatible table scorer, checked against hand-computed P/R/F1."""

from __future__ import annotations

from typing import Any

import pytest

from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.verifiers import ColumnRule, TableScore, extract_markdown_table, score_table, verify
from agent_swarm.swarm.verifiers.table import parse_date

GOLD = [
    {
        "Country": "France",
        "Capital": "Paris",
        "Population (M)": "2.1",
        "Founded": "1950-01-10",
        "Website": "https://www.paris.fr/en",
    },
    {
        "Country": "Japan",
        "Capital": "Tokyo",
        "Population (M)": "14.0",
        "Founded": "1943-07-01",
        "Website": "https://www.metro.tokyo.lg.jp",
    },
    {
        "Country": "Peru",
        "Capital": "Lima",
        "Population (M)": "10.0",
        "Founded": "1535-01-18",
        "Website": "https://www.munlima.gob.pe",
    },
]
RULES = {
    "Population (M)": ColumnRule(preprocess=("extract_number",), metrics=("number_near",), criterion=0.1),
    "Founded": ColumnRule(preprocess=(), metrics=("date_near",)),
    "Website": ColumnRule(preprocess=(), metrics=("url_match",)),
}


def table(rows: list[list[str]], header: str = "| country | capital | population (m) | founded | website |") -> str:
    lines = [header, "|---|---|---|---|---|", *("| " + " | ".join(r) + " |" for r in rows)]
    return "Here is the table:\n```markdown\n" + "\n".join(lines) + "\n```\nHope this helps."


PERFECT = [
    ["**France**", "paris", "2.1 million", "January 10, 1950", "http://paris.fr/x"],
    ["Japan", "Tokyo", "14", "1943-07-15", "https://www.metro.tokyo.lg.jp/english"],
    ["Peru", "Lima", "10.5", "18 Jan 1535", "www.munlima.gob.pe"],
]


def score(resp: str, **kw: Any) -> TableScore:
    return score_table(resp, GOLD, key_columns=["Country"], rules=RULES, **kw)


def test_extraction_prefers_the_markdown_block_and_drops_separators() -> None:
    parsed = extract_markdown_table("| x | y |\n|---|---|\n| 1 | a \\| b |\n")
    assert parsed == (["x", "y"], [["1", "a | b"]])
    assert extract_markdown_table("no table at all") is None
    _header, rows = extract_markdown_table("| a | b |\n|:--|--:|\n| 1 |\n| 2 | 3 | 4 |") or ([], [])
    assert rows == [["1", ""], ["2", "3"]]  # short rows padded, long rows cut


def test_tolerant_cells_still_match() -> None:
    # Keys normalised (case, *, spaces), numbers within 10%, dates within 31 days, URLs by domain.
    s = score(table(PERFECT))
    # paris.fr ≠ www.paris.fr: domains must be equal sets, so row 1 misses its Website cell.
    # Items are the 4 looked-up cells per row (keys excluded): 11 of 12.
    assert s.matched_rows == 3
    assert s.column_scores["website"] == pytest.approx(2 / 3)
    assert s.item_precision == pytest.approx(11 / 12) and s.item_recall == pytest.approx(11 / 12)
    assert s.items["France|website"] == 0.0 and s.items["Japan|website"] == 1.0 and len(s.items) == 12
    assert s.row_precision == pytest.approx(2 / 3) and not s.success


def test_hand_computed_precision_recall_with_missing_and_extra_rows() -> None:
    rows = [
        ["France", "Paris", "2.1", "1950-01-10", "https://www.paris.fr"],
        ["Japan", "Kyoto", "14", "1943-07-01", "https://www.metro.tokyo.lg.jp"],  # wrong capital
        ["Atlantis", "Poseidonia", "1", "1000-01-01", "https://atlantis.example"],  # hallucinated
    ]
    s = score(table(rows))
    # Matched rows: France (4/4 looked-up cells), Japan (3/4); Peru missing; Atlantis extra.
    # (Keys are not items: the old 9/15 counted 2 of its 9 for copying the country names.)
    assert (s.pred_rows, s.gold_rows, s.matched_rows) == (3, 3, 2)
    assert s.row_precision == pytest.approx(1 / 3) and s.row_recall == pytest.approx(1 / 3)
    assert s.item_precision == pytest.approx(7 / 12) and s.item_recall == pytest.approx(7 / 12)
    assert s.item_f1 == pytest.approx(7 / 12) and not s.success
    fewer = score(table(rows[:2]))
    assert fewer.item_precision == pytest.approx(7 / 8) and fewer.item_recall == pytest.approx(7 / 12)
    assert fewer.item_f1 == pytest.approx(2 * (7 / 8) * (7 / 12) / (7 / 8 + 7 / 12))


def test_exact_table_is_a_success() -> None:
    rows = [[g["Country"], g["Capital"], g["Population (M)"], g["Founded"], g["Website"]] for g in GOLD]
    s = score(table(list(reversed(rows))))
    assert s.success and s.item_f1 == 1.0 and s.row_f1 == 1.0


def test_wrong_columns_score_zero_with_the_reason() -> None:
    s = score(table([PERFECT[0]], header="| country | city | population (m) | founded | website |"))
    assert s.item_f1 == 0.0 and "missing ['capital']" in (s.error or "") and "extra ['city']" in (s.error or "")
    aliased = score(
        table([PERFECT[1]], header="| country | city | population (m) | founded | website |"),
        column_aliases={"City": "Capital"},
    )
    assert aliased.error is None and aliased.matched_rows == 1


def test_key_aliases_rewrite_response_keys_to_gold_spelling() -> None:
    rows = [["Nippon", "Tokyo", "14", "1943-07-01", "https://www.metro.tokyo.lg.jp"]]
    assert score(table(rows)).matched_rows == 0
    s = score(table(rows), key_aliases={"country": {"nippon": "Japan"}})
    assert s.matched_rows == 1 and s.row_precision == 1.0


def test_duplicate_keys_are_dropped_before_scoring() -> None:
    row = ["Peru", "Lima", "10", "1535-01-18", "https://www.munlima.gob.pe"]
    s = score(table([row, row, row]))
    assert s.pred_rows == 1 and s.row_precision == 1.0 and s.row_recall == pytest.approx(1 / 3)


def test_in_match_and_llm_judge_fallback() -> None:
    gold = [{"k": "a", "note": "the quick brown fox"}]
    rules = {"note": ColumnRule(preprocess=(), metrics=("in_match",))}
    ok = score_table("| k | note |\n|-|-|\n| a | Brown fox |", gold, key_columns=["k"], rules=rules)
    assert ok.item_f1 == 1.0
    judged = score_table(
        "| k | note |\n|-|-|\n| a | The quick  brown fox |",
        gold,
        key_columns=["k"],
        rules={"note": ColumnRule(metrics=("llm_judge",))},
    )
    assert judged.item_f1 == 1.0 and judged.judge_fallback_columns == ("note",)


def test_dates_both_unparseable_count_as_match_one_side_does_not() -> None:
    gold = [{"k": "a", "d": "unknown"}]
    rules = {"d": ColumnRule(preprocess=(), metrics=("date_near",))}
    assert score_table("|k|d|\n|-|-|\n|a|n/a|", gold, key_columns=["k"], rules=rules).item_f1 == 1.0
    # 0.0, not 0.5: the key cell is no item (a matched name alone scores nothing)
    assert score_table("|k|d|\n|-|-|\n|a|2020-01-01|", gold, key_columns=["k"], rules=rules).item_f1 == 0.0
    assert score_table("|k|d|\n|-|-|\n|a|whenever|", gold, key_columns=["k"], rules=rules).item_f1 == 0.0


def test_percent_values_are_fractions_for_number_near() -> None:
    gold = [{"k": "a", "share": "0.25"}]
    rules = {"share": ColumnRule(preprocess=(), metrics=("number_near",), criterion=0.01)}
    assert score_table("|k|share|\n|-|-|\n|a|25%|", gold, key_columns=["k"], rules=rules).success


def test_structured_rows_and_csv_gold_are_accepted() -> None:
    s = score_table([{"K": "x", "V": 1}], "k,v\nx,1\ny,2\n", key_columns=["k"])
    assert s.matched_rows == 1 and s.row_recall == 0.5 and s.row_precision == 1.0


def test_no_table_in_the_response() -> None:
    s = score("I could not find anything.")
    assert s.item_f1 == 0.0 and s.error == "no markdown table found in the response"


def test_bad_scorer_arguments_raise() -> None:
    with pytest.raises(ConfigError, match="key columns"):
        score_table("|a|\n|-|\n|1|", [{"a": "1"}], key_columns=["b"])
    with pytest.raises(ConfigError, match="not required"):
        score_table("|a|\n|-|\n|1|", [{"a": "1"}], key_columns=["a"], rules={"z": ColumnRule()})


def test_parse_date_forms() -> None:
    for text in ("2024-03-05", "March 5th, 2024", "5 March 2024", "2024/03/05", "2024年3月5日", "Mar 5 2024"):
        d = parse_date(text)
        assert d is not None and d.isoformat() == "2024-03-05", text
    assert parse_date("yesterday") is None


async def test_table_verifier_picks_the_score_and_reports_details() -> None:
    args = {"gold": GOLD, "key_columns": ["Country"], "rules": {k: v.model_dump() for k, v in RULES.items()}}
    v = await verify("table", table(PERFECT), args)
    assert v.score == pytest.approx(11 / 12) and v.details["row_precision"] == pytest.approx(2 / 3)
    v_row = await verify("table", table(PERFECT), {**args, "score": "row_f1"})
    assert v_row.score == pytest.approx(2 / 3)
    none = await verify("table", "nothing", args)
    assert none.score == 0.0 and none.error is None and none.details["problem"]
    with pytest.raises(ConfigError, match="gold"):
        await verify("table", "x", {"gold": [], "key_columns": ["a"]})


def test_extract_number_takes_the_first_number_as_widesearch_does() -> None:
    gold = [{"k": "a", "n": "2.1"}]
    rules = {"n": ColumnRule(preprocess=("extract_number",), metrics=("number_near",))}
    assert score_table("|k|n|\n|-|-|\n|a|2.1 million (2,100,000)|", gold, key_columns=["k"], rules=rules).success
    assert not score_table("|k|n|\n|-|-|\n|a|2,100,000 = 2.1 M|", gold, key_columns=["k"], rules=rules).success


def test_extract_time_reads_clock_times_in_their_common_forms() -> None:
    rule = {"arrival": ColumnRule(preprocess=("extract_time",), metrics=("exact_match",))}
    gold = "| flight | arrival |\n|---|---|\n| HAT1 | 22:00:00 |\n| HAT2 | 00:30:00+1 |\n| HAT3 | 07:05:00 |"
    resp = "| flight | arrival |\n|---|---|\n| HAT1 | 10:00 pm EST |\n| HAT2 | 00:30:00+1 EST |\n| HAT3 | 7:05 |"
    s = score_table(resp, gold, key_columns=["flight"], rules=rule)
    assert s.column_scores["arrival"] == 1.0 and s.success
    # a day off, a minute off, no time at all: wrong
    resp = "| flight | arrival |\n|---|---|\n| HAT1 | 22:00:00+1 |\n| HAT2 | 00:31:00+1 |\n| HAT3 | morning |"
    s = score_table(resp, gold, key_columns=["flight"], rules=rule)
    assert s.column_scores["arrival"] == 0.0
