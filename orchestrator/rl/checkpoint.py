"""Checkpoints of a training run: ``run_dir/checkpoints/step-NNNNNN`` with the policy (``policy/``: the
full model and tokenizer, or a LoRA policy's adapter plus ``adapter.gguf``), the optimizer states
(``optimizer.pt``) and the trainer state (``state.json``). Written atomically (a temporary directory,
then a rename); only the newest ``keep`` complete ones are kept."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict

from agent_swarm.orchestrator.rl.lora import export_adapter, is_peft_model, load_adapter
from agent_swarm.swarm.errors import ConfigError

__all__ = [
    "CHECKPOINTS",
    "CheckpointState",
    "latest_checkpoint",
    "load_optimizer_states",
    "load_policy_weights",
    "read_checkpoint_state",
    "rng_from_json",
    "rng_to_json",
    "save_checkpoint",
    "state_checksum",
]

CHECKPOINTS = "checkpoints"


class CheckpointState(BaseModel):
    """``state.json``: what the trainer needs besides weights and optimizer states to resume."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step: int  # number of completed steps
    weight_version: int
    budgets: dict[str, float] | None = None
    python_rng: Any = None


def save_checkpoint(
    run_dir: Path,
    state: CheckpointState,
    model: Any,
    tokenizer: Any,
    optimizers: Sequence[torch.optim.Optimizer],
    *,
    keep: int,
    base_gguf: Path | None = None,
) -> Path:
    """Write ``checkpoints/step-NNNNNN`` (``state.step``) atomically (tmp dir + rename) and prune old ones.

    A LoRA policy saves its adapter only (the base is the GGUF) and, given ``base_gguf``, the adapter in
    llama.cpp's format too.
    """
    root = run_dir / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{state.step:06d}"
    tmp = root / f".tmp-step-{state.step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    if is_peft_model(model):  # the adapter only (the base is the GGUF), plus its llama.cpp form
        model.save_pretrained(tmp / "policy", save_embedding_layers=False)
        if base_gguf is not None:
            export_adapter(model, base_gguf, tmp / "adapter.gguf", version=str(state.step))
    else:
        model.save_pretrained(tmp / "policy")
        tokenizer.save_pretrained(tmp / "policy")
    torch.save([o.state_dict() for o in optimizers], tmp / "optimizer.pt")
    (tmp / "state.json").write_text(state.model_dump_json(indent=2), encoding="utf-8")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for old in _complete(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of a run (one with its ``state.json``), or None."""
    done = _complete(run_dir / CHECKPOINTS)
    return done[-1] if done else None


def _complete(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("step-*") if (p / "state.json").is_file())


def read_checkpoint_state(ckpt: Path) -> CheckpointState:
    return CheckpointState.model_validate_json((ckpt / "state.json").read_text(encoding="utf-8"))


def load_policy_weights(ckpt: Path, model: Any) -> None:
    """Load a checkpoint's policy into ``model`` (a LoRA policy: its adapter); a mismatch is a ConfigError."""
    from safetensors.torch import load_file

    if is_peft_model(model):
        load_adapter(model, ckpt / "policy")
        return
    weights: dict[str, torch.Tensor] = {}
    for f in sorted((ckpt / "policy").glob("*.safetensors")):
        weights.update(load_file(f))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if unexpected or [k for k in missing if not k.endswith("lm_head.weight")]:
        raise ConfigError(
            f"checkpoint {ckpt} does not match the policy model: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )


def load_optimizer_states(ckpt: Path, optimizers: Sequence[torch.optim.Optimizer]) -> None:
    for opt, sd in zip(optimizers, torch.load(ckpt / "optimizer.pt", weights_only=True), strict=True):
        opt.load_state_dict(sd)


def state_checksum(model: torch.nn.Module) -> str:
    """sha256 over every parameter and buffer (name, dtype, shape, bytes): equal iff weights are equal."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def rng_to_json(state: Any) -> Any:
    """``random.Random.getstate()`` in a JSON-friendly form (``state.json``'s ``python_rng``)."""
    version, internal, gauss = state
    return [version, list(internal), gauss]


def rng_from_json(data: Any) -> Any:
    """The inverse of :func:`rng_to_json`, for ``random.Random.setstate``."""
    version, internal, gauss = data
    return (version, tuple(internal), gauss)
