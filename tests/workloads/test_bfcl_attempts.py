"""BFCL scores every call any agent attempted, read from the record: calls one-call-per-turn held back
and assignments admission dropped as duplicates count, as a single agent's every call does."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_swarm.orchestrator.coach import lists_items
from agent_swarm.orchestrator.engine import Orchestrator
from agent_swarm.orchestrator.eval import arm_config, episode_config
from agent_swarm.swarm.backend import Completion, ModelBackend, ModelRequest
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import ErrorType
from agent_swarm.swarm.messages import ToolCall
from agent_swarm.swarm.records import EpisodeRecord, EpisodeStatus, Task
from agent_swarm.swarm.testing import FunctionBackend, call
from agent_swarm.workloads import get_workload
from agent_swarm.workloads.base import Mode, Score, tool_messages, user_text
from agent_swarm.workloads.bfcl import _by_id, _gold_call, call_f1

WL = get_workload("bfcl-parallel")
# A request the small coach reads as several parts (it lists items), so its orchestrator may delegate on the
# first turn; on a one-part request it makes the calls itself first (SmallModelCoach).
TASK = next(
    t for t in WL.tasks(40, seed=0, categories=["parallel"]) if t.metadata["gold_calls"] >= 2 and lists_items(t.prompt)
)
ITEM = _by_id()[TASK.id]
GOLD = [_gold_call(g, ITEM) for g in ITEM.gold]  # (tool name, arguments)


def _bogus(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """The gold arguments with one string (else number) value changed: a call of the right function that
    matches nothing."""
    key = next((k for k, v in args.items() if isinstance(v, str)), None)
    if key is not None:
        return {**args, key: args[key] + " (wrong)"}
    key = next(k for k, v in args.items() if isinstance(v, int | float) and not isinstance(v, bool))
    return {**args, key: args[key] + 1000}


def _assign(task: str) -> Any:
    return call("assign_task", agent="caller", task=task)


def _ask(name: str, args: dict[str, Any]) -> str:
    return f"Call `{name}` with arguments {json.dumps(args, sort_keys=True)}"


async def _run(
    orch: ModelBackend, sub: ModelBackend | None, mode: Mode = "swarm", profile: str = "default"
) -> tuple[EpisodeRecord, Score]:
    ep = WL.episode(TASK, mode)
    o = Orchestrator(
        orch,
        episode_config(ep, SwarmConfig(prompt_profile=profile)),
        tools=ep.tools,
        agents=ep.agents,
        subagent_backend=sub or WL.gold_policy(TASK, mode).subagent,
        reward_fn=ep.reward,
    )
    rec = await o.run(TASK)
    return rec, ep.score(rec)


def _assign_all_then_answer(tasks: list[str]) -> FunctionBackend:
    def policy(request: ModelRequest) -> Completion:
        if tool_messages(request) or request.tool_choice == "none":
            return Completion(text="done")
        return Completion(tool_calls=tuple(_assign(t) for t in tasks))

    return FunctionBackend(policy)


async def test_a_held_call_the_agent_never_made_again_counts() -> None:
    # One sub-agent per gold call; the first also writes a wrong extra call in the same turn, which
    # one-call-per-turn holds back. It was attempted: the single agent's would have run and counted.
    def sub(request: ModelRequest) -> Completion:
        if tool_messages(request):
            return Completion(text="done")
        name, args = next((n, a) for n, a in GOLD if _ask(n, a) == user_text(request))
        extra = (call(name, **_bogus(name, args)),) if (name, args) == GOLD[0] else ()
        return Completion(tool_calls=(call(name, **args), *extra))

    rec, s = await _run(_assign_all_then_answer([_ask(n, a) for n, a in GOLD]), FunctionBackend(sub), profile="small")
    held = [
        r
        for sa in rec.subagent_results
        for st in sa.step_records
        for r in st.tool_results
        if r.error_type == ErrorType.ONE_CALL_PER_TURN
    ]
    assert len(held) == 1  # the runtime did hold it back
    n = len(GOLD)
    assert s.details["held_calls"] == 1 and s.details["emitted_calls"] == n + 1
    assert s.details["call_precision"] == n / (n + 1) and s.details["call_recall"] == 1.0 and not s.success
    ran = [(next(iter(g)), a) for g, (_, a) in zip(ITEM.gold, GOLD, strict=True)]
    assert call_f1(ran, ITEM)[0] == 1.0  # the calls that ran: all the old scorer saw


async def test_a_held_call_made_again_next_turn_is_one_call() -> None:
    # One sub-agent for everything: it writes all calls at once, is told to make one per turn, and
    # makes the held ones again one by one (as the notice asks): each gold call counts once.
    def sub(request: ModelRequest) -> Completion:
        seen = [m for m in tool_messages(request) if "not run" not in m.content]
        if not tool_messages(request):
            return Completion(tool_calls=tuple(call(n, **a) for n, a in GOLD))
        if len(seen) < len(GOLD):
            name, args = GOLD[len(seen)]
            return Completion(tool_calls=(call(name, **args),))
        return Completion(text="done")

    rec, s = await _run(
        _assign_all_then_answer(["make every call of the request"]), FunctionBackend(sub), profile="small"
    )
    assert any(
        r.error_type == ErrorType.ONE_CALL_PER_TURN
        for sa in rec.subagent_results
        for st in sa.step_records
        for r in st.tool_results
    )
    assert s.details["held_calls"] == 0 and s.metric == 1.0 and s.success, s.details
    assert s.items == {f"{j}:{next(iter(g))}": 1.0 for j, g in enumerate(ITEM.gold)}


async def test_a_duplicate_assignment_admission_dropped_counts_as_its_twin_again() -> None:
    tasks = [_ask(n, a) for n, a in GOLD]
    rec, s = await _run(_assign_all_then_answer([tasks[0], *tasks]), None, profile="small")  # distinct tasks on
    refused = [r for st in rec.stages for r in st.tool_results if r.error_type == ErrorType.DUPLICATE_TASK]
    assert len(refused) == 1 and len(rec.subagent_results) == len(GOLD)  # the copy was not run
    n = len(GOLD)
    assert s.details["dropped_duplicate_calls"] == 1 and s.details["emitted_calls"] == n + 1
    assert s.details["call_precision"] == n / (n + 1) and not s.success

    # The single agent making the same call twice scores the same.
    def single(request: ModelRequest) -> Completion:
        if tool_messages(request) or request.tool_choice == "none":
            return Completion(text="done")
        return Completion(tool_calls=tuple(call(nm, **a) for nm, a in [GOLD[0], *GOLD]))

    _rec, alone = await _run(FunctionBackend(single), None, mode="single")
    assert alone.metric == s.metric and alone.details["emitted_calls"] == n + 1


async def test_an_assignment_dropped_as_already_done_counts_again() -> None:
    tasks = [_ask(n, a) for n, a in GOLD]
    turns = iter([tasks, [tasks[0]]])

    def policy(request: ModelRequest) -> Completion:
        nxt = next(turns, None)
        if nxt is None or request.tool_choice == "none":
            return Completion(text="done")
        return Completion(tool_calls=tuple(_assign(t) for t in nxt))

    rec, s = await _run(FunctionBackend(policy), None)
    assert any(r.error_type == ErrorType.ALREADY_DONE for st in rec.stages for r in st.tool_results)
    assert s.details["dropped_duplicate_calls"] == 1 and s.details["call_precision"] < 1.0


async def test_an_unparsed_call_counts_and_matches_nothing() -> None:
    name, _args = GOLD[0]
    broken = ToolCall(id="broken", name=name, arguments={}, error="arguments are not a JSON object")

    def single(request: ModelRequest) -> Completion:
        if tool_messages(request) or request.tool_choice == "none":
            return Completion(text="done")
        return Completion(tool_calls=(*(call(n, **a) for n, a in GOLD), broken))

    _rec, s = await _run(FunctionBackend(single), None, mode="single")
    n = len(GOLD)
    assert s.details["emitted_calls"] == n + 1 and s.details["call_precision"] == n / (n + 1) and not s.success


@pytest.mark.parametrize("profile", ["default", "small"])
async def test_a_single_agent_sending_the_same_calls_again_is_stopped_before_its_budget(profile: str) -> None:
    # Every turn the same parallel calls (a 1.5B on a test task sent them 11 times, to its budget of 12):
    # a call made again returns what it did, so the repeat guard ends the episode after max_repeats
    # turns of repeats, with the answer turn; each call sent still counts.
    shown: list[str] = []

    def policy(request: ModelRequest) -> Completion:
        shown[:] = [m.content for m in tool_messages(request)]
        if request.tool_choice == "none":
            return Completion(text="I called " + ", ".join(n for n, _ in GOLD))
        return Completion(tool_calls=tuple(call(n, **a) for n, a in GOLD))

    ep = WL.episode(TASK, "single")
    cfg = arm_config(ep, "single-parallel", SwarmConfig(prompt_profile=profile))
    rec = await Orchestrator(FunctionBackend(policy), cfg, tools=ep.tools, reward_fn=ep.reward).run(TASK)
    s = ep.score(rec)
    calling = [t for t in rec.turns if t.tool_calls]
    assert rec.status == EpisodeStatus.COMPLETED and (rec.answer or "").startswith("I called"), (rec.status, rec.answer)
    assert len(calling) == 3 < cfg.max_critical_steps - 1  # the first turn, then two turns of repeats
    first, repeated = shown[: len(GOLD)], shown[len(GOLD) :]  # what the answer turn saw
    assert not any("already made" in c for c in first)
    assert len(repeated) == 2 * len(GOLD) and all(c.startswith("You already made exactly this call") for c in repeated)
    assert s.details["emitted_calls"] == 3 * len(GOLD) and s.details["call_precision"] == pytest.approx(1 / 3)


def test_the_task_has_several_gold_calls() -> None:
    assert isinstance(TASK, Task) and len(GOLD) >= 2
