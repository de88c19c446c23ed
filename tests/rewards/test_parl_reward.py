"""PARL reward: λ schedules, r_parallel / r_finish on real episodes, the reward hook, group advantages."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

import pytest

from agent_swarm.orchestrator import Orchestrator, PARLReward, RewardConfig, SwarmConfig
from agent_swarm.swarm.errors import UnknownNameError
from agent_swarm.swarm.messages import ToolCall
from agent_swarm.swarm.records import EpisodeRecord, EpisodeStatus, Task
from agent_swarm.swarm.rl.rewards import (
    ADVANTAGES,
    FinishReward,
    ParallelReward,
    Schedule,
    parl_total,
    r_finish,
    r_parallel,
)
from agent_swarm.swarm.testing import ScriptedBackend, call


def create(name: str = "w") -> ToolCall:
    return call("create_subagent", name=name, system_prompt=f"you are {name}")


def assign(task: str, agent: str = "w") -> ToolCall:
    return call("assign_task", agent=agent, task=task)


async def episode(
    policy_turns: list[Any],
    workers: dict[str, list[Any]] | None = None,
    *,
    task: Task | None = None,
    reward: PARLReward | None = None,
    config: SwarmConfig | None = None,
) -> EpisodeRecord:
    policy = ScriptedBackend(policy_turns)
    sub = ScriptedBackend(workers or {})
    orch = Orchestrator(policy, config, subagent_backend=sub, reward_fn=reward)
    return await orch.run(task or Task(id="t", prompt="go"))


# -- schedules --------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["linear", "cosine", "exponential"])
def test_annealing_schedules_start_at_start_decrease_and_reach_zero(kind: str) -> None:
    s = Schedule(kind=kind, start=0.3, steps=100)
    values = [s(i) for i in range(0, 130)]
    assert values[0] == pytest.approx(0.3)
    assert all(a >= b for a, b in itertools.pairwise(values))
    assert values[100] == 0.0 and values[129] == 0.0
    assert values[99] > 0.0


def test_schedule_values_follow_their_formulas() -> None:
    assert Schedule(kind="linear", start=0.2, steps=10).value(5) == pytest.approx(0.1)
    assert Schedule(kind="cosine", start=0.2, steps=10).value(5) == pytest.approx(0.1)
    assert Schedule(kind="cosine", start=0.2, steps=10).value(2) == pytest.approx(0.1 * (1 + math.cos(math.pi * 0.2)))
    # exponential: e^(−rate·p) rescaled to reach `end` exactly at p = 1 (continuous, no cut-off jump)
    e = math.exp
    assert Schedule(kind="exponential", start=1.0, steps=10, rate=2.0).value(5) == pytest.approx(
        (e(-1.0) - e(-2.0)) / (1 - e(-2.0))
    )
    assert Schedule(kind="constant", start=0.4, steps=1).value(10_000) == 0.4


def test_schedule_rejects_negative_steps_and_unknown_names() -> None:
    with pytest.raises(Exception, match="step must be >= 0"):
        Schedule().value(-1)
    with pytest.raises(UnknownNameError, match="known: constant, cosine, exponential, linear"):
        Schedule(kind="sqrt")
    with pytest.raises(ValueError, match="lambda1 must stay >= 0"):
        RewardConfig(lambda1=Schedule(start=-0.1))


def test_reward_config_round_trips_schedules_by_kind() -> None:
    cfg = RewardConfig(
        lambda1=Schedule(kind="cosine", start=0.5, steps=20), lambda2=Schedule(kind="constant", start=0.05)
    )
    back = RewardConfig.model_validate_json(cfg.model_dump_json())
    assert back == cfg
    assert back.lambda1.kind == "cosine" and back.lambda1.value(10) == pytest.approx(0.25)
    # a config written before the schedules were unified (no `end`) still reads, annealing to 0
    old = RewardConfig.model_validate({"lambda1": {"kind": "exponential", "start": 0.3, "steps": 10, "rate": 5.0}})
    assert old.lambda1.value(0) == pytest.approx(0.3) and old.lambda1.value(10) == 0.0


# -- auxiliary terms on real episodes ---------------------------------------------------------------


async def test_serial_episode_earns_no_parallel_reward_and_empty_finish_rate() -> None:
    rec = await episode(["I did it myself"])
    for form in ("any", "count", "width"):
        assert r_parallel(rec, ParallelReward(form=form)) == 0.0
    assert r_finish(rec) == 0.0
    assert r_finish(rec, FinishReward(empty_value=1.0)) == 1.0


async def test_parallel_forms_count_instantiated_subagents() -> None:
    rec = await episode(
        [[create(), assign("a"), assign("b"), assign("c")], [assign("d")], "done"],
        {"w-0-0": ["ra"], "w-0-1": ["rb"], "w-0-2": ["rc"], "w-1-0": ["rd"]},
    )
    assert r_parallel(rec, ParallelReward(form="any")) == 1.0
    assert r_parallel(rec, ParallelReward(form="count", target=8)) == pytest.approx(4 / 8)
    assert r_parallel(rec, ParallelReward(form="width", target=6)) == pytest.approx(3 / 6)
    assert r_parallel(rec, ParallelReward(form="count", target=2)) == 1.0  # bounded


async def test_parts_form_pays_one_subagent_per_part_and_takes_back_extras() -> None:
    two_parts = Task(id="t", prompt="capitals of France and Japan", metadata={"parts": 2})
    form = ParallelReward(form="parts")

    async def run(names: list[str]) -> EpisodeRecord:
        turns: list[Any] = [[create(), *(assign(n) for n in names)], "done"]
        return await episode(turns, {f"w-0-{i}": ["ok"] for i in range(len(names))}, task=two_parts)

    assert r_parallel(await run(["France", "Japan"]), form) == 1.0
    assert r_parallel(await run(["France"]), form) == pytest.approx(1 / 2)
    assert r_parallel(await run(["France", "Japan", "Italy"]), form) == pytest.approx(1 / 2)
    assert r_parallel(await run(["France", "Japan", "Italy", "Spain", "Peru"]), form) == 0.0
    # the count form pays the five-country episode in full: what taught the 0.5B to invent items
    five = await run(["France", "Japan", "Italy", "Spain", "Peru"])
    assert r_parallel(five, ParallelReward(form="count", target=4)) == 1.0
    # a task that declares no parts is scored against the form's target
    untagged = await episode([[create(), assign("a"), assign("b")], "done"], {"w-0-0": ["ok"], "w-0-1": ["ok"]})
    assert r_parallel(untagged, ParallelReward(form="parts", target=4)) == pytest.approx(2 / 4)


async def test_bad_parts_metadata_is_a_recorded_error_not_a_crash() -> None:
    cfg = RewardConfig(parallel=ParallelReward(form="parts"), default_verifier="exact")
    task = Task(id="t", prompt="go", metadata={"parts": "two"})
    rec = await episode([[create(), assign("a")], "done"], {"w-0-0": ["ok"]}, task=task, reward=PARLReward(cfg))
    assert rec.reward is not None and rec.reward.r_parallel == 0.0
    assert rec.reward.error is not None and "parts='two'" in rec.reward.error
    assert rec.reward.r_finish == 1.0  # the other terms are still computed


async def test_finish_rate_counts_failed_and_refused_assignments() -> None:
    rec = await episode(
        [[create(), assign("a"), assign("b"), assign("c", agent="ghost")], "done"],
        {"w-0-0": ["ok"], "w-0-1": [RuntimeError("model crashed")]},
    )
    # 1 completed of 2 run + 1 refused (unknown agent) = 1/3; without refused ones 1/2.
    assert r_finish(rec) == pytest.approx(1 / 3)
    assert r_finish(rec, FinishReward(count_rejected=False)) == pytest.approx(1 / 2)


async def test_subagents_refused_for_lack_of_budget_are_not_instantiation() -> None:
    cfg = SwarmConfig(max_critical_steps=2)
    rec = await episode([[create(), assign("a")], "forced answer"], {}, config=cfg)
    # Refused before it started (no 0-step sub-agent): a failed assign_task call, not a sub-agent.
    assert not rec.subagent_results
    (refused,) = [t for s in rec.stages for t in s.tool_results if t.call.name == "assign_task"]
    assert refused.is_error and refused.error_type == "BudgetExhausted"
    assert r_parallel(rec, ParallelReward(form="any")) == 0.0
    assert r_finish(rec) == 0.0  # assigned but never completed


# -- the hook ---------------------------------------------------------------------------------------


async def test_parl_reward_on_the_episode_keeps_components_lambdas_and_step() -> None:
    cfg = RewardConfig(
        lambda1=Schedule(kind="linear", start=0.2, steps=10),
        lambda2=Schedule(kind="cosine", start=0.4, steps=10),
        parallel=ParallelReward(form="count", target=2),
    )
    reward = PARLReward(cfg, step=5)
    task = Task(id="n", prompt="sum", verifier="numeric", verifier_args={"expected": 12})
    rec = await episode(
        [[create(), assign("a"), assign("b")], "Answer: 12"],
        {"w-0-0": ["5"], "w-0-1": [RuntimeError("x")]},
        task=task,
        reward=reward,
    )
    r = rec.reward
    assert r is not None and r.error is None
    assert (r.r_perf, r.r_parallel, r.r_finish) == (1.0, 1.0, 0.5)
    assert (r.lambda1, r.lambda2, r.step) == (pytest.approx(0.1), pytest.approx(0.2), 5)
    assert r.total == pytest.approx(parl_total(1.0, 1.0, 0.5, 0.1, 0.2)) == pytest.approx(1.2)
    assert r.verifier == "numeric" and r.details["subagents_assigned"] == 2
    # Past the annealing horizon only r_perf is left.
    reward.step = 10
    rec2 = await episode(["Answer: 12"], task=task, reward=reward)
    assert rec2.reward is not None and rec2.reward.total == 1.0 and rec2.reward.lambda1 == 0.0


async def test_verification_problems_are_recorded_not_raised() -> None:
    reward = PARLReward()
    bad_args = Task(id="b", prompt="q", verifier="numeric", verifier_args={"expectd": 1})
    rec = await episode(["Answer: 1"], task=bad_args, reward=reward)
    assert rec.reward is not None and rec.reward.r_perf == 0.0
    assert "invalid arguments for verifier 'numeric'" in (rec.reward.error or "")
    no_verifier = await episode(["hi"], task=Task(id="n", prompt="q"), reward=reward)
    assert no_verifier.reward is not None and "no verifier" in (no_verifier.reward.error or "")


async def test_episode_without_answer_scores_zero_with_reason() -> None:
    task = Task(id="f", prompt="q", verifier="exact", verifier_args={"expected": "x"})
    rec = await episode([RuntimeError("server down")], task=task, reward=PARLReward())
    assert rec.status is EpisodeStatus.FAILED
    assert rec.reward is not None and rec.reward.r_perf == 0.0 and "without an answer" in (rec.reward.error or "")


def test_unknown_default_verifier_fails_at_construction() -> None:
    with pytest.raises(UnknownNameError, match="known: code, exact"):
        PARLReward(RewardConfig(default_verifier="exactt"))


# -- advantages -------------------------------------------------------------------------------------


def _slow_advantages(rewards: list[float], normalize: bool) -> list[float]:
    n = len(rewards)
    mean = 0.0
    for r in rewards:
        mean += r / n
    out = []
    for r in rewards:
        a = r - mean
        if normalize:
            var = 0.0
            for x in rewards:
                var += (x - mean) ** 2 / n
            a = a / (var**0.5 + 1e-6)
        out.append(a)
    return out


@pytest.mark.parametrize("normalize", [False, True])
def test_group_advantages_match_reference(normalize: bool) -> None:
    rng = random.Random(7)
    fn = ADVANTAGES.get("group_normalized" if normalize else "group_mean")
    for _ in range(50):
        rewards = [rng.uniform(-1, 2) for _ in range(rng.randint(1, 9))]
        got = fn(rewards, ["x"] * len(rewards))
        assert got == pytest.approx(_slow_advantages(rewards, normalize), abs=1e-9)
        assert sum(got) == pytest.approx(0.0, abs=1e-9)


def test_group_advantages_edge_cases() -> None:
    assert ADVANTAGES.get("group_mean")([], []) == []
    assert ADVANTAGES.get("group_mean")([0.7], ["x"]) == [0.0]
    assert ADVANTAGES.get("group_normalized")([1.0, 1.0, 1.0], ["x"] * 3) == [0.0, 0.0, 0.0]  # no blow-up


async def test_a_verifier_that_raises_keeps_the_auxiliary_terms() -> None:
    from agent_swarm.swarm.verifiers import Verdict, VerifierArgs, VerifierContext, register_verifier

    class NoArgs(VerifierArgs):
        pass

    @register_verifier("test_buggy_verifier", NoArgs, replace=True)
    def buggy(answer: str, args: NoArgs, ctx: VerifierContext) -> Verdict:
        raise ZeroDivisionError("oops")

    task = Task(id="b", prompt="q", verifier="test_buggy_verifier")
    rec = await episode([[create(), assign("a")], "done"], {"w-0-0": ["ok"]}, task=task, reward=PARLReward())
    r = rec.reward
    assert r is not None and r.r_perf == 0.0 and r.r_parallel == 0.25 and r.r_finish == 1.0
    assert "raised ZeroDivisionError: oops" in (r.error or "")
