"""BFCL parallel: recorded calls, BFCL's AST matching rules (reimplemented), call-level F1."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from agent_swarm.orchestrator.engine import Orchestrator
from agent_swarm.swarm.backend import Completion, ModelBackend, ModelRequest
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.records import Task
from agent_swarm.swarm.testing import FunctionBackend, call
from agent_swarm.workloads import get_workload
from agent_swarm.workloads.base import MODES, Mode, tool_messages
from agent_swarm.workloads.bfcl import BfclItem, _by_id, _items, call_f1, call_matches, split_of

WL = get_workload("bfcl-parallel")

FUNCS = (
    {
        "name": "spotify.play",
        "parameters": {
            "type": "dict",
            "properties": {
                "artist": {"type": "string"},
                "duration": {"type": "integer"},
                "volume": {"type": "float"},
                "shuffle": {"type": "boolean"},
            },
            "required": ["artist", "duration"],
        },
    },
)
GOLD: dict[str, dict[str, list[Any]]] = {
    "spotify.play": {"artist": ["Taylor Swift"], "duration": [20], "volume": [0.5, ""], "shuffle": [False, ""]}
}


def test_matching_follows_bfcl_rules() -> None:
    ok = call_matches
    assert ok("spotify.play", {"artist": "taylor swift", "duration": 20}, GOLD, FUNCS)  # standardised strings
    assert ok("spotify.play", {"artist": "Taylor-Swift", "duration": 20, "volume": 0.5}, GOLD, FUNCS)
    assert not ok("spotify.play", {"artist": "Taylor Swift", "duration": 20.0}, GOLD, FUNCS)  # float for int
    assert ok("spotify.play", {"artist": "Taylor Swift", "duration": 20, "volume": 1 / 2}, GOLD, FUNCS)
    assert not ok("spotify.play", {"artist": "Taylor Swift"}, GOLD, FUNCS)  # required missing
    assert not ok("spotify.play", {"artist": "Taylor Swift", "duration": 20, "loud": True}, GOLD, FUNCS)
    assert not ok("spotify.play", {"artist": "Maroon 5", "duration": 20}, GOLD, FUNCS)
    assert not ok("spotify_play", {"artist": "Taylor Swift", "duration": 20}, GOLD, FUNCS)  # name must be equal
    assert not ok("spotify.play", {"artist": "Taylor Swift", "duration": 20, "shuffle": 0}, GOLD, FUNCS)
    gold_int_for_float: dict[str, dict[str, list[Any]]] = {
        "spotify.play": {"artist": ["x"], "duration": [1], "volume": [5]}
    }
    assert ok("spotify.play", {"artist": "x", "duration": 1, "volume": 5}, gold_int_for_float, FUNCS)


def test_call_f1_is_order_free_and_one_to_one() -> None:
    item = BfclItem(
        "t",
        "parallel",
        "q",
        FUNCS,
        ({"spotify.play": {"artist": ["A"], "duration": [1]}}, {"spotify.play": {"artist": ["B"], "duration": [2]}}),
    )
    a = ("spotify.play", {"artist": "A", "duration": 1})
    b = ("spotify.play", {"artist": "B", "duration": 2})
    assert call_f1([b, a], item)[:3] == (1.0, 1.0, 1.0)
    p, r, _f, tp = call_f1([a, a], item)  # a duplicate cannot match both gold calls
    assert (p, r, tp) == (0.5, 0.5, 1)
    p, r, _, _ = call_f1([a, b, ("spotify.play", {"artist": "C", "duration": 3})], item)
    assert p == pytest.approx(2 / 3) and r == 1.0
    assert call_f1([], item)[:3] == (0.0, 0.0, 0.0)


async def _run(task: Task, mode: Mode, orch: ModelBackend | None = None) -> tuple[float, bool, dict[str, Any]]:
    ep = WL.episode(task, mode)
    gold = WL.gold_policy(task, mode)
    o = Orchestrator(
        orch or gold.orchestrator,
        ep.config,
        tools=ep.tools,
        agents=ep.agents,
        subagent_backend=gold.subagent,
        reward_fn=ep.reward,
    )
    rec = await o.run(task)
    s = ep.score(rec)
    return s.metric, s.success, {**s.details, "widths": rec.dag.stage_widths}


async def test_gold_policies_score_one_on_parallel_items_and_controls() -> None:
    tasks = WL.tasks(30, seed=1, categories=["parallel", "parallel_multiple", "simple_python", "multiple"])
    assert {t.metadata["category"] for t in tasks} >= {"parallel", "parallel_multiple"}
    for task in tasks:
        for mode in MODES:
            metric, success, d = await _run(task, mode)
            assert (metric, success) == (1.0, True), (task.id, mode, d)
            if mode == "swarm":
                # One sub-agent per call; the single-call controls are answered without sub-agents.
                n = task.metadata["gold_calls"]
                assert d["widths"][0] == (n if n > 1 else 0)


async def test_an_extra_or_missing_call_is_penalised() -> None:
    task = next(t for t in WL.tasks(40, seed=0) if t.metadata["gold_calls"] >= 2)
    gold = WL.gold_policy(task, "single").orchestrator

    async def one_short(request: ModelRequest) -> Completion:
        out = await gold.complete(request)
        return dataclasses.replace(out, tool_calls=out.tool_calls[1:]) if out.tool_calls else out

    _metric, success, d = await _run(task, "single", FunctionBackend(one_short))
    assert d["call_precision"] == 1.0 and d["call_recall"] < 1.0 and not success

    async def one_more(request: ModelRequest) -> Completion:
        out = await gold.complete(request)
        if out.tool_calls:
            return dataclasses.replace(
                out, tool_calls=(*out.tool_calls, dataclasses.replace(out.tool_calls[0], id="dup"))
            )
        return out

    _metric, success, d = await _run(task, "single", FunctionBackend(one_more))
    assert d["call_recall"] == 1.0 and d["call_precision"] < 1.0 and not success


async def test_malformed_calls_are_recorded_and_reported_to_the_model() -> None:
    task = WL.tasks(1, seed=3, categories=["simple_python"])[0]
    ep = WL.episode(task, "single")
    tool = ep.tools[0]

    def policy(request: ModelRequest) -> Completion:
        if tool_messages(request):
            return Completion(text=tool_messages(request)[0].content)
        return Completion(tool_calls=(call(tool.name, not_a_param=1),))

    o = Orchestrator(FunctionBackend(policy), ep.config, tools=ep.tools, reward_fn=ep.reward)
    rec = await o.run(task)
    assert rec.answer is not None and "malformed" in rec.answer
    assert rec.reward is not None and rec.reward.details["emitted_calls"] == 1 and rec.reward.r_perf == 0.0


def test_tool_names_replace_dots_and_the_split_is_stable() -> None:
    task = next(t for t in WL.tasks(60, seed=0) if any("." in f["name"] for f in _by_id()[t.id].functions))
    ep = WL.episode(task, "swarm")
    assert all("." not in t.name for t in ep.tools)
    assert {t.name for t in ep.tools} == {f["name"].replace(".", "_") for f in _by_id()[task.id].functions}
    ids = [it.id for it in _items("parallel")]
    held = [i for i in ids if split_of(i) == "test"]
    assert 30 < len(held) < 70
    train_ids = {t.id for t in WL.tasks(100, seed=0, categories=["parallel"])}
    assert not train_ids & set(held)


def test_unknown_category_and_oversized_requests_fail_loudly() -> None:
    with pytest.raises(ConfigError, match="categories"):
        WL.tasks(1, categories=["irrelevance"])
    with pytest.raises(ConfigError, match="only"):
        WL.tasks(10_000)


TWO = BfclItem(
    "t2",
    "parallel",
    "q",
    FUNCS,
    ({"spotify.play": {"artist": ["A"], "duration": [1]}}, {"spotify.play": {"artist": ["B"], "duration": [2]}}),
)
_A = ("spotify.play", {"artist": "A", "duration": 1})
_B = ("spotify.play", {"artist": "B", "duration": 2})

# Call sets that must not score full marks: (calls, the most F1 they may reach).
BAD_CALLS: list[tuple[list[tuple[str, dict[str, Any]]], float]] = [
    ([], 0.0),
    ([_A, _A, _A, _A], 0.4),  # one right call repeated
    ([_A, _B, *[("spotify.play", {"artist": a, "duration": d}) for a in "CDE" for d in (1, 2)]], 0.5),  # a spray
    ([("spotify.play", {"artist": "A"}), ("spotify.play", {"artist": "B"})], 0.0),  # required missing
    ([("spotify.play", {"artist": "A", "duration": "1"}), _B], 0.5),  # a string for an integer
    ([("spotify_play", {"artist": "A", "duration": 1}), _B], 0.5),  # the tool name, not BFCL's
    ([("spotify.play", {"artist": "A or B", "duration": 1}), _B], 0.5),  # a hedged value
]


@pytest.mark.parametrize(("calls", "most"), BAD_CALLS, ids=[f"bad{i}" for i in range(len(BAD_CALLS))])
def test_bad_call_sets_do_not_score(calls: list[tuple[str, dict[str, Any]]], most: float) -> None:
    _p, _r, f1, tp = call_f1(calls, TWO)
    assert f1 <= most + 1e-9 and not (tp == len(TWO.gold) == len(calls))


def test_the_task_is_the_request_and_every_arm_is_told_how_calls_are_taken() -> None:
    # How calls are taken lives in each arm's instructions, never in the task the coach quotes back or
    # splits: in the task, "answer it now, in the form it asks for" asked for the calls again, and "the
    # request needs, each exactly once, and no other call" read as a list of three items to assign.
    from agent_swarm.orchestrator.coach import split_items
    from agent_swarm.workloads.bfcl import _HARNESS

    splits = [split_of(it.id) for c in ("parallel", "parallel_multiple") for it in _items(c)]
    tasks = [t for s in ("train", "dev") for t in WL.tasks(splits.count(s), seed=0, split=s)]
    assert len(tasks) == 305
    for task in tasks:
        item = _by_id()[task.id]
        assert task.prompt == item.question
        for mode in ("swarm", "single"):
            assert _HARNESS in WL.episode(task, mode).instructions
        for part in split_items(task.prompt) or []:
            assert "exactly once" not in part and "no other call" not in part, part
    assert split_items(_HARNESS) is None


async def test_the_swarm_gold_policy_makes_the_calls_itself_when_delegation_is_withheld() -> None:
    # The small coach has a request that lists no items done directly first (assign_task withheld): the gold
    # orchestrator then makes every gold call itself, and scores 1.
    from agent_swarm.orchestrator.coach import lists_items
    from agent_swarm.orchestrator.eval import episode_config
    from agent_swarm.swarm.config import SwarmConfig

    task = next(t for t in WL.tasks(20, seed=2, split="train") if not lists_items(t.prompt) and t.metadata["parts"] > 1)
    ep = WL.episode(task, "swarm")
    gold = WL.gold_policy(task, "swarm")
    cfg = episode_config(ep, SwarmConfig(prompt_profile="small"))
    o = Orchestrator(gold.orchestrator, cfg, tools=ep.tools, agents=ep.agents, subagent_backend=gold.subagent)
    rec = await o.run(task)
    assert ep.score(rec).metric == 1.0 and not rec.subagent_results
