"""A tiny name → function registry: RL maths (advantages, schedules, losses) is chosen by name from
config and fails loudly on typos. One registry per kind, one implementation per name."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from swarm.errors import ConfigError, UnknownNameError

__all__ = ["Registry"]

F = TypeVar("F", bound=Callable[..., object])


class Registry(Generic[F]):
    """Functions of one kind (advantage estimators, losses, schedules) keyed by name.

    ``get`` raises :class:`~swarm.errors.UnknownNameError` listing the known names, so a typo in a
    training config stops the run before any compute is spent.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: ``@ADVANTAGES.register("grpo")``. Registering a name twice is a bug."""

        def deco(fn: F) -> F:
            if name in self._items:
                raise ConfigError(f"{self.kind} {name!r} is already registered")
            self._items[name] = fn
            return fn

        return deco

    def get(self, name: str) -> F:
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self._items) from None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._items))

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)
