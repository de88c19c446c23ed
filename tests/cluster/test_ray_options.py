"""Both Ray features check their actors' options alike, where they are built (no Ray needed), and say
which actor could not start and what it was doing."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from agent_swarm.orchestrator.cluster import RayExecutor, RayPlacement
from agent_swarm.orchestrator.cluster._ray import require_ray, wait_started
from agent_swarm.orchestrator.cluster.sim import sim_subagents
from agent_swarm.swarm.errors import ConfigError

BAD = [
    ({"actors": 0}, "needs at least one actor, got actors=0"),
    ({"max_attempts": 0}, "needs max_attempts >= 1, got 0"),
    ({"num_cpus": -1.0}, "needs num_cpus per actor >= 0, got -1.0"),
]


@pytest.mark.parametrize(("options", "message"), BAD)
def test_the_executor_refuses_bad_actor_options_with_the_value(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=f"RayExecutor {message}"):
        RayExecutor(**options)


@pytest.mark.parametrize(("options", "message"), BAD)
def test_the_placement_refuses_the_same_options_with_the_same_words(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=f"RayPlacement {message}"):
        RayPlacement(sim_subagents(), **options)
    with pytest.raises(ConfigError, match="RayPlacement needs min_width >= 1, got 0"):
        RayPlacement(sim_subagents(), min_width=0)


def test_ray_for_a_feature_whose_actors_this_loop_drives_needs_asyncio() -> None:
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    assert require_ray() is ray  # no event loop here: fine for what does not await Ray
    with pytest.raises(ConfigError, match=r"RayPlacement runs on asyncio .*backend='asyncio'"):
        require_ray(asyncio_for="RayPlacement")


async def test_on_asyncio_the_feature_gets_ray() -> None:
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    assert require_ray(asyncio_for="RayExecutor") is ray


class _ActorError(Exception):
    pass


class _Handle:
    def __init__(self, error: BaseException | None) -> None:
        self.error = error
        self.pinged = 0
        self.ping = SimpleNamespace(remote=self._ping)

    async def _ping(self) -> None:
        self.pinged += 1
        if self.error is not None:
            raise self.error


async def test_an_actor_that_could_not_start_is_a_config_error_naming_it() -> None:
    ray = SimpleNamespace(exceptions=SimpleNamespace(RayActorError=_ActorError))
    ok, broken = _Handle(None), _Handle(_ActorError("build failed: no GPU"))
    await wait_started(ray, [("actor a", ok)], "build the kit")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="actor b could not build the kit: build failed: no GPU"):
        await wait_started(ray, [("actor a", ok), ("actor b", broken)], "build the kit")  # type: ignore[arg-type]
    assert ok.pinged == 2 and broken.pinged == 1
