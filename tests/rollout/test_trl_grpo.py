"""TRL's real GRPOTrainer trains a step on swarm episodes through ``trl_rollout_func``.

Needs the ``trl`` extra (torch, transformers, trl); the model is a tiny randomly initialised Llama over
the fake byte tokenizer's 256 ids, built in memory (nothing is downloaded).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent_swarm.orchestrator import Orchestrator, SwarmConfig, trl_rollout_func
from agent_swarm.orchestrator.engine import RewardFn
from agent_swarm.orchestrator.rollout.episodes import EpisodeJob
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.messages import ToolMessage
from agent_swarm.swarm.records import Task
from agent_swarm.swarm.testing import FunctionBackend, call

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),  # importing torch/transformers/TRL and one CPU step: ~1 min on 2 busy cores
    # Third-party deprecation chatter (transformers/TRL/torch internals), not our code's warnings.
    pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning", "ignore::UserWarning"),
]


def policy(request: ModelRequest) -> Completion:
    if not any(isinstance(m, ToolMessage) for m in request.messages):
        return Completion(
            tool_calls=(
                call("create_subagent", name="w", system_prompt="s"),
                call("assign_task", agent="w", task="add"),
            )
        )
    return Completion(text=f"Answer: {4 if (request.sampling.seed or 0) % 2 else 5}")


def factory(job: EpisodeJob, cfg: SwarmConfig, reward: RewardFn) -> Orchestrator:
    return Orchestrator(
        FunctionBackend(policy), cfg, reward_fn=reward, subagent_backend=FunctionBackend(lambda r: Completion(text="4"))
    )


def test_grpo_trainer_consumes_swarm_rollouts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    trl = pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    from tokenizers import Tokenizer, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    vocab = {f"<{i}>": i for i in range(256)} | {"<pad>": 256}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>")),
        pad_token="<pad>",
        eos_token="<pad>",
    )
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=257,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=4096,
            pad_token_id=256,
            eos_token_id=256,
        )
    )
    tasks = [
        Task(id=f"t{i}", prompt=f"what is {i} + {4 - i}?", verifier="numeric", verifier_args={"expected": 4})
        for i in range(2)
    ]
    seen: dict[str, Any] = {}

    def parl_reward(completions: list[Any], reward: list[float], advantage: list[float], **kw: Any) -> list[float]:
        seen.update(reward=reward, advantage=advantage, group_id=kw["group_id"])
        return reward

    args = trl.GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=2,
        max_steps=1,
        use_cpu=True,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        max_completion_length=4096,
        bf16=False,
    )
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=[parl_reward],
        args=args,
        processing_class=tokenizer,
        train_dataset=datasets.Dataset.from_dict({"prompt": [t.prompt for t in tasks]}),
        rollout_func=trl_rollout_func(factory, tasks=tasks),
    )
    trainer.train()
    log = trainer.state.log_history[0]
    # Two groups of two: seeds differ within a group, so rewards differ and advantages are ±half the gap.
    assert len(seen["reward"]) == 4 and len(set(seen["group_id"])) == 2
    assert sum(seen["advantage"]) == pytest.approx(0.0, abs=1e-9)
    assert log["reward"] == pytest.approx(sum(seen["reward"]) / 4, rel=1e-5)
    # TRL counted only the orchestrator's own tokens (env_mask) as completion length.
    assert 0 < log["completions/mean_length"] < log["num_tokens"]
