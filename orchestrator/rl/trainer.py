"""The orchestrator-only RL trainer: rollout → rewards → update → push weights → repeat.

PARL's update (Kimi K2.5 report §4.4.2, https://arxiv.org/abs/2602.02276): only the orchestrator's
tokens are trained; the sub-agents stay frozen.

One iteration (a *step*):

1. **rollout** — K episodes per task (:func:`orchestrator.rollout.collect_rollouts`, written under
   ``run_dir/rollouts/step-NNNNNN``): the orchestrator samples from the current policy (the
   colocated :class:`~swarm.backends.transformers_backend.TransformersBackend`), sub-agents run on
   their own *frozen* backend, every episode is scored with the PARL reward at this step's λs;
2. **rewards** — optionally Toggle (budget-limited / free phases), then group advantages
   ``r − r̄`` (:data:`~swarm.rl.rewards.ADVANTAGES`, the same registry rollout collection uses);
3. **update** — with the engine paused, the policy loss (:data:`~swarm.rl.losses.LOSSES`,
   K2.5's by default) plus an optional PTX loss is minimised over ``minibatches × epochs`` optimizer
   steps, gradients clipped. π_old is the engine's sampling (behaviour) logprobs by default, so the
   K2.5 log-ratio mask and τ penalty act on the engine/trainer mismatch they exist for
   (``old_logprobs = "recompute"`` uses the trainer's own pre-update logprobs instead); the
   mismatch and the fraction of masked tokens are logged;
4. **push** — the colocated engine already holds the new weights; its ``weight_version`` is bumped
   so every later completion (and trajectory) names the policy that sampled it. A separate serving
   engine gets the weights through :class:`WeightSync`.

Only the orchestrator's parameters are given to the optimizer; the sub-agent model is a separate
module with ``requires_grad=False``. Checkpoints (policy weights, optimizer, trainer state) are
written atomically every ``checkpoint_every`` steps; :meth:`Trainer.run` resumes from the newest
one, re-running an interrupted step's rollout from what is already on disk. Metrics go to
``run_dir/metrics.jsonl``, one line per step.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib
import json
import math
import os
import random
import shutil
import sys
import time
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import anyio
import anyio.to_thread
import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.rl.gold import WorkloadTasks
from orchestrator.rl.lora import (
    LlamaCppConfig,
    LlamaCppLoraSync,
    LoraSpec,
    export_adapter,
    is_peft_model,
    load_adapter,
    load_lora_policy,
    load_tokenizer,
)
from orchestrator.rl.tiny import TinyModelSpec, build_tiny_model
from orchestrator.rollout import (
    EpisodeEntry,
    EpisodeFactory,
    RolloutConfig,
    collect_rollouts,
    orchestrator_factory,
)
from orchestrator.tasks import model_problems
from swarm.backend import ModelBackend, ToolSpec
from swarm.backends.transformers_backend import TransformersBackend, chat_dicts
from swarm.config import SwarmConfig
from swarm.errors import ConfigError, UserError
from swarm.messages import Message
from swarm.monitors import summarise_monitors
from swarm.records import AgentDefinition, AgentStatus, EpisodeRecord, Task
from swarm.rl.export import read_jsonl
from swarm.rl.losses import LOSSES, LossParams, masked_logprobs, pad_batch, ptx_loss
from swarm.rl.rewards import ADVANTAGES, PARLReward, RewardConfig, Schedule
from swarm.rl.toggle import toggle_phase, toggle_rewards, update_budgets
from swarm.rl.trajectory import TrajectoryError, build_trajectory
from tools.registry import Tool, ToolRegistry

__all__ = [
    "CheckpointState",
    "Environment",
    "OptimConfig",
    "PtxConfig",
    "SftConfig",
    "StepMetrics",
    "ToggleConfig",
    "TrainConfig",
    "Trainer",
    "TrainingSequence",
    "TransformersWeightSync",
    "WeightSync",
    "build_policy",
    "frozen_copy",
    "llamacpp_serving",
    "load_environment",
    "load_train_config",
    "sft_example",
    "state_checksum",
    "subagent_model_name",
    "workload_environment",
]

METRICS = "metrics.jsonl"
CHECKPOINTS = "checkpoints"


# -- configuration ----------------------------------------------------------------------------------


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
    callable ``(TrainConfig, tokenizer) -> Environment``), or ``tasks_file`` (JSONL; sub-agents get
    no tools).
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
        pattern="^(transformers|vllm|llamacpp)$",
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
        "replay cache (swarm.backends.replay_cache), so a group's samples share their sub-tasks; "
        "needs engine = 'llamacpp' (sub-agents on the pinned GGUF base)",
    )
    checkpoint_every: int = Field(1, ge=1)
    keep_checkpoints: int = Field(2, ge=1)
    keep_rollouts: bool = True

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


def _cache_totals(records: Sequence[EpisodeRecord]) -> dict[str, int]:
    from swarm.backends.replay_cache import cache_counts, sum_counts

    return sum_counts(cache_counts(r) for r in records)


def _cached_subagents(config: TrainConfig, sub: ModelBackend | None) -> ModelBackend:
    """The frozen sub-agents behind the replay cache: only where their weights are pinned by hash."""
    from orchestrator.backend_factory import model_identity, with_subagent_cache

    if config.engine != "llamacpp" or config.policy_gguf is None or sub is None:
        raise ConfigError(
            "subagent_cache needs sub-agents whose weights are pinned by hash: set engine = 'llamacpp' "
            "with policy_gguf and no other sub-agent model (sub-agents then run its frozen GGUF base), "
            "or remove subagent_cache"
        )
    assert config.subagent_cache is not None
    return with_subagent_cache(
        sub, sub, directory=config.subagent_cache, model_id=model_identity("local", config.policy_gguf)
    )


# -- environment ------------------------------------------------------------------------------------


@dataclass
class Environment:
    """What episodes run in: tasks, tools, predefined sub-agents, the frozen sub-agent backend,
    the reward (a :class:`~swarm.rl.rewards.PARLReward`, whose ``step`` the trainer sets) and an
    optional SFT set (conversations) for the PTX loss."""

    tasks: Sequence[Task]
    tools: ToolRegistry | Iterable[Tool] = ()
    agents: Sequence[AgentDefinition] = ()
    subagent_backend: ModelBackend | None = None
    reward: PARLReward | None = None
    sft: Sequence[Sequence[Message]] = ()
    tool_specs: Sequence[ToolSpec] = field(default_factory=tuple)
    factory: Callable[[ModelBackend, ModelBackend | None], EpisodeFactory] | None = None
    """``(engine, sub-agent backend) -> EpisodeFactory`` when episodes need more than tools and
    agents (a workload task's job builds its own fresh environment); default: a plain orchestrator."""


def workload_environment(config: TrainConfig) -> Environment:
    """Tasks of ``config.workloads``; each episode gets its task's fresh workload environment and is
    scored by the workload (``r_perf``) with the PARL terms of ``config.reward`` on top."""
    from orchestrator.eval import workload_orchestrator_factory

    modes = {w.mode for w in config.workloads}
    if len(modes) != 1:
        raise ConfigError(f"training workloads must share one mode, got {sorted(modes)}")
    mode = modes.pop()
    tasks = [t for w in config.workloads for t in w.tasks()]

    def factory(engine: ModelBackend, sub: ModelBackend | None) -> EpisodeFactory:
        return workload_orchestrator_factory(engine, sub, mode=mode)

    return Environment(tasks=tasks, reward=PARLReward(config.reward), factory=factory)


def load_environment(spec: str, config: TrainConfig, tokenizer: Any, search: Sequence[Path] = ()) -> Environment:
    """Import ``"module:attr"`` (a callable returning an :class:`Environment`) and call it."""
    mod_name, _, attr = spec.partition(":")
    if not mod_name or not attr:
        raise ConfigError(f"environment must look like 'package.module:function', got {spec!r}")
    for p in search:
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))
    try:
        factory = getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load environment {spec!r}: {exc}") from None
    env = factory(config, tokenizer)
    if not isinstance(env, Environment):
        raise ConfigError(f"environment {spec!r} returned {type(env).__name__}, not an Environment")
    return env


# -- sequences --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TrainingSequence:
    """One training sequence: ``ids`` = prompt + response, ``mask[i] = 1`` where the orchestrator
    sampled ``ids[i]``, ``behaviour_logprobs[i]`` its sampling-time logprob (0 elsewhere)."""

    ids: tuple[int, ...]
    mask: tuple[int, ...]
    behaviour_logprobs: tuple[float, ...]
    advantage: float
    temperature: float


def sft_example(
    tokenizer: Any, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()
) -> tuple[list[int], list[int]]:
    """(ids, mask) of a conversation with mask 1 on the assistant's tokens (for SFT and PTX).

    Each assistant message's tokens are the ones the template adds after the generation prompt, so
    the mask matches exactly what the model would sample at that turn.
    """
    specs = [t.to_openai() for t in tools] or None
    dicts = chat_dicts(list(messages))
    ids: list[int] = []
    mask: list[int] = []
    for i, m in enumerate(dicts):
        if m["role"] != "assistant":
            continue
        prefix = tokenizer.apply_chat_template(dicts[:i], tools=specs, tokenize=False, add_generation_prompt=True)
        full = tokenizer.apply_chat_template(dicts[: i + 1], tools=specs, tokenize=False)
        if not full.startswith(prefix):
            raise ConfigError("chat template is not prefix-stable; cannot build an SFT mask")
        p_ids = tokenizer(prefix, add_special_tokens=False)["input_ids"]
        f_ids = tokenizer(full, add_special_tokens=False)["input_ids"]
        if f_ids[: len(p_ids)] != p_ids or p_ids[: len(ids)] != ids:
            raise ConfigError("tokenization is not prefix-stable; cannot build an SFT mask")
        obs = p_ids[len(ids) :]
        ids += obs
        mask += [0] * len(obs)
        # the sampled part ends at the end-of-turn token; the template's trailing newline is context
        resp = f_ids[len(p_ids) :]
        eos = tokenizer.eos_token_id
        cut = resp.index(eos) + 1 if eos in resp else len(resp)
        ids += resp[:cut]
        mask += [1] * cut
    if not any(mask):
        raise ConfigError("SFT conversation has no assistant message to learn from")
    return ids, mask


def _episode_length(record: EpisodeRecord, kind: str) -> float:
    if kind == "critical_steps":
        return float(record.dag.critical_steps)
    return float(sum(len(t.response_token_ids or ()) for t in record.turns))


# -- weight push ------------------------------------------------------------------------------------


class WeightSync(Protocol):
    """Pushes new policy weights into a serving engine that does not share the trainer's module.

    Called in the trainer's event loop after every update (and after a resume), so an engine that
    lives in that loop (vLLM's in-process ``AsyncLLM``) can be driven from here.
    """

    async def push(self, model: torch.nn.Module, version: int) -> None: ...


class TransformersWeightSync:
    """Copy the trainer's weights into another :class:`TransformersBackend` (a separate engine)."""

    def __init__(self, engine: TransformersBackend) -> None:
        self.engine = engine

    async def push(self, model: torch.nn.Module, version: int) -> None:
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        await anyio.to_thread.run_sync(self.engine.load_weights, state, version)


def state_checksum(model: torch.nn.Module) -> str:
    """sha256 over every parameter and buffer (name, dtype, shape, bytes): equal iff weights are equal."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


# -- checkpoints ------------------------------------------------------------------------------------


class CheckpointState(_Frozen):
    step: int  # number of completed steps
    weight_version: int
    budgets: dict[str, float] | None = None
    python_rng: Any = None


class StepMetrics(BaseModel):
    """One line of ``metrics.jsonl``."""

    model_config = ConfigDict(extra="forbid")

    step: int
    loss: float
    policy_loss: float
    ptx_loss: float | None = None
    reward: float
    r_perf: float
    r_parallel: float
    r_finish: float
    lambda1: float
    lambda2: float
    temperature: float
    toggle_phase: int | None = None
    toggled_zero: int = 0
    mean_critical_steps: float
    mean_total_steps: float
    mean_parallel_width: float
    finish_rate: float
    masked_token_frac: float
    ratio_mismatch: float
    grad_norm: float
    episodes: int
    trained_sequences: int
    trained_tokens: int
    sequence_tokens: int = Field(0, description="all tokens the update ran through (prompts and observations too)")
    dropped_episodes: int
    split_episodes: int = 0
    statuses: dict[str, int]
    reward_details: dict[str, float] = Field(
        default_factory=dict,
        description="mean over the step's episodes of each numeric (or boolean) reward detail the verifier "
        "or workload reports (e.g. exact fan-out, over-assignment, call F1)",
    )
    weight_version: int
    rollout_s: float
    update_s: float
    subagent_cache: dict[str, int] = Field(
        default_factory=dict, description="the sub-agent replay cache's hits, misses and bypassed calls this step"
    )
    monitors: dict[str, float] = Field(
        default_factory=dict,
        description="collapse monitors over the step's episodes (swarm.monitors.summarise_monitors): share of "
        "serial collapse and spurious parallelism, mean finish rate and straggler ratio",
    )


# -- the trainer ------------------------------------------------------------------------------------


class Trainer:
    """``Trainer(config, policy, env).run()``; or :meth:`from_config` to build everything from a file.

    ``policy`` holds the trained module. By default it is also the colocated engine: rollouts sample
    from it and updates change its module in place. With ``engine`` (e.g. a
    :class:`~swarm.backends.vllm_engine.VLLMEngineBackend`), rollouts sample from that separate
    serving engine instead, and ``sync`` (required then, e.g.
    :class:`~orchestrator.rl.vllm_sync.VLLMWeightSync`) pushes the new weights into it after each
    update; the engine's logprobs are the behaviour policy and their gap to the trainer's
    recomputation is logged as ``ratio_mismatch``.
    """

    def __init__(
        self,
        config: TrainConfig,
        policy: TransformersBackend,
        env: Environment,
        *,
        engine: ModelBackend | None = None,
        sync: WeightSync | None = None,
        on_step: Callable[[StepMetrics], None] | None = None,
        base_gguf: Path | None = None,
    ) -> None:
        config.check_names()
        if engine is not None and engine is not policy and sync is None:
            raise ConfigError("a separate serving engine needs a WeightSync to receive the new weights (sync=...)")
        if not env.tasks:
            raise ConfigError("the training environment has no tasks")
        if len({t.id for t in env.tasks}) != len(env.tasks) or not all(t.id for t in env.tasks):
            raise ConfigError("training tasks need unique, non-empty ids (they name the groups)")
        self.config = config
        self.policy = policy
        self.env = env
        self.sync = sync
        self.base_gguf = base_gguf
        """The GGUF base of a LoRA policy: checkpoints then also hold the adapter in llama.cpp's format."""
        self.engine: ModelBackend = engine or policy
        self.on_step = on_step
        self.model: Any = policy.hf_model  # a transformers PreTrainedModel
        if env.subagent_backend is None:
            env.subagent_backend = frozen_copy(policy, name=f"{policy.model}-frozen")
        sub_model = getattr(env.subagent_backend, "hf_model", None)
        if sub_model is not None and any(p is q for p in sub_model.parameters() for q in self.model.parameters()):
            raise ConfigError("the sub-agent backend shares parameters with the policy; give it a frozen copy")
        self.reward = env.reward or PARLReward(config.reward)
        self.run_dir = config.run_dir
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.optimizers = _optimizers(self.model, config.optim)
        self.step = 0
        self.budgets: dict[str, float] | None = None
        self.rng = random.Random(config.seed)
        self._sft = [sft_example(policy.tokenizer, conv, env.tool_specs) for conv in env.sft] if config.ptx else []
        if config.ptx and not self._sft:
            raise ConfigError("ptx is configured but the environment has no SFT conversations")

    # -- construction from a config ----------------------------------------------------------------

    @classmethod
    def from_config(cls, config: TrainConfig, *, config_dir: Path | None = None, **kwargs: Any) -> Trainer:
        policy, policy_dir, gguf = build_policy(config)
        search = [p for p in (config_dir, Path.cwd()) if p is not None]
        if config.environment:
            env = load_environment(config.environment, config, policy.tokenizer, search)
        elif config.workloads:
            env = workload_environment(config)
        else:
            env = _tasks_environment(config)
        if config.subagent_model is not None:
            env.subagent_backend = TransformersBackend.from_pretrained(
                config.subagent_model, name="subagent", device=config.device, dtype=config.dtype
            )
            _freeze(env.subagent_backend.hf_model)
        sub_base: ModelBackend | None = None
        if config.engine == "vllm":
            from orchestrator.rl.vllm_sync import WORKER_EXTENSION, VLLMWeightSync
            from swarm.backends.vllm_engine import VLLMEngineBackend

            if policy_dir is None:
                raise ConfigError("engine = 'vllm' serves a transformers model directory: set policy_model or tiny")
            args = {"dtype": config.dtype, **config.vllm_engine_args, "worker_extension_cls": WORKER_EXTENSION}
            served = VLLMEngineBackend(str(policy_dir), engine_args=args, name="orchestrator", weight_version="0")
            kwargs.setdefault("engine", served)
            kwargs.setdefault("sync", VLLMWeightSync(served, config.run_dir / "weight-staging"))
        elif config.engine == "llamacpp":
            if gguf is None or config.policy_gguf is None:
                raise ConfigError("engine = 'llamacpp' serves a GGUF base with the LoRA adapter: set policy_gguf")
            orch, sub, sync = llamacpp_serving(config, policy, config.policy_gguf, gguf)
            sub_base = sub  # the engine's frozen GGUF base: the only sub-agents the cache can pin
            kwargs.setdefault("engine", orch)
            kwargs.setdefault("sync", sync)
            if env.subagent_backend is None:
                env.subagent_backend = sub
        if config.subagent_cache is not None:
            # only the engine's own base model: a subagent_model or an environment's backend is not pinned
            pinned = sub_base if sub_base is not None and env.subagent_backend is sub_base else None
            env.subagent_backend = _cached_subagents(config, pinned)
        return cls(config, policy, env, base_gguf=gguf, **kwargs)

    # -- the loop ----------------------------------------------------------------------------------

    def run(self, steps: int | None = None) -> list[StepMetrics]:
        """Blocking :meth:`arun` (one event loop for the whole run)."""
        return anyio.run(self.arun, steps)

    async def arun(self, steps: int | None = None) -> list[StepMetrics]:
        """Run until ``config.steps`` (or ``steps`` more), resuming from the newest checkpoint."""
        await self.aresume()
        target = self.config.steps if steps is None else self.step + steps
        out = []
        while self.step < target:
            out.append(await self.atrain_step())
        return out

    def train_step(self) -> StepMetrics:
        """Blocking :meth:`atrain_step`."""
        return anyio.run(self.atrain_step)

    async def atrain_step(self) -> StepMetrics:
        """One iteration: rollout → rewards (Toggle) → advantages → update → push → log/checkpoint."""
        cfg = self.config
        step = self.step
        torch.manual_seed(cfg.seed * 1_000_003 + step)
        temperature = cfg.temperature.value(step)
        t0 = time.perf_counter()
        records = await self._rollout(step, temperature)
        rollout_s = time.perf_counter() - t0

        rewards, phase, zeroed = self.shape_rewards(step, records)
        advantages = ADVANTAGES.get(cfg.advantage)(rewards, [r.task.id for r in records])
        seqs, dropped, split = self._sequences(records, advantages, temperature)

        t1 = time.perf_counter()
        upd = await anyio.to_thread.run_sync(self._paused_update, seqs)
        if self.sync is not None:
            await self.sync.push(self.model, self.policy.weight_version)
        update_s = time.perf_counter() - t1
        self.step = step + 1
        metrics = self._metrics(
            step, records, rewards, upd, temperature, phase, zeroed, seqs, dropped, split, rollout_s, update_s
        )
        _append_jsonl(self.run_dir / METRICS, metrics.model_dump(mode="json"))
        if self.step % cfg.checkpoint_every == 0 or self.step == cfg.steps:
            self.save_checkpoint()
        if not cfg.keep_rollouts:
            shutil.rmtree(self._rollout_dir(step), ignore_errors=True)
        if self.on_step is not None:
            self.on_step(metrics)
        return metrics

    def shape_rewards(self, step: int, records: Sequence[EpisodeRecord]) -> tuple[list[float], int | None, int]:
        """(rewards the update uses, Toggle phase or None, responses Toggle zeroed) of a step's episodes.

        The reward is the PARL total; Toggle (when configured) judges group accuracy on ``r_perf`` and
        gives every task a length budget the first time it has a correct response (then keeps it).
        """
        cfg = self.config
        rewards = [r.reward.total if r.reward else 0.0 for r in records]
        if cfg.toggle is None:
            return rewards, None, 0
        groups = [r.task.id for r in records]
        perf = [r.reward.r_perf if r.reward else 0.0 for r in records]
        lengths = [_episode_length(r, cfg.toggle.length) for r in records]
        self.budgets = update_budgets(self.budgets, perf, lengths, groups, cfg.toggle.p, cfg.toggle.correct_at)
        toggled = toggle_rewards(rewards, perf, lengths, groups, self.budgets, step, cfg.toggle.m, cfg.toggle.lam)
        zeroed = sum(1 for a, b in zip(rewards, toggled, strict=True) if a != b)
        return toggled, toggle_phase(step, cfg.toggle.m), zeroed

    async def _disconnect(self) -> None:
        """Close the HTTP connections of the backends on the serving llama.cpp engine (they belong to this
        event loop; the next rollout, maybe in another loop, reconnects). The engine keeps running."""
        from swarm.backends.local import LocalBackend

        serving = getattr(self.sync, "engine", None)
        for b in (self.engine, self.env.subagent_backend):
            if isinstance(b, LocalBackend) and serving is not None and b.engine is serving:
                await b.aclose()

    def close(self) -> None:
        """Stop a llama.cpp serving engine this trainer pushes adapters into (nothing else needs closing)."""
        engine = getattr(self.sync, "engine", None)
        if engine is not None and hasattr(engine, "close"):
            engine.close()

    def _rollout_dir(self, step: int) -> Path:
        return self.run_dir / "rollouts" / f"step-{step:06d}"

    def _paused_update(self, seqs: list[TrainingSequence]) -> dict[str, float]:
        """The update with the colocated engine paused, then the new weight version."""
        with self.policy.paused():
            upd = self.update(seqs)
            self.policy.weight_version += 1
        return upd

    async def _rollout(self, step: int, temperature: float) -> list[EpisodeRecord]:
        cfg = self.config
        tasks = list(self.env.tasks)
        r = random.Random(cfg.seed * 7919 + step)
        picked = tasks if cfg.tasks_per_step >= len(tasks) else r.sample(tasks, cfg.tasks_per_step)
        sampling = cfg.swarm.orchestrator_sampling.model_copy(update={"temperature": temperature})
        swarm_cfg = cfg.swarm.model_copy(update={"orchestrator_sampling": sampling})
        if self.env.factory is not None:
            factory = self.env.factory(self.engine, self.env.subagent_backend)
        else:
            factory = orchestrator_factory(
                self.engine, subagent_backend=self.env.subagent_backend, tools=self.env.tools, agents=self.env.agents
            )
        self.reward.step = step
        out = self._rollout_dir(step)
        # the trajectories on disk carry the advantages of the estimator the update uses
        rollout_cfg = cfg.rollout.model_copy(update={"seed": cfg.seed * 1_000_003 + step, "advantage": cfg.advantage})

        try:
            await collect_rollouts(
                picked, factory, out_dir=out, config=rollout_cfg, swarm_config=swarm_cfg, reward=self.reward
            )
        finally:
            await self._disconnect()
        entries = read_jsonl(out / "episodes.jsonl", EpisodeEntry, on_error="skip")
        wanted = {t.id for t in picked}
        records = [
            e.record for e in sorted(entries, key=lambda e: (e.group_id, e.sample_index)) if e.group_id in wanted
        ]
        if not records:
            raise UserError(f"step {step}: no episode finished (see {out / 'failures.jsonl'})")
        return records

    def _sequences(
        self, records: Sequence[EpisodeRecord], advantages: Sequence[float], temperature: float
    ) -> tuple[list[TrainingSequence], int, int]:
        """Training sequences of the episodes: (sequences, dropped episodes, episodes split per turn).

        An episode becomes one sequence (its flattened trajectory: observations masked out). When its
        turns do not chain (drift: the template re-rendered earlier text differently), each turn
        becomes its own sequence — still the exact sampled ids, never re-tokenized text. Episodes
        without token ids or logprobs are dropped and counted.
        """
        temp = temperature if temperature > 0 else 1.0  # greedy turns report T=1 logprobs
        seqs: list[TrainingSequence] = []
        dropped = split = 0
        for rec, adv in zip(records, advantages, strict=True):
            try:
                traj = build_trajectory(rec, advantage=adv, include_transcripts=False)
            except TrajectoryError:
                turns = [
                    t
                    for t in rec.turns
                    if t.prompt_token_ids is not None
                    and t.response_token_ids
                    and t.response_logprobs is not None
                    and len(t.response_logprobs) == len(t.response_token_ids)
                ]
                if not turns or len(turns) != len(rec.turns):
                    dropped += 1
                    continue
                split += 1
                for t in turns:
                    assert t.prompt_token_ids is not None and t.response_token_ids is not None
                    assert t.response_logprobs is not None
                    n_p, n_r = len(t.prompt_token_ids), len(t.response_token_ids)
                    seqs.append(
                        TrainingSequence(
                            ids=t.prompt_token_ids + t.response_token_ids,
                            mask=(0,) * n_p + (1,) * n_r,
                            behaviour_logprobs=(0.0,) * n_p + t.response_logprobs,
                            advantage=adv,
                            temperature=temp,
                        )
                    )
                continue
            ids = traj.prompt_ids + traj.response_ids
            mask = (0,) * len(traj.prompt_ids) + traj.response_mask
            lps = (0.0,) * len(traj.prompt_ids) + traj.response_logprobs
            seqs.append(TrainingSequence(ids=ids, mask=mask, behaviour_logprobs=lps, advantage=adv, temperature=temp))
        return seqs, dropped, split

    # -- the update --------------------------------------------------------------------------------

    def update(self, seqs: list[TrainingSequence]) -> dict[str, float]:
        """One update on a rollout's sequences (call with the engine paused); returns the step's update metrics."""
        cfg = self.config
        model = self.model
        device = next(model.parameters()).device
        loss_fn = LOSSES.get(cfg.loss)
        stats: dict[str, list[float]] = {
            "loss": [],
            "policy_loss": [],
            "ptx_loss": [],
            "grad_norm": [],
            "masked_token_frac": [],
            "ratio_mismatch": [],
        }
        if not seqs:
            return {
                "loss": 0.0,
                "policy_loss": 0.0,
                "grad_norm": 0.0,
                "masked_token_frac": 0.0,
                "ratio_mismatch": 0.0,
                "tokens": 0,
            }
        # π_old: the behaviour (sampling) logprobs, or the trainer's recomputation before any change
        old: list[torch.Tensor] = []
        mismatch_num = 0.0
        mismatch_den = 0
        if cfg.old_logprobs == "recompute":
            model.eval()
            with torch.no_grad():
                for chunk in _chunks(list(range(len(seqs))), cfg.optim.micro_batch):
                    batch = [seqs[i] for i in chunk]
                    ids, mask, beh, _, temps = _pad(batch, device)
                    lp = masked_logprobs(model, ids, mask, temps)
                    for j, s in enumerate(batch):
                        n = len(s.ids) - 1
                        old.append(lp[j, :n].detach().clone())
                        m = mask[j, :n]
                        mismatch_num += float(((lp[j, :n] - beh[j, :n]).abs() * m).sum())
                        mismatch_den += int(m.sum())
        else:
            old = [torch.tensor(s.behaviour_logprobs[1:], dtype=torch.float32, device=device) for s in seqs]
        measured = cfg.old_logprobs == "behaviour"  # measure the gap on the first minibatch's forward instead
        model.train()
        order = list(range(len(seqs)))
        total_tokens = sum(sum(s.mask[1:]) for s in seqs)
        for _ in range(cfg.optim.epochs):
            self.rng.shuffle(order)
            per_mb = math.ceil(len(order) / cfg.optim.minibatches)
            for mb in _chunks(order, per_mb):
                for opt in self.optimizers:
                    opt.zero_grad(set_to_none=True)
                mb_tokens = sum(sum(seqs[i].mask[1:]) for i in mb)
                mb_loss = 0.0
                mb_policy = 0.0
                masked: list[float] = []
                for chunk in _chunks(mb, cfg.optim.micro_batch):
                    batch = [seqs[i] for i in chunk]
                    ids, mask, beh, adv, temps = _pad(batch, device)
                    lp = masked_logprobs(model, ids, mask, temps)
                    old_lp = torch.zeros_like(lp)
                    for j, i in enumerate(chunk):
                        old_lp[j, : old[i].shape[0]] = old[i]
                    if measured:  # no optimizer step yet: these are the pre-update logprobs
                        mismatch_num += float(((lp.detach() - beh).abs() * mask).sum())
                        mismatch_den += int(mask.sum())
                    out = loss_fn(lp, old_lp, adv, mask, cfg.loss_params, float(max(mb_tokens, 1)))
                    out.loss.backward()  # type: ignore[no-untyped-call]
                    mb_loss += float(out.loss.item())
                    mb_policy += float(out.loss.item())
                    masked.append(out.metrics["masked_token_frac"])
                if cfg.ptx is not None and self._sft:
                    picks = [self._sft[self.rng.randrange(len(self._sft))] for _ in range(cfg.ptx.batch_size)]
                    ids, mask = pad_batch(picks, device)
                    lp = masked_logprobs(model, ids, mask[:, 1:], torch.ones(ids.shape[0], device=device))
                    px = ptx_loss(lp, mask[:, 1:]) * cfg.ptx.coef
                    px.backward()  # type: ignore[no-untyped-call]
                    mb_loss += float(px.item())
                    stats["ptx_loss"].append(float(px.item()) / cfg.ptx.coef if cfg.ptx.coef else 0.0)
                params = [p for p in model.parameters() if p.grad is not None]
                # the total norm before clipping (max_norm=inf only measures); 0 when nothing has a gradient
                gn = float(torch.nn.utils.clip_grad_norm_(params, cfg.optim.grad_clip or math.inf))
                if not math.isfinite(gn):
                    for opt in self.optimizers:
                        opt.zero_grad(set_to_none=True)  # a non-finite gradient must not reach the weights
                else:
                    for opt in self.optimizers:
                        opt.step()
                stats["loss"].append(mb_loss)
                stats["policy_loss"].append(mb_policy)
                stats["grad_norm"].append(gn)
                stats["masked_token_frac"].append(sum(masked) / len(masked) if masked else 0.0)
                measured = False
        model.eval()
        res = {k: (sum(v) / len(v)) for k, v in stats.items() if v}
        res["ratio_mismatch"] = mismatch_num / max(mismatch_den, 1)
        res["tokens"] = float(total_tokens)
        res["sequence_tokens"] = float(sum(len(s.ids) for s in seqs) * cfg.optim.epochs)
        return res

    # -- metrics, checkpoints ----------------------------------------------------------------------

    def _metrics(
        self,
        step: int,
        records: Sequence[EpisodeRecord],
        rewards: Sequence[float],
        upd: dict[str, float],
        temperature: float,
        phase: int | None,
        zeroed: int,
        seqs: Sequence[TrainingSequence],
        dropped: int,
        split: int,
        rollout_s: float,
        update_s: float,
    ) -> StepMetrics:
        def mean(xs: Iterable[float]) -> float:
            v = list(xs)
            return sum(v) / len(v) if v else 0.0

        rr = [r.reward for r in records if r.reward is not None]
        subs = [s for r in records for s in r.subagent_results]
        statuses: dict[str, int] = {}
        for r in records:
            statuses[r.status.value] = statuses.get(r.status.value, 0) + 1
        widths = [w for r in records for w in r.dag.stage_widths if w]
        l1, l2 = self.reward.lambdas(step)
        return StepMetrics(
            step=step,
            loss=upd.get("loss", 0.0),
            policy_loss=upd.get("policy_loss", 0.0),
            ptx_loss=upd.get("ptx_loss"),
            reward=mean(rewards),
            r_perf=mean(x.r_perf for x in rr),
            r_parallel=mean(x.r_parallel for x in rr),
            r_finish=mean(x.r_finish for x in rr),
            lambda1=l1,
            lambda2=l2,
            temperature=temperature,
            toggle_phase=phase,
            toggled_zero=zeroed,
            mean_critical_steps=mean(r.dag.critical_steps for r in records),
            mean_total_steps=mean(r.dag.total_steps for r in records),
            mean_parallel_width=mean(widths),
            finish_rate=mean(float(s.status is AgentStatus.COMPLETED) for s in subs) if subs else 0.0,
            masked_token_frac=upd.get("masked_token_frac", 0.0),
            ratio_mismatch=upd.get("ratio_mismatch", 0.0),
            grad_norm=upd.get("grad_norm", 0.0),
            episodes=len(records),
            trained_sequences=len(seqs),
            trained_tokens=int(upd.get("tokens", 0)),
            sequence_tokens=int(upd.get("sequence_tokens", 0)),
            dropped_episodes=dropped,
            split_episodes=split,
            statuses=statuses,
            reward_details=_mean_details(rr),
            weight_version=self.policy.weight_version,
            rollout_s=rollout_s,
            update_s=update_s,
            subagent_cache=_cache_totals(records),
            monitors=summarise_monitors(records),
        )

    def save_checkpoint(self) -> Path:
        """Write ``checkpoints/step-NNNNNN`` atomically (tmp dir + rename) and prune old ones."""
        root = self.run_dir / CHECKPOINTS
        root.mkdir(parents=True, exist_ok=True)
        final = root / f"step-{self.step:06d}"
        tmp = root / f".tmp-step-{self.step:06d}"
        shutil.rmtree(tmp, ignore_errors=True)
        if is_peft_model(self.model):  # the adapter only (the base is the GGUF), plus its llama.cpp form
            self.model.save_pretrained(tmp / "policy", save_embedding_layers=False)
            if self.base_gguf is not None:
                export_adapter(self.model, self.base_gguf, tmp / "adapter.gguf", version=str(self.step))
        else:
            self.model.save_pretrained(tmp / "policy")
            self.policy.tokenizer.save_pretrained(tmp / "policy")
        torch.save([o.state_dict() for o in self.optimizers], tmp / "optimizer.pt")
        state = CheckpointState(
            step=self.step,
            weight_version=self.policy.weight_version,
            budgets=self.budgets,
            python_rng=_jsonable_rng(self.rng.getstate()),
        )
        (tmp / "state.json").write_text(state.model_dump_json(indent=2), encoding="utf-8")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        done = sorted(p for p in root.glob("step-*") if (p / "state.json").is_file())
        for old in done[: -self.config.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def latest_checkpoint(self) -> Path | None:
        root = self.run_dir / CHECKPOINTS
        done = sorted(p for p in root.glob("step-*") if (p / "state.json").is_file())
        return done[-1] if done else None

    def resume(self) -> int:
        """Blocking :meth:`aresume`."""
        return anyio.run(self.aresume)

    async def aresume(self) -> int:
        """Load the newest complete checkpoint (if any); drop metrics lines of steps not in it."""
        ckpt = self.latest_checkpoint()
        if ckpt is None or self.step > 0:
            return self.step
        from safetensors.torch import load_file

        state = CheckpointState.model_validate_json((ckpt / "state.json").read_text(encoding="utf-8"))
        with self.policy.paused():
            if is_peft_model(self.model):
                load_adapter(self.model, ckpt / "policy")
            else:
                weights: dict[str, torch.Tensor] = {}
                for f in sorted((ckpt / "policy").glob("*.safetensors")):
                    weights.update(load_file(f))
                missing, unexpected = self.model.load_state_dict(weights, strict=False)
                if unexpected or [k for k in missing if not k.endswith("lm_head.weight")]:
                    raise ConfigError(
                        f"checkpoint {ckpt} does not match the policy model: missing {missing[:5]}, "
                        f"unexpected {unexpected[:5]}"
                    )
            self.policy.weight_version = state.weight_version
        for opt, sd in zip(self.optimizers, torch.load(ckpt / "optimizer.pt", weights_only=True), strict=True):
            opt.load_state_dict(sd)
        self.step = state.step
        self.budgets = state.budgets
        if state.python_rng is not None:
            self.rng.setstate(_tuple_rng(state.python_rng))
        _truncate_metrics(self.run_dir / METRICS, state.step)
        if self.sync is not None:
            await self.sync.push(self.model, self.policy.weight_version)
        return self.step


# -- helpers ----------------------------------------------------------------------------------------


def build_policy(
    config: TrainConfig, *, warm_start: bool = True
) -> tuple[TransformersBackend, Path | None, Path | None]:
    """(policy, its transformers directory or None, its GGUF base or None) from the config.

    With ``warm_start`` the SFT stage's result (``run_dir/sft/policy``) is the starting point when
    it exists (and ``init_adapter`` / ``policy_model`` do not say otherwise).
    """
    run_dir = config.run_dir
    if config.policy_gguf is not None:
        from swarm.backends.local import resolve_model

        _, gguf = resolve_model(config.policy_gguf)
        tok = load_tokenizer(gguf, run_dir / "tokenizer")
        sft = run_dir / "sft" / "policy"
        warm = warm_start and (sft / "adapter_model.safetensors").is_file()
        init = config.init_adapter or (sft if warm else None)
        policy = load_lora_policy(gguf, config.lora, dtype=config.dtype, tokenizer=tok, adapter=init)
        return policy, None, gguf
    policy_dir = config.policy_model
    if policy_dir is None:
        if config.tiny is None:
            raise ConfigError(
                "set policy_gguf (a packaged model + LoRA), policy_model (a transformers directory) or tiny"
            )
        policy_dir = run_dir / "init-policy"
        if not (policy_dir / "config.json").exists():
            build_tiny_model(policy_dir, config.tiny)
    sft_dir = run_dir / "sft" / "policy"
    if warm_start and config.policy_model is None and (sft_dir / "config.json").is_file():
        policy_dir = sft_dir  # the SFT stage's warm start
    policy = TransformersBackend.from_pretrained(
        policy_dir, name="orchestrator", device=config.device, dtype=config.dtype
    )
    return policy, policy_dir, None


def subagent_model_name(config: TrainConfig, policy: TransformersBackend) -> str | None:
    """The model name the sub-agents of a run built from ``config`` report (None: set by the environment)."""
    if config.engine == "llamacpp" and config.policy_gguf is not None:
        from swarm.backends.local import LOCAL_MODELS

        return config.policy_gguf if config.policy_gguf in LOCAL_MODELS else Path(config.policy_gguf).stem
    if config.subagent_model is not None:
        return "subagent"
    if config.environment:
        return None
    return f"{policy.model}-frozen"


def llamacpp_serving(
    config: TrainConfig, policy: TransformersBackend, model: str, gguf: Path
) -> tuple[ModelBackend, ModelBackend, LlamaCppLoraSync]:
    """(orchestrator backend with the adapter, frozen base for sub-agents, weight sync) on one llama.cpp engine."""
    from swarm.backends.local import LocalBackend, LocalEngine
    from swarm.backends.lora_gguf import file_sha256

    lc = config.llamacpp
    first = export_adapter(policy.hf_model, gguf, config.run_dir / "adapters" / "adapter-000000.gguf", version="0")
    engine = LocalEngine(
        model,
        slots=lc.slots,
        ctx_per_slot=lc.ctx_per_slot,
        threads=lc.threads,
        lora_adapters=[first],
        adapter_slots=lc.adapter_slots,
        adapter_version=f"0:{file_sha256(first)[:12]}",
    )
    engine.start()
    orch = LocalBackend(engine=engine, lora_scale=1.0, constrain_actions=lc.constrain_actions)
    sub = LocalBackend(engine=engine, constrain_actions=lc.constrain_actions)
    return orch, sub, LlamaCppLoraSync(engine, gguf, config.run_dir / "adapters")


def frozen_copy(backend: TransformersBackend, *, name: str) -> TransformersBackend:
    """A separate, gradient-free copy of a backend's model (sub-agents run on the initial checkpoint).

    For a LoRA policy the copy is the base model without the adapter (sub-agents are the frozen base).
    """
    model = copy.deepcopy(backend.hf_model)
    if is_peft_model(model):
        model = model.unload()
    _freeze(model)
    return TransformersBackend(model, backend.tokenizer, name=name)


def _freeze(model: torch.nn.Module) -> None:
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)


def _tasks_environment(config: TrainConfig) -> Environment:
    from orchestrator.rollout import load_task_file

    if config.tasks_file is None:
        raise ConfigError("set environment ('module:function') or tasks_file (JSONL tasks) in the training config")
    tasks, _problems = load_task_file(config.tasks_file, on_malformed="fail")
    return Environment(tasks=tasks, reward=PARLReward(config.reward))


def _optimizers(model: Any, cfg: OptimConfig) -> list[torch.optim.Optimizer]:
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ConfigError("the policy model has no trainable parameters")
    if cfg.name == "adamw":
        return [torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)]
    muon_cls = getattr(torch.optim, "Muon", None)
    if muon_cls is None:
        raise ConfigError(f"optimizer 'muon' needs torch.optim.Muon, which torch {torch.__version__} lacks; use adamw")
    embeds = {id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
    out_emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if out_emb is not None:
        embeds |= {id(p) for p in out_emb.parameters()}
    hidden = [p for p in params if p.dim() == 2 and id(p) not in embeds]
    rest = [p for p in params if p.dim() != 2 or id(p) in embeds]
    opts: list[torch.optim.Optimizer] = [muon_cls(hidden, lr=cfg.lr, weight_decay=cfg.weight_decay)]
    if rest:
        opts.append(torch.optim.AdamW(rest, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay))
    return opts


def _chunks(xs: list[int], n: int) -> list[list[int]]:
    return [xs[i : i + n] for i in range(0, len(xs), max(n, 1))]


def _pad(batch: Sequence[TrainingSequence], device: torch.device) -> tuple[torch.Tensor, ...]:
    """ids [B, L]; mask/behaviour logprobs shifted to next-token positions [B, L−1]; adv [B]; temps [B]."""
    width = max(len(s.ids) for s in batch)
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    mask = torch.zeros(len(batch), width - 1)
    beh = torch.zeros(len(batch), width - 1)
    for i, s in enumerate(batch):
        n = len(s.ids)
        ids[i, :n] = torch.tensor(s.ids)
        mask[i, : n - 1] = torch.tensor(s.mask[1:], dtype=torch.float32)
        beh[i, : n - 1] = torch.tensor(s.behaviour_logprobs[1:])
    adv = torch.tensor([s.advantage for s in batch])
    temps = torch.tensor([s.temperature for s in batch])
    return ids.to(device), mask.to(device), beh.to(device), adv.to(device), temps.to(device)


def _mean_details(rewards: Sequence[Any]) -> dict[str, float]:
    """Mean of every numeric or boolean reward detail, over the episodes that report it."""
    sums: dict[str, list[float]] = {}
    for r in rewards:
        for k, v in r.details.items():
            if isinstance(v, bool | int | float) and math.isfinite(float(v)):
                sums.setdefault(k, []).append(float(v))
    return {k: sum(v) / len(v) for k, v in sorted(sums.items())}


def _append_jsonl(path: Path, data: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(data, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _truncate_metrics(path: Path, completed_steps: int) -> None:
    """Keep only metrics of steps a checkpoint covers (a resumed step is re-run and re-logged)."""
    if not path.exists():
        return
    keep = []
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):
            if json.loads(line).get("step", 1 << 60) < completed_steps:
                keep.append(line)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(x + "\n" for x in keep), encoding="utf-8")
    os.replace(tmp, path)


def _jsonable_rng(state: Any) -> Any:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _tuple_rng(data: Any) -> Any:
    version, internal, gauss = data
    return (version, tuple(internal), gauss)
