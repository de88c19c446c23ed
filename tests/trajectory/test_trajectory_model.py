"""The orchestrator-only trajectory: exact tokens, masked observations, refusals, validation."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agent_swarm.orchestrator import Orchestrator, PARLReward, SwarmConfig
from agent_swarm.swarm.backend import Completion, ModelRequest, SamplingParams
from agent_swarm.swarm.function_backend import encode, render_prompt
from agent_swarm.swarm.records import EpisodeRecord, Task
from agent_swarm.swarm.rl.trajectory import (
    Trajectory,
    TrajectoryError,
    TrajectoryTurn,
    build_trajectory,
    flatten_turns,
    validate_trajectory,
)
from agent_swarm.swarm.testing import FunctionBackend, ScriptedBackend, call

TASK = Task(id="cap", prompt="capitals of FR and JP", verifier="exact", verifier_args={"expected": "Paris, Tokyo"})


async def fanout_episode(*, config: SwarmConfig | None = None) -> EpisodeRecord:
    policy = ScriptedBackend(
        [
            [
                call("create_subagent", name="w", system_prompt="look it up"),
                call("assign_task", agent="w", task="FR"),
                call("assign_task", agent="w", task="JP"),
            ],
            [call("assign_task", agent="w", task="check")],
            "Answer: Paris, Tokyo",
        ]
    )
    workers = ScriptedBackend({"w-0-0": ["Paris"], "w-0-1": [RuntimeError("boom")], "w-1-0": ["ok"]})
    orch = Orchestrator(policy, config, subagent_backend=workers, reward_fn=PARLReward())
    return await orch.run(TASK, episode_id="ep1")


async def test_trajectory_carries_exact_tokens_and_masks_observations() -> None:
    rec = await fanout_episode(config=SwarmConfig(orchestrator_sampling=SamplingParams(temperature=0.7, seed=11)))
    t = build_trajectory(rec, group_id="g", sample_index=2, advantage=0.25)
    assert t.num_turns == 3 and validate_trajectory(t) == []
    assert t.prompt_ids == rec.turns[0].prompt_token_ids
    # Mask-1 tokens are exactly the orchestrator's sampled tokens with their logprobs, in order.
    sampled = [i for i, m in zip(t.response_ids, t.response_mask, strict=True) if m == 1]
    assert tuple(sampled) == sum((turn.response_token_ids or () for turn in rec.turns), ())
    lps = [lp for lp, m in zip(t.response_logprobs, t.response_mask, strict=True) if m == 1]
    assert tuple(lps) == sum((turn.response_logprobs or () for turn in rec.turns), ())
    # Each later prompt is prompt_ids + the flattened tokens before that turn.
    n0 = len(rec.turns[0].response_token_ids or ())
    obs1 = len(rec.turns[1].prompt_token_ids or ()) - len(t.prompt_ids) - n0
    assert t.prompt_ids + t.response_ids[: n0 + obs1] == rec.turns[1].prompt_token_ids
    # The observation block holds the sub-agent reports (as the engine rendered them), masked out.
    obs_text = bytes(t.response_ids[n0 : n0 + obs1]).decode()
    assert "Paris" in obs_text and "boom" in obs_text and set(t.response_mask[n0 : n0 + obs1]) == {0}
    assert set(t.response_logprobs[n0 : n0 + obs1]) == {0.0}
    # Metadata for the trainer.
    assert (t.group_id, t.task_id, t.sample_index, t.advantage) == ("g", "cap", 2, 0.25)
    assert t.sampling.seed == 11 and t.sampling.temperature == 0.7
    assert t.reward == rec.reward and t.reward.r_perf == 1.0
    assert t.subagent_statuses == ("completed", "failed", "completed") and t.stage_widths == (2, 1, 0)
    assert t.critical_steps == rec.dag.critical_steps and t.trace_id == rec.trace_id
    assert [s.result.agent_id for s in t.side] == ["w-0-0", "w-0-1", "w-1-0"]
    assert t.side[0].result.transcript  # transcripts ride along as side data
    assert not build_trajectory(rec, include_transcripts=False).side[0].result.transcript


async def test_turn_without_token_ids_is_refused() -> None:
    policy = ScriptedBackend(["plain answer"], tokens=False)
    rec = await Orchestrator(policy, reward_fn=PARLReward()).run(TASK)
    with pytest.raises(TrajectoryError, match=r"turn 0 has no token ids.*rather than re-tokenizing"):
        build_trajectory(rec)


async def test_drifted_turn_is_refused() -> None:
    turns = iter(range(2))

    def fn(request: ModelRequest) -> Completion:
        k = next(turns)
        prompt = encode(render_prompt(request.messages))
        if k == 1:  # the template re-rendered history differently: ids no longer extend turn 0
            prompt = (7, *prompt[1:])
            return Completion(text="done", prompt_token_ids=prompt, token_ids=(1, 2), logprobs=(-0.1, -0.2))
        c = call("create_subagent", name="w", system_prompt="s")
        return Completion(tool_calls=(c,), prompt_token_ids=prompt, token_ids=(3, 4, 5), logprobs=(-0.1,) * 3)

    rec = await Orchestrator(FunctionBackend(fn), reward_fn=PARLReward()).run(TASK)
    assert rec.turns[1].drift
    with pytest.raises(TrajectoryError, match="turn 1 drifted"):
        build_trajectory(rec)


def test_flatten_detects_drift_even_when_unflagged() -> None:
    a = TrajectoryTurn(index=0, stage=0, prompt_ids=(1, 2), response_ids=(3,), response_logprobs=(-0.5,))
    b = TrajectoryTurn(index=1, stage=1, prompt_ids=(1, 2, 9, 4), response_ids=(5,), response_logprobs=(-0.1,))
    with pytest.raises(TrajectoryError, match="turn 1 drifted"):
        flatten_turns((a, b))
    ok = b.model_copy(update={"prompt_ids": (1, 2, 3, 4, 4)})
    assert flatten_turns((a, ok)) == ((1, 2), (3, 4, 4, 5), (1, 0, 0, 1), (-0.5, 0.0, 0.0, -0.1))


async def test_missing_logprobs_and_no_reward_and_no_turns_are_refused() -> None:
    def no_lp(request: ModelRequest) -> Completion:
        return Completion(text="x", prompt_token_ids=(1,), token_ids=(2,), logprobs=None)

    rec = await Orchestrator(FunctionBackend(no_lp), reward_fn=PARLReward()).run(TASK)
    with pytest.raises(TrajectoryError, match="no logprobs"):
        build_trajectory(rec)
    unscored = await Orchestrator(ScriptedBackend(["x"])).run(TASK)
    with pytest.raises(TrajectoryError, match="has no reward"):
        build_trajectory(unscored)
    dead = await Orchestrator(ScriptedBackend([RuntimeError("down")]), reward_fn=PARLReward()).run(TASK)
    with pytest.raises(TrajectoryError, match="no orchestrator turns"):
        build_trajectory(dead)


async def test_validator_rejects_tampered_records() -> None:
    rec = await fanout_episode()
    data = build_trajectory(rec).model_dump()
    n = len(data["response_ids"])
    k = data["response_mask"].index(0)  # first observation token: changing it breaks continuity
    tampered_obs = [*data["response_ids"][:k], data["response_ids"][k] ^ 1, *data["response_ids"][k + 1 :]]
    cases = {
        "lengths differ": {"response_mask": data["response_mask"][:-1]},
        "other than 0 and 1": {"response_mask": [2] * n},
        "turn 1: observation tokens before it differ from its prompt": {"response_ids": tampered_obs},
        "not in the flattened view with mask 1": {"response_mask": [0] * n},
        "flattened logprobs differ": {"response_logprobs": [-9.0] * n},
        "first turn's prompt": {"prompt_ids": [*data["prompt_ids"], 1]},
    }
    for message, patch in cases.items():
        with pytest.raises(ValidationError, match=message):
            Trajectory.model_validate({**data, **patch})
    with pytest.raises(ValidationError, match="trailing tokens"):
        Trajectory.model_validate(
            {
                **data,
                "response_ids": [*data["response_ids"], 1],
                "response_mask": [*data["response_mask"], 0],
                "response_logprobs": [*data["response_logprobs"], 0.0],
            }
        )
    assert Trajectory.model_validate(data) == build_trajectory(rec)
