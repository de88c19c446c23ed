"""Slots sharing one KV cache (llama.cpp's unified cache, ``LocalEngine(pool=...)``; not the default
plan's layout, which gives each slot its own) on the real engine: the same ids and logprobs as slots
with their own caches, one request at a time and several at once, and requests beyond the cache's room
wait instead of failing."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from agent_swarm.swarm.backend import Completion, ModelRequest, SamplingParams
from agent_swarm.swarm.backends.local import LocalBackend, LocalEngine
from agent_swarm.swarm.messages import UserMessage

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DOC = " ".join(f"Fact {i}: city {i} has {i * 7 % 13} bridges and {i * 3 % 11} parks." for i in range(25))
QUESTIONS = (
    "What is the capital of France? Answer in one sentence.",
    "Write a Python function that reverses a string.",
    f"{DOC}\nWhich city has the most parks?",
    f"{DOC}\nWhich city has the fewest bridges?",
)
# Sampled (not greedy), so that the logprobs are the real distribution's, not 0.
SAMPLING = SamplingParams(temperature=0.8, max_tokens=24, seed=11)


async def _answers(engine: LocalEngine, together: bool) -> list[Completion]:
    async with LocalBackend(engine=engine, owns_engine=True) as backend:

        async def one(i: int, out: list[Completion | None]) -> None:
            request = ModelRequest(messages=(UserMessage(content=QUESTIONS[i]),), sampling=SAMPLING)
            out[i] = await backend.complete(request)

        out: list[Completion | None] = [None] * len(QUESTIONS)
        if together:
            async with anyio.create_task_group() as tg:
                for i in range(len(QUESTIONS)):
                    tg.start_soon(one, i, out)
        else:
            for i in range(len(QUESTIONS)):
                await one(i, out)
    assert all(c is not None for c in out)
    return [c for c in out if c is not None]


async def test_a_shared_cache_gives_the_same_ids_and_logprobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_model: str
) -> None:
    monkeypatch.setenv("SWARM_CACHE_DIR", str(tmp_path))
    model = small_model
    own = await _answers(LocalEngine(model, slots=4, ctx_per_slot=1024, threads=2, prefix_cache=False), False)
    pooled = LocalEngine(model, slots=4, ctx_per_slot=1024, pool=1024, threads=2, prefix_cache=False)
    shared = await _answers(pooled, False)
    for a, b in zip(own, shared, strict=True):
        assert a.token_ids == b.token_ids and a.logprobs == b.logprobs and a.text == b.text
        assert a.logprobs  # sampled: real logprobs were compared


async def test_requests_beyond_the_shared_cache_wait_for_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_model: str
) -> None:
    """Unreserved, llama.cpp ends every running request of a full cache with HTTP 500 "Context size
    has been exceeded." (bench/README.md); reserved, the request that does not fit waits. (Requests
    decoded together are not compared with one-at-a-time answers: llama.cpp's arithmetic depends on
    the batch, with its own caches as with a shared one.)"""
    monkeypatch.setenv("SWARM_CACHE_DIR", str(tmp_path))
    # 1,024 tokens shared: the two requests with the document (about 550 tokens each with their
    # completion) do not fit at once
    pooled = LocalEngine(small_model, slots=4, ctx_per_slot=1024, pool=1024, threads=2, prefix_cache=False)
    shared = await _answers(pooled, True)
    assert all(c.token_ids and c.finish_reason in ("stop", "length") for c in shared)
    waits = [c.timings.queue_s for c in shared if c.timings is not None]
    assert len(waits) == len(QUESTIONS) and max(waits) > 0.05  # one waited for the other's room
