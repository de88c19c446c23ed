"""A short training run on the tiny model: weights move, sub-agents stay frozen, metrics and resume work."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from orchestrator.config import SwarmConfig  # noqa: E402
from orchestrator.rl.tiny import TinyModelSpec, build_tiny_model  # noqa: E402
from orchestrator.rl.trainer import (  # noqa: E402
    Environment,
    OptimConfig,
    TrainConfig,
    Trainer,
    load_train_config,
    state_checksum,
)
from orchestrator.rollout import RolloutConfig  # noqa: E402
from swarm.backend import SamplingParams  # noqa: E402
from swarm.backends.transformers_backend import TransformersBackend  # noqa: E402
from swarm.errors import ConfigError, UnknownNameError  # noqa: E402
from swarm.records import AgentDefinition, EpisodeRecord, Task  # noqa: E402
from swarm.rewards import PARLReward, RewardConfig  # noqa: E402


class HashReward(PARLReward):
    """A deterministic, answer-dependent r_perf in [0, 1] so groups have non-zero advantages."""

    async def r_perf(self, record: EpisodeRecord):  # type: ignore[no-untyped-def]
        answer = record.answer or ""
        return hashlib.sha256(answer.encode()).digest()[0] / 255, "hash", {}, None


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("tiny")
    return build_tiny_model(root / "policy", TinyModelSpec(seed=1)), build_tiny_model(
        root / "sub", TinyModelSpec(seed=2)
    )


def _config(run_dir: Path, steps: int) -> TrainConfig:
    sampling = SamplingParams(temperature=1.0, max_tokens=12)
    return TrainConfig(
        run_dir=run_dir,
        steps=steps,
        tasks_per_step=2,
        rollout=RolloutConfig(group_size=2, max_concurrent_episodes=4),
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
    )


def _trainer(cfg: TrainConfig, dirs: tuple[Path, Path]) -> tuple[Trainer, TransformersBackend]:
    policy = TransformersBackend.from_pretrained(dirs[0], name="orchestrator")
    sub = TransformersBackend.from_pretrained(dirs[1], name="subagent")
    for p in sub.hf_model.parameters():
        p.requires_grad_(False)
    tasks = [Task(id="t1", prompt="count to three"), Task(id="t2", prompt="name a colour")]
    env = Environment(
        tasks=tasks,
        subagent_backend=sub,
        reward=HashReward(cfg.reward),
        agents=[AgentDefinition(name="worker", system_prompt="do it")],
    )
    return Trainer(cfg, policy, env), sub


def test_three_steps_train_the_orchestrator_only_and_resume(model_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    run = tmp_path / "run"
    trainer, sub = _trainer(_config(run, steps=3), model_dirs)
    policy_before = state_checksum(trainer.model)
    sub_before = state_checksum(sub.hf_model)
    metrics = trainer.run()

    assert [m.step for m in metrics] == [0, 1, 2]
    assert state_checksum(trainer.model) != policy_before, "orchestrator weights did not change"
    assert state_checksum(sub.hf_model) == sub_before, "sub-agent weights changed"
    assert trainer.policy.weight_version == 3
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [0, 1, 2]
    for x in lines:
        assert x["episodes"] == 4
        assert x["trained_tokens"] > 0
        assert {
            "loss",
            "reward",
            "r_perf",
            "lambda1",
            "lambda2",
            "mean_critical_steps",
            "mean_parallel_width",
            "finish_rate",
            "masked_token_frac",
            "ratio_mismatch",
        } <= set(x)
        assert x["ratio_mismatch"] < 1e-3  # same weights, same maths: engine and trainer logprobs agree
    ckpt = trainer.latest_checkpoint()
    assert ckpt is not None and ckpt.name == "step-000003"
    assert len(list((run / "checkpoints").glob("step-*"))) == 2  # keep_checkpoints

    # a fresh process resumes from the checkpoint: same weights, continues at step 3
    trainer2, _ = _trainer(_config(run, steps=4), model_dirs)
    assert trainer2.resume() == 3
    assert state_checksum(trainer2.model) == state_checksum(trainer.model)
    assert trainer2.policy.weight_version == 3
    more = trainer2.run()
    assert [m.step for m in more] == [3]
    lines = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert lines == [0, 1, 2, 3]


def test_resume_after_a_kill_drops_metrics_of_uncheckpointed_steps(
    model_dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    run = tmp_path / "run"
    cfg = _config(run, steps=2).model_copy(update={"checkpoint_every": 5})
    trainer, _ = _trainer(cfg, model_dirs)
    trainer.train_step()  # step 0 logged, not checkpointed (as if killed before step 1 finished)
    trainer.save_checkpoint()  # checkpoint after step 1 of 2
    trainer.train_step()  # logged but the final checkpoint...
    ckpt = run / "checkpoints" / "step-000002"
    assert ckpt.is_dir()
    import shutil

    shutil.rmtree(ckpt)  # ...is lost, as if the process died while writing it
    again, _ = _trainer(cfg, model_dirs)
    assert again.resume() == 1
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [0]
    again.run()
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [0, 1]


def test_config_file_validation(tmp_path: Path) -> None:
    p = tmp_path / "train.toml"
    p.write_text('run_dir = "out"\nloss = "grpo"\n')
    with pytest.raises(UnknownNameError, match="k25"):
        load_train_config(p)
    p.write_text('run_dir = "out"\nsteps = 0\n')
    with pytest.raises(ConfigError, match="steps"):
        load_train_config(p)
    p.write_text('run_dir = "out"\n[tiny]\nhidden_size = 32\n')
    cfg = load_train_config(p)
    assert cfg.run_dir == tmp_path / "out"
    with pytest.raises(ConfigError, match="environment"):
        Trainer.from_config(cfg)
