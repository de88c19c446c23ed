"""GPU tier (marked ``gpu``): the orchestrator trainer on CUDA.

Skipped without CUDA. On a GPU machine: ``pytest -m gpu tests/rl/test_gpu_trainer.py`` (torch with CUDA,
transformers). The tiny Qwen2 (:mod:`agent_swarm.orchestrator.rl.tiny`) is built locally, so nothing downloads.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agent_swarm.orchestrator.rl.checkpoint import state_checksum  # noqa: E402
from agent_swarm.orchestrator.rl.config import OptimConfig, TrainConfig  # noqa: E402
from agent_swarm.orchestrator.rl.environment import Environment  # noqa: E402
from agent_swarm.orchestrator.rl.tiny import TinyModelSpec, build_tiny_model  # noqa: E402
from agent_swarm.orchestrator.rl.trainer import Trainer  # noqa: E402
from agent_swarm.orchestrator.rollout.config import RolloutConfig  # noqa: E402
from agent_swarm.swarm.backend import SamplingParams  # noqa: E402
from agent_swarm.swarm.backends.transformers_backend import TransformersBackend  # noqa: E402
from agent_swarm.swarm.config import SwarmConfig  # noqa: E402
from agent_swarm.swarm.records import AgentDefinition, EpisodeRecord, Task  # noqa: E402
from agent_swarm.swarm.rl.losses import masked_logprobs, pad_batch  # noqa: E402
from agent_swarm.swarm.rl.rewards import PARLReward, RewardConfig  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


class _AnswerReward(PARLReward):
    """A deterministic, answer-dependent r_perf in [0, 1], so groups have non-zero advantages."""

    async def r_perf(self, record: EpisodeRecord):  # type: ignore[no-untyped-def]
        return hashlib.sha256((record.answer or "").encode()).digest()[0] / 255, "hash", {}, None


def _config(run_dir: Path) -> TrainConfig:
    sampling = SamplingParams(temperature=1.0, max_tokens=16)
    return TrainConfig(
        run_dir=run_dir,
        steps=3,
        tasks_per_step=2,
        rollout=RolloutConfig(group_size=4, max_concurrent_episodes=8),
        swarm=SwarmConfig(
            max_critical_steps=4,
            max_malformed_retries=0,
            orchestrator_sampling=sampling,
            subagent_sampling=sampling,
            max_subagent_steps=1,
        ),
        optim=OptimConfig(lr=1e-2, micro_batch=4),
        reward=RewardConfig(),
        checkpoint_every=1,
        device="cuda",
    )


def test_three_steps_on_cuda_train_the_orchestrator_only_on_the_engines_logprobs(tmp_path: Path) -> None:
    policy = TransformersBackend.from_pretrained(
        build_tiny_model(tmp_path / "policy", TinyModelSpec(seed=1)), name="orchestrator", device="cuda"
    )
    sub = TransformersBackend.from_pretrained(
        build_tiny_model(tmp_path / "sub", TinyModelSpec(seed=2)), name="subagent", device="cuda"
    )
    for p in sub.hf_model.parameters():
        p.requires_grad_(False)
    env = Environment(
        tasks=[Task(id="t1", prompt="count to three"), Task(id="t2", prompt="name a colour")],
        subagent_backend=sub,
        reward=_AnswerReward(RewardConfig()),
        agents=[AgentDefinition(name="worker", system_prompt="do it")],
    )
    trainer = Trainer(_config(tmp_path / "run"), policy, env)
    assert next(trainer.model.parameters()).device.type == "cuda"
    before, sub_before = state_checksum(trainer.model), state_checksum(sub.hf_model)
    metrics = trainer.run()
    assert [m.step for m in metrics] == [0, 1, 2]
    assert state_checksum(trainer.model) != before, "orchestrator weights did not change"
    assert state_checksum(sub.hf_model) == sub_before, "sub-agent weights changed"
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    for x in lines:
        assert x["episodes"] == 8 and x["trained_tokens"] > 0
        assert x["ratio_mismatch"] < 1e-3, x  # the engine's logprobs are the trainer's on the same weights
        assert torch.isfinite(torch.tensor(x["loss"]))
    assert trainer.latest_checkpoint() is not None


def test_cuda_and_cpu_give_the_same_token_logprobs(tmp_path: Path) -> None:
    directory = build_tiny_model(tmp_path / "policy", TinyModelSpec(seed=3))
    cpu = TransformersBackend.from_pretrained(directory, name="cpu").hf_model
    gpu = TransformersBackend.from_pretrained(directory, name="gpu", device="cuda").hf_model
    examples = [([5, 17, 99, 42, 7, 250, 3], [1] * 7), ([8, 8, 64, 21], [1] * 4)]
    ids, mask = pad_batch(examples, "cpu")
    temps = torch.ones(ids.shape[0])
    on_cpu = masked_logprobs(cpu, ids, mask[:, 1:], temps)
    on_gpu = masked_logprobs(gpu, ids.cuda(), mask[:, 1:].cuda(), temps.cuda()).cpu()
    assert torch.allclose(on_cpu, on_gpu, atol=1e-4), (on_cpu - on_gpu).abs().max()
