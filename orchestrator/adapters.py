"""Trained orchestrator adapters that ship with the package, and which one an orchestrator runs with.

An adapter lives in ``orchestrator/shipped/<base model>/``: ``adapter.gguf`` (llama.cpp's LoRA GGUF,
exported from the ``peft`` adapter that ``swarm train`` trained), ``manifest.json`` (the base model
and its sha256, the adapter's sha256 and version, and whether it is the default) and
``MODEL_CARD.md`` (data, steps, seeds, metrics, licence). The adapter file is checked against the
manifest's hash before it is loaded, and the base model's hash against the one it was trained on.

``--orchestrator-adapter`` (``[backend] orchestrator_adapter`` in a config) picks the adapter of a
``local`` backend's orchestrator; the sub-agents always run the frozen base model:

* ``default`` (or unset): the shipped adapter of the orchestrator's model when its manifest marks
  it the default (only an adapter that beat the base orchestrator on a fresh test split, paired over
  ≥ 30 tasks with p < 0.05; none does today), else none;
* ``none``: the base model;
* ``shipped``: the shipped adapter of the orchestrator's model, default or not;
* a path to a LoRA ``.gguf`` file: that adapter (e.g. ``RUN/checkpoints/step-N/adapter.gguf``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_swarm.swarm.errors import ConfigError

__all__ = [
    "ADAPTER_CHOICES",
    "SHIPPED_DIR",
    "AdapterManifest",
    "OrchestratorAdapter",
    "resolve_orchestrator_adapter",
    "shipped_adapter",
]

SHIPPED_DIR = Path(__file__).resolve().parent / "shipped"
ADAPTER_CHOICES = ("default", "none", "shipped")
"""The named values of ``--orchestrator-adapter`` (anything else is a path to a ``.gguf`` file)."""


class AdapterManifest(BaseModel):
    """``manifest.json`` of a shipped adapter."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_model: str = Field(
        description="the local model name (agent_swarm.swarm.backends.local.LOCAL_MODELS) it was trained on"
    )
    base_sha256: str = Field(description="sha256 of that model's GGUF file")
    file: str = "adapter.gguf"
    sha256: str = Field(description="sha256 of the adapter file")
    version: str = Field(description="carried as weight_version by the orchestrator's completions")
    default: bool = Field(description="swarm run applies it unless told otherwise (it won on the test split)")


@dataclass(frozen=True, slots=True)
class OrchestratorAdapter:
    """A LoRA adapter file for the orchestrator, checked, with its version label."""

    path: Path
    version: str


def shipped_adapter(model: str, root: Path = SHIPPED_DIR) -> AdapterManifest | None:
    """The manifest of the adapter shipped for ``model``, or ``None`` when none ships."""
    path = root / model / "manifest.json"
    if not path.is_file():
        return None
    try:
        return AdapterManifest.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, ValidationError) as exc:
        raise ConfigError(f"the shipped adapter manifest {path} is invalid ({exc}); reinstall agent-swarm") from None


def _checked(manifest: AdapterManifest, root: Path) -> OrchestratorAdapter:
    from agent_swarm.swarm.backends.local.catalogue import LOCAL_MODELS, file_sha256

    base = LOCAL_MODELS.get(manifest.base_model)
    if base is None or base.sha256 != manifest.base_sha256:
        raise ConfigError(
            f"the shipped adapter for {manifest.base_model} was trained on a model with sha256 "
            f"{manifest.base_sha256}, but this installation's {manifest.base_model} is "
            f"{base.sha256 if base else 'unknown'}; use --orchestrator-adapter none"
        )
    path = root / manifest.base_model / manifest.file
    if not path.is_file():
        raise ConfigError(f"the shipped adapter file {path} is missing; reinstall agent-swarm")
    got = file_sha256(path)  # cached by (path, size, mtime, inode)
    if got != manifest.sha256:
        raise ConfigError(
            f"the shipped adapter {path} has sha256 {got}, expected {manifest.sha256} (a damaged or altered "
            "file); reinstall agent-swarm, or run the base model with --orchestrator-adapter none"
        )
    return OrchestratorAdapter(path, manifest.version)


def resolve_orchestrator_adapter(
    choice: str | None, model: str, root: Path = SHIPPED_DIR
) -> OrchestratorAdapter | None:
    """The adapter ``choice`` names for an orchestrator on local model ``model`` (see the module doc)."""
    choice = (choice or "default").strip()
    if choice == "none":
        return None
    if choice in ("default", "shipped"):
        manifest = shipped_adapter(model, root)
        if manifest is None:
            if choice == "default":
                return None
            shipped = ", ".join(p.parent.name for p in sorted(root.glob("*/manifest.json"))) or "none"
            raise ConfigError(
                f"no trained orchestrator adapter ships for model {model!r} (adapters ship for: {shipped}); "
                "pass a .gguf adapter path or --orchestrator-adapter none"
            )
        if choice == "default" and not manifest.default:
            return None
        return _checked(manifest, root)
    path = Path(choice).expanduser()
    if path.suffix != ".gguf" or not path.is_file():
        raise ConfigError(
            f"--orchestrator-adapter {choice!r} is neither {', '.join(ADAPTER_CHOICES)} nor an existing "
            "LoRA .gguf file (e.g. RUN/checkpoints/step-N/adapter.gguf from `swarm train`)"
        )
    return OrchestratorAdapter(path, path.parent.name if path.stem == "adapter" else path.stem)
