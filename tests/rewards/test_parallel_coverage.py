"""r_parallel's ``coverage`` form (the default, issue 28): neither serial collapse nor spurious
parallelism pays. Records come from real scripted episodes (scripted orchestrator, scripted workers)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from agent_swarm.orchestrator import Orchestrator
from agent_swarm.swarm.errors import UnknownNameError
from agent_swarm.swarm.messages import ToolCall
from agent_swarm.swarm.records import EpisodeRecord, Task
from agent_swarm.swarm.rl.rewards import (
    PARALLEL_FORMS,
    FinishReward,
    ParallelReward,
    PARLReward,
    RewardConfig,
    Schedule,
    parallel_counts,
    r_finish,
    r_parallel,
)
from agent_swarm.swarm.testing import ScriptedBackend, call

COVERAGE = ParallelReward()
FOUR = ["France", "Japan", "Kenya", "Peru"]


def create() -> ToolCall:
    return call("create_subagent", name="w", system_prompt="you look up one capital")


def assign(item: str) -> ToolCall:
    return call("assign_task", agent="w", task=f"Find the capital of {item}.")


def contains(phrase: str) -> dict[str, Any]:
    return {"constraints": [{"type": "contains", "phrases": [phrase]}]}


def wide(parts: int = 4) -> Task:
    return Task(
        id="wide",
        prompt="capitals of " + ", ".join(FOUR[:parts]),
        verifier="instructions",
        verifier_args=contains("capitals"),
        metadata={"parts": parts},
    )


CONTROL = Task(
    id="control",
    prompt="What is the capital of France?",
    verifier="instructions",
    verifier_args=contains("Paris"),
    metadata={"parts": 1},
)


async def run(stages: list[list[str]], task: Task, *, fail: tuple[str, ...] = (), answer: str = "") -> EpisodeRecord:
    """An episode assigning ``stages[i]`` in stage i (one worker per item; items in ``fail`` fail),
    then answering ``answer`` (default: the capitals listed)."""
    turns: list[Any] = []
    workers: dict[str, list[Any]] = {}
    for s, items in enumerate(stages):
        turns.append([*([create()] if s == 0 else []), *(assign(i) for i in items)])
        for j, item in enumerate(items):
            workers[f"w-{s}-{j}"] = [RuntimeError("model crashed")] if item in fail else [f"capital of {item}"]
    turns.append(answer or "capitals: " + ", ".join(i for st in stages for i in st))
    reward = PARLReward(RewardConfig(lambda1=Schedule(start=0.3), lambda2=Schedule(start=0.3)))
    orch = Orchestrator(ScriptedBackend(turns), subagent_backend=ScriptedBackend(workers), reward_fn=reward)
    return await orch.run(task, episode_id="e")


def total(rec: EpisodeRecord) -> float:
    assert rec.reward is not None and rec.reward.error is None, rec.reward
    return rec.reward.total


async def test_a_wide_task_pays_width_up_to_its_parts_and_not_serial_collapse() -> None:
    exact = await run([FOUR], wide())
    serial = await run([[i] for i in FOUR], wide())  # one sub-agent per stage: serial collapse
    one = await run([["France"]], wide())
    half = await run([FOUR[:2]], wide())
    assert r_parallel(exact) == 1.0
    assert r_parallel(serial) == r_parallel(one) == 0.25  # width 1 over four stages is still width 1
    assert r_parallel(half) == 0.5
    assert total(exact) > total(half) > total(serial) > total(await run([], wide()))
    # the parts and count forms pay the serial episode as much as the exact fan-out
    for form in ("parts", "count"):
        assert r_parallel(serial, ParallelReward(form=form)) == r_parallel(exact, ParallelReward(form=form)) == 1.0


async def test_a_control_earns_nothing_for_delegating_over_answering_directly() -> None:
    direct = await run([], CONTROL, answer="Paris")
    one = await run([["France"]], CONTROL, answer="Paris")
    three = await run([["France", "France's capital", "Paris"]], CONTROL, answer="Paris")
    for rec in (direct, one, three):
        assert r_parallel(rec) == 0.0
    assert direct.reward is not None and direct.reward.r_perf == 1.0 and direct.reward.r_finish == 1.0
    assert total(one) == total(three) == total(direct)
    failed = await run([["France"]], CONTROL, fail=("France",), answer="Paris")
    assert total(failed) < total(direct)
    # the defect this form fixes: the parts form pays a control's one delegation in full
    assert r_parallel(one, ParallelReward(form="parts")) == 1.0


async def test_duplicate_sub_tasks_earn_nothing() -> None:
    once = await run([["France", "Japan"]], wide(2))
    twice = await run([["France", "Japan", "France"]], wide(2))
    # case, punctuation, word order and filler words do not make it new work
    respelled = await run([["France", "Japan"], ["france, please"]], wide(2))
    assert parallel_counts(twice).duplicates == parallel_counts(respelled).duplicates == 1
    assert r_parallel(once) == 1.0
    assert r_parallel(twice) == r_parallel(respelled) == pytest.approx(0.75)
    four_copies = await run([["France"] * 4], wide())
    assert r_parallel(four_copies) < r_parallel(await run([["France"]], wide())) == 0.25
    assert r_parallel(four_copies) == 0.0  # (1 − 0.5 · 3) / 4 clipped at 0


async def test_invented_sub_tasks_earn_nothing_and_cost_half_a_part_each() -> None:
    asked = ["France", "Japan"]
    invented = ["Italy", "Spain", "Chile", "Peru", "Ghana"]
    values = [r_parallel(await run([asked + invented[:k]], wide(2))) for k in range(len(invented) + 1)]
    assert values[0] == 1.0
    assert values == [pytest.approx(max(0.0, (2 - 0.5 * k) / 2)) for k in range(len(invented) + 1)]
    assert all(a > b for a, b in itertools.pairwise(values[:5]))
    # invented items in a later stage cost the same
    later = await run([asked, invented[:2]], wide(2))
    assert r_parallel(later) == pytest.approx(0.5)
    # a smaller take-back is a parameter
    assert r_parallel(later, ParallelReward(overassign=0.25)) == pytest.approx(0.75)
    assert r_parallel(later, ParallelReward(overassign=0.0)) == 1.0


async def test_only_finished_sub_agents_cover_a_part() -> None:
    rec = await run([FOUR], wide(), fail=("Japan", "Kenya"))
    assert parallel_counts(rec).finished_width == 2
    assert r_parallel(rec) == 0.5
    assert r_finish(rec) == 0.5


async def test_a_task_without_parts_is_scored_against_the_target() -> None:
    untagged = Task(id="u", prompt="capitals", verifier="instructions", verifier_args=contains("capitals"))
    rec = await run([FOUR[:3]], untagged)
    assert r_parallel(rec) == pytest.approx(3 / 4)
    assert r_parallel(rec, ParallelReward(target=3)) == 1.0
    assert r_parallel(rec, ParallelReward(target=1)) == 0.0  # a target of one part is a control
    assert r_finish(await run([], untagged)) == 0.0  # not a declared control: no finish reward for silence


def test_forms_are_chosen_by_name_from_the_registry() -> None:
    assert PARALLEL_FORMS.names == ("any", "count", "coverage", "parts", "width")
    assert ParallelReward().form == "coverage" and RewardConfig().parallel.form == "coverage"
    with pytest.raises(UnknownNameError, match="known: any, count, coverage, parts, width"):
        ParallelReward(form="breadth")
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        ParallelReward(overassign=-1.0)


async def test_finish_reward_of_a_direct_answer_depends_on_the_task_being_a_control() -> None:
    direct = await run([], CONTROL, answer="Paris")
    assert r_finish(direct) == 1.0
    assert r_finish(direct, FinishReward(control_value=0.0)) == 0.0
    assert r_finish(await run([], wide())) == 0.0
