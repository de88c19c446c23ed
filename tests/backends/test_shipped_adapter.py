"""An orchestrator adapter loaded through llama.cpp changes what the orchestrator says and leaves the
sub-agents on the frozen base model: a generated adapter on SmolLM2 always, and the adapter that
ships in the package (hash-checked) when one ships for the 0.5B model."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orchestrator.adapters import resolve_orchestrator_adapter, shipped_adapter
from orchestrator.backend_factory import build_backends
from orchestrator.engine import Orchestrator
from swarm.backend import SamplingParams
from swarm.backends.local import LocalBackend, model_available, resolve_model
from swarm.backends.lora_gguf import base_model_info, export_lora_gguf
from swarm.testing import ScriptedBackend

MODEL = "qwen2.5-coder-0.5b"

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(900)]  # three engines on busy cores
ships = pytest.mark.skipif(
    not model_available(MODEL) or shipped_adapter(MODEL) is None,
    reason=f"no adapter ships for {MODEL} (or the model is not installed)",
)


def _random_adapter(model: str, out: Path) -> Path:
    """A LoRA on every block's o_proj with random A and B (so it visibly moves the model)."""
    import gguf

    _, path = resolve_model(model)
    info = base_model_info(path)
    field = gguf.GGUFReader(str(path)).get_field(f"{info.arch}.embedding_length")
    assert field is not None
    width = int(field.contents())
    rng = np.random.default_rng(0)
    tensors = {}
    for i in range(info.n_blocks):
        key = f"base_model.model.model.layers.{i}.self_attn.o_proj"
        tensors[f"{key}.lora_A.weight"] = rng.normal(0, 0.2, (8, width)).astype(np.float32)
        tensors[f"{key}.lora_B.weight"] = rng.normal(0, 0.2, (width, 8)).astype(np.float32)
    return export_lora_gguf(tensors, alpha=16.0, base=path, out=out, metadata={"swarm.adapter.version": "rand"})


async def _orchestrator_and_subagents_vs_base(model: str, adapter: str, ctx: int = 2048) -> dict[str, Any]:
    """Greedy completions of the orchestrator's real first request by the orchestrator (with
    ``adapter``), the sub-agent backend of the same engine, and a plain base-model backend."""
    orch, sub = build_backends("local", model, slots=2, ctx=ctx, orchestrator_adapter=adapter)
    base, none = build_backends("local", model, slots=1, ctx=ctx, orchestrator_adapter="none")
    assert isinstance(orch, LocalBackend) and isinstance(sub, LocalBackend) and none is None
    assert isinstance(base, LocalBackend)
    assert orch.engine is sub.engine
    probe = ScriptedBackend(["done"], model=model)  # named as the model: its prompt profile, tools and all
    await Orchestrator(probe).run("What are the capital cities of Peru, Norway and Egypt?")
    request = replace(probe.calls[0], sampling=SamplingParams(temperature=0.0, max_tokens=32, seed=0))
    async with orch, base, sub:  # sub (no engine of its own) closes first
        return {
            "trained": await orch.complete(request),
            "plain": await base.complete(request),
            "frozen": await sub.complete(request),
        }


def _assert_only_the_orchestrator_changed(out: dict[str, Any], version: str) -> None:
    trained, plain, frozen = out["trained"], out["plain"], out["frozen"]
    assert trained.weight_version == version and frozen.weight_version is None
    # the sub-agents' requests are the base model's, token for token
    assert frozen.token_ids == plain.token_ids
    assert frozen.logprobs == pytest.approx(plain.logprobs, abs=1e-3)
    # the orchestrator's are not: other tokens, or the same tokens at other probabilities
    differs = trained.token_ids != plain.token_ids or any(
        abs(a - b) > 0.05 for a, b in zip(trained.logprobs or (), plain.logprobs or (), strict=False)
    )
    assert trained.logprobs and plain.logprobs
    assert differs, (trained.text, plain.text)


async def test_an_adapter_changes_the_orchestrator_and_not_the_subagents(tmp_path: Path) -> None:
    path = _random_adapter("smollm2-135m", tmp_path / "step-000003" / "adapter.gguf")
    out = await _orchestrator_and_subagents_vs_base("smollm2-135m", str(path))
    _assert_only_the_orchestrator_changed(out, "step-000003")


@ships
def test_an_adapter_ships_for_the_default_small_model_and_passes_its_hash_check() -> None:
    manifest = shipped_adapter(MODEL)
    assert manifest is not None and manifest.base_model == MODEL
    adapter = resolve_orchestrator_adapter("shipped", MODEL)
    assert adapter is not None and adapter.version == manifest.version
    assert adapter.path.stat().st_size < 16 * 2**20  # a LoRA adapter, not a model


@ships
async def test_the_shipped_adapter_changes_the_orchestrator_and_not_the_subagents() -> None:
    manifest = shipped_adapter(MODEL)
    assert manifest is not None
    out = await _orchestrator_and_subagents_vs_base(MODEL, "shipped")
    _assert_only_the_orchestrator_changed(out, manifest.version)


@pytest.mark.skipif(shipped_adapter(MODEL) is None, reason=f"no adapter ships for {MODEL}")
def test_the_shipped_05b_adapter_is_not_the_default_until_it_wins_on_the_yardstick() -> None:
    """Issue 26: the 0.5B adapter's measured lead was name copying under a lenient table scorer, so it
    is not the default (`swarm run -m qwen2.5-coder-0.5b` runs the base model); `shipped` still loads it,
    and its card says why. It becomes the default again only with a paired win on the test split."""
    manifest = shipped_adapter(MODEL)
    assert manifest is not None and not manifest.default
    assert resolve_orchestrator_adapter(None, MODEL) is None
    assert resolve_orchestrator_adapter("default", MODEL) is None
    shipped = resolve_orchestrator_adapter("shipped", MODEL)
    assert shipped is not None and shipped.version == manifest.version
    card = (shipped.path.parent / "MODEL_CARD.md").read_text(encoding="utf-8")
    assert "not the default" in card
    assert resolve_orchestrator_adapter("none", MODEL) is None
    assert resolve_orchestrator_adapter(None, "qwen2.5-coder-1.5b") is None
