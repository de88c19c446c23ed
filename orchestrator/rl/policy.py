"""The trained policy and the frozen sub-agent models of a training run, built from its config."""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from agent_swarm.orchestrator.rl.config import TrainConfig
from agent_swarm.orchestrator.rl.lora import is_peft_model, load_lora_policy, load_tokenizer
from agent_swarm.orchestrator.rl.tiny import build_tiny_model
from agent_swarm.swarm.backends.transformers_backend import TransformersBackend
from agent_swarm.swarm.errors import ConfigError

__all__ = ["build_policy", "freeze", "frozen_copy", "frozen_model", "subagent_model_name"]


def build_policy(
    config: TrainConfig, *, warm_start: bool = True
) -> tuple[TransformersBackend, Path | None, Path | None]:
    """(policy, its transformers directory or None, its GGUF base or None) from the config.

    With ``warm_start`` the SFT stage's result (``run_dir/sft/policy``) is the starting point when
    it exists (and ``init_adapter`` / ``policy_model`` do not say otherwise).
    """
    run_dir = config.run_dir
    if config.policy_gguf is not None:
        from agent_swarm.swarm.backends.local import resolve_model

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
        from agent_swarm.swarm.backends.local import LOCAL_MODELS

        return config.policy_gguf if config.policy_gguf in LOCAL_MODELS else Path(config.policy_gguf).stem
    if config.subagent_model is not None:
        return "subagent"
    if config.environment:
        return None
    return f"{policy.model}-frozen"


def frozen_copy(backend: TransformersBackend, *, name: str) -> TransformersBackend:
    """A separate, gradient-free copy of a backend's model (sub-agents run on the initial checkpoint).

    For a LoRA policy the copy is the base model without the adapter (sub-agents are the frozen base).
    """
    model = copy.deepcopy(backend.hf_model)
    if is_peft_model(model):
        model = model.unload()
    freeze(model)
    return TransformersBackend(model, backend.tokenizer, name=name)


def freeze(model: torch.nn.Module) -> None:
    """Evaluation mode and no gradients: a frozen sub-agent model."""
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)


def frozen_model(path: Path, *, name: str, device: str, dtype: str) -> TransformersBackend:
    """A transformers model directory loaded for sub-agents: gradient-free, in evaluation mode."""
    backend = TransformersBackend.from_pretrained(path, name=name, device=device, dtype=dtype)
    freeze(backend.hf_model)
    return backend
