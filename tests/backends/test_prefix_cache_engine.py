"""The prefix cache on the real engine: a prefix restored from disk gives the same ids and logprobs
as the run that computed it, and the timings say what was restored, cached and computed."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_swarm.swarm.backend import Completion, ModelRequest, SamplingParams
from agent_swarm.swarm.backends.local import (
    LocalBackend,
    LocalEngine,
    default_threads,
)
from agent_swarm.swarm.messages import SystemMessage, UserMessage

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SYSTEM = "You are a careful assistant. " + " ".join(f"Rule {i}: answer briefly and cite fact {i}." for i in range(15))
# Sampled (not greedy) so that the logprobs are the real distribution's, not 0.
SAMPLING = SamplingParams(temperature=0.8, max_tokens=8, seed=7)


def _request(question: str) -> ModelRequest:
    return ModelRequest(messages=(SystemMessage(content=SYSTEM), UserMessage(content=question)), sampling=SAMPLING)


async def _run(model: str, *questions: str, prefix_cache: bool = True) -> list[Completion]:
    engine = LocalEngine(model, slots=2, ctx_per_slot=1024, threads=default_threads(), prefix_cache=prefix_cache)
    async with LocalBackend(engine=engine, owns_engine=True) as backend:
        return [await backend.complete(_request(q)) for q in questions]


async def test_a_restored_prefix_gives_the_same_ids_and_logprobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_model: str
) -> None:
    monkeypatch.setenv("SWARM_CACHE_DIR", str(tmp_path))  # a cold cache (the model is assembled into it)
    model = small_model
    cold, other = await _run(model, "What is 2+2?", "Name a prime number.")
    assert cold.timings is not None and other.timings is not None
    # Cold: the whole prompt computed (the fixed prefix alone first, then the rest), nothing restored.
    assert cold.timings.restored_tokens == 0 and cold.timings.startup_s > 0
    assert cold.timings.prefill_tokens + cold.timings.cached_tokens == len(cold.prompt_token_ids or ())
    # The second question shares the fixed prefix, still in the slot: only its own tokens are computed.
    assert other.timings.cached_tokens >= 64 and other.timings.prefill_tokens < 32 and other.timings.startup_s == 0
    files = list((tmp_path / "prefixes").glob("*/*.bin"))
    assert len(files) == 1, files
    # Warm: a new engine (another run) restores the prefix from disk ...
    (warm,) = await _run(model, "What is 2+2?")
    assert warm.timings is not None
    assert warm.timings.restored_tokens == other.timings.cached_tokens > 0 and warm.timings.prefill_tokens < 32
    # ... and samples exactly what the cold run sampled, with the same logprobs.
    assert warm.token_ids == cold.token_ids and warm.logprobs == cold.logprobs and warm.text == cold.text
    # Without the cache the whole prompt is one prefill: the same tokens; llama.cpp's arithmetic over
    # one batch differs from two in the last digits, so logprobs agree closely but not bit for bit
    # (as every continued turn's already did before the prefix cache).
    (fresh,) = await _run(model, "What is 2+2?", prefix_cache=False)
    assert fresh.timings is not None and fresh.timings.cached_tokens == 0 and fresh.timings.restored_tokens == 0
    assert fresh.token_ids == cold.token_ids
    assert fresh.logprobs is not None and cold.logprobs is not None
    assert max(abs(a - b) for a, b in zip(fresh.logprobs, cold.logprobs, strict=True)) < 0.1
