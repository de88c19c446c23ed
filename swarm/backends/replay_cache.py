"""A replay cache for frozen sub-agents: each model call is computed once, on disk, for every run.

Sub-agents are frozen (PARL trains the orchestrator only), so a sub-agent's model call is a pure
function of the model file, the request (messages, tool specs, tool choice, sampling parameters
including the seed) and nothing else. :class:`CachedBackend` wraps the sub-agents' backend and keys
each call by ``sha256(cache version, model id, namespace, request)``; a hit returns the stored
completion (text, tool calls, token ids, logprobs, usage) without touching the engine.

Why per call and not per sub-agent run: a run's later requests carry the tool results of its earlier
steps, so a changed tool environment (another corpus, a fixed tool) changes every key after the first
tool call by itself, and the first call of a run depends on its prompt alone. Tools still run on a
replay, so side effects and tool errors are real; only the model's work is skipped. The ``namespace``
(e.g. a workload's environment version) separates caches that must never mix anyway.

Only deterministic calls are cached: greedy (temperature 0) or seeded sampling. A call sampled at
T > 0 without a seed is passed through and counted as ``bypassed`` (caching it would collapse the
variety the sampler is asked for). Failed calls (a :class:`~agent_swarm.swarm.errors.BackendError`) are never
stored. Concurrent identical calls in one process are computed once (the others wait for it), which is
what lets the K samples of an RL group share their sub-tasks.

Hits, misses, bypasses and waits are counted for the whole cache (:attr:`CachedBackend.stats`) and per
episode: inside ``with episode_cache_stats() as stats:`` every call made by that task tree (anyio
tasks inherit the context) is counted in ``stats`` as well; ``swarm rollout`` and ``swarm train`` write
it into the record's ``metadata["subagent_cache"]`` and sum it in their summaries and step metrics.

The store is one SQLite file (WAL mode, safe across processes such as Ray actors) in the cache
directory, with its format version in a ``meta`` table: a directory written by another version is
refused with the fix, never silently reused.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import sqlite3
import threading
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
from pydantic import TypeAdapter

from agent_swarm.swarm.backend import Completion, ModelBackend, ModelRequest, SamplingParams
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.records import EpisodeRecord

__all__ = [
    "CACHE_VERSION",
    "METADATA_KEY",
    "CacheStats",
    "CachedBackend",
    "ReplayCache",
    "cache_counts",
    "deterministic_sampling",
    "episode_cache_stats",
    "request_key",
    "sum_counts",
    "with_cache_stats",
]

CACHE_VERSION = 1
"""Bump when the key or the stored value changes meaning; old directories are then refused."""

_REQUEST = TypeAdapter(ModelRequest)
_COMPLETION = TypeAdapter(Completion)


@dataclass(slots=True)
class CacheStats:
    """Counts of one cache or one episode's use of it."""

    hits: int = 0
    misses: int = 0
    bypassed: int = 0
    waits: int = 0
    """Calls that found the same call in flight and waited for its result (counted as hits too)."""

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def __bool__(self) -> bool:
        return bool(self.hits or self.misses or self.bypassed)


METADATA_KEY = "subagent_cache"
"""Where a harness puts an episode's :class:`CacheStats` in ``EpisodeRecord.metadata``."""

_EPISODE: contextvars.ContextVar[CacheStats | None] = contextvars.ContextVar("swarm_replay_cache_episode", default=None)


@contextlib.contextmanager
def episode_cache_stats() -> Iterator[CacheStats]:
    """Count the calls every :class:`CachedBackend` answers inside this block (and the tasks it
    starts, which inherit the context) in a fresh :class:`CacheStats`. Sub-agents placed in other
    processes (Ray actors) are counted there, not here."""
    stats = CacheStats()
    token = _EPISODE.set(stats)
    try:
        yield stats
    finally:
        _EPISODE.reset(token)


def with_cache_stats(record: EpisodeRecord, stats: CacheStats) -> EpisodeRecord:
    """``record`` with ``stats`` in ``metadata["subagent_cache"]`` (unchanged when the cache answered nothing)."""
    if not stats:
        return record
    return record.model_copy(update={"metadata": {**record.metadata, METADATA_KEY: stats.as_dict()}})


_COUNTED = ("hits", "misses", "bypassed")


def cache_counts(record: EpisodeRecord) -> dict[str, int]:
    """The hits, misses and bypassed calls a record's ``metadata["subagent_cache"]`` holds (``{}``: none)."""
    got = record.metadata.get(METADATA_KEY)
    if not isinstance(got, Mapping):
        return {}
    return {k: int(got.get(k, 0)) for k in _COUNTED}


def sum_counts(counts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Per-episode cache counts summed for a run's summary (``{}`` when no episode used the cache)."""
    totals: dict[str, int] = {}
    for c in counts:
        for k in _COUNTED:
            if k in c:
                totals[k] = totals.get(k, 0) + int(c[k])
    return totals


def request_key(model_id: str, namespace: str, request: ModelRequest) -> str:
    """The cache key of one call: who asks (``agent_id``/``agent_name``) is left out, what is asked is not."""
    body = _REQUEST.dump_python(request, mode="json")
    body.pop("agent_id", None)
    body.pop("agent_name", None)
    canonical = json.dumps(
        {"v": CACHE_VERSION, "model": model_id, "ns": namespace, "request": body},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def deterministic(request: ModelRequest) -> bool:
    """Whether the same request always gives the same completion (greedy, or sampled with a seed)."""
    return deterministic_sampling(request.sampling)


def deterministic_sampling(sampling: SamplingParams) -> bool:
    """Whether calls sampled with ``sampling`` can be cached: greedy, or with a seed."""
    return sampling.temperature == 0.0 or sampling.seed is not None


class ReplayCache:
    """The on-disk store: ``key -> completion``, one SQLite file under ``directory``."""

    FILE = "replay.sqlite3"

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory).expanduser()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"the sub-agent cache directory {str(self.directory)!r} cannot be created ({exc.strerror}); "
                "pass a writable directory or turn the cache off"
            ) from exc
        self.path = self.directory / self.FILE
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
        self._db.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, value BLOB NOT NULL)")
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('version', ?)", (str(CACHE_VERSION),))
        (found,) = self._db.execute("SELECT v FROM meta WHERE k = 'version'").fetchone()
        if found != str(CACHE_VERSION):
            self._db.close()
            raise ConfigError(
                f"the sub-agent cache at {str(self.path)!r} has format version {found}, this Swarm writes "
                f"version {CACHE_VERSION}; delete the directory or point the cache elsewhere"
            )

    def get(self, key: str) -> Completion | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM calls WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        return _COMPLETION.validate_json(zlib.decompress(row[0]))

    def put(self, key: str, completion: Completion) -> None:
        # A hit costs no model time: the call's timings stay with the call that computed it.
        blob = zlib.compress(_COMPLETION.dump_json(replace(completion, timings=None)), 6)
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO calls VALUES (?, ?)", (key, blob))

    def __len__(self) -> int:
        with self._lock:
            (n,) = self._db.execute("SELECT COUNT(*) FROM calls").fetchone()
        return int(n)

    def close(self) -> None:
        with self._lock:
            self._db.close()


@dataclass(slots=True)
class _Flight:
    done: anyio.Event = field(default_factory=anyio.Event)
    result: Completion | None = None


class CachedBackend:
    """A :class:`~agent_swarm.swarm.backend.ModelBackend` that answers repeated deterministic calls from a
    :class:`ReplayCache`.

    ``model_id`` names the weights exactly (the model file's sha256 for local models; for an HTTP
    endpoint whatever pins its weights, e.g. ``name@sha256``): a changed model must change it.
    """

    def __init__(self, inner: ModelBackend, cache: ReplayCache, *, model_id: str, namespace: str = "") -> None:
        if not model_id:
            raise ConfigError("the sub-agent cache needs the model's identity (its sha256); got an empty model_id")
        self.inner = inner
        self.cache = cache
        self.model_id = model_id
        self.namespace = namespace
        self.stats = CacheStats()
        self._flights: dict[str, _Flight] = {}

    @property
    def model(self) -> str:
        return self.inner.model

    def _count(self, what: str) -> None:
        for stats in (self.stats, _EPISODE.get()):
            if stats is not None:
                setattr(stats, what, getattr(stats, what) + 1)

    async def complete(self, request: ModelRequest) -> Completion:
        if not deterministic(request):
            self._count("bypassed")
            return await self.inner.complete(request)
        key = request_key(self.model_id, self.namespace, request)
        while True:
            hit = self.cache.get(key)
            if hit is not None:
                self._count("hits")
                return hit
            flight = self._flights.get(key)
            if flight is None:
                break
            await flight.done.wait()  # the same call is in flight: take its result
            if flight.result is not None:
                self._count("waits")
                self._count("hits")
                return flight.result
            # it failed: look again, and compute it here if nobody else has started to
        flight = self._flights[key] = _Flight()
        try:
            completion = await self.inner.complete(request)
            self._count("misses")
            self.cache.put(key, completion)
            flight.result = completion
            return completion
        finally:
            flight.done.set()
            del self._flights[key]

    def __getattr__(self, name: str) -> Any:
        # what the wrapped backend offers besides complete() (e.g. a local engine's close/aclose)
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)
