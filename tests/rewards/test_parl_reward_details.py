"""The PARL reward's edges: which sub-agents count as instantiated, the parts rule's bounds, what the
hook hands its verifier, how errors combine, and the exact messages. Written against the surviving
mutants of ``bench/mutation.py rewards``."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from agent_swarm.orchestrator import Orchestrator, PARLReward, RewardConfig
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.records import AgentStatus, EpisodeRecord, Task
from agent_swarm.swarm.rl.rewards import (
    FinishReward,
    ParallelReward,
    Schedule,
    group_mean,
    group_mean_baseline,
    parl_total,
    r_finish,
    r_parallel,
    task_parts,
)
from agent_swarm.swarm.testing import ScriptedBackend, call
from agent_swarm.swarm.verifiers import Verdict, VerifierArgs, VerifierContext, register_verifier


async def episode(
    turns: list[Any], workers: dict[str, list[Any]], task: Task, reward: PARLReward | None = None
) -> EpisodeRecord:
    orch = Orchestrator(ScriptedBackend(turns), subagent_backend=ScriptedBackend(workers), reward_fn=reward)
    return await orch.run(task, episode_id="e")


def fan_out(n: int) -> list[Any]:
    return [
        [
            call("create_subagent", name="w", system_prompt="s"),
            *(call("assign_task", agent="w", task=f"t{i}") for i in range(n)),
        ],
        "done",
    ]


def with_results(rec: EpisodeRecord, **changes: Any) -> EpisodeRecord:
    """``rec`` with every sub-agent result changed as given (records read back may hold any of these)."""
    stages = tuple(
        s.model_copy(update={"subagents": tuple(dataclasses.replace(r, **changes) for r in s.subagents)})
        for s in rec.stages
    )
    return rec.model_copy(update={"stages": stages})


async def test_one_subagent_is_enough_for_the_any_form_and_the_coverage_form_is_the_default() -> None:
    one = await episode(fan_out(1), {"w-0-0": ["ok"]}, Task(id="t", prompt="q"))
    assert ParallelReward().form == "coverage"
    assert r_parallel(one, ParallelReward(form="any")) == 1.0
    assert r_parallel(one, ParallelReward(form="count")) == 0.25  # target 4
    assert r_parallel(one) == 0.25  # coverage: one part of the target's 4
    for form in ("width", "coverage", "count", "any", "parts"):  # a record with no stages at all
        assert r_parallel(one.model_copy(update={"stages": ()}), ParallelReward(form=form)) == 0.0


async def test_a_subagent_counts_as_run_when_admitted_or_when_it_took_a_step() -> None:
    rec = await episode(fan_out(2), {"w-0-0": ["ok"], "w-0-1": ["ok"]}, Task(id="t", prompt="q"))
    count = ParallelReward(form="count", target=2)
    assert r_parallel(rec, count) == 1.0
    assert r_parallel(rec, ParallelReward(form="width", target=1)) == 1.0  # bounded: 2 wide, target 1
    assert r_parallel(with_results(rec, step_cap=0, steps=0), count) == 0.0  # never admitted
    assert r_parallel(with_results(rec, step_cap=0), count) == 1.0  # an older record: steps but no cap
    assert r_parallel(with_results(rec, steps=0), count) == 1.0  # admitted, failed before its first step
    assert r_parallel(with_results(rec, step_cap=1, steps=0), count) == 1.0  # however small its cap


def test_task_parts_accepts_positive_integers_only() -> None:
    assert task_parts(Task(id="t", prompt="q")) is None
    assert task_parts(Task(id="t", prompt="q", metadata={"parts": 1})) == 1
    assert task_parts(Task(id="t", prompt="q", metadata={"parts": 3})) == 3
    for bad in (0, -2, True, 2.0, "2"):
        with pytest.raises(ConfigError) as info:
            task_parts(Task(id="t", prompt="q", metadata={"parts": bad}))
        assert str(info.value) == (
            f"task 't' has metadata parts={bad!r}; it must be a positive integer "
            "(the number of independent sub-tasks) or be left out"
        )


async def test_only_refused_assign_task_calls_count_against_the_finish_rate() -> None:
    turns = [[call("nosuchtool", x=1), *fan_out(1)[0]], "done"]
    rec = await episode(turns, {"w-0-0": ["ok"]}, Task(id="t", prompt="q"))
    assert [t.is_error for s in rec.stages for t in s.tool_results if t.call.name == "nosuchtool"] == [True]
    assert r_finish(rec) == 1.0
    assert r_finish(with_results(rec, status=AgentStatus.FAILED)) == 0.0


async def test_the_hook_counts_refused_assignments_as_its_config_says() -> None:
    turns = [[*fan_out(1)[0], call("assign_task", agent="ghost", task="x")], "done"]
    task = Task(id="t", prompt="q")
    counted = await episode(turns, {"w-0-0": ["ok"]}, task, PARLReward())
    assert counted.reward is not None and counted.reward.r_finish == 0.5
    assert counted.reward.details["subagents_assigned"] == 2
    cfg = RewardConfig(finish=FinishReward(count_rejected=False))
    ignored = await episode(turns, {"w-0-0": ["ok"]}, task, PARLReward(cfg))
    assert ignored.reward is not None and ignored.reward.r_finish == 1.0
    assert ignored.reward.details["subagents_assigned"] == 1


def test_parl_total_weighs_each_term() -> None:
    assert parl_total(0.5, 0.5, 0.25, 0.2, 0.4) == pytest.approx(0.5 + 0.1 + 0.1)


def test_schedules_anneal_to_a_nonzero_end_and_the_hook_reads_them_at_its_step() -> None:
    s = Schedule(kind="linear", start=1.0, end=0.6, steps=4)
    assert [s(k) for k in (0, 1, 4, 9)] == pytest.approx([1.0, 0.9, 0.6, 0.6])
    assert Schedule(kind="constant", start=0.3, end=0.0, steps=2)(5) == 0.3
    cfg = RewardConfig(lambda1=Schedule(start=0.4, steps=4), lambda2=Schedule(start=0.8, steps=4))
    assert PARLReward(cfg).lambdas() == pytest.approx((0.4, 0.8))  # step 0 unless told
    assert PARLReward(cfg, step=2).lambdas() == pytest.approx((0.2, 0.4))
    assert PARLReward(cfg, step=2).lambdas(3) == pytest.approx((0.1, 0.2))


def test_reward_inputs_are_checked_with_exact_messages() -> None:
    with pytest.raises(ConfigError) as info:
        group_mean([1.0, 2.0], ["a"])
    assert str(info.value) == "2 rewards but 1 group ids; pass one group id per reward"
    nan, inf = float("nan"), float("inf")
    with pytest.raises(ConfigError) as info:
        group_mean_baseline([1.0, nan, inf, -inf, nan], ["a"] * 5)
    assert str(info.value) == "rewards must be finite numbers, got [nan, inf, -inf]"
    assert group_mean([1.0, 3.0, 5.0], ["a", "b", "a"]) == {"a": 3.0, "b": 3.0}


class _Seen(VerifierArgs):
    expected: str = ""


@register_verifier("test_context_probe", _Seen, replace=True)
def _probe(answer: str, args: _Seen, ctx: VerifierContext) -> Verdict:
    """Passes what the hook handed it back in its details."""
    seen: dict[str, object] = {
        "answer": answer,
        "expected": args.expected,
        "prompt": ctx.prompt,
        "extra": dict(ctx.extra),
    }
    seen |= {"judge": ctx.judge is not None, "workspace": str(ctx.workspace)}
    return Verdict(score=0.5, passed=True, details=seen)


async def test_the_verifier_gets_the_answer_its_arguments_and_the_hooks_context(tmp_path: Any) -> None:
    judge = ScriptedBackend([])
    cfg = RewardConfig(default_verifier="test_context_probe", default_verifier_args={"expected": "dflt"})
    reward = PARLReward(cfg, judge=judge, workspace=tmp_path, context={"k": 1})
    own = Task(id="t", prompt="capital?", verifier="test_context_probe", verifier_args={"expected": "own"})
    rec = await episode(fan_out(1), {"w-0-0": ["ok"]}, own, reward)
    r = rec.reward
    assert r is not None and r.error is None and r.verifier == "test_context_probe" and r.r_perf == 0.5
    assert r.details == {
        "passed": True,
        "answer": "done",
        "expected": "own",
        "prompt": "capital?",
        "extra": {"k": 1},
        "judge": True,
        "workspace": str(tmp_path),
        "subagents_completed": 1,
        "subagents_assigned": 1,
    }
    plain = await episode(["Paris"], {}, Task(id="u", prompt="q"), reward)
    assert plain.reward is not None and plain.reward.details["expected"] == "dflt"
    exact = PARLReward(RewardConfig(default_verifier="exact", default_verifier_args={"expected": "Paris"}))
    task = Task(id="v", prompt="q", verifier="numeric", verifier_args={"expected": 3})
    scored = await episode(["3"], {}, task, exact)
    assert scored.reward is not None and (scored.reward.verifier, scored.reward.r_perf) == ("numeric", 1.0)


async def test_errors_score_zero_and_combine_with_a_bad_parts_error() -> None:
    parts = RewardConfig(parallel=ParallelReward(form="parts"), finish=FinishReward(empty_value=1.0))
    bad = Task(id="t", prompt="q", metadata={"parts": 0})
    rec = await episode(["x"], {}, bad, PARLReward(parts))
    r = rec.reward
    assert r is not None and (r.r_perf, r.r_parallel, r.r_finish) == (0.0, 0.0, 1.0)
    assert r.error == (
        "task has no verifier and the reward config sets no default_verifier; r_parallel: task 't' has metadata "
        "parts=0; it must be a positive integer (the number of independent sub-tasks) or be left out"
    )
    assert r.total == pytest.approx(0.1)  # λ2 · the empty finish rate, nothing else
    verified = Task(id="t", prompt="q", verifier="exact", verifier_args={"expected": "x"}, metadata={"parts": 0})
    rec = await episode(["x"], {}, verified, PARLReward(parts))
    assert rec.reward is not None and rec.reward.r_perf == 1.0
    assert rec.reward.error is not None and rec.reward.error.startswith("r_parallel: task 't'")
