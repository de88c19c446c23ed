"""The local engine sizes each slot's context from the model's GGUF metadata and the free memory."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from agent_swarm.swarm.backends.local import cache_dir
from agent_swarm.swarm.backends.local.sizing import FULL_CONTEXT, MIN_CONTEXT, auto_context, gguf_shape
from agent_swarm.swarm.errors import ConfigError

GiB = 2**30


def _gguf(path: Path, meta: dict[str, int | str], vocab: int = 3) -> Path:
    """A GGUF header with ``meta`` (u32 / string values) and a tokenizer vocabulary after it."""

    def s(text: str) -> bytes:
        raw = text.encode()
        return struct.pack("<Q", len(raw)) + raw

    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(meta) + 2)
    for k, v in meta.items():
        out += s(k) + (struct.pack("<II", 4, v) if isinstance(v, int) else struct.pack("<I", 8) + s(v))
    out += s("tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, vocab) + b"\0" * 4 * vocab
    out += s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, vocab) + b"".join(s(f"t{i}") for i in range(vocab))
    path.write_bytes(out)
    return path


QWEN_1_5B: dict[str, int | str] = {
    "general.architecture": "qwen2",
    "qwen2.context_length": 32768,
    "qwen2.embedding_length": 1536,
    "qwen2.block_count": 28,
    "qwen2.attention.head_count": 12,
    "qwen2.attention.head_count_kv": 2,
}


def test_the_shape_comes_from_the_metadata(tmp_path: Path) -> None:
    shape = gguf_shape(_gguf(tmp_path / "m.gguf", QWEN_1_5B))
    assert shape.context_length == 32768 and shape.kv_bytes_per_token == 28 * 1024  # 28 x 2 x (128 + 128) x 2
    with pytest.raises(ConfigError, match="set ctx_per_slot explicitly"):
        gguf_shape(_gguf(tmp_path / "bad.gguf", {"general.architecture": "qwen2"}))


def test_each_slot_gets_what_the_memory_holds_within_the_trained_context(tmp_path: Path) -> None:
    path = _gguf(tmp_path / "m.gguf", QWEN_1_5B)
    roomy = auto_context(path, 8, available=13 * GiB)  # what this 24 GiB machine has free
    assert roomy.ctx_per_slot == 32768 and "trained 32768" in roomy.note and "8 slots" in roomy.note
    tight = auto_context(path, 8, available=int(5 * GiB))  # 3.75 GiB / (8 x 28 KiB) = 17,554 tokens
    assert tight.ctx_per_slot == 17408 and tight.ctx_per_slot % 1024 == 0
    assert auto_context(path, 16, available=1 * GiB).ctx_per_slot == MIN_CONTEXT  # never under the floor
    short = _gguf(tmp_path / "s.gguf", {**QWEN_1_5B, "qwen2.context_length": 2048})
    assert auto_context(short, 2, available=64 * GiB).ctx_per_slot == 2048  # nor over the trained context


def test_slots_nobody_set_give_way_to_a_full_context(tmp_path: Path) -> None:
    path = _gguf(tmp_path / "m.gguf", QWEN_1_5B)
    # 13 GiB free: 16 slots would get 9.75 GiB / (16 x 28 KiB) = 22,848 tokens each; 11 slots get the full 32 k
    asked = auto_context(path, 16, available=13 * GiB)
    assert asked.slots == 16 and asked.ctx_per_slot == 22528
    fitted = auto_context(path, 16, available=13 * GiB, fit_slots=True)
    assert (fitted.slots, fitted.ctx_per_slot) == (11, FULL_CONTEXT)
    assert "11 slots (16 asked: fewer, so each holds 32768)" in fitted.note
    roomy = auto_context(path, 16, available=22 * GiB, fit_slots=True)  # this machine idle: all 16 fit
    assert (roomy.slots, roomy.ctx_per_slot) == (16, FULL_CONTEXT) and "asked" not in roomy.note
    assert auto_context(path, 4, available=13 * GiB, fit_slots=True).slots == 4  # never more than asked
    tiny = auto_context(path, 16, available=1 * GiB, fit_slots=True, keep=3)  # never under keep
    assert (tiny.slots, tiny.ctx_per_slot) == (3, 9216)  # 0.75 GiB / (3 x 28 KiB), to 1,024
    short = _gguf(tmp_path / "s.gguf", {**QWEN_1_5B, "qwen2.context_length": 4096})  # full = the trained 4,096
    assert auto_context(short, 16, available=1 * GiB, fit_slots=True).slots == 6  # 0.75 GiB / 112 MiB


@pytest.mark.integration
def test_the_installed_1_5b_gets_at_least_32k_per_slot_here() -> None:
    path = cache_dir() / "qwen2.5-coder-1.5b-instruct.gguf"
    if not path.is_file():
        pytest.skip("the 1.5B model is not installed")
    assert gguf_shape(path).kv_bytes_per_token == 28 * 1024
    assert auto_context(path, 8, available=13 * GiB).ctx_per_slot >= 32768
    # the default engine (16 slots asked, nobody set them) keeps 32 k per slot with 13 GiB free
    fitted = auto_context(path, 16, available=13 * GiB, fit_slots=True)
    assert fitted.ctx_per_slot >= 32768 and fitted.slots >= 8


def test_the_engine_starts_the_slots_its_plan_chose(tmp_path: Path) -> None:
    from agent_swarm.swarm.backends.local import LocalEngine

    path = _gguf(tmp_path / "m.gguf", QWEN_1_5B)  # nothing loads: plan() reads the metadata only
    fitted = LocalEngine(str(path), slots=64, ctx_per_slot=None, fit_slots=True)  # 56 GiB of KV
    assert "64 asked" in fitted.plan() and fitted.slots < 64 and fitted.ctx_per_slot == FULL_CONTEXT
    asked = LocalEngine(str(path), slots=64, ctx_per_slot=None)
    asked.plan()
    assert asked.slots == 64 and asked.ctx_per_slot < FULL_CONTEXT
