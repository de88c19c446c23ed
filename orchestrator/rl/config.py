"""What ``swarm train --config FILE`` reads: the training config and its parts, and the file loader.

The keys of a training file are the fields of :class:`TrainConfig` (TOML or JSON); ``engine`` names a
serving kind of :data:`agent_swarm.orchestrator.rl.serving.SERVING`, ``advantage`` and ``loss`` name entries of
:mod:`agent_swarm.swarm.rl`'s registries, and each is checked before any compute.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agent_swarm.orchestrator.rl.gold import WorkloadTasks
from agent_swarm.orchestrator.rl.lora import LlamaCppConfig, LoraSpec
from agent_swarm.orchestrator.rl.serving import SERVING
from agent_swarm.orchestrator.rl.tiny import TinyModelSpec
from agent_swarm.orchestrator.rollout.config import RolloutConfig
from agent_swarm.orchestrator.tasks import model_problems
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.rl.losses import LOSSES, LossParams
from agent_swarm.swarm.rl.rewards import ADVANTAGES, RewardConfig, Schedule

__all__ = [
    "OptimConfig",
    "PtxConfig",
    "SftConfig",
    "ToggleConfig",
    "TrainConfig",
    "load_train_config",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class OptimConfig(_Frozen):
    """Optimizer and update shape. ``muon`` uses ``torch.optim.Muon`` for 2-D hidden weights and AdamW
    for the rest (embeddings, norms, biases), as Muon implementations recommend."""

    name: str = Field("adamw", pattern="^(adamw|muon)$")
    lr: float = Field(1e-4, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float | None = Field(1.0, gt=0)
    minibatches: int = Field(1, ge=1, description="optimizer steps per rollout (the batch is split)")
    epochs: int = Field(1, ge=1, description="passes over the rollout batch")
    micro_batch: int = Field(8, ge=1, description="sequences per forward/backward (memory bound)")


class ToggleConfig(_Frozen):
    """Toggle: every ``m`` steps alternate the budget-limited phase and the free phase.

    ``length`` is what the budget limits: the orchestrator's sampled tokens, or the episode's
    critical steps (the swarm's latency). A task's budget is the ``p``-th percentile of its *correct*
    responses' lengths (``r_perf ≥ correct_at``), set the first time the task has a correct response
    and kept fixed (across resumes too). Group accuracy (against ``lam``) is the mean ``r_perf``.
    """

    m: int = Field(4, ge=1)
    lam: float = Field(0.5, ge=0, le=1, description="group accuracy above which the budget applies")
    p: float = Field(50.0, ge=0, le=100)
    length: str = Field("tokens", pattern="^(tokens|critical_steps)$")
    correct_at: float = 1.0


class PtxConfig(_Frozen):
    """PTX auxiliary loss (K2): ``coef · NLL`` on ``batch_size`` sequences of a fixed SFT set per update."""

    coef: float = Field(0.1, ge=0)
    batch_size: int = Field(4, ge=1)


class SftConfig(_Frozen):
    """The SFT warm start (``swarm train sft``): gold transcripts of ``workloads`` (default: the RL
    workloads, train split), regenerated through the current engine and protocol at every run, kept
    when the gold episode scores ``r_perf ≥ min_r_perf``; masked NLL on the orchestrator's tokens."""

    workloads: tuple[WorkloadTasks, ...] = ()
    min_r_perf: float = Field(1.0, ge=0, le=1)
    steps: int = Field(100, ge=1)
    lr: float = Field(2e-4, gt=0)
    batch_size: int = Field(4, ge=1)
    micro_batch: int = Field(1, ge=1, description="sequences per forward/backward (memory bound)")
    seed: int = 0
    stop_below: float | None = Field(None, gt=0, description="stop once a step's loss falls below this")
    checkpoint_every: int = Field(25, ge=1)


class TrainConfig(_Frozen):
    """Everything ``swarm train --config FILE`` reads (TOML or JSON).

    The policy is a local transformers directory (``policy_model``), a freshly built tiny Qwen2
    (``tiny``), or a packaged GGUF model (``policy_gguf``: ``qwen2.5-coder-0.5b``, ``smollm2-135m`` or a
    ``.gguf`` path) loaded in transformers with a trainable LoRA adapter (``lora``; only the adapter
    trains, starting from ``init_adapter`` or the SFT stage's adapter in ``run_dir/sft/policy``).
    ``engine = "llamacpp"`` samples rollouts from llama.cpp with that adapter (exported after each
    update); sub-agents then run on the same engine's frozen base model.

    Otherwise sub-agents run on ``subagent_model`` when given, else on the environment's backend,
    else on a frozen copy of the initial policy. Tasks come from ``workloads`` (workload task sets
    with their environments, gold policies and scorers), or ``environment`` (``"module:attr"``, a
    callable ``(TrainConfig, tokenizer) -> Environment``), or ``tasks_file`` (a task file, read as
    ``swarm rollout --tasks`` reads one; sub-agents get no tools).
    """

    run_dir: Path
    policy_model: Path | None = None
    tiny: TinyModelSpec | None = None
    policy_gguf: str | None = None
    lora: LoraSpec = LoraSpec()
    init_adapter: Path | None = None
    workloads: tuple[WorkloadTasks, ...] = ()
    sft: SftConfig = SftConfig()
    subagent_model: Path | None = None
    environment: str | None = None
    tasks_file: Path | None = None
    dtype: str = "float32"
    device: str = "cpu"
    engine: str = Field(
        "transformers",
        description="who samples rollouts: the colocated transformers engine, vLLM in-process (weights "
        "pushed), or llama.cpp with the LoRA adapter (policy_gguf; adapter exported and the engine restarted)",
    )
    llamacpp: LlamaCppConfig = LlamaCppConfig()
    vllm_engine_args: dict[str, Any] = Field(default_factory=dict, description="extra AsyncEngineArgs for vLLM")
    seed: int = 0
    steps: int = Field(10, ge=1)
    tasks_per_step: int = Field(4, ge=1)
    rollout: RolloutConfig = RolloutConfig()
    swarm: SwarmConfig = SwarmConfig()
    reward: RewardConfig = RewardConfig()
    advantage: str = "group_mean"
    loss: str = "k25"
    loss_params: LossParams = LossParams()
    old_logprobs: Literal["behaviour", "recompute"] = Field(
        "behaviour",
        description="π_old of the loss: the engine's sampling logprobs (the off-policy gap K2.5's mask is for), "
        "or the trainer's recomputation before the update (log-ratio 0 on the first minibatch)",
    )
    optim: OptimConfig = OptimConfig()
    temperature: Schedule = Schedule(kind="constant", start=1.0, end=1.0)
    toggle: ToggleConfig | None = None
    ptx: PtxConfig | None = None
    subagent_cache: Path | None = Field(
        None,
        description="a directory: the frozen sub-agents' deterministic model calls are answered from this "
        "replay cache (agent_swarm.swarm.backends.replay_cache), so a group's samples share their sub-tasks; "
        "needs engine = 'llamacpp' (sub-agents on the pinned GGUF base)",
    )
    checkpoint_every: int = Field(1, ge=1)
    keep_checkpoints: int = Field(2, ge=1)
    keep_rollouts: bool = True

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, name: str) -> str:
        if name not in SERVING:
            raise ValueError(f"unknown serving engine {name!r}; known: {', '.join(SERVING.names)}")
        return name

    def check_names(self) -> None:
        """Fail before any compute on unknown registry names."""
        ADVANTAGES.get(self.advantage)
        LOSSES.get(self.loss)


def load_train_config(path: Path, **overrides: Any) -> TrainConfig:
    """Read a TOML or JSON config; relative paths in it are resolved against the file's directory."""
    if not path.is_file():
        raise ConfigError(f"training config {path} does not exist")
    try:
        raw: dict[str, Any] = (
            tomllib.loads(path.read_text(encoding="utf-8"))
            if path.suffix == ".toml"
            else json.loads(path.read_text(encoding="utf-8"))
        )
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not valid {path.suffix.lstrip('.') or 'JSON'}: {exc}") from None
    raw.update({k: v for k, v in overrides.items() if v is not None})
    for key in ("run_dir", "policy_model", "subagent_model", "tasks_file", "init_adapter", "subagent_cache"):
        if isinstance(raw.get(key), str) and not Path(raw[key]).is_absolute():
            raw[key] = str(path.parent / raw[key])
    try:
        cfg = TrainConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{path}: invalid training config: {model_problems(exc, '', TrainConfig)}") from None
    cfg.check_names()
    return cfg
