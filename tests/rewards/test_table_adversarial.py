"""The table scorer against answers that must not score (copied names, hedges, dumps, conflicting
rows) and right answers in shapes a model writes instead of a clean table (lists, labelled blocks)."""

from __future__ import annotations

import pytest

from agent_swarm.swarm.verifiers import ColumnRule, score_table
from agent_swarm.swarm.verifiers.table import TableScore

# A wide-lookup table: 2 customers × 3 looked-up attributes (keys are not items).
GOLD = [
    {"customer": "Ava Lopez", "email": "ava.lopez1234@example.com", "city": "Denver", "orders": "3"},
    {"customer": "Liam Chen", "email": "liam.chen5678@example.com", "city": "Austin", "orders": "1"},
]
RULES = {"orders": ColumnRule(preprocess=("extract_number",), metrics=("number_near",), criterion=0.001)}
HEADER = "| customer | email | city | orders |\n|---|---|---|---|\n"
RIGHT = (
    HEADER
    + "| Ava Lopez | ava.lopez1234@example.com | Denver | 3 |\n| Liam Chen | liam.chen5678@example.com | Austin | 1 |"
)


def score(answer: str) -> TableScore:
    return score_table(answer, GOLD, key_columns=["customer"], columns=list(GOLD[0]), rules=RULES)


# (answer, item F1 it may reach at most)
BAD: list[tuple[str, float]] = [
    # the names copied into the table, every looked-up cell empty or a copy: 0 (was 1/(M+1) = 0.25)
    (HEADER + "| Ava Lopez |  |  |  |\n| Liam Chen |  |  |  |", 0.0),
    (
        HEADER + "| Ava Lopez | Ava Lopez | Ava Lopez | Ava Lopez |\n| Liam Chen | Liam Chen | Liam Chen | Liam Chen |",
        0.0,
    ),
    (HEADER + "| Ava Lopez | ? | ? | ? |\n| Liam Chen | N/A | N/A | N/A |", 0.0),
    ("| customer |\n|---|\n| Ava Lopez |\n| Liam Chen |", 0.0),  # names only, no attribute columns
    ("Ava Lopez\nLiam Chen", 0.0),  # names only, as a list
    ("- Ava Lopez\n- Liam Chen", 0.0),
    # the prompt copied back
    (
        "Build a table of these 2 retail customers: Ava Lopez, Liam Chen. For each one give: email, city, orders "
        "(how many). Answer with one markdown table with exactly these columns: | customer | email | city | orders |",
        0.0,
    ),
    # hedged cells
    (
        HEADER + "| Ava Lopez | ava.lopez1234@example.com or ava@example.com | Denver or Boulder | 3 or 4 |\n"
        "| Liam Chen | liam.chen5678@example.com/liam@example.com | maybe Austin | 1? |",
        0.0,
    ),
    # a number dump in a count column
    (HEADER + "| Ava Lopez | x | x | 1, 2, 3, 4, 5 |\n| Liam Chen | x | x | 0 1 2 3 |", 0.0),
    # two rows for one key that disagree: a hedge across rows
    (HEADER + "| Ava Lopez | x | Denver | 3 |\n| Ava Lopez | x | Boulder | 2 |\n| Liam Chen | x | Dallas | 9 |", 0.0),
    # every value under the wrong key (swapped)
    (
        HEADER
        + "| Ava Lopez | liam.chen5678@example.com | Austin | 1 |\n"
        + "| Liam Chen | ava.lopez1234@example.com | Denver | 3 |",
        0.0,
    ),
    # a list naming both keys on each line: nothing is attributed
    ("Ava Lopez and Liam Chen: Denver, Austin, 3, 1", 0.0),
    # one column holding two asked ones: not aligned to either, so the columns differ
    (
        "| customer | email / city | orders |\n|---|---|---|\n"
        "| Ava Lopez | ava.lopez1234@example.com / Denver | 3 |\n"
        "| Liam Chen | liam.chen5678@example.com / Austin | 1 |",
        0.0,
    ),
    # a key column under a name that holds no asked column (the task asks for exactly its columns)
    (RIGHT.replace("| customer |", "| Name |"), 0.0),
    # two names left over for one missing column: no alignment by elimination
    (
        RIGHT.replace("| customer | email |", "| Name | Alias | email |")
        .replace("| Ava Lopez |", "| Ava Lopez | A |")
        .replace("| Liam Chen |", "| Liam Chen | L |")
        .replace("|---|", "|---|---|", 1),
        0.0,
    ),
    # a table without a header row, its columns in another order than the asked one: cells land in the
    # wrong columns
    (
        "| Ava Lopez | Denver | 3 | ava.lopez1234@example.com |\n"
        "| Liam Chen | Austin | 1 | liam.chen5678@example.com |",
        0.0,
    ),
    # a first row of data whose key is no gold key: not taken for a headerless table
    (
        "| Mia Park | ava.lopez1234@example.com | Denver | 3 |\n|---|---|---|---|\n"
        "| Ava Lopez | ava.lopez1234@example.com | Denver | 3 |",
        0.0,
    ),
    # a table without a header row that leaves out an asked column: its first row is not data of the
    # asked width, so it is read as a header naming no asked column
    ("| Ava Lopez | Denver | 3 |\n| Liam Chen | Austin | 1 |", 0.0),
    # an extra column whose name holds an asked one that is already there
    (
        RIGHT.replace("| customer |", "| customer | customer email |")
        .replace("| Ava Lopez |", "| Ava Lopez | x |")
        .replace("| Liam Chen |", "| Liam Chen | y |")
        .replace("|---|", "|---|---|", 1),
        0.0,
    ),
]

# (answer, expected item F1)
GOOD: list[tuple[str, float]] = [
    (RIGHT, 1.0),
    ("```markdown\n" + RIGHT + "\n```", 1.0),
    (
        HEADER.replace("orders", "Orders") + "| **Ava Lopez** | AVA.LOPEZ1234@example.com | denver | 3 orders |\n"
        "| Liam Chen | liam.chen5678@example.com | Austin | 1 |",
        1.0,
    ),
    # markdown dressing in cells: code spans, links, angle brackets
    (
        HEADER + "| Ava Lopez | [ava.lopez1234@example.com](mailto:ava.lopez1234@example.com) | `Denver` | 3 |\n"
        "| Liam Chen | <liam.chen5678@example.com> | Austin | `1` |",
        1.0,
    ),
    # the header as people write it
    (
        RIGHT.replace("| customer | email | city | orders |", "| Customer | E-mail | **City** | Orders (how many) |"),
        1.0,
    ),
    # headers in other words, aligned as WideSearch's column alignment would, by whole words
    (
        RIGHT.replace(
            "| customer | email | city | orders |", "| Customer Name | Email Address | City | Number of Orders |"
        ),
        1.0,
    ),
    # no header row: the first row is data, the columns in the asked order (with or without a separator)
    (RIGHT.removeprefix(HEADER), 1.0),
    (
        "| Ava Lopez | ava.lopez1234@example.com | Denver | 3 |\n|---|---|---|---|\n"
        "| Liam Chen | liam.chen5678@example.com | Austin | 1 |",
        1.0,
    ),
    # ... its key cell dressed as code: freed of markdown before it is matched to a gold key
    (
        "| `Ava Lopez` | ava.lopez1234@example.com | Denver | 3 |\n"
        "| Liam Chen | liam.chen5678@example.com | Austin | 1 |",
        1.0,
    ),
    ("| Ava Lopez | ava.lopez1234@example.com | Denver | 3 |", 2 / 3),  # one of two rows: P 1, R 1/2
    # a bullet list with labels: Liam's labelled email counts; Ava's unlabelled pair is not 3 values (P 1/3, R 1/6)
    ("- Ava Lopez: email ava.lopez1234@example.com, city Denver\n- Liam Chen: email: liam.chen5678@example.com", 2 / 9),
    (
        "- **Ava Lopez** — email: ava.lopez1234@example.com; city: Denver; orders: 3\n"
        "- **Liam Chen** — email: liam.chen5678@example.com; city: Austin; orders: 1",
        1.0,
    ),
    # "Name: attr1, attr2, attr3" in the asked order
    ("Ava Lopez: ava.lopez1234@example.com, Denver, 3\nLiam Chen: liam.chen5678@example.com, Austin, 1", 1.0),
    # key-value blocks, as the sub-agents report
    (
        "customer: Ava Lopez\nemail: ava.lopez1234@example.com\ncity: Denver\nnumber of orders: 3\n\n"
        "customer: Liam Chen\nemail: liam.chen5678@example.com\ncity: Austin\norders (how many): 1",
        1.0,
    ),
]


@pytest.mark.parametrize(("answer", "most"), BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_answers_do_not_score(answer: str, most: float) -> None:
    s = score(answer)
    assert s.item_f1 <= most and s.row_f1 <= most and not s.success, s
    assert all(v == 0.0 for v in s.items.values())


@pytest.mark.parametrize(("answer", "f1"), GOOD, ids=[f"good{i}" for i in range(len(GOOD))])
def test_good_answers_in_other_shapes_score(answer: str, f1: float) -> None:
    s = score(answer)
    assert s.item_f1 == pytest.approx(f1), s


def test_items_row_f1_and_success_are_reported_side_by_side() -> None:
    one_wrong = RIGHT.replace("| Austin |", "| Dallas |")
    s = score(one_wrong)
    assert s.items == {
        "Ava Lopez|email": 1.0,
        "Ava Lopez|city": 1.0,
        "Ava Lopez|orders": 1.0,
        "Liam Chen|email": 1.0,
        "Liam Chen|city": 0.0,
        "Liam Chen|orders": 1.0,
    }
    assert s.item_f1 == pytest.approx(5 / 6) and s.row_f1 == pytest.approx(0.5) and not s.success
    assert s.scored_columns == ("email", "city", "orders")
    assert score(RIGHT).success


def test_a_table_of_keys_alone_scores_which_rows_it_lists() -> None:
    gold = [{"name": "a"}, {"name": "b"}]
    s = score_table("| name |\n|---|\n| a |\n| c |", gold, key_columns=["name"])
    assert s.item_precision == 0.5 and s.item_recall == 0.5 and s.items == {"a|name": 1.0, "b|name": 0.0}


def test_hedge_words_inside_values_are_not_hedges() -> None:
    gold = [{"k": "x", "email": "ava.or@example.com", "url": "https://or.example.com/a/b?q=1"}]
    rules = {"url": ColumnRule(preprocess=(), metrics=("url_match",))}
    s = score_table(
        "| k | email | url |\n|-|-|-|\n| x | ava.or@example.com | https://or.example.com/c?d |",
        gold,
        key_columns=["k"],
        rules=rules,
    )
    assert s.success


def test_in_match_needs_a_value() -> None:
    gold = [{"k": "a", "note": "the quick brown fox"}]
    rules = {"note": ColumnRule(preprocess=(), metrics=("in_match",))}
    assert score_table("| k | note |\n|-|-|\n| a |  |", gold, key_columns=["k"], rules=rules).item_f1 == 0.0
    assert score_table("| k | note |\n|-|-|\n| a | qu |", gold, key_columns=["k"], rules=rules).item_f1 == 0.0


@pytest.mark.parametrize(
    "extra",
    [
        "- **Mia Park** — email: mia@example.com; city: Boise; orders: 2",
        "- Mia Park: mia@example.com, Boise, 2",
        "customer: Mia Park\nemail: mia@example.com\ncity: Boise\norders: 2",
    ],
)
def test_a_hallucinated_entry_in_a_list_costs_precision_as_a_table_row_does(extra: str) -> None:
    listed = (
        "customer: Ava Lopez\nemail: ava.lopez1234@example.com\ncity: Denver\norders: 3\n\n"
        "customer: Liam Chen\nemail: liam.chen5678@example.com\ncity: Austin\norders: 1\n\n"
    )
    s = score(listed + extra)
    assert s.pred_rows == 3 and s.item_recall == 1.0 and s.item_precision == pytest.approx(2 / 3), s
    assert not s.success


def test_a_link_in_a_url_column_is_its_target() -> None:
    gold = [{"k": "x", "site": "https://www.paris.fr/en"}]
    rules = {"site": ColumnRule(preprocess=(), metrics=("url_match",))}
    s = score_table("| k | site |\n|-|-|\n| x | [Paris](https://www.paris.fr) |", gold, key_columns=["k"], rules=rules)
    assert s.success


def test_a_row_that_says_not_found_claims_nothing() -> None:
    # A distractor reported as not found in the table costs no precision, as leaving it out does;
    # a guessed value for it does.
    base = RIGHT + "\n| Mia Park | NOT FOUND | NOT FOUND | NOT FOUND |"
    s = score(base)
    assert s.success and s.abstained_rows == 1 and s.pred_rows == 2
    guessed = score(RIGHT + "\n| Mia Park | mia@example.com | Boise | 2 |")
    assert guessed.item_precision == pytest.approx(2 / 3) and not guessed.success
    names_only = score(HEADER + "| Ava Lopez | n/a | n/a | n/a |\n| Liam Chen |  |  |  |")
    assert names_only.item_f1 == 0.0 and names_only.abstained_rows == 2


def test_a_header_row_whose_key_cell_is_also_a_gold_key_is_still_the_header() -> None:
    # a word list keyed by the word, one of whose words is "word": the header row names the asked columns,
    # so it is the header even though its key cell is a gold key (read as data it would add a second,
    # conflicting row for "word" and reject that cell)
    gold = [{"word": "word", "meaning": "a unit of language"}, {"word": "fish", "meaning": "an animal"}]
    answer = "| word | meaning |\n|---|---|\n| word | a unit of language |\n| fish | an animal |"
    s = score_table(answer, gold, key_columns=["word"])
    assert s.item_f1 == 1.0 and s.success, s
