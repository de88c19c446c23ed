"""The fixed-prefix cache (agent_swarm.swarm.backends.local.prefix) against a scripted llama.cpp slot API.

The real engine's part (a restored prefix gives the same ids and logprobs as one computed in the
run) is tests/backends/test_prefix_cache_engine.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from agent_swarm.swarm.backends.local.prefix import (
    MAX_FILES,
    CacheRoom,
    PrefixCache,
    Slot,
    SlotPool,
    common_prefix,
)
from agent_swarm.swarm.errors import BackendError

PREFIX = tuple(range(100, 300))


class FakeSlots:
    """llama.cpp's /completion (n_predict 0) and /slots save/restore, on ``directory``."""

    def __init__(self, directory: Path, *, broken_restore: bool = False) -> None:
        self.directory = directory
        self.calls: list[str] = []
        self.held: dict[int, list[int]] = {}
        self.broken_restore = broken_restore

    async def post_json(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        await anyio.sleep(0.01)
        sid = int(body.get("id_slot", -1)) if path == "/completion" else int(path.split("/")[2].split("?")[0])
        if path == "/completion":
            self.calls.append("compute")
            assert body["n_predict"] == 0 and body["cache_prompt"] is True
            self.held[sid] = list(body["prompt"])
            return {"timings": {"prompt_n": len(body["prompt"]), "prompt_ms": 250.0}}
        action = path.split("action=")[1]
        self.calls.append(action)
        file = self.directory / body["filename"]
        if action == "save":
            file.write_text(json.dumps(self.held[sid]))
            return {"n_saved": len(self.held[sid])}
        if self.broken_restore or not file.is_file():
            raise BackendError("llama.cpp answered HTTP 400: failed to restore slot")
        self.held[sid] = json.loads(file.read_text())
        return {"n_restored": len(self.held[sid])}


def test_common_prefix() -> None:
    assert common_prefix((1, 2, 3), (1, 2, 4)) == 2
    assert common_prefix((), (1,)) == 0
    assert common_prefix((1, 2), (1, 2, 3)) == 2
    a = tuple(range(5000))
    assert common_prefix(a, (*a[:3333], -1)) == 3333
    assert common_prefix(a, a) == 5000


async def test_a_new_prefix_is_computed_once_saved_and_restored_by_the_next_run(tmp_path: Path) -> None:
    http = FakeSlots(tmp_path)
    cache = PrefixCache.open(tmp_path)
    slot = Slot(0)
    work = await cache.prepare(http, slot, PREFIX)
    assert http.calls == ["compute", "save"]
    assert (work.prefill_tokens, work.restored_tokens, work.prefill_s) == (len(PREFIX), 0, 0.25)
    assert slot.held == PREFIX and cache.match((*PREFIX, 1, 2)) == PREFIX
    # The slot holds it now: nothing to do.
    assert await cache.prepare(http, slot, PREFIX) == type(work)() and http.calls == ["compute", "save"]
    # Another run (a new engine) finds it on disk and restores it instead of computing it.
    http2 = FakeSlots(tmp_path)
    later = PrefixCache.open(tmp_path)
    assert later.match((*PREFIX, 7)) == PREFIX
    other = Slot(3)
    work = await later.prepare(http2, other, PREFIX)
    assert http2.calls == ["restore"] and work.restored_tokens == len(PREFIX) and work.prefill_tokens == 0
    assert other.held == PREFIX and http2.held[3] == list(PREFIX)


async def test_concurrent_requests_with_one_new_prefix_compute_it_once(tmp_path: Path) -> None:
    """The sub-agents of one stage share their common prefix: one computes it, the others restore it."""
    http = FakeSlots(tmp_path)
    cache = PrefixCache.open(tmp_path)
    slots = [Slot(i) for i in range(4)]
    async with anyio.create_task_group() as tg:
        for s in slots:
            tg.start_soon(cache.prepare, http, s, PREFIX)
    assert sorted(http.calls) == ["compute", "restore", "restore", "restore", "save"]
    assert all(s.held == PREFIX for s in slots)


async def test_a_state_that_fails_to_restore_is_dropped_and_computed_again(tmp_path: Path) -> None:
    await PrefixCache.open(tmp_path).prepare(FakeSlots(tmp_path), Slot(0), PREFIX)
    http = FakeSlots(tmp_path, broken_restore=True)
    cache = PrefixCache.open(tmp_path)
    slot = Slot(1)
    with pytest.warns(RuntimeWarning, match="restoring it failed"):
        work = await cache.prepare(http, slot, PREFIX)
    assert http.calls == ["restore", "compute", "save"] and work.prefill_tokens == len(PREFIX)
    assert slot.held == PREFIX


def test_a_prefix_is_named_by_its_exact_ids_and_adapter(tmp_path: Path) -> None:
    assert PrefixCache.key(PREFIX) != PrefixCache.key(PREFIX[:-1])
    assert PrefixCache.key(PREFIX) != PrefixCache.key(PREFIX, "adaptersha")
    cache = PrefixCache.open(tmp_path)
    cache.known[PrefixCache.key(PREFIX, "a")] = ("a", PREFIX)
    cache.known[PrefixCache.key(PREFIX[:80], "")] = ("", PREFIX[:80])
    # Only a prefix computed with the same adapter matches; the longest one wins.
    assert cache.match((*PREFIX, 1), "a") == PREFIX
    assert cache.match((*PREFIX, 1), "") == PREFIX[:80]
    assert cache.match((*PREFIX, 1), "b") is None
    assert cache.match(PREFIX[:50]) is None


async def test_old_states_are_evicted_beyond_the_limit(tmp_path: Path) -> None:
    http = FakeSlots(tmp_path)
    cache = PrefixCache.open(tmp_path)
    for i in range(MAX_FILES + 3):
        await cache.prepare(http, Slot(0), (i, *PREFIX))
    assert _count(tmp_path, "*.bin") == MAX_FILES == len(cache.known) == _count(tmp_path, "*.json")


async def test_old_states_are_evicted_beyond_the_byte_limit(tmp_path: Path) -> None:
    http = FakeSlots(tmp_path)
    one = len(json.dumps(list(PREFIX)))  # what FakeSlots writes per state
    cache = PrefixCache.open(tmp_path, max_bytes=3 * one + 10)
    for i in range(5):
        await cache.prepare(http, Slot(0), (*PREFIX, i))
    assert _count(tmp_path, "*.bin") == 3 == len(cache.known)
    # The newest one always stays, even alone over the limit.
    tiny = PrefixCache.open(tmp_path, max_bytes=1)
    await tiny.prepare(http, Slot(0), (*PREFIX, 99))
    assert _count(tmp_path, "*.bin") == 1 and list(tiny.known.values()) == [("", (*PREFIX, 99))]


def _count(directory: Path, pattern: str) -> int:
    return len(list(directory.glob(pattern)))


def test_a_request_gets_the_slot_holding_its_prefix_else_an_empty_one() -> None:
    pool = SlotPool(range(3))
    a = pool.take(PREFIX)
    assert a is not None
    a.held = (*PREFIX, 1, 2, 3)  # the orchestrator's conversation
    pool.give(a)
    b = pool.take((7, 7, 7))
    assert b is not None and b is not a
    b.held = (7, 7, 7, 8)  # something else
    pool.give(b)
    # A sub-agent's prompt shares only a few template tokens with the orchestrator's slot: it takes
    # the empty slot, not the one holding a conversation.
    other = pool.take((*PREFIX[:5], 9, 9, 9))
    assert other is not None and other.held == () and other.id not in (a.id, b.id)
    # The orchestrator's next turn finds its slot; with none free, nothing is handed out.
    assert pool.take((*PREFIX, 1, 2, 3, 4, 5)) is a
    assert pool.take(PREFIX) is b and pool.take(PREFIX) is None
    pool.give(other)
    assert pool.take(()) is other


def test_the_action_grammar_check_is_kept_beside_the_prefix_states(tmp_path: Path) -> None:
    from agent_swarm.swarm.backends.local import LocalEngine
    from agent_swarm.swarm.backends.local.engine import GRAMMARS_FILE

    engine = LocalEngine("smollm2-135m")
    engine.remember_grammar("a", True)  # no prefix cache yet (not started): in memory only
    assert engine.grammars == {"a": True} and not (tmp_path / GRAMMARS_FILE).exists()
    engine.prefixes = PrefixCache.open(tmp_path)
    engine.remember_grammar("b", False)
    engine.remember_grammar("c", True)
    assert json.loads((tmp_path / GRAMMARS_FILE).read_text()) == {"b": False, "c": True}


def test_engines_of_other_kv_layouts_never_share_prefix_states(tmp_path: Path) -> None:
    """llama.cpp refuses to restore a state an engine of other slot sizes wrote ("No available space
    in KV cache"): in one test session a 4 x 4096 engine's states failed in a 2 x 2048 engine."""
    from agent_swarm.swarm.backends.local.engine import LocalEngine

    weights = tmp_path / "m.gguf"
    weights.write_bytes(b"weights")

    def prefix_dir(slots: int, ctx: int, pool: int = 0) -> Path:
        engine = LocalEngine(str(weights), slots=slots, ctx_per_slot=ctx, pool=pool)
        engine.path = weights
        return engine._prefix_dir()

    assert prefix_dir(4, 4096) == prefix_dir(4, 4096)
    layouts = {prefix_dir(4, 4096), prefix_dir(2, 4096), prefix_dir(4, 2048), prefix_dir(4, 4096, pool=8192)}
    assert len(layouts) == 4


def test_a_shared_kv_cache_starts_a_request_only_with_room_for_it() -> None:
    room = CacheRoom(1000)
    base, adapter = SlotPool(range(1, 4), room), SlotPool([0], room)  # two kinds share one cache
    a = base.take((), tokens=600)
    assert a is not None and room.used == 600
    # a free slot, but not the room: the request waits (None), nothing is reserved for it
    assert base.take((), tokens=500) is None and adapter.take((), tokens=500) is None and room.used == 600
    b = adapter.take((), tokens=400)
    assert b is not None and room.used == 1000
    base.give(a)
    assert room.used == 400 and a.reserved == 0
    c = base.take((), tokens=50_000)  # more than the cache: all of it, once the rest is free
    assert c is None
    adapter.give(b)
    c = base.take((), tokens=50_000)
    assert c is not None and room.used == 1000 == c.reserved
    base.give(c)
    assert room.used == 0
    with pytest.raises(ValueError, match="at least one token"):
        CacheRoom(0)
