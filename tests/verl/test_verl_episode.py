"""The verl-free half of the verl agent loop (agent_swarm.orchestrator.rl.verl_episode), without verl.

A scripted server manager with verl's ``generate`` signature plays the policy's rollout servers
(token ids out, decided by the test), the tiny byte-level tokenizer renders prompts, and a scripted
backend plays the frozen sub-agents. tests/verl/test_agent_loop.py runs the real thing in verl's venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from agent_swarm.orchestrator.backend_options import HTTPOptions, VLLMEngineOptions
from agent_swarm.orchestrator.rl.tiny import build_tiny_tokenizer
from agent_swarm.orchestrator.rl.verl_episode import (
    REWARD_INFO_KEYS,
    SubagentServer,
    VerlLoopConfig,
    VerlRuntime,
    VerlTaskSpec,
    dataset_rows,
    episode_metrics,
    run_verl_episode,
    task_spec_of,
)
from agent_swarm.swarm.backend import Completion
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.records import Task
from agent_swarm.swarm.rl.rewards import RewardConfig, Schedule
from agent_swarm.swarm.testing import FunctionBackend
from agent_swarm.workloads import get_workload

TOK = build_tiny_tokenizer()
CALL = '<tool_call>{"name": "assign_task", "arguments": {"agent": "worker", "task": "what is 0+1?"}}</tool_call>'
TASK = Task(id="free-1", prompt="what number?", verifier="numeric", verifier_args={"expected": 1})
REWARD = RewardConfig(lambda1=Schedule(kind="linear", start=0.4, steps=10))


class ScriptedServer:
    """verl's ``generate`` signature; replies with the token ids of scripted texts, in order."""

    def __init__(self, texts: Sequence[str], *, global_steps: int | None = 3, fail: bool = False) -> None:
        self.texts = list(texts)
        self.global_steps = global_steps
        self.fail = fail
        self.prompts: list[list[int]] = []
        self.params: list[dict[str, Any]] = []

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ) -> Any:
        if self.fail:
            raise ConnectionError("server down")
        self.prompts.append(list(prompt_ids))
        self.params.append(dict(sampling_params))
        ids = [*TOK(self.texts.pop(0), add_special_tokens=False)["input_ids"], TOK.eos_token_id]
        lps = [-0.5 - 0.01 * i for i in range(len(ids))]
        return SimpleNamespace(
            token_ids=ids, log_probs=lps, stop_reason="completed", extra_fields={"global_steps": self.global_steps}
        )


def _runtime(tmp_path: Path, sub: FunctionBackend) -> VerlRuntime:
    cfg = VerlLoopConfig(
        reward=REWARD,
        subagents={"model": "frozen", "base_url": "http://127.0.0.1:9/v1"},
        policy_name="policy",
        records_dir=tmp_path / "episodes",
    )
    return VerlRuntime(cfg, subagent_backend=sub)


def _sample(task: Task) -> dict[str, Any]:
    row = dataset_rows([task])[0]
    return {"raw_prompt": row["prompt"], "extra_info": row["extra_info"], "index": 0, "data_source": "x"}


SAMPLING = {"temperature": 0.7, "top_p": 0.9, "top_k": 20, "repetition_penalty": 1.0, "logprobs": True}


async def test_output_is_the_trajectory_and_subagents_never_reach_the_policy_server(tmp_path: Path) -> None:
    sub = FunctionBackend(lambda r: Completion(text="1"), model="frozen")
    server = ScriptedServer([CALL, "Answer: 1"])
    ep = await run_verl_episode(
        _runtime(tmp_path, sub), server, TOK, _sample(TASK), sampling_params=SAMPLING, prompt_length=4096,
        response_length=4096,
    )  # fmt: skip
    t, out = ep.trajectory, ep.output
    assert t is not None and ep.record is not None and t.num_turns == 2
    assert out["prompt_ids"] == list(t.prompt_ids) and out["response_ids"] == list(t.response_ids)
    assert out["response_mask"] == list(t.response_mask) and out["response_logprobs"] == list(t.response_logprobs)
    # mask 1 exactly on the tokens the server sampled, in order; each later prompt continues the last exactly
    sampled = [i for i, m in zip(out["response_ids"], out["response_mask"], strict=True) if m]
    assert sampled == [i for turn in t.turns for i in turn.response_ids]
    assert server.prompts == [list(turn.prompt_ids) for turn in t.turns]
    assert server.prompts[1][: len(server.prompts[0]) + len(t.turns[0].response_ids)] == list(
        t.turns[0].prompt_ids + t.turns[0].response_ids
    )
    # verl's sampling reaches the server, the orchestrator's token cap and logprobs always
    assert all(p["top_k"] == 20 and p["temperature"] == 0.7 and p["logprobs"] is True for p in server.params)
    assert len(sub.calls) == 1 and len(server.prompts) == 2  # the sub-agent ran on its own backend
    info = out["extra_fields"]["reward_extra_info"]
    assert set(info) == set(REWARD_INFO_KEYS)
    assert info["swarm_lambda_step"] == 3 and info["swarm_lambda1"] == pytest.approx(REWARD.lambda1(3))
    assert info["swarm_r_perf"] == 1.0 and info["swarm_max_width"] == 1 and info["swarm_subagents"] == 1
    assert out["reward_score"] == pytest.approx(ep.record.reward.total if ep.record.reward else -1)
    path = out["extra_fields"]["swarm"]["record_path"]
    assert path == str(tmp_path / "episodes" / "step-000003.jsonl")
    assert json.loads(await anyio.Path(path).read_text())["record"]["episode_id"] == t.episode_id


async def test_response_is_cut_to_verl_length_and_an_overlong_prompt_is_refused(tmp_path: Path) -> None:
    sub = FunctionBackend(lambda r: Completion(text="1"), model="frozen")
    ep = await run_verl_episode(
        _runtime(tmp_path, sub), ScriptedServer([CALL, "Answer: 1"]), TOK, _sample(TASK),
        sampling_params=SAMPLING, prompt_length=4096, response_length=10,
    )  # fmt: skip
    assert ep.trajectory is not None
    out = ep.output
    assert out["response_ids"] == list(ep.trajectory.response_ids[:10]) and len(out["response_mask"]) == 10
    assert out["extra_fields"]["swarm"]["cut_response_tokens"] == len(ep.trajectory.response_ids) - 10
    with pytest.raises(ConfigError, match=r"rollout.prompt_length is 8; raise data.max_prompt_length"):
        await run_verl_episode(
            _runtime(tmp_path, sub), ScriptedServer([CALL, "Answer: 1"]), TOK, _sample(TASK),
            sampling_params=SAMPLING, prompt_length=8, response_length=10,
        )  # fmt: skip


async def test_a_failed_policy_server_gives_an_untrainable_sample_not_a_crash(tmp_path: Path) -> None:
    sub = FunctionBackend(lambda r: Completion(text="1"), model="frozen")
    ep = await run_verl_episode(
        _runtime(tmp_path, sub), ScriptedServer([], fail=True), TOK, _sample(TASK), sampling_params=SAMPLING,
        prompt_length=4096, response_length=64,
    )  # fmt: skip
    out = ep.output
    assert ep.trajectory is None and ep.record is not None and ep.record.status.value == "failed"
    assert out["response_mask"] == [0] and out["reward_score"] == 0.0
    assert "no orchestrator turns" in out["extra_fields"]["swarm"]["trajectory_error"]
    assert out["extra_fields"]["reward_extra_info"]["swarm_trainable"] == 0.0
    assert not sub.calls


def test_dataset_rows_name_their_task_and_a_reference_resolves_to_it() -> None:
    tasks = get_workload("starter").tasks(3, seed=0, split="train")
    rows = dataset_rows(tasks, reference={"workload": "starter", "split": "train", "seed": 0, "knobs": {}})
    assert [r["agent_name"] for r in rows] == ["swarm_agent"] * 3
    assert [r["extra_info"]["index"] for r in rows] == [0, 1, 2]
    for row, task in zip(rows, tasks, strict=True):
        assert task_spec_of(row).resolve() == task
        by_ref = json.loads(row["extra_info"]["swarm"])
        del by_ref["task"]
        assert VerlTaskSpec.model_validate(by_ref).resolve() == task  # regenerated from the reference


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({}, "has no extra_info"),
        ({"swarm": "{not json"}, "invalid extra_info"),
        ({"swarm": {"workload": "starter"}}, "give 'task'"),
        ({"swarm": {"workload": "starter", "index": 3, "n": 2}}, "not among the n=2"),
    ],
)
def test_a_row_without_a_usable_task_is_a_clear_error(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        task_spec_of({"extra_info": extra})


def test_episode_metrics_average_trainable_episodes() -> None:
    cols = {
        "swarm_trainable": [1.0, 1.0, 0.0],
        "swarm_critical_steps": [3.0, 5.0, 0.0],
        "swarm_max_width": [2.0, 4.0, 0.0],
        "swarm_r_perf": [1.0, 0.0, 0.0],
    }
    m = episode_metrics(cols)
    assert m["swarm/trainable_frac"] == pytest.approx(2 / 3)
    assert m["swarm/critical_steps/mean"] == 4.0 and m["swarm/critical_steps/max"] == 5.0
    assert m["swarm/max_width/max"] == 4.0 and m["swarm/r_perf/mean"] == 0.5
    assert episode_metrics({}) == {}


def test_loop_config_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "loop.toml"
    bad.write_text('[subagents]\nmodel = "m"\nbogus = 1\n')
    with pytest.raises(ConfigError, match=r"invalid verl agent loop config .*loop.toml"):
        VerlLoopConfig.load(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        VerlLoopConfig.load(tmp_path / "missing.toml")


def test_subagent_options_are_the_kinds_typed_options() -> None:
    url = "http://127.0.0.1:9/v1"
    server = SubagentServer(kind="vllm", model="m", base_url=url, options={"max_concurrency": 256, "timeout": 300})
    assert isinstance(server.options, HTTPOptions)
    assert (server.options.max_concurrency, server.options.timeout) == (256, 300.0)
    assert SubagentServer.model_validate(server.model_dump()) == server  # the kind's fields survive a dump
    assert isinstance(SubagentServer(kind="vllm", model="m").options, VLLMEngineOptions)  # no URL: in-process


@pytest.mark.parametrize(
    ("kind", "base_url", "options", "message"),
    [
        ("openai", "http://h/v1", {"max_concurency": 4}, r"unknown backend option max_concurency = 4 .*'openai'"),
        ("openai", "http://h/v1", {"max_concurrency": 0}, r"backend option max_concurrency = 0 is invalid"),
        ("vllm", None, {"max_concurrency": 4}, r"unknown backend option max_concurrency = 4 .*'vllm'"),
    ],
)
def test_a_bad_subagent_option_fails_at_construction_in_one_line(
    kind: str, base_url: str | None, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        SubagentServer(kind=kind, model="m", base_url=base_url, options=options)
    assert "\n" not in str(caught.value)


def test_a_bad_subagent_option_in_the_loop_config_names_the_file_and_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "loop.toml"
    bad.write_text('[subagents]\nmodel = "m"\nbase_url = "http://h/v1"\n[subagents.options]\nbogus = 1\n')
    with pytest.raises(ConfigError, match=r"invalid verl agent loop config .*loop.toml: unknown backend option bogus"):
        VerlLoopConfig.load(bad)
    with pytest.raises(ConfigError, match=r"takes HTTPOptions"):
        SubagentServer(kind="openai", model="m", base_url="http://h/v1", options=VLLMEngineOptions())


def test_the_recipe_builds_rows_verl_reads_and_its_loop_config_loads(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "train.parquet"
    cmd = [sys.executable, str(root / "examples/verl/build_dataset.py"), "-w", "starter", "-n", "3", "-o", str(out)]
    subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True)
    rows = pq.read_table(out).to_pylist()
    tasks = get_workload("starter").tasks(3, seed=0, split="train")
    assert [task_spec_of(r).resolve() for r in rows] == tasks
    assert {r["agent_name"] for r in rows} == {"swarm_agent"} and rows[0]["prompt"][0]["role"] == "user"
    cfg = VerlLoopConfig.load(root / "examples/verl/agent_loop.toml")
    assert cfg.records_dir == root / "examples/verl/episodes" and cfg.subagents.base_url
