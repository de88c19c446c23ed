"""Exporters: atomic JSONL, Parquet, verl AgentLoopOutput and TRL rollout_func records."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agent_swarm.orchestrator import Orchestrator, PARLReward
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.records import Task
from agent_swarm.swarm.rl.export import (
    JsonlProblem,
    JsonlWriter,
    read_jsonl,
    read_parquet,
    read_trajectories,
    repair_jsonl,
    to_trl_rollout,
    to_verl_agent_loop_output,
    write_parquet,
)
from agent_swarm.swarm.rl.trajectory import Trajectory, build_trajectory
from agent_swarm.swarm.testing import ScriptedBackend, call


async def make_trajectories(n: int = 3) -> list[Trajectory]:
    out = []
    for j in range(n):
        policy = ScriptedBackend(
            [
                [call("create_subagent", name="w", system_prompt="s"), call("assign_task", agent="w", task="t")],
                f"Answer: {j}",
            ]
        )
        workers = ScriptedBackend({"w-0-0": [f"report {j} ünïcode"]})
        task = Task(id="g", prompt="what number?", verifier="numeric", verifier_args={"expected": 1})
        rec = await Orchestrator(policy, subagent_backend=workers, reward_fn=PARLReward()).run(task)
        out.append(build_trajectory(rec, group_id="g", sample_index=j, advantage=0.5 - j))
    return out


async def test_jsonl_round_trip_is_lossless(tmp_path: Path) -> None:
    trajs = await make_trajectories()
    with JsonlWriter(tmp_path / "t.jsonl") as w:
        for t in trajs:
            w.write(t)
    assert read_trajectories(tmp_path / "t.jsonl") == trajs
    # Append-only: a second writer adds to the file.
    with JsonlWriter(tmp_path / "t.jsonl") as w:
        w.write(trajs[0])
    assert len(read_trajectories(tmp_path / "t.jsonl")) == 4


async def test_a_write_cut_by_a_crash_is_repaired_and_never_read_as_a_record(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    trajs = await make_trajectories(2)
    with JsonlWriter(path) as w:
        w.write(trajs[0])
    whole = path.read_bytes()
    line = trajs[1].model_dump_json().encode()
    path.write_bytes(whole + line[: len(line) // 2])  # the process died mid-write
    problems: list[JsonlProblem] = []
    assert read_jsonl(path, Trajectory, on_error="skip", problems=problems) == [trajs[0]]
    assert problems[0].line == 2 and "unterminated" in problems[0].error
    with pytest.raises(ConfigError, match=r"t\.jsonl:2: cannot read record"):
        read_jsonl(path, Trajectory)
    with JsonlWriter(path) as w:  # opening a writer cuts the half record, then appends whole ones
        assert w.repaired_bytes == len(line) // 2
        w.write(trajs[1])
    assert read_trajectories(path) == trajs


def test_repair_handles_files_without_any_newline(tmp_path: Path) -> None:
    p = tmp_path / "x.jsonl"
    p.write_bytes(b'{"half": ')
    assert repair_jsonl(p) == 9 and p.read_bytes() == b""
    assert repair_jsonl(tmp_path / "missing.jsonl") == 0


def test_bad_lines_are_reported_with_their_number(tmp_path: Path) -> None:
    p = tmp_path / "x.jsonl"
    p.write_text('{"a": 1}\nnot json\n\n{"b": 2}\n')
    problems: list[JsonlProblem] = []
    assert read_jsonl(p, on_error="skip", problems=problems) == [{"a": 1}, {"b": 2}]
    assert [(q.line, q.error.split(":")[0]) for q in problems] == [(2, "Expecting value")]


async def test_concurrent_writers_in_one_process_never_interleave(tmp_path: Path) -> None:
    import anyio

    path = tmp_path / "c.jsonl"
    w = JsonlWriter(path)
    big = {"payload": "x" * 200_000}

    async def write(i: int) -> None:
        await anyio.to_thread.run_sync(w.write, {**big, "i": i})

    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(write, i)
    w.close()
    assert sorted(r["i"] for r in read_jsonl(path)) == list(range(8))


async def test_parquet_round_trip_is_lossless(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    trajs = await make_trajectories()
    assert write_parquet(trajs, tmp_path / "t.parquet") == 3
    assert read_parquet(tmp_path / "t.parquet") == trajs
    table = pq.read_table(tmp_path / "t.parquet")
    # Trainers can read the token columns directly.
    assert table.column("response_mask").to_pylist()[0] == list(trajs[0].response_mask)
    assert table.column("advantage").to_pylist() == [0.5, -0.5, -1.5]
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


# -- verl -------------------------------------------------------------------------------------------

# verl 0.9.1 verl/experimental/agent_loop/agent_loop.py: AgentLoopOutput and AgentLoopMetrics fields.
VERL_FIELDS = {
    "prompt_ids": list,
    "response_ids": list,
    "response_mask": list,
    "response_logprobs": list,
    "reward_score": float,
    "num_turns": int,
    "metrics": dict,
    "extra_fields": dict,
}
VERL_METRICS = {"generate_sequences", "tool_calls", "compute_score", "num_preempted"}


async def test_verl_record_follows_agent_loop_output_contract() -> None:
    t = (await make_trajectories(1))[0]
    rec = to_verl_agent_loop_output(t)
    assert {k: type(v) for k, v in rec.items()} == VERL_FIELDS
    assert set(rec["metrics"]) == VERL_METRICS
    n = len(rec["response_ids"])
    assert len(rec["response_mask"]) == n == len(rec["response_logprobs"])
    assert all(isinstance(i, int) for i in rec["prompt_ids"] + rec["response_ids"])
    assert rec["reward_score"] == t.reward.total and rec["num_turns"] == 2 * t.num_turns
    assert rec["extra_fields"]["uid"] == "g" and rec["extra_fields"]["advantage"] == 0.5
    json.dumps(rec)  # plain data: crosses Ray/process boundaries as is


async def test_verl_agent_loop_output_loads_the_record() -> None:
    agent_loop = pytest.importorskip("verl.experimental.agent_loop.agent_loop")
    t = (await make_trajectories(1))[0]
    out = agent_loop.AgentLoopOutput(**to_verl_agent_loop_output(t))
    assert out.response_mask == list(t.response_mask) and out.reward_score == t.reward.total
    assert out.metrics.num_preempted == -1
    # verl's own tensorisation of the record: token tensors, rollout logprobs, reward on the last token.
    d = out.as_dict()
    assert d["responses"].tolist() == list(t.response_ids) and d["prompts"].tolist() == list(t.prompt_ids)
    assert d["response_mask"].tolist() == list(t.response_mask)
    assert d["rollout_log_probs"].shape == d["responses"].shape
    assert float(d["rm_scores"][-1]) == pytest.approx(t.reward.total)


# -- TRL --------------------------------------------------------------------------------------------


async def test_trl_rollout_output_contract() -> None:
    trajs = await make_trajectories()
    out = to_trl_rollout(trajs)
    # GRPOTrainer requires these three; env_mask becomes its tool_mask; the rest go to reward functions.
    assert {"prompt_ids", "completion_ids", "logprobs", "env_mask"} <= set(out)
    assert all(len(v) == 3 for v in out.values())
    for i, t in enumerate(trajs):
        assert out["completion_ids"][i] == list(t.response_ids)
        assert len(out["logprobs"][i]) == len(out["completion_ids"][i]) == len(out["env_mask"][i])
        assert sum(out["env_mask"][i]) == sum(len(turn.response_ids) for turn in t.turns)
    assert out["reward"] == [t.reward.total for t in trajs] and out["advantage"] == [0.5, -0.5, -1.5]
    with pytest.raises(ConfigError):
        to_trl_rollout([])


async def test_records_scored_by_table_and_instruction_verifiers_round_trip(tmp_path: Path) -> None:
    tasks = [
        Task(
            id="t",
            prompt="table",
            verifier="table",
            verifier_args={
                "gold": [{"k": "a", "v": "1"}],
                "key_columns": ["k"],
                "rules": {"v": {"metrics": ["llm_judge"]}},
            },
        ),
        Task(
            id="i",
            prompt="list",
            verifier="instructions",
            verifier_args={"constraints": [{"type": "sections", "required": ["A"]}, {"type": "bullets", "min": 1}]},
        ),
    ]
    trajs = []
    for task in tasks:
        rec = await Orchestrator(ScriptedBackend(["| k | v |\n|-|-|\n| a | 1 |\n- x"]), reward_fn=PARLReward()).run(
            task
        )
        trajs.append(build_trajectory(rec))
    assert trajs[0].reward.details["judge_fallback_columns"] == ["v"]
    with JsonlWriter(tmp_path / "t.jsonl") as w:
        for t in trajs:
            w.write(t)
    assert read_trajectories(tmp_path / "t.jsonl") == trajs


async def test_agent_lightning_triplets_carry_each_turn_and_the_final_reward() -> None:
    from agent_swarm.swarm.rl.export import to_agl_triplets

    t = (await make_trajectories(1))[0]
    triplets = to_agl_triplets(t)
    assert len(triplets) == t.num_turns == 2
    assert [tr["prompt"]["token_ids"] for tr in triplets] == [list(turn.prompt_ids) for turn in t.turns]
    assert triplets[1]["response"]["log_probs"] == list(t.turns[1].response_logprobs)
    assert [tr["reward"] for tr in triplets] == [None, t.reward.total]


def test_iter_jsonl_streams_records_with_the_same_checks_as_read_jsonl(tmp_path: Path) -> None:
    """A resume reads files of hundreds of MB: records come one at a time, bad lines as read_jsonl does."""
    from agent_swarm.swarm.rl.export import iter_jsonl

    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n{broken\n{"a": 2}\n{"a": 3}')  # the last line was cut by a crash
    problems: list[JsonlProblem] = []
    records = iter_jsonl(path, on_error="skip", problems=problems)
    assert next(records) == {"a": 1} and problems == []  # nothing past the first line was read yet
    assert list(records) == [{"a": 2}] and [p.line for p in problems] == [2, 4]
    assert read_jsonl(path, on_error="skip") == [{"a": 1}, {"a": 2}]
