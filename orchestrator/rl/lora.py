"""The real orchestrator policy: a packaged GGUF model in transformers with a trainable LoRA adapter.

Only the adapter trains (``peft``); the base weights are the GGUF's, dequantised by transformers'
GGUF loader (float32 values of the Q4/Q8 blocks, so the trainer and llama.cpp start from the same
numbers). After every update the adapter is exported to llama.cpp's LoRA GGUF
(:func:`agent_swarm.swarm.backends.lora_gguf.export_lora_gguf`) and the serving engine is restarted with it
(:class:`LlamaCppLoraSync`): one llama.cpp engine then serves the frozen base to sub-agents and
base + adapter to the orchestrator (per-request ``lora`` scales), and every orchestrator completion
carries the adapter's version (``"<step>:<sha256[:12]>"``) as its ``weight_version``.

Needs the ``rl`` extra (torch, transformers, gguf, accelerate, peft).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field

from agent_swarm.swarm.backends.lora_gguf import export_lora_gguf, file_sha256
from agent_swarm.swarm.backends.transformers_backend import TransformersBackend
from agent_swarm.swarm.errors import ConfigError

__all__ = [
    "ADAPTER_GGUF",
    "LlamaCppConfig",
    "LlamaCppLoraSync",
    "LoraSpec",
    "adapter_tensors",
    "export_adapter",
    "is_peft_model",
    "load_adapter",
    "load_lora_policy",
    "load_tokenizer",
]

ADAPTER_GGUF = "adapter.gguf"


class LoraSpec(BaseModel):
    """The LoRA adapter: rank, ``alpha`` (PEFT ``lora_alpha``), dropout and the adapted projections."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    r: int = Field(16, ge=1)
    alpha: int = Field(32, gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    seed: int = Field(0, description="initialisation of lora_A (lora_B starts at 0: the adapter starts as a no-op)")
    gradient_checkpointing: bool = Field(
        True,
        description="recompute each layer's activations in the backward pass: ~1/3 more compute, a fraction "
        "of the memory (a 2k-token sequence of the 0.5B otherwise holds several GB of activations)",
    )


class LlamaCppConfig(BaseModel):
    """The llama.cpp engine that samples rollouts (``engine = "llamacpp"``): one engine, base model for
    sub-agents on ``slots − adapter_slots`` slots, base + adapter for the orchestrator on ``adapter_slots``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    slots: int = Field(8, ge=2)
    adapter_slots: int = Field(4, ge=1)
    ctx_per_slot: int = Field(4096, ge=256)
    threads: int | None = Field(None, ge=1, description="decode threads (default: all cores)")
    constrain_actions: bool = Field(False, description="grammar-constrained actions for the orchestrator's turns")


def is_peft_model(model: Any) -> bool:
    """Whether ``model`` is a PEFT wrapper (its checkpoints hold the adapter only)."""
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


def _require_peft() -> None:
    if importlib.util.find_spec("peft") is None:
        raise ConfigError("LoRA training needs peft: pip install 'agent-swarm[rl]' (peft==0.21.2)")


def load_tokenizer(gguf: Path, cache: Path | None = None) -> Any:
    """The model's tokenizer and chat template, from the GGUF (cached as ``tokenizer.json`` in ``cache``)."""
    from transformers import AutoTokenizer

    if cache is not None and (cache / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(cache, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if cache is not None:
        tmp = cache.with_name(f".{cache.name}.tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tok.save_pretrained(tmp)
        shutil.rmtree(cache, ignore_errors=True)
        os.replace(tmp, cache)
    return tok


def load_lora_policy(
    gguf: Path,
    spec: LoraSpec,
    *,
    name: str = "orchestrator",
    dtype: str = "float32",
    tokenizer: Any = None,
    adapter: Path | None = None,
) -> TransformersBackend:
    """A :class:`TransformersBackend` whose ``hf_model`` is the GGUF base wrapped in a fresh PEFT adapter.

    With ``adapter`` (a directory written by ``save_pretrained`` of a PEFT model) the adapter starts
    from those weights. Only adapter parameters have ``requires_grad``.
    """
    _require_peft()
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ConfigError(f"unknown torch dtype {dtype!r}; use float32 or bfloat16")
    tok = tokenizer if tokenizer is not None else load_tokenizer(gguf)
    base: Any = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch_dtype)
    base.eval()
    for p in base.parameters():
        p.requires_grad_(False)
    cfg = LoraConfig(
        r=spec.r,
        lora_alpha=spec.alpha,  # PEFT scales by lora_alpha / r, llama.cpp by adapter.lora.alpha / rank
        lora_dropout=spec.dropout,
        target_modules=list(spec.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng(), warnings.catch_warnings():
        # transformers 5.23 deprecates the attribute peft 0.21 reads; harmless, and tests turn warnings into errors
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        torch.manual_seed(spec.seed)
        model: Any = get_peft_model(base, cfg)
    if adapter is not None:
        load_adapter(model, adapter)
    if spec.gradient_checkpointing:
        # non-reentrant: gradients reach the adapter although the frozen inputs need none
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.23 (the old name warns)
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    model.eval()
    return TransformersBackend(model, tok, name=name)


def load_adapter(model: Any, directory: Path) -> None:
    """Load adapter weights saved by ``model.save_pretrained(directory)`` into a PEFT model."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    f = directory / "adapter_model.safetensors"
    if not f.is_file():
        raise ConfigError(f"{directory} holds no adapter_model.safetensors (a PEFT adapter directory)")
    result = set_peft_model_state_dict(model, load_file(str(f)))
    unexpected = list(getattr(result, "unexpected_keys", ()) or ())
    if unexpected:
        raise ConfigError(f"adapter {directory} does not fit this model: unexpected {unexpected[:5]}")


def adapter_tensors(model: Any) -> dict[str, Any]:
    """The adapter's LoRA matrices as float32 numpy arrays, keyed by PEFT's names."""
    from peft import get_peft_model_state_dict

    # save_embedding_layers=False: the adapter never touches embeddings (and "auto" looks for a hub config)
    state = get_peft_model_state_dict(model, save_embedding_layers=False)
    return {k: v.detach().float().cpu().numpy() for k, v in state.items()}


def _alpha(model: Any) -> float:
    cfg = model.peft_config["default"]
    if getattr(cfg, "use_rslora", False):
        raise ConfigError("rsLoRA adapters scale by alpha/sqrt(r), which llama.cpp's LoRA format cannot express")
    return float(cfg.lora_alpha)


def export_adapter(model: Any, base_gguf: Path, out: Path, *, version: str = "") -> Path:
    """Write the PEFT model's adapter as a llama.cpp LoRA GGUF at ``out``."""
    meta = {"swarm.adapter.version": version} if version else None
    return export_lora_gguf(adapter_tensors(model), alpha=_alpha(model), base=base_gguf, out=out, metadata=meta)


class LlamaCppLoraSync:
    """A :class:`~agent_swarm.orchestrator.rl.serving.WeightSync` into a llama.cpp engine that serves the adapter.

    ``push`` exports the adapter to ``directory/adapter-<version>.gguf``, restarts ``engine`` (a
    :class:`~agent_swarm.swarm.backends.local.LocalEngine`) with it, and sets the engine's ``adapter_version``
    to ``"<version>:<sha256[:12]>"``, which every orchestrator completion then carries as its
    ``weight_version``. llama.cpp reads adapter files only at start (its ``/lora-adapters`` endpoint
    changes scales, not files), hence the restart: about a second for the 0.5B model, after the
    rollout has finished (no request is in flight). Only the ``keep`` newest files are kept.
    """

    def __init__(self, engine: Any, base_gguf: Path, directory: Path, *, keep: int = 2) -> None:
        self.engine = engine
        self.base_gguf = base_gguf
        self.directory = directory
        self.keep = keep

    def _push(self, model: Any, version: int) -> None:
        path = self.directory / f"adapter-{version:06d}.gguf"
        export_adapter(model, self.base_gguf, path, version=str(version))
        tag = f"{version}:{file_sha256(path)[:12]}"
        self.engine.restart(lora_adapters=[path], adapter_version=tag)
        files = sorted(self.directory.glob("adapter-*.gguf"))
        for old in files[: -self.keep]:
            old.unlink(missing_ok=True)

    async def push(self, model: Any, version: int) -> None:
        await anyio.to_thread.run_sync(self._push, model, version)
