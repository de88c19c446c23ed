"""The starter workload: a newcomer's wide tasks, checked item by item, with gold policies."""

from __future__ import annotations

import re
from typing import Any

import pytest

from agent_swarm.orchestrator.coach import lists_items
from agent_swarm.orchestrator.engine import Orchestrator
from agent_swarm.orchestrator.eval import episode_config
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import ConfigError, ToolError
from agent_swarm.swarm.records import EpisodeRecord, Task
from agent_swarm.workloads import get_workload, workload_names
from agent_swarm.workloads.base import Mode
from agent_swarm.workloads.starter import _KIND, KINDS, calculator, score_answer

STARTER = get_workload("starter")


async def _run(task: Task, mode: Mode) -> EpisodeRecord:
    ep = STARTER.episode(task, mode)
    gold = STARTER.gold_policy(task, mode)
    o = Orchestrator(
        gold.orchestrator,
        episode_config(ep, SwarmConfig()),
        tools=ep.tools,
        agents=ep.agents,
        subagent_backend=gold.subagent,
        reward_fn=ep.reward,
    )
    return await o.run(task)


def test_registered_with_sixty_plus_tasks_and_disjoint_splits() -> None:
    assert "starter" in workload_names()
    train = STARTER.tasks(48, seed=0, split="train")
    test = STARTER.tasks(24, seed=0, split="test")
    assert len(train) + len(test) >= 60
    assert {t.metadata["kind"] for t in test} == set(KINDS)  # every kind in a 24-task test run
    assert all(2 <= len(t.metadata["items"]) <= 6 for t in [*train, *test])

    def keys(tasks: list[Task]) -> set[tuple[str, str]]:
        return {(t.metadata["kind"], it["key"]) for t in tasks for it in t.metadata["items"]}

    assert not keys(train) & keys(test)  # held-out items never appear in training tasks
    assert STARTER.tasks(5, seed=3) == STARTER.tasks(5, seed=3)  # deterministic
    assert STARTER.tasks(5, seed=3) != STARTER.tasks(5, seed=4)
    with pytest.raises(ConfigError, match="min_items"):
        STARTER.tasks(1, min_items=5, max_items=3)
    with pytest.raises(ConfigError, match="unknown split"):
        STARTER.tasks(1, split="validation")


@pytest.mark.parametrize("kind", KINDS)
async def test_gold_policies_answer_every_item_in_both_modes(kind: str) -> None:
    task = STARTER.tasks(1, seed=1, split="test", kinds=[kind], min_items=4, max_items=4)[0]
    swarm = await _run(task, "swarm")
    single = await _run(task, "single")
    for rec in (swarm, single):
        assert rec.reward is not None and rec.reward.r_perf == 1.0, (rec.answer, rec.reward)
        assert rec.reward.details["success"] is True
        assert rec.reward.details["items"] == {it["key"]: 1.0 for it in task.metadata["items"]}  # per item
    assert swarm.dag.stage_widths[0] == 4 and swarm.reward is not None
    assert swarm.reward.details["max_width"] == 4
    assert {a.name for a in swarm.agents} == {"worker"}  # the built-in type, nothing created
    if kind == "arithmetic":  # the sub-agents used the calculator, one step each, then answered
        assert all(r.steps == 2 for r in swarm.subagent_results)


@pytest.mark.parametrize(
    ("answer", "right"),
    [
        ("France: Paris. Japan: Tokyo. Kenya: Nairobi.", [True, True, True]),
        ("The capitals are Paris, Tokyo and Nairobi.", [True, True, True]),  # no keys: in the asked order
        ("paris, TOKYO; nairobi!", [True, True, True]),  # case and punctuation
        ("France: Tokyo. Japan: Paris. Kenya: Nairobi.", [False, False, True]),  # swapped
        # Hedges never count (the old scorer took the first two: only another *capital* competed).
        ("France: Paris or Lyon. Japan: Tokyo, maybe Kyoto. Kenya: Nairobi or Lima.", [False, False, False]),
        ("France: Paris.", [True, False, False]),
        ("", [False, False, False]),
    ],
)
def test_capitals_are_checked_per_item(answer: str, right: list[bool]) -> None:
    items = [{"key": k, "answer": [v]} for k, v in (("France", "Paris"), ("Japan", "Tokyo"), ("Kenya", "Nairobi"))]
    assert score_answer(answer, items, "capital") == right


CAPITALS_FJ = [{"key": "France", "answer": ["Paris"]}, {"key": "Japan", "answer": ["Tokyo"]}]
CAPITALS_FJK = [*CAPITALS_FJ, {"key": "Kenya", "answer": ["Nairobi"]}]
US_CONTINENT = [{"key": k, "answer": list(_KIND["continent"].facts[k])} for k in ("the United States",)]
CONTINENTS_PM = [{"key": k, "answer": list(_KIND["continent"].facts[k])} for k in ("Peru", "Mexico")]

# Bad answers that must not score (issue 26's examples first), per kind: (answer, items, kind, right).
BAD: list[tuple[str, list[dict[str, Any]], str, list[bool]]] = [
    # values without their keys, among competitors: not 2/2 (it was)
    ("Paris: Rome / Tokyo: Tokyo / Berlin: Berlin / Rome: Madrid", CAPITALS_FJ, "capital", [False, False]),
    ("Maybe Paris or Lyon; Tokyo or Osaka", CAPITALS_FJ, "capital", [False, False]),  # hedging (was 2/2)
    ("France: Paris or Lyon\nJapan: Tokyo or Osaka", CAPITALS_FJ, "capital", [False, False]),
    ("France: Paris/Lyon. Japan: Tokyo?", CAPITALS_FJ, "capital", [False, False]),
    ("France: perhaps Paris. Japan: probably Tokyo", CAPITALS_FJ, "capital", [False, False]),
    ("Paris Tokyo Berlin Rome Madrid Lima Cairo", CAPITALS_FJ, "capital", [False, False]),  # a dump of capitals
    ("Paris, Tokyo, Berlin", CAPITALS_FJ, "capital", [False, False]),  # more values than items: no order
    ("France: Tokyo\nJapan: Paris", CAPITALS_FJ, "capital", [False, False]),  # swapped
    ("France: Paris, Rome\nJapan: Tokyo", CAPITALS_FJ, "capital", [False, True]),  # a second capital for France
    ("France and Japan", CAPITALS_FJ, "capital", [False, False]),  # the keys copied back
    ("France: France\nJapan: Japan", CAPITALS_FJ, "capital", [False, False]),
    ("Germany: Paris. Italy: Tokyo", CAPITALS_FJ, "capital", [False, False]),  # values under other keys
    ("France: Paris. France: Lyon? Japan: Tokyo", CAPITALS_FJ, "capital", [False, True]),  # a later doubt
    ("Japan: yen, dollar or euro", [{"key": "Japan", "answer": ["yen"]}], "currency", [False]),
    ("gold: Au or Ag", [{"key": "gold", "answer": ["Au"]}], "symbol", [False]),
    ("Hamlet: Shakespeare, Marlowe or Kyd", [{"key": "Hamlet", "answer": ["Shakespeare"]}], "author", [False]),
    ("Hamlet: Shakespeare or Cervantes", [{"key": "Hamlet", "answer": ["Shakespeare"]}], "author", [False]),
    ("dog: perro o gato", [{"key": "dog", "answer": ["perro"]}], "spanish", [False]),
    # arithmetic: the numbers 4000-6999 contain every product in the test range (was all right)
    (" ".join(str(n) for n in range(4000, 7000)), [{"key": "61 * 77", "answer": ["4697"]}], "arithmetic", [False]),
    (
        ", ".join(str(n) for n in range(4000, 7000)),
        [{"key": "61 * 77", "answer": ["4697"]}, {"key": "80 * 70", "answer": ["5600"]}],
        "arithmetic",
        [False, False],
    ),
    ("61 * 77 = 4697 or 4700", [{"key": "61 * 77", "answer": ["4697"]}], "arithmetic", [False]),
    ("61 * 77 = 4600, 4697, 4700", [{"key": "61 * 77", "answer": ["4697"]}], "arithmetic", [False]),
    ("61 * 77 is about 4697?", [{"key": "61 * 77", "answer": ["4697"]}], "arithmetic", [False]),
    (
        "61 * 77 = 5600\n80 * 70 = 4697",
        ARITH := [{"key": "61 * 77", "answer": ["4697"]}, {"key": "80 * 70", "answer": ["5600"]}],
        "arithmetic",
        [False, False],
    ),
    ("61 * 77", [{"key": "61 * 77", "answer": ["4697"]}], "arithmetic", [False]),  # the key copied back
    # a hedge in the next sentence, naming no key, is still the key's
    ("France: Paris. Or Rome.\nJapan: Tokyo", CAPITALS_FJ, "capital", [False, True]),
    ("France: Paris\nmaybe Lyon\nJapan: Tokyo", CAPITALS_FJ, "capital", [False, True]),
    ("61 * 77 = 4697. Or 4700.", [{"key": "61 * 77", "answer": ["4697"]}], "arithmetic", [False]),
    ("5600 4697", ARITH, "arithmetic", [False, False]),  # in the wrong order
    # a continent's adjective is an answer, so also a rival and a hedge
    ("The United States is on the South American continent.", US_CONTINENT, "continent", [False]),
    ("The United States is North American or European.", US_CONTINENT, "continent", [False]),
    ("The United States: North American, perhaps.", US_CONTINENT, "continent", [False]),
    ("The United States is a North American and Asian country.", US_CONTINENT, "continent", [False]),
    ("Peru: North America. Mexico: South American.", CONTINENTS_PM, "continent", [False, False]),
    # found by mutation testing (bench/mutation.py starter)
    ("France and Japan: maybe Paris and Tokyo", CAPITALS_FJ, "capital", [False, False]),  # a hedged pairing
    ("4697.5", [{"key": "61 * 77", "answer": ["4697"]}], "arithmetic", [False]),  # half off is off
]

# Right answers in unusual shapes that must score.
GOOD: list[tuple[str, list[dict[str, Any]], str, list[bool]]] = [
    # over-complete: the extra Germany line must not spoil Japan (it did)
    ("France: Paris. Japan: Tokyo. Germany: Berlin.", CAPITALS_FJ, "capital", [True, True]),
    ("| Country | Capital |\n|---|---|\n| France | Paris |\n| Japan | Tokyo |", CAPITALS_FJ, "capital", [True, True]),
    ("- **France** – Paris\n- **Japan** – Tokyo", CAPITALS_FJ, "capital", [True, True]),
    ("1. France: Paris\n2. Japan: Tokyo", CAPITALS_FJ, "capital", [True, True]),
    ("The capital of France is Paris, and the capital of Japan is Tokyo.", CAPITALS_FJ, "capital", [True, True]),
    ("Paris is the capital of France; Tokyo is the capital of Japan.", CAPITALS_FJ, "capital", [True, True]),
    ("The capitals of France and Japan are Paris and Tokyo.", CAPITALS_FJ, "capital", [True, True]),
    ("Paris and Tokyo are the capitals of France and Japan, respectively.", CAPITALS_FJ, "capital", [True, True]),
    ("Paris\nTokyo", CAPITALS_FJ, "capital", [True, True]),  # in the asked order, no keys
    (
        "What are the capital cities of France and Japan?\nFrance: Paris\nJapan: Tokyo",
        CAPITALS_FJ,
        "capital",
        [True, True],
    ),
    ("France's capital is Paris and Japan's is Tokyo.", CAPITALS_FJ, "capital", [True, True]),
    ("What is 61 * 77?\n61 * 77 = 4697", [{"key": "61 * 77", "answer": ["4697"]}], "arithmetic", [True]),
    ("Paris and Tokyo.", CAPITALS_FJ, "capital", [True, True]),
    ("France → Paris\nJapan → Tokyo (formerly Edo)", CAPITALS_FJ, "capital", [True, True]),
    (
        "The Hobbit: J. R. R. Tolkien. The Great Gatsby: F. Scott Fitzgerald.",
        [
            {"key": "The Hobbit", "answer": ["J. R. R. Tolkien", "Tolkien"]},
            {"key": "The Great Gatsby", "answer": ["F. Scott Fitzgerald", "Fitzgerald"]},
        ],
        "author",
        [True, True],
    ),
    (
        "Hamlet was written by William Shakespeare.",
        [{"key": "Hamlet", "answer": ["William Shakespeare", "Shakespeare"]}],
        "author",
        [True],
    ),
    (
        "table: table, cat: chat",
        [{"key": "table", "answer": ["table"]}, {"key": "cat", "answer": ["chat"]}],
        "french",
        [True, True],
    ),
    ("61 × 77 = 4,697", [{"key": "61 * 77", "answer": ["4697"]}], "arithmetic", [True]),
    ("61 times 77 is 4697.", [{"key": "61 * 77", "answer": ["4697"]}], "arithmetic", [True]),
    ("The product of 61 and 77 is 4697.", [{"key": "61 * 77", "answer": ["4697"]}], "arithmetic", [True]),
    ("61 * 77 = 4697\n80 * 70 = 5600", ARITH, "arithmetic", [True, True]),
    ("61 * 77 = 4697, 80 * 70 = 5600.", ARITH, "arithmetic", [True, True]),
    ("4697\n5600", ARITH, "arithmetic", [True, True]),  # in the asked order
    ("1. 4697\n2. 5600", ARITH, "arithmetic", [True, True]),
    ("80 * 70 = 5600\n61 * 77 = 4697", ARITH, "arithmetic", [True, True]),  # keys named: any order
    # the adjective of the right continent (issue 26's controls: this was scored wrong)
    ("The United States is on the North American continent.", US_CONTINENT, "continent", [True]),
    ("Peru is a South American country; Mexico lies in North America.", CONTINENTS_PM, "continent", [True, True]),
    # found by mutation testing (bench/mutation.py starter): the survivors each of these kills
    ("Hobbit: J. R. R. Tolkien", [{"key": "The Hobbit", "answer": ["Tolkien"]}], "author", [True]),  # "The" dropped
    ("\u22124", [{"key": "5 - 9", "answer": ["-4"]}], "arithmetic", [True]),  # a Unicode minus sign
    ("What are the capitals of France and Japan?\nJapan: Tokyo\nFrance: Paris", CAPITALS_FJ, "capital", [True, True]),
    ("Here you go.\nParis\nTokyo", CAPITALS_FJ, "capital", [True, True]),  # in order, after a preamble
    ("France: Paris.\nRome is nice too.\nJapan: Tokyo", CAPITALS_FJ, "capital", [True, True]),  # no key, no hedge
    ("France and Japan: Paris and Tokyo.\nKenya: Nairobi", CAPITALS_FJK, "capital", [True, True, True]),
    ("France Paris Japan Tokyo Kenya Nairobi", CAPITALS_FJK, "capital", [True, True, True]),  # one clause
    ("France Paris Japan Tokyo", CAPITALS_FJ, "capital", [True, True]),
]


def _case_id(answer: str) -> str:
    """The answer's first 40 characters, printable ASCII only: pytest escapes newlines and accents in
    ids, and a test named with the escapes is not found again by its id (mutmut selects tests by id)."""
    return re.sub(r"[^ -~]", "~", answer[:40])


@pytest.mark.parametrize(("answer", "items", "kind", "right"), BAD, ids=[_case_id(b[0]) for b in BAD])
def test_bad_answers_do_not_score(answer: str, items: list[dict[str, Any]], kind: str, right: list[bool]) -> None:
    assert score_answer(answer, items, kind) == right


@pytest.mark.parametrize(("answer", "items", "kind", "right"), GOOD, ids=[_case_id(g[0]) for g in GOOD])
def test_good_answers_in_unusual_shapes_score(
    answer: str, items: list[dict[str, Any]], kind: str, right: list[bool]
) -> None:
    assert score_answer(answer, items, kind) == right


def test_aliases_accents_symbols_and_numbers() -> None:
    cur = [
        {"key": "Japan", "answer": ["yen", "JPY"]},
        {"key": "the United States", "answer": ["US dollar", "dollar", "USD"]},
    ]
    assert score_answer("Japan uses the JPY; the United States, the dollar.", cur, "currency") == [True, True]
    assert score_answer("Japan: yen, dollar or euro. United States: USD", cur, "currency") == [False, True]
    col = [{"key": "Colombia", "answer": ["Bogotá", "Bogota"]}]
    assert score_answer("BOGOTA", col, "capital") == [True]
    sym = [{"key": "gold", "answer": ["Au"]}, {"key": "silver", "answer": ["Ag"]}]
    assert score_answer("Gold: Au. Silver: Ag.", sym, "symbol") == [True, True]
    assert score_answer("gold: au, silver: ag", sym, "symbol") == [False, False]  # symbols are case-sensitive
    arith = [{"key": "17 * 23", "answer": ["391"]}, {"key": "905 - 47", "answer": ["858"]}]
    assert score_answer("17 * 23 = 391.0 and 905 - 47 = 858", arith, "arithmetic") == [True, True]
    assert score_answer("17 * 23 = 392", arith, "arithmetic") == [False, False]
    spanish = [{"key": "dog", "answer": ["perro"]}, {"key": "tree", "answer": ["árbol", "arbol"]}]
    assert score_answer("dog: el perro, tree: el árbol", spanish, "spanish") == [True, True]


def test_the_calculator_is_exact_and_refuses_anything_but_arithmetic() -> None:
    assert calculator("17 * 23") == "391"
    assert calculator("17 × 23") == calculator("17 x 23") == "391"
    assert calculator("144 / 12") == "12" and calculator("7 / 2") == "3.5"
    assert calculator("1,234 + 1") == "1235"
    for bad in ("__import__('os')", "2 ** 999999", "9" * 30 + " * " + "9" * 30, "1 / 0", "a + 1"):
        with pytest.raises(ToolError):
            calculator(bad)


async def test_single_mode_has_the_calculator_and_no_subagent_actions() -> None:
    task = STARTER.tasks(1, seed=0, kinds=["arithmetic"], min_items=3, max_items=3)[0]
    rec = await _run(task, "single")
    # one calculator call per turn (the single arm's protocol: several per turn is single-parallel), then the answer
    assert rec.dag.stage_widths == (0, 0, 0, 0) and rec.reward is not None and rec.reward.r_perf == 1.0
    assert [[t.call.name for t in s.tool_results] for s in rec.stages] == [["calculator"]] * 3 + [[]]


@pytest.mark.parametrize("name", ["starter", "bfcl-parallel", "wide-lookup"])
async def test_gold_policies_ignore_the_small_profiles_worked_example(name: str) -> None:
    """Under the small-model profile the prompt carries a worked example (a user task, its reports,
    an answer) before the real task; gold policies (SFT's data) must act on the real task only."""
    wl = get_workload(name)
    # a task that lists items: the small coach has a request that lists none done directly first
    task = next(t for t in wl.tasks(20, seed=2, split="train") if lists_items(t.prompt))
    ep = wl.episode(task, "swarm")
    gold = wl.gold_policy(task, "swarm")
    cfg = episode_config(ep, SwarmConfig(prompt_profile="small"))
    o = Orchestrator(
        gold.orchestrator, cfg, tools=ep.tools, agents=ep.agents, subagent_backend=gold.subagent, reward_fn=ep.reward
    )
    assert o.profile.example  # the prompt carries the worked example
    rec = await o.run(task)
    assert rec.reward is not None and rec.reward.r_perf == 1.0, (rec.answer, rec.reward)
    assert max(rec.dag.stage_widths) >= 2


AUTHORS_4 = [
    {"key": k, "answer": list(_KIND["author"].facts[k])}
    for k in ("Madame Bovary", "The Adventures of Tom Sawyer", "Dracula", "Oliver Twist")
]


@pytest.mark.parametrize(
    ("answer", "right"),
    [
        # one unit per item in the asked order, two of them authors the kind does not list: read in order
        # (all four were scored wrong: the in-order reading wanted every unit to hold a known value)
        ("George Bernard Shaw, Mark Twain, George Orwell, Charles Dickens.", [False, True, False, True]),
        (
            "Here are the authors:\nGeorge Bernard Shaw, Mark Twain, George Orwell, Charles Dickens.",
            [False, True, False, True],
        ),
        ("Gustave Flaubert, Somebody Else, Bram Stoker, Charles Dickens.", [True, False, True, True]),
        ("Gustave Flaubert, Mark Twain, X, Charles Dickens.", [True, True, False, True]),  # "X" is a unit
        ("George Bernard Shaw, Mark Twain, George Orwell, Charles Dickens, ...", [False, True, False, True]),
        (
            "Here are the authors: \nGeorge Bernard Shaw, Mark Twain, George Orwell, Charles Dickens",
            [False, True, False, True],
        ),
        # not one unit per item: nothing is attributed
        ("George Bernard Shaw, Mark Twain, George Orwell, Charles Dickens, Bram Stoker.", [False] * 4),
        ("George Bernard Shaw, Mark Twain, Charles Dickens.", [False] * 4),
        ("Somebody, Mark Twain, George Orwell, Charles Dickens, and more.", [False] * 4),
        # a hedged unit or one holding two values spoils the reading
        ("Shaw or Flaubert, Mark Twain, George Orwell, Charles Dickens.", [False] * 4),
        ("George Bernard Shaw, Mark Twain Charles Dickens, George Orwell, Bram Stoker.", [False] * 4),
    ],
)
def test_one_unit_per_item_in_the_asked_order_is_read_in_order(answer: str, right: list[bool]) -> None:
    assert score_answer(answer, AUTHORS_4, "author") == right
