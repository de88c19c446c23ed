"""Fixed prompt prefixes computed once: their KV state kept in llama.cpp's slots and on disk.

Every role's first prompt starts with the same tokens in every turn, episode and run: the system
prompt, the tool schemas, the worked example. :class:`PrefixCache` keeps, for each such prefix, the
engine's KV state as a llama.cpp slot file (``/slots/{id}?action=save``) under
``cache_dir()/prefixes/<model sha256>-<engine version>/``, named by the sha256 of the exact prefix
ids (and of the LoRA adapter files a request applies). A request whose slot does not already hold
its prefix gets it restored from disk (milliseconds) instead of prefilled (seconds). The first
request with a new prefix computes it alone in its slot (``n_predict: 0``) and saves it; concurrent
requests with the same prefix (the sub-agents of one stage) wait for that and restore it.

A changed model, engine or adapter file is a different directory or name, so a stale state is never
restored; a slot file that fails to restore is deleted and the prefix computed again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio

from agent_swarm.swarm.errors import BackendError

__all__ = ["MIN_PREFIX_TOKENS", "CacheRoom", "PrefixCache", "PrefixWork", "Slot", "SlotPool", "common_prefix"]

MIN_PREFIX_TOKENS = 64
"""Shorter prefixes are prefilled every time (restoring them saves nothing worth a file)."""

MAX_FILES = 32
"""Slot files kept per model directory; the least recently used go first."""

MAX_BYTES = 512 << 20
"""Bytes of slot files kept per model directory (a 1,400-token prefix of the 1.5B is about 40 MB)."""


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the longest common prefix of two id sequences (slice compares, O(n log n) in C)."""
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while lo < hi:  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(slots=True)
class Slot:
    """One of the engine's parallel sequences, and the ids its KV cache holds (as far as we know)."""

    id: int
    held: tuple[int, ...] = ()
    used: float = 0.0
    reserved: int = 0
    """Tokens of the shared cache (:class:`CacheRoom`) its request under way reserved."""


class CacheRoom:
    """The tokens of one KV cache that all slots share (llama.cpp's unified cache), and how many the
    requests under way reserved: a request starts only when its prompt and completion fit in the
    rest. llama.cpp, out of room, drops idle slots' cached tokens and then ends running requests
    with an error; reserved like this, it only ever needs the first."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a shared KV cache holds at least one token, got {size}")
        self.size = size
        self.used = 0
        self._lock = threading.Lock()

    def reserve(self, tokens: int) -> int | None:
        """Reserve ``tokens`` (at most the whole cache); how many, or ``None`` where they do not fit now."""
        need = min(max(tokens, 0), self.size)
        with self._lock:
            if self.used + need > self.size:
                return None
            self.used += need
            return need

    def release(self, tokens: int) -> None:
        with self._lock:
            self.used -= tokens


class SlotPool:
    """The free slots of one kind; :meth:`take` picks the one that suits a prompt best. With a
    ``room`` (a shared KV cache, maybe shared with pools of other kinds), a slot is taken only with
    room for its request."""

    def __init__(self, ids: Iterable[int], room: CacheRoom | None = None) -> None:
        self.free = [Slot(i) for i in ids]
        self.room = room
        self._lock = threading.Lock()

    def take(self, prompt: Sequence[int], tokens: int = 0) -> Slot | None:
        """The free slot with a cached prefix of ``prompt`` worth keeping (a chat template's few
        shared header tokens are not), else an empty one (nothing of value is overwritten), else the
        least recently used, with ``tokens`` (the request's prompt and completion) of the shared
        cache reserved; ``None`` when all are busy or the shared cache lacks the room now."""
        with self._lock:
            slot = max(self.free, key=lambda s: _rank(s, prompt), default=None)
            if slot is None:
                return None
            reserved = self.room.reserve(tokens) if self.room is not None else 0
            if reserved is None:
                return None
            slot.reserved = reserved
            self.free.remove(slot)
            return slot

    def give(self, slot: Slot) -> None:
        """Return ``slot`` and the room its request reserved."""
        slot.used = time.monotonic()
        if self.room is not None:
            self.room.release(slot.reserved)
        slot.reserved = 0
        with self._lock:
            self.free.append(slot)


def _rank(slot: Slot, prompt: Sequence[int]) -> tuple[int, bool, float]:
    shared = common_prefix(slot.held, prompt)
    return (shared if shared >= MIN_PREFIX_TOKENS else 0, not slot.held, -slot.used)


@dataclass(slots=True)
class PrefixWork:
    """What making a request's prefix ready in its slot cost."""

    restored_tokens: int = 0
    prefill_tokens: int = 0
    prefill_s: float = 0.0


class _Http(Protocol):
    async def post_json(self, path: str, body: dict[str, Any]) -> dict[str, Any]: ...


@dataclass(slots=True)
class PrefixCache:
    """The prefixes known to one engine, and their slot files in ``directory`` (llama.cpp's
    ``slot_save_path``)."""

    directory: Path
    max_files: int = MAX_FILES
    max_bytes: int = MAX_BYTES
    known: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    """File key -> (adapter, prefix ids) of the prefixes on disk (loaded at start or saved since)."""
    _busy: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def open(cls, directory: Path, *, max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES) -> PrefixCache:
        cache = cls(directory, max_files, max_bytes)
        directory.mkdir(parents=True, exist_ok=True)
        for index in directory.glob("*.json"):
            entry = _read_index(index)
            if entry is not None and (directory / f"{index.stem}.bin").is_file():
                cache.known[index.stem] = entry
        return cache

    @staticmethod
    def key(prefix: Sequence[int], adapter: str = "") -> str:
        """The file name stem of a prefix's state: exact ids and the adapter files applied."""
        return hashlib.sha256(json.dumps([adapter, list(prefix)]).encode()).hexdigest()[:40]

    def match(self, prompt: Sequence[int], adapter: str = "") -> tuple[int, ...] | None:
        """The longest known prefix of ``prompt`` (computed with ``adapter``), if any."""
        best: tuple[int, ...] | None = None
        for made_with, ids in list(self.known.values()):
            longer = best is None or len(ids) > len(best)
            if longer and made_with == adapter and len(ids) <= len(prompt) and tuple(prompt[: len(ids)]) == ids:
                best = ids
        return best

    async def prepare(
        self, http: _Http, slot: Slot, prefix: tuple[int, ...], adapter: str = "", lora: Any = None
    ) -> PrefixWork:
        """Make ``slot`` hold ``prefix``: nothing if it does, else restore its file, else compute it
        (and save it). Returns what that cost; failures fall back to computing, never raise."""
        if common_prefix(slot.held, prefix) >= len(prefix):
            return PrefixWork()
        key = self.key(prefix, adapter)
        while True:
            with self._lock:
                if key not in self._busy:
                    self._busy.add(key)
                    break
            await anyio.sleep(0.02)  # another request is computing this prefix: restore its result
        try:
            if key in self.known and await self._restore(http, slot, key, prefix):
                return PrefixWork(restored_tokens=len(prefix))
            return await self._compute(http, slot, key, prefix, adapter, lora)
        finally:
            with self._lock:
                self._busy.discard(key)

    async def _restore(self, http: _Http, slot: Slot, key: str, prefix: tuple[int, ...]) -> bool:
        try:
            out = await http.post_json(f"/slots/{slot.id}?action=restore", {"filename": f"{key}.bin"})
        except BackendError as exc:
            out = {"error": str(exc)}
        if out.get("n_restored") != len(prefix):
            slot.held = ()
            self._forget(key, f"restoring it failed ({json.dumps(out)[:200]})")
            return False
        slot.held = prefix
        with contextlib.suppress(OSError):
            os.utime(self.directory / f"{key}.bin")
        return True

    async def _compute(
        self, http: _Http, slot: Slot, key: str, prefix: tuple[int, ...], adapter: str, lora: Any
    ) -> PrefixWork:
        body: dict[str, Any] = {"prompt": list(prefix), "n_predict": 0, "cache_prompt": True, "id_slot": slot.id}
        if lora is not None:
            body["lora"] = lora
        slot.held = ()
        data = await http.post_json("/completion", body)
        slot.held = prefix
        t = data.get("timings") or {}
        work = PrefixWork(prefill_tokens=int(t.get("prompt_n") or 0), prefill_s=float(t.get("prompt_ms") or 0) / 1e3)
        await self._save(http, slot, key, prefix, adapter)
        return work

    async def _save(self, http: _Http, slot: Slot, key: str, prefix: tuple[int, ...], adapter: str) -> None:
        tmp = f"{key}.tmp{os.getpid()}.bin"
        try:
            out = await http.post_json(f"/slots/{slot.id}?action=save", {"filename": tmp})
            if out.get("n_saved") != len(prefix):
                raise BackendError(f"saved {out.get('n_saved')} tokens of {len(prefix)}")
            (self.directory / tmp).replace(self.directory / f"{key}.bin")
            index = self.directory / f"{key}.json.tmp{os.getpid()}"
            index.write_text(
                json.dumps({"adapter": adapter, "ids": list(prefix), "saved": time.time()}), encoding="utf-8"
            )
            index.replace(self.directory / f"{key}.json")
        except (BackendError, OSError) as exc:
            (self.directory / tmp).unlink(missing_ok=True)
            warnings.warn(
                f"the prompt prefix cache could not save a prefix ({exc}); it is computed again next run",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        self.known[key] = (adapter, prefix)
        self._evict()

    def _forget(self, key: str, why: str) -> None:
        self.known.pop(key, None)
        for suffix in (".bin", ".json"):
            (self.directory / f"{key}{suffix}").unlink(missing_ok=True)
        warnings.warn(f"a cached prompt prefix was dropped: {why}; it is computed again", RuntimeWarning, stacklevel=3)

    def _evict(self) -> None:
        """Keep the most recently used states within ``max_files`` and ``max_bytes`` (the newest always)."""
        files = [(p, p.stat()) for p in self.directory.glob("*.bin") if ".tmp" not in p.name]
        files.sort(key=lambda f: f[1].st_mtime, reverse=True)
        kept = 0
        for i, (path, st) in enumerate(files):
            kept += st.st_size
            if i == 0 or (i < self.max_files and kept <= self.max_bytes):
                continue
            self.known.pop(path.stem, None)
            path.unlink(missing_ok=True)
            path.with_suffix(".json").unlink(missing_ok=True)


def _read_index(index: Path) -> tuple[str, tuple[int, ...]] | None:
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
        adapter, ids = data["adapter"], data["ids"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if isinstance(adapter, str) and isinstance(ids, list) and all(type(i) is int for i in ids):
        return adapter, tuple(ids)
    return None
