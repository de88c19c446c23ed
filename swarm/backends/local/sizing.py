"""Each slot's context from the model and the free memory.

llama.cpp reserves the KV cache of every slot up front (``n_ctx = slots × ctx_per_slot``), at
``block_count × head_count_kv × (key_length + value_length) × 2`` bytes per token (f16 keys and
values): 28 KiB on Qwen2.5-Coder-1.5B, 12 KiB on the 0.5B. :func:`auto_context` gives each slot as
much context as three quarters of the memory available now (less the model file) holds, capped by
the context the model was trained with and rounded down to 1,024 tokens; never less than
:data:`MIN_CONTEXT`. The shape is read from the GGUF file's metadata (:func:`gguf_shape`).

With ``fit_slots`` (the default engine when nobody set the slots), context comes before width: where
the memory cannot give every asked-for slot :data:`FULL_CONTEXT` (or the trained context, if shorter),
the engine starts fewer slots that each get it. On this 24 GiB machine with 13 GiB free, 16 slots of
the 1.5B would get 19,456 tokens each and a sub-agent reading a few documents overflows; 9 slots get
32,768. The sub-agents beyond the slots wait unstarted (their time limit counts their own work only).
The slots asked for are at most four per core (``cpu.slot_cap``): 8 on 2 cores start 20-25 s sooner
than 16, and 16 requests at once decode 1.31× the tokens/s of 8 (bench/README.md, "Slots and the engine
start").

Each slot keeps its own cache. One cache the slots share (``LocalEngine(pool=…)``, llama.cpp's unified
cache) starts in 2.7 s instead of 16–35 s (llama.cpp zeroes the whole cache when it allocates it;
``bench/results/kv_start.json``), but llama.cpp then clears every idle slot at each new request, so
a conversation's next turn is prefilled again from its start (948 tokens instead of 223 on the README
command's second turn, ``bench/results/first_answer_pool.json``): it is not the default.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from agent_swarm.swarm.errors import ConfigError

__all__ = [
    "FULL_CONTEXT",
    "MIN_CONTEXT",
    "POOL_CONTEXT",
    "ContextPlan",
    "ModelShape",
    "auto_context",
    "available_memory",
    "gguf_shape",
]

MIN_CONTEXT = 8192
"""The floor of an automatic per-slot context (the fixed default before it was sized)."""
FULL_CONTEXT = 32768
"""The per-slot context ``fit_slots`` keeps (issue 29: at least 32 k for the 1.5B on this machine)."""
POOL_CONTEXT = 65536
"""A shared cache's size measured against separate ones (``bench/bench_kv_*.py``): two full contexts."""
MEMORY_SHARE = 0.75
"""The share of the available memory the KV cache and the model may take."""

# GGUF value types: fixed-size scalars by struct format; 8 is a string, 9 an array.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What sizing needs of a model: its trained context and KV-cache bytes per token."""

    context_length: int
    kv_bytes_per_token: int


@dataclass(frozen=True, slots=True)
class ContextPlan:
    """A chosen per-slot context and why (shown by the run header and ``swarm doctor``)."""

    ctx_per_slot: int
    note: str
    slots: int
    """The slots to start: as asked, or fewer with ``fit_slots``."""


def _read(f: BinaryIO, fmt: str) -> int | float | bool:
    size = struct.calcsize("<" + fmt)
    value: int | float | bool = struct.unpack("<" + fmt, f.read(size))[0]
    return value


def _string(f: BinaryIO) -> str:
    n = int(_read(f, "Q"))
    return f.read(n).decode("utf-8", "replace")


def _value(f: BinaryIO, kind: int) -> object:
    if kind in _SCALARS:
        return _read(f, _SCALARS[kind])
    if kind == _STRING:
        return _string(f)
    if kind != _ARRAY:
        raise ValueError(f"unknown GGUF value type {kind}")
    item, count = int(_read(f, "I")), int(_read(f, "Q"))
    if item in _SCALARS:  # skipped whole (a tokenizer's scores, token types)
        f.seek(struct.calcsize("<" + _SCALARS[item]) * count, os.SEEK_CUR)
        return None
    for _ in range(count):  # strings (a tokenizer's vocabulary) or nested arrays
        _value(f, item)
    return None


def gguf_shape(path: Path) -> ModelShape:
    """The trained context and KV bytes per token of the GGUF model at ``path`` (its metadata)."""
    meta: dict[str, object] = {}
    try:
        with path.open("rb") as f:
            if f.read(4) != b"GGUF":
                raise ValueError("not a GGUF file")
            _read(f, "I")  # version
            _read(f, "Q")  # tensors
            for _ in range(int(_read(f, "Q"))):
                key = _string(f)
                if key.startswith("tokenizer.") and "general.architecture" in meta:
                    break  # the model's own keys come first; the vocabulary is not needed
                meta[key] = _value(f, int(_read(f, "I")))
        arch = str(meta["general.architecture"])
        heads = int(meta[f"{arch}.attention.head_count"])  # type: ignore[call-overload]
        head_dim = int(meta[f"{arch}.embedding_length"]) // heads  # type: ignore[call-overload]
        keys = int(meta.get(f"{arch}.attention.key_length", head_dim))  # type: ignore[call-overload]
        values = int(meta.get(f"{arch}.attention.value_length", head_dim))  # type: ignore[call-overload]
        kv_heads = int(meta.get(f"{arch}.attention.head_count_kv", heads))  # type: ignore[call-overload]
        layers = int(meta[f"{arch}.block_count"])  # type: ignore[call-overload]
        trained = int(meta[f"{arch}.context_length"])  # type: ignore[call-overload]
    except (OSError, ValueError, KeyError, struct.error) as exc:
        raise ConfigError(f"cannot read the model shape from {path}: {exc}; set ctx_per_slot explicitly") from None
    return ModelShape(context_length=trained, kv_bytes_per_token=layers * kv_heads * (keys + values) * 2)


def available_memory() -> int | None:
    """Bytes of memory available now (``MemAvailable`` of /proc/meminfo), or ``None`` where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def auto_context(
    path: Path, slots: int, available: int | None = None, *, fit_slots: bool = False, keep: int = 1
) -> ContextPlan:
    """Each of ``slots`` slots' context for the model at ``path`` (see the module docstring);
    ``available``: bytes of free memory (default: :func:`available_memory`). ``fit_slots``: start fewer
    slots (never under ``keep``) where ``slots`` cannot each hold :data:`FULL_CONTEXT`."""
    shape = gguf_shape(path)
    free = available if available is not None else available_memory()
    if free is None:
        ctx = min(MIN_CONTEXT, shape.context_length)
        return ContextPlan(ctx, f"{ctx} tokens per slot (free memory unknown; trained {shape.context_length})", slots)
    room = max(0, int(free * MEMORY_SHARE) - path.stat().st_size)
    asked = slots
    if fit_slots:
        full = min(FULL_CONTEXT, shape.context_length)
        slots = max(keep, min(slots, room // (full * shape.kv_bytes_per_token)))
    fits = room // (slots * shape.kv_bytes_per_token) // 1024 * 1024
    ctx = max(min(fits, shape.context_length), min(MIN_CONTEXT, shape.context_length))
    kv = ctx * slots * shape.kv_bytes_per_token / 2**30
    fewer = f" ({asked} asked: fewer, so each holds {min(FULL_CONTEXT, shape.context_length)})" if slots < asked else ""
    note = (
        f"{ctx} tokens per slot x {slots} slots{fewer} (trained {shape.context_length}; KV cache {kv:.1f} GiB at "
        f"{shape.kv_bytes_per_token // 1024} KiB/token of {free / 2**30:.1f} GiB available)"
    )
    return ContextPlan(ctx, note, slots)
