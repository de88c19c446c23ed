"""The backend a command builds, resolved once from its flags and the config file's ``[backend]`` table.

``swarm run``, ``swarm eval`` and ``swarm rollout`` resolve the same way: a flag given wins over the
table's ``model``, ``base_url``, ``subagent_backend`` and ``subagent_model``; the table's ``kind`` wins
over ``--backend`` (whose default cannot be told from a typed value); the table's other keys are the
backend options (:data:`orchestrator.backend_factory.BACKEND_TABLE_KEYS`), over the command's defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.backend_factory import build_backends
from swarm.backend import ModelBackend

__all__ = ["BackendSpec"]

NAMED = ("kind", "model", "base_url", "subagent_backend", "subagent_model")
"""The ``[backend]`` keys a flag also sets."""


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """Which backends to build: the kind, the models and server of both roles, and the other options."""

    kind: str
    model: str | None = None
    base_url: str | None = None
    subagent_kind: str | None = None
    subagent_model: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def resolve(
        cls,
        table: Mapping[str, Any],
        *,
        kind: str,
        model: str | None = None,
        base_url: str | None = None,
        subagent_kind: str | None = None,
        subagent_model: str | None = None,
    ) -> BackendSpec:
        """The flags over a config file's ``[backend]`` table (see the module docstring)."""
        options = dict(table)
        named = {k: options.pop(k, None) for k in NAMED}
        return cls(
            kind=named["kind"] or kind,
            model=model or named["model"],
            base_url=base_url or named["base_url"],
            subagent_kind=subagent_kind or named["subagent_backend"],
            subagent_model=subagent_model or named["subagent_model"],
            options=options,
        )

    def arguments(self, **defaults: Any) -> dict[str, Any]:
        """:func:`~orchestrator.backend_factory.build_backends`' keyword arguments; the table's options
        win over ``defaults``."""
        return {
            "kind": self.kind,
            "model": self.model,
            "base_url": self.base_url,
            "subagent_kind": self.subagent_kind,
            "subagent_model": self.subagent_model,
            **defaults,
            **self.options,
        }

    def build(self, **defaults: Any) -> tuple[ModelBackend, ModelBackend | None]:
        """(orchestrator backend, sub-agents' backend or ``None`` = the same)."""
        return build_backends(**self.arguments(**defaults))
