"""One generic name → item registry for everything chosen by name from a config, a task file or a flag:
verifiers (:data:`agent_swarm.swarm.verifiers.VERIFIERS`), workloads (:data:`workloads.WORKLOADS`), model backends
(:data:`agent_swarm.orchestrator.backend_factory.BACKENDS`) and the RL maths (:data:`agent_swarm.swarm.rl.ADVANTAGES`,
:data:`agent_swarm.swarm.rl.SCHEDULES`, :data:`agent_swarm.swarm.rl.rewards.PARALLEL_FORMS`,
:data:`agent_swarm.swarm.rl.losses.LOSSES`).

A lookup of an unknown name raises :class:`~agent_swarm.swarm.errors.UnknownNameError` listing the known names, so
a typo stops a run before any compute is spent; registering a name twice is an error unless the caller
says ``replace=True``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from agent_swarm.swarm.errors import ConfigError, UnknownNameError

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Items of one kind keyed by name: ``REG.add("name", item)`` or ``@REG.register("name")``."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def add(self, name: str, item: T, *, replace: bool = False) -> T:
        """Register ``item`` under ``name``; a taken name raises :class:`ConfigError` unless ``replace``."""
        if name in self._items and not replace:
            raise ConfigError(f"{self.kind} {name!r} is already registered; pass replace=True to override it")
        self._items[name] = item
        return item

    def register(self, name: str, *, replace: bool = False) -> Callable[[T], T]:
        """Decorator form of :meth:`add`: ``@ADVANTAGES.register("group_mean")``."""

        def deco(item: T) -> T:
            return self.add(name, item, replace=replace)

        return deco

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self._items) from None

    @property
    def names(self) -> tuple[str, ...]:
        """The registered names, sorted."""
        return tuple(sorted(self._items))

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self.names)})"
