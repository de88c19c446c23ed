"""Write a PEFT LoRA adapter in llama.cpp's LoRA GGUF format, so llama.cpp serves base + adapter.

llama.cpp loads LoRA adapters as GGUF files (``--lora FILE``; ``xllamacpp.CommonParams.lora_adapters``)
and applies them per request (``"lora": [{"id": 0, "scale": 1.0}]``). This module writes what
llama.cpp's own converter (``convert_lora_to_gguf.py``) writes, from the adapter's tensors alone:

* metadata ``general.architecture`` (the base model's), ``general.type = "adapter"``,
  ``adapter.type = "lora"``, ``adapter.lora.alpha`` (PEFT's ``lora_alpha``: llama.cpp scales the
  update by ``scale · alpha / rank``, PEFT by ``lora_alpha / r``, so the two agree at scale 1);
* per adapted weight ``W`` (GGUF name, e.g. ``blk.3.attn_q.weight``) two float32 tensors
  ``blk.3.attn_q.weight.lora_a`` (PEFT ``lora_A``, torch shape ``[r, in]``) and ``…lora_b``
  (``lora_B``, ``[out, r]``); the GGUF writer stores them with ggml's reversed dimension order;
* for the ``llama`` architecture the rows of ``lora_b`` of ``q``/``k`` are permuted the way the
  converter permutes the base ``q``/``k`` weights (rotary layout), since transformers un-permutes
  them when it loads a llama GGUF.

The base model's architecture, block count and head counts are read from the base GGUF itself,
so exporting needs neither the hub nor a transformers config. Only ``numpy`` and ``gguf`` are
needed (the ``rl`` extra has both); the caller turns tensors into numpy arrays.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_swarm.swarm.errors import ConfigError

__all__ = ["BaseModelInfo", "base_model_info", "export_lora_gguf", "file_sha256", "read_lora_gguf"]

_PEFT_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<base>.+)\.lora_(?P<ab>[AB])(?:\.[A-Za-z0-9_-]+)?\.weight$")


@dataclass(frozen=True)
class BaseModelInfo:
    """What the export needs to know about the base model (read from its GGUF)."""

    arch: str
    n_blocks: int
    n_head: int
    n_head_kv: int
    name: str = ""


def _field(reader: Any, key: str) -> Any:
    f = reader.get_field(key)
    if f is None:
        return None
    return f.contents()


def base_model_info(gguf_path: Path) -> BaseModelInfo:
    """Architecture, block and head counts of a GGUF model (its header only; the file is memory-mapped)."""
    import gguf

    try:
        reader = gguf.GGUFReader(str(gguf_path))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the base model GGUF {gguf_path}: {exc}") from None
    arch = _field(reader, "general.architecture")
    if not isinstance(arch, str):
        raise ConfigError(f"{gguf_path} has no general.architecture; it is not a GGUF model file")
    blocks = _field(reader, f"{arch}.block_count")
    heads = _field(reader, f"{arch}.attention.head_count")
    heads_kv = _field(reader, f"{arch}.attention.head_count_kv") or heads
    if not isinstance(blocks, int) or not isinstance(heads, int):
        raise ConfigError(f"{gguf_path}: no {arch}.block_count / {arch}.attention.head_count in the header")
    return BaseModelInfo(arch, blocks, heads, int(heads_kv), str(_field(reader, "general.name") or ""))


def _permute_rows(b: Any, n_head: int) -> Any:
    """llama.cpp's rotary re-layout of a q/k weight (``LlamaModel.permute``), applied to ``lora_b``'s rows."""
    out = b.shape[0]
    return b.reshape(n_head, 2, out // n_head // 2, *b.shape[1:]).swapaxes(1, 2).reshape(b.shape)


def _pairs(tensors: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    pairs: dict[str, dict[str, Any]] = {}
    for key, value in tensors.items():
        m = _PEFT_KEY.match(key)
        if m is None:
            raise ConfigError(
                f"adapter tensor {key!r} is not a LoRA A/B matrix; only lora_A/lora_B weights can be exported "
                "(train embeddings, norms or lm_head outside the adapter, or merge them into the base)"
            )
        pairs.setdefault(m["base"], {})[m["ab"]] = value
    for base, ab in pairs.items():
        if set(ab) != {"A", "B"}:
            raise ConfigError(f"adapter weight {base!r} has lora_{''.join(ab)} but not both lora_A and lora_B")
    return pairs


def export_lora_gguf(
    tensors: Mapping[str, Any],
    *,
    alpha: float,
    base: Path | BaseModelInfo,
    out: Path,
    metadata: Mapping[str, str] | None = None,
) -> Path:
    """Write ``tensors`` (PEFT names → 2-D arrays, e.g. ``get_peft_model_state_dict`` as numpy) to ``out``.

    ``alpha`` is PEFT's ``lora_alpha`` (not divided by the rank; rsLoRA adapters are not supported).
    ``metadata`` adds string keys (e.g. ``swarm.adapter.version``). The file is written to a
    temporary name and renamed, so a reader never sees half an adapter. Raises
    :class:`~agent_swarm.swarm.errors.ConfigError` for tensors llama.cpp could not apply (unknown names,
    embeddings, ranks or shapes that do not agree).
    """
    info = base if isinstance(base, BaseModelInfo) else base_model_info(base)
    items = _gguf_tensors(tensors, info)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    _write_adapter(tmp, info, items, alpha=alpha, metadata=metadata or {})
    os.replace(tmp, out)
    return out


def _gguf_tensors(tensors: Mapping[str, Any], info: BaseModelInfo) -> list[tuple[str, Any]]:
    """The adapter's (GGUF name, float32 array) pairs, ``.lora_a`` then ``.lora_b`` per weight, with the
    llama q/k rows permuted as llama.cpp's converter does. Raises :class:`ConfigError` for tensors
    llama.cpp could not apply."""
    import gguf
    import numpy as np

    try:
        arch_enum = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == info.arch)
    except StopIteration:
        raise ConfigError(f"architecture {info.arch!r} is unknown to the gguf package") from None
    names = gguf.get_tensor_name_map(arch_enum, info.n_blocks)
    pairs = _pairs(tensors)
    if not pairs:
        raise ConfigError("the adapter has no LoRA tensors to export")
    items: list[tuple[str, Any]] = []
    for base_name, ab in sorted(pairs.items()):
        a = np.ascontiguousarray(np.asarray(ab["A"], dtype=np.float32))
        b = np.ascontiguousarray(np.asarray(ab["B"], dtype=np.float32))
        if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1]:
            raise ConfigError(
                f"{base_name}: lora_A {a.shape} and lora_B {b.shape} are not [r, in] and [out, r] of one rank"
            )
        gguf_name = names.get_name(base_name + ".weight", try_suffixes=(".weight",))
        if gguf_name is None:
            raise ConfigError(f"no {info.arch} GGUF tensor corresponds to {base_name!r}")
        if gguf_name.startswith(("token_embd", "output.")):
            raise ConfigError(f"{base_name!r}: LoRA on embeddings or the output head is not exported")
        if info.arch == "llama" and gguf_name.endswith(("attn_q.weight", "attn_k.weight")):
            heads = info.n_head if gguf_name.endswith("attn_q.weight") else info.n_head_kv
            b = np.ascontiguousarray(_permute_rows(b, heads))
        items += [(gguf_name + ".lora_a", a), (gguf_name + ".lora_b", b)]
    return items


def _write_adapter(
    path: Path, info: BaseModelInfo, items: list[tuple[str, Any]], *, alpha: float, metadata: Mapping[str, str]
) -> None:
    """Write a GGUF LoRA adapter file: the adapter keys (type, alpha, base model name), ``metadata``, ``items``."""
    import gguf

    writer = gguf.GGUFWriter(str(path), info.arch)
    try:
        writer.add_type(gguf.GGUFType.ADAPTER)
        writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
        writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(alpha))
        if info.name:
            writer.add_string("general.base_model.0.name", info.name)
        for k, v in metadata.items():
            writer.add_string(k, str(v))
        for name, arr in items:
            writer.add_tensor(name, arr)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()


def read_lora_gguf(path: Path) -> tuple[dict[str, str | float], dict[str, Any]]:
    """(metadata, tensors) of a LoRA GGUF (tensors as numpy arrays in torch's ``[rows, cols]`` order)."""
    import gguf
    import numpy as np

    reader = gguf.GGUFReader(str(path))
    meta: dict[str, str | float] = {}
    for key in reader.fields:
        if key.startswith("GGUF."):
            continue
        value = _field(reader, key)
        if isinstance(value, str | int | float):
            meta[key] = value
    arrays = {t.name: np.array(t.data).reshape(tuple(reversed([int(d) for d in t.shape]))) for t in reader.tensors}
    return meta, arrays


def file_sha256(path: Path) -> str:
    """sha256 of a file (adapter versions and the shipped adapter's pin use it)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
