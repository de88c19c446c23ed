"""The backend a command builds, resolved once from its flags and the config file's ``[backend]`` table.

``swarm run``, ``swarm eval`` and ``swarm rollout`` resolve the same way: a flag given wins over the
table's ``model``, ``base_url``, ``subagent_backend`` and ``subagent_model``; the table's ``kind`` wins
over ``--backend`` (whose default cannot be told from a typed value); the table's other keys are the
backend options (:data:`agent_swarm.orchestrator.backend_factory.BACKEND_TABLE_KEYS`), checked against the kinds
in use when the spec is resolved (:func:`agent_swarm.orchestrator.backend_factory.plan_backends`). A command's
hints (the widest stage, a progress bar) are not options: :meth:`BackendSpec.build` passes them apart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent_swarm.orchestrator.backend_factory import backend_option_keys, build_backends, plan_backends
from agent_swarm.swarm.backend import ModelBackend

__all__ = ["BackendSpec"]

NAMED = ("kind", "model", "base_url", "subagent_backend", "subagent_model")
"""The ``[backend]`` keys a flag also sets."""


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """Which backends to build: the kind, the models and server of both roles, and the user's options."""

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
        """The flags over a config file's ``[backend]`` table (see the module docstring); an option the
        kinds in use do not take, or a bad value, raises :class:`~agent_swarm.swarm.errors.ConfigError` here."""
        options = dict(table)
        named = {k: options.pop(k, None) for k in NAMED}
        spec = cls(
            kind=named["kind"] or kind,
            model=model or named["model"],
            base_url=base_url or named["base_url"],
            subagent_kind=subagent_kind or named["subagent_backend"],
            subagent_model=subagent_model or named["subagent_model"],
            options=options,
        )
        plan_backends(**spec.arguments())
        return spec

    def arguments(self) -> dict[str, Any]:
        """:func:`~agent_swarm.orchestrator.backend_factory.build_backends`' keyword arguments, less the hints."""
        return {
            "kind": self.kind,
            "model": self.model,
            "base_url": self.base_url,
            "subagent_kind": self.subagent_kind,
            "subagent_model": self.subagent_model,
            **self.options,
        }

    def build(
        self,
        *,
        fanout: int | None = None,
        progress: Callable[..., Any] | None = None,
        default_keep_alive: float = 0.0,
    ) -> tuple[ModelBackend, ModelBackend | None]:
        """(orchestrator backend, sub-agents' backend or ``None`` = the same); ``fanout``, ``progress``
        and ``default_keep_alive`` are the command's hints (:func:`build_backends`)."""
        return build_backends(
            **self.arguments(), fanout=fanout, progress=progress, default_keep_alive=default_keep_alive
        )

    def for_subagent_model(self, model: str) -> BackendSpec:
        """The backend of sub-agents on ``model`` (an agent file's own): the sub-agents' kind and
        server as :func:`~agent_swarm.orchestrator.backend_factory.build_backends` resolves them, with the options
        that kind takes."""
        plan = plan_backends(**self.arguments())
        kind, _, url, _ = plan.subagents or (plan.kind, plan.model, plan.base_url, plan.options)
        keys = backend_option_keys(kind, url)
        return BackendSpec(kind, model, url, options={k: v for k, v in self.options.items() if k in keys})
