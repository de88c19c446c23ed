"""Trajectory building field by field, every refusal's exact message, and every problem the validator
names (with the exact text and count). Written against the surviving mutants of ``bench/mutation.py
trajectory``."""

from __future__ import annotations

from typing import Any

import pytest

from agent_swarm.orchestrator import Orchestrator, PARLReward, SwarmConfig
from agent_swarm.swarm.backend import Completion, SamplingParams
from agent_swarm.swarm.records import EpisodeRecord, EpisodeStatus, Task
from agent_swarm.swarm.rl.trajectory import (
    Trajectory,
    TrajectoryError,
    TrajectoryTurn,
    build_trajectory,
    flatten_turns,
    validate_trajectory,
)
from agent_swarm.swarm.testing import ScriptedBackend, call

TASK = Task(id="cap", prompt="capital of France?", verifier="exact", verifier_args={"expected": "Paris"})


async def four_turns(last: Completion | None = None) -> EpisodeRecord:
    """Three stages of one sub-agent each (the third fails), then the answer; weight versions v1, -, v2, v3."""
    create = call("create_subagent", name="w", system_prompt="look it up")
    policy = ScriptedBackend(
        [
            Completion(tool_calls=(create, call("assign_task", agent="w", task="a")), weight_version="v1"),
            Completion(tool_calls=(call("assign_task", agent="w", task="b"),)),
            Completion(tool_calls=(call("assign_task", agent="w", task="c"),), weight_version="v2"),
            last or Completion(text="Paris", weight_version="v3"),
        ]
    )
    workers = ScriptedBackend({"w-0-0": ["ra"], "w-1-0": ["rb"], "w-2-0": [RuntimeError("x")]})
    orch = Orchestrator(policy, subagent_backend=workers, reward_fn=PARLReward())
    return await orch.run(TASK, episode_id="e1")


async def test_every_field_comes_from_the_record() -> None:
    rec = (await four_turns()).model_copy(update={"trace_id": "trace-1"})
    t = build_trajectory(rec, metadata={"arm": "b"})
    assert (t.episode_id, t.group_id, t.task_id, t.prompt, t.sample_index) == ("e1", "cap", "cap", TASK.prompt, 0)
    assert (t.model, t.status, t.answer, t.truncated, t.advantage) == ("scripted", "completed", "Paris", False, None)
    assert t.policy_version == "v3"  # the last turn's weights
    assert t.sampling == SamplingParams.model_validate(rec.config["orchestrator_sampling"])
    assert [(u.index, u.stage, u.tool_calls, u.weight_version, u.finish_reason) for u in t.turns] == [
        (0, 0, ("create_subagent", "assign_task"), "v1", "tool_calls"),
        (1, 1, ("assign_task",), None, "tool_calls"),
        (2, 2, ("assign_task",), "v2", "tool_calls"),
        (3, 3, (), "v3", "stop"),
    ]
    assert all(u.tools_enabled for u in t.turns)
    for u, r in zip(t.turns, rec.turns, strict=True):
        assert (u.prompt_ids, u.response_ids, u.response_logprobs) == (
            r.prompt_token_ids,
            r.response_token_ids,
            r.response_logprobs,
        )
    assert t.reward == rec.reward and t.metadata == {"arm": "b"}
    assert (t.critical_steps, t.total_steps, t.stage_widths) == (7, 7, (1, 1, 1, 0))
    assert t.subagent_statuses == ("completed", "completed", "failed")
    assert t.wall_time_s == rec.wall_time_s > 0 and t.trace_id == "trace-1"
    assert [(s.stage, s.result.agent_id) for s in t.side] == [(0, "w-0-0"), (1, "w-1-0"), (2, "w-2-0")]
    assert t.side[0].result == rec.stages[0].subagents[0]
    bare = build_trajectory(rec, include_transcripts=False)
    assert all(s.result.transcript == () for s in bare.side) and bare.side[0].result.report == "ra"
    assert bare.metadata == {}


async def test_the_group_the_sampling_and_the_policy_version_fall_back_in_order() -> None:
    rec = await four_turns(Completion(text="Paris"))
    assert build_trajectory(rec).policy_version == "v2"  # the last turn that names its weights
    assert build_trajectory(rec, group_id="g").group_id == "g"
    untagged = rec.model_copy(update={"task": Task(id="", prompt="q"), "config": {}})
    t = build_trajectory(untagged)
    assert t.group_id == "e1" and t.sampling == SamplingParams()
    given = SamplingParams(temperature=0.3)
    assert build_trajectory(untagged, sampling=given).sampling == given
    no_versions = rec.model_copy(
        update={"turns": tuple(u.model_copy(update={"weight_version": None}) for u in rec.turns)}
    )
    assert build_trajectory(no_versions).policy_version is None


async def test_truncated_means_out_of_budget_or_a_last_turn_cut_at_the_token_cap() -> None:
    assert build_trajectory(await four_turns(Completion(text="Par", finish_reason="length"))).truncated
    policy = ScriptedBackend(
        [[call("create_subagent", name="w", system_prompt="s"), call("assign_task", agent="w", task="a")], "x"]
    )
    cfg = SwarmConfig(max_critical_steps=2)
    rec = await Orchestrator(policy, cfg, subagent_backend=ScriptedBackend(["r"]), reward_fn=PARLReward()).run(TASK)
    assert rec.status.value == "budget_exhausted" and rec.turns[-1].finish_reason == "stop"
    t = build_trajectory(rec)
    assert t.truncated
    assert [u.tools_enabled for u in t.turns] == [True, False]  # the forced last turn had no tools


async def test_each_refusal_names_the_episode_the_turn_and_the_fix() -> None:
    rec = await four_turns()

    def refusal(record: EpisodeRecord) -> str:
        with pytest.raises(TrajectoryError) as info:
            build_trajectory(record)
        return str(info.value)

    def with_turn(**update: Any) -> EpisodeRecord:
        return rec.model_copy(update={"turns": (rec.turns[0].model_copy(update=update), *rec.turns[1:])})

    assert refusal(rec.model_copy(update={"reward": None})) == (
        "episode e1 has no reward; run it with a reward_fn (e.g. PARLReward)"
    )
    no_turns = rec.model_copy(update={"turns": (), "status": EpisodeStatus.FAILED, "error": "RuntimeError: down"})
    assert refusal(no_turns) == (
        "episode e1 has no orchestrator turns (status failed): nothing to train on; RuntimeError: down"
    )
    assert refusal(no_turns.model_copy(update={"error": None})) == (
        "episode e1 has no orchestrator turns (status failed): nothing to train on"
    )
    assert refusal(no_turns.model_copy(update={"error": "no route to host X"})).endswith(
        "nothing to train on; no route to host X"
    )
    no_ids = (
        "episode e1 turn 0 has no token ids: the orchestrator backend did not return prompt/response token ids; "
        "use a backend that does (vLLM, llama.cpp with return_tokens) rather than re-tokenizing text"
    )
    assert refusal(with_turn(response_token_ids=None)) == no_ids
    assert refusal(with_turn(prompt_token_ids=None)) == no_ids
    assert refusal(with_turn(response_logprobs=None)) == (
        "episode e1 turn 0 has no logprobs: request them (SamplingParams(logprobs=True)) "
        "from a backend that returns them"
    )
    n = len(rec.turns[0].response_token_ids or ())
    assert refusal(with_turn(response_logprobs=(-0.5,))) == f"episode e1 turn 0: {n} response ids but 1 logprobs"
    assert refusal(with_turn(context_cut=True)) == (
        "episode e1 turn 0: earlier tool results were shortened to fit the context before it (record.context_cuts), "
        "so its prompt is not the previous turn's tokens plus new ones; refusing to train across it "
        "(raise [swarm] context_tokens or the engine's context)"
    )
    assert refusal(with_turn(drift=True)) == (
        "episode e1 turn 0 drifted (the engine flagged its prompt as not extending the previous turn's tokens); "
        "refusing to re-tokenize"
    )


# -- flattening and validation on hand-made turns --------------------------------------------------------

A = TrajectoryTurn(index=0, stage=0, prompt_ids=(1, 2), response_ids=(3, 4), response_logprobs=(-0.5, -0.25))
B = TrajectoryTurn(index=1, stage=1, prompt_ids=(1, 2, 3, 4, 8, 9), response_ids=(5,), response_logprobs=(-0.1,))
C = TrajectoryTurn(index=2, stage=2, prompt_ids=(1, 2, 3, 4, 8, 9, 5), response_ids=(6,), response_logprobs=(-0.2,))


def fields(*turns: TrajectoryTurn, **patch: Any) -> dict[str, Any]:
    prompt, ids, mask, lps = flatten_turns(turns)
    data = {
        "episode_id": "e",
        "group_id": "g",
        "task_id": "t",
        "prompt": "p",
        "status": "completed",
        "reward": {"total": 0.0, "r_perf": 0.0, "r_parallel": 0.0, "r_finish": 0.0},
        "turns": turns,
        "prompt_ids": prompt,
        "response_ids": ids,
        "response_mask": mask,
        "response_logprobs": lps,
    }
    return {**data, **patch}


def problems(*turns: TrajectoryTurn, **patch: Any) -> list[str]:
    return validate_trajectory(Trajectory.model_construct(**fields(*turns, **patch)))


def test_flattening_interleaves_observations_masked_out() -> None:
    assert flatten_turns((A, B, C)) == (
        (1, 2),
        (3, 4, 8, 9, 5, 6),
        (1, 1, 0, 0, 1, 1),
        (-0.5, -0.25, 0.0, 0.0, -0.1, -0.2),
    )
    assert Trajectory.model_validate(fields(A, B, C)).num_turns == 3
    with pytest.raises(TrajectoryError) as info:
        flatten_turns(())
    assert str(info.value) == "no orchestrator turns to flatten"
    with pytest.raises(TrajectoryError) as info:
        flatten_turns((A, B.model_copy(update={"prompt_ids": (1, 2, 3, 7, 8)})))
    assert str(info.value) == (
        "turn 1 drifted: its prompt token ids do not extend turn 0's prompt + response (the chat template "
        "re-rendered earlier text); refusing to re-tokenize. Use a backend/template that keeps prior tokens stable."
    )


def test_a_turn_with_no_observation_before_it_is_valid() -> None:
    direct = B.model_copy(update={"prompt_ids": (1, 2, 3, 4)})
    assert problems(A, direct) == []
    assert fields(A, direct)["response_mask"] == (1, 1, 1)


def test_the_validator_names_each_layout_problem() -> None:
    assert problems(A, B, C) == []
    assert problems(A, B, C, turns=()) == ["a trajectory needs at least one orchestrator turn"]
    assert problems(A, B, response_mask=(1, 1, 0, 0)) == [
        "lengths differ: response_ids 5, response_mask 4, response_logprobs 5"
    ]
    assert problems(A, B, response_logprobs=(0.0,)) == [
        "lengths differ: response_ids 5, response_mask 5, response_logprobs 1"
    ]
    assert problems(A, B, response_mask=(1, 2, 0, 0, 1)) == ["response_mask holds values other than 0 and 1"]
    assert problems(A, B, prompt_ids=(1,)) == ["prompt_ids is not the first turn's prompt"]
    short = A.model_copy(update={"response_logprobs": (-0.5,)})
    assert problems(short, response_logprobs=(-0.5, -0.25)) == ["turn 0: 2 response ids but 1 logprobs"]


def test_the_validator_names_each_continuity_problem() -> None:
    assert problems(A, B, response_mask=(1, 1, 1, 0, 1)) == [
        "turn 1: observation tokens before it differ from its prompt or are not masked 0"
    ]
    assert problems(A, B, response_ids=(3, 4, 8, 7, 5)) == [
        "turn 1: observation tokens before it differ from its prompt or are not masked 0"
    ]
    assert problems(A, B, response_logprobs=(-0.5, -0.25, 0.0, -1.0, -0.1)) == [
        "turn 1: observation tokens carry non-zero logprobs"
    ]
    assert problems(A, B, response_ids=(3, 4, 8, 9, 6)) == [
        "turn 1: its response tokens are not in the flattened view with mask 1"
    ]
    assert problems(A, B, response_logprobs=(-0.5, -0.25, 0.0, 0.0, -0.3)) == [
        "turn 1: flattened logprobs differ from the turn's"
    ]
    for other in ((1, 2, 3), (1, 2, 3, 7, 8, 9)):  # shorter than the tokens before it, or not starting with them
        assert problems(A, B, turns=(A, B.model_copy(update={"prompt_ids": other}))) == [
            "turn 1: its prompt does not continue the previous turns' tokens"
        ]
    assert problems(
        A, response_ids=(3, 4, 0, 0), response_mask=(1, 1, 0, 0), response_logprobs=(-0.5, -0.25, 0, 0)
    ) == ["2 trailing tokens after the last turn's response"]
