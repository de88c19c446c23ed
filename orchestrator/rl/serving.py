"""Who samples the rollouts and how new weights reach them: the serving kinds of ``swarm train``.

``engine`` in a training config names one of :data:`SERVING`: ``transformers`` (the trained module is
the colocated engine: nothing to push), ``vllm`` (vLLM in-process, weights pushed by
:class:`~agent_swarm.orchestrator.rl.vllm_sync.VLLMWeightSync`) or ``llamacpp`` (llama.cpp serving the GGUF base
with the LoRA adapter, exported and the engine restarted by
:class:`~agent_swarm.orchestrator.rl.lora.LlamaCppLoraSync`). A builder maps :class:`ServingInputs` to a
:class:`Serving`; another kind is one ``@SERVING.register("name")`` away.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio.to_thread

from agent_swarm.orchestrator.rl.lora import LlamaCppConfig, LlamaCppLoraSync, export_adapter
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.registry import Registry

if TYPE_CHECKING:
    import torch

    from agent_swarm.swarm.backend import ModelBackend
    from agent_swarm.swarm.backends.transformers_backend import TransformersBackend

__all__ = [
    "SERVING",
    "Serving",
    "ServingBuilder",
    "ServingInputs",
    "TransformersWeightSync",
    "WeightSync",
    "colocated_serving",
    "llamacpp_serving",
    "vllm_serving",
]


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


@dataclass(frozen=True, slots=True)
class ServingInputs:
    """What a serving kind is built from: the trained policy and the config values serving reads."""

    policy: TransformersBackend
    run_dir: Path
    dtype: str = "float32"
    policy_dir: Path | None = None
    """The policy's transformers directory (None for a LoRA policy on a GGUF base)."""
    policy_gguf: str | None = None
    """The configured GGUF model (a packaged name or a path) of a LoRA policy."""
    gguf: Path | None = None
    """That model's resolved GGUF file."""
    llamacpp: LlamaCppConfig = field(default_factory=LlamaCppConfig)
    vllm_engine_args: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Serving:
    """A serving kind's result: the engine rollouts sample from and the sync that feeds it new weights
    (both None: the policy's own module samples), and the engine's frozen base for sub-agents, if any."""

    engine: ModelBackend | None = None
    sync: WeightSync | None = None
    subagents: ModelBackend | None = None


ServingBuilder = Callable[[ServingInputs], Serving]
SERVING: Registry[ServingBuilder] = Registry("serving engine")


@SERVING.register("transformers")
def colocated_serving(inputs: ServingInputs) -> Serving:
    """The trained module is the engine: updates change it in place, nothing is pushed."""
    return Serving()


@SERVING.register("vllm")
def vllm_serving(inputs: ServingInputs) -> Serving:
    """vLLM in-process on the policy's directory; weights pushed through a safetensors file."""
    from agent_swarm.orchestrator.rl.vllm_sync import WORKER_EXTENSION, VLLMWeightSync
    from agent_swarm.swarm.backends.vllm_engine import VLLMEngineBackend

    if inputs.policy_dir is None:
        raise ConfigError("engine = 'vllm' serves a transformers model directory: set policy_model or tiny")
    args = {"dtype": inputs.dtype, **inputs.vllm_engine_args, "worker_extension_cls": WORKER_EXTENSION}
    served = VLLMEngineBackend(str(inputs.policy_dir), engine_args=args, name="orchestrator", weight_version="0")
    return Serving(engine=served, sync=VLLMWeightSync(served, inputs.run_dir / "weight-staging"))


@SERVING.register("llamacpp")
def llamacpp_serving(inputs: ServingInputs) -> Serving:
    """One llama.cpp engine: the orchestrator on the base with the adapter, sub-agents on the frozen base,
    and the adapter exported and the engine restarted after each update."""
    from agent_swarm.swarm.backends.local import LocalBackend, LocalEngine
    from agent_swarm.swarm.backends.lora_gguf import file_sha256

    gguf, model = inputs.gguf, inputs.policy_gguf
    if gguf is None or model is None:
        raise ConfigError("engine = 'llamacpp' serves a GGUF base with the LoRA adapter: set policy_gguf")
    lc = inputs.llamacpp
    adapters = inputs.run_dir / "adapters"
    first = export_adapter(inputs.policy.hf_model, gguf, adapters / "adapter-000000.gguf", version="0")
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
    return Serving(engine=orch, sync=LlamaCppLoraSync(engine, gguf, adapters), subagents=sub)
