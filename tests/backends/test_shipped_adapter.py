"""The shipped 0.5B adapter is what its card (``orchestrator/shipped/qwen2.5-coder-0.5b/MODEL_CARD.md``)
says it is, and an adapter loaded through llama.cpp changes only the orchestrator.

The card's claims since issue 26 (the adapter is no longer the default, and its quality figures are
kept as history, not as claims) are checked where a random adapter would fail them: the file is the
one the manifest's sha256 names and any other file is refused on load; its shape is the card's (LoRA
rank, alpha, target projections, parameter count) and its base model the card's sha256; ``shipped``
loads it under its version while the default runs the base model; and it changes the orchestrator's
outputs while the sub-agents' stay the frozen base model's, token for token (that last check is
behavioural and holds for any adapter: a generated random one on SmolLM2 runs it always)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent_swarm.orchestrator.adapters import SHIPPED_DIR, resolve_orchestrator_adapter, shipped_adapter
from agent_swarm.orchestrator.backend_factory import build_backends
from agent_swarm.orchestrator.engine import Orchestrator
from agent_swarm.swarm.backend import SamplingParams
from agent_swarm.swarm.backends.local import LocalBackend, model_available, resolve_model
from agent_swarm.swarm.backends.lora_gguf import base_model_info, export_lora_gguf
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.testing import ScriptedBackend

MODEL = "qwen2.5-coder-0.5b"

CARD = SHIPPED_DIR / MODEL / "MODEL_CARD.md"
ships = pytest.mark.skipif(
    not model_available(MODEL) or shipped_adapter(MODEL) is None,
    reason=f"no adapter ships for {MODEL} (or the model is not installed)",
)
ships_file = pytest.mark.skipif(shipped_adapter(MODEL) is None, reason=f"no adapter ships for {MODEL}")


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


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(900)
async def test_an_adapter_changes_the_orchestrator_and_not_the_subagents(tmp_path: Path) -> None:
    path = _random_adapter("smollm2-135m", tmp_path / "step-000003" / "adapter.gguf")
    out = await _orchestrator_and_subagents_vs_base("smollm2-135m", str(path))
    _assert_only_the_orchestrator_changed(out, "step-000003")


def _shape(path: Path) -> tuple[int, float, set[str], int]:
    """(rank, alpha, target projections as PEFT names, parameter count) of a llama.cpp LoRA GGUF."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    alpha = reader.get_field("adapter.lora.alpha")
    assert alpha is not None
    peft = {"attn_q": "q_proj", "attn_k": "k_proj", "attn_v": "v_proj", "attn_output": "o_proj"}
    targets = {peft.get(t.name.split(".")[2], t.name.split(".")[2]) for t in reader.tensors}
    ranks = {int(min(t.shape)) for t in reader.tensors}
    assert len(ranks) == 1, ranks
    return ranks.pop(), float(alpha.contents()), targets, sum(int(t.n_elements) for t in reader.tensors)


def _card_shape() -> tuple[int, float, set[str], float]:
    """What the card's table says: 'LoRA r 16, alpha 32, on `q_proj`, … (2.16 M parameters)'."""
    row = next(line for line in CARD.read_text(encoding="utf-8").splitlines() if line.startswith("| adapter |"))
    m = re.search(r"LoRA r (\d+), alpha (\d+), on (.*?) \(([\d.]+) M parameters\)", row)
    assert m is not None, row
    return int(m[1]), float(m[2]), set(re.findall(r"`(\w+)`", m[3])), float(m[4])


@ships_file
def test_the_shipped_file_has_the_shape_and_base_model_its_card_states(tmp_path: Path) -> None:
    manifest = shipped_adapter(MODEL)
    assert manifest is not None and manifest.base_model == MODEL
    rank, alpha, targets, millions = _card_shape()
    path = SHIPPED_DIR / MODEL / manifest.file
    got_rank, got_alpha, got_targets, n = _shape(path)
    assert (got_rank, got_alpha, got_targets) == (rank, alpha, targets)
    assert round(n / 1e6, 2) == millions
    base_row = next(line for line in CARD.read_text(encoding="utf-8").splitlines() if line.startswith("| base model |"))
    assert f"sha256 `{manifest.base_sha256}`" in base_row
    from agent_swarm.swarm.backends.local import LOCAL_MODELS

    assert LOCAL_MODELS[MODEL].sha256 == manifest.base_sha256  # the model `-m qwen2.5-coder-0.5b` installs


@ships_file
def test_shipped_loads_that_file_and_refuses_any_other(tmp_path: Path) -> None:
    manifest = shipped_adapter(MODEL)
    assert manifest is not None
    adapter = resolve_orchestrator_adapter("shipped", MODEL)
    assert adapter is not None and adapter.version == manifest.version
    assert adapter.path == SHIPPED_DIR / MODEL / manifest.file
    # the same manifest beside other bytes (one bit flipped: what a random adapter would be, too)
    copy = tmp_path / MODEL
    copy.mkdir()
    (copy / "manifest.json").write_bytes((SHIPPED_DIR / MODEL / "manifest.json").read_bytes())
    data = bytearray(adapter.path.read_bytes())
    data[len(data) // 2] ^= 1
    (copy / manifest.file).write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=f"expected {manifest.sha256}"):
        resolve_orchestrator_adapter("shipped", MODEL, root=tmp_path)
    (copy / manifest.file).unlink()
    with pytest.raises(ConfigError, match="is missing"):
        resolve_orchestrator_adapter("shipped", MODEL, root=tmp_path)


@ships
@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(900)
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
