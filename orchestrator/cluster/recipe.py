"""Recipes: picklable descriptions of objects that must be built where they are used.

A model backend holds an HTTP client, a llama.cpp engine or a GPU; a workload's tools hold an
environment. None of that can be pickled and sent to a Ray actor, and none of it should be: the actor
builds its own. A :class:`Recipe` is the function and its arguments; it pickles as just that, and its
first :meth:`~Recipe.get` in each process builds the object (once) there.

::

    factory = remote_factory(build_my_factory, "http://vllm:8000/v1", model="qwen")
    await collect_rollouts(tasks, factory, out_dir=out, executor=RayExecutor(actors=4))

``build_my_factory`` must be importable on the actors (a module-level function of an installed
package, or of a module Ray's ``runtime_env`` ships).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from agent_swarm.orchestrator.engine import Orchestrator, RewardFn
from agent_swarm.orchestrator.rollout.episodes import EpisodeFactory, EpisodeJob
from agent_swarm.swarm.config import SwarmConfig

__all__ = ["FactoryRecipe", "Recipe", "remote_factory"]

T = TypeVar("T")


class Recipe(Generic[T]):
    """``build(*args, **kwargs)``, run at most once per process by :meth:`get`; pickles as the call only."""

    def __init__(self, build: Callable[..., T], /, *args: Any, **kwargs: Any) -> None:
        if not callable(build):
            raise TypeError(f"a recipe needs a callable to build with, got {build!r}")
        self.build = build
        self.args = args
        self.kwargs = kwargs
        self._built: list[T] = []
        self._lock = threading.Lock()

    def get(self) -> T:
        """The object, built on first use in this process."""
        if not self._built:
            with self._lock:
                if not self._built:
                    self._built.append(self.build(*self.args, **self.kwargs))
        return self._built[0]

    @property
    def built(self) -> bool:
        return bool(self._built)

    def __getstate__(self) -> dict[str, Any]:
        return {"build": self.build, "args": self.args, "kwargs": self.kwargs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["build"], *state["args"], **state["kwargs"])  # type: ignore[misc]

    def __repr__(self) -> str:
        name = getattr(self.build, "__qualname__", repr(self.build))
        return f"{type(self).__name__}({name}, {len(self.args)} args, {sorted(self.kwargs)})"


class FactoryRecipe(Recipe[EpisodeFactory]):
    """An episode factory built where it runs: call it like the factory it builds."""

    def __call__(self, job: EpisodeJob, config: SwarmConfig, reward_fn: RewardFn) -> Orchestrator:
        return self.get()(job, config, reward_fn)


def remote_factory(build: Callable[..., EpisodeFactory], /, *args: Any, **kwargs: Any) -> FactoryRecipe:
    """An episode factory for :func:`~agent_swarm.orchestrator.rollout.collection.collect_rollouts` that each process
    (the driver, every Ray actor) builds for itself from ``build(*args, **kwargs)``."""
    return FactoryRecipe(build, *args, **kwargs)
