"""The shared guards of tests/conftest.py: an empty model cache, no real model, no network."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from agent_swarm.swarm.backends.local import LocalEngine, cache_dir


def test_unmarked_tests_see_an_empty_model_cache_not_the_users() -> None:
    # A model assembled into ~/.cache/swarm must not make a skip guard pass in an unmarked test.
    here = cache_dir()
    assert here == Path(os.environ["SWARM_CACHE_DIR"]) and here != Path.home() / ".cache" / "swarm"
    # It holds no model: at most the sha256 cache of files other tests hashed (hashes.json).
    assert not here.exists() or {p.name for p in here.iterdir()} <= {"hashes.json"}


def test_loading_a_real_model_fails_an_unmarked_test() -> None:
    with pytest.raises(pytest.fail.Exception, match=r"loads the real model 'smollm2-135m'.*not marked integration"):
        LocalEngine("smollm2-135m", slots=1).start()


async def test_a_call_off_the_machine_fails_an_unmarked_test() -> None:
    async with httpx.AsyncClient() as client:
        with pytest.raises(pytest.fail.Exception, match=r"calls example\.org over the network"):
            await client.get("http://example.org/v1/models")


@pytest.mark.integration
def test_integration_tests_see_the_users_model_cache(hermetic_cache_dir: Path) -> None:
    # They use the installed local models as the CLI would, assembled ones included.
    assert os.environ.get("SWARM_CACHE_DIR") != str(hermetic_cache_dir)
