"""The environment variables the orchestrator and its CLI read, in one place, typed.

:func:`environment` reads the process environment when called (tests and commands that change it see
the change); each value is parsed when it is used, so a malformed variable fails the command that
needs it, with a :class:`~agent_swarm.swarm.errors.ConfigError` naming the variable, and no other.

The variables that stand in for a flag (``SWARM_BACKEND``, ``SWARM_MODEL``, ``SWARM_BASE_URL``,
``SWARM_SUBAGENT_BACKEND``, ``SWARM_SUBAGENT_MODEL``, ``SWARM_ORCHESTRATOR_ADAPTER``) are declared on
their options (:data:`FLAG_VARIABLES`; the flag wins, as typer resolves them). The kernel's own
(``SWARM_CACHE_DIR``, ``SWARM_SANDBOX*``) are read in :mod:`swarm`, which cannot import this layer;
the verl integration's in :mod:`agent_swarm.orchestrator.rl`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from agent_swarm.swarm.errors import ConfigError

__all__ = ["BACKEND_OPTION_VARIABLES", "FLAG_VARIABLES", "VARIABLES", "Environment", "environment"]

FLAG_VARIABLES: dict[str, str] = {
    "SWARM_BACKEND": "--backend",
    "SWARM_MODEL": "--model",
    "SWARM_BASE_URL": "--base-url",
    "SWARM_SUBAGENT_BACKEND": "--subagent-backend",
    "SWARM_SUBAGENT_MODEL": "--subagent-model",
    "SWARM_ORCHESTRATOR_ADAPTER": "--orchestrator-adapter",
}
"""Variables that give a flag's value when the flag is not typed (read by the options themselves)."""

VARIABLES: dict[str, str] = {
    "SWARM_CONFIG_DIR": "the user config directory (swarm.toml, agents/) [default: $XDG_CONFIG_HOME/swarm]",
    "XDG_CONFIG_HOME": "the base of the user config directory [default: ~/.config]",
    "SWARM_RECORDS_DIR": "where records go without --out [default: $XDG_DATA_HOME/swarm/records]",
    "XDG_DATA_HOME": "the base of the records directory [default: ~/.local/share]",
    "SWARM_BACKEND": "the backend kind a library caller names none of [default: local]",
    "SWARM_SUBAGENT_BASE_URL": "the sub-agents' OpenAI-compatible server [default: the orchestrator's]",
    "SWARM_API_KEY": "the OpenAI-compatible server's API key (else OPENAI_API_KEY)",
    "OPENAI_API_KEY": "the OpenAI-compatible server's API key, when SWARM_API_KEY is not set",
    "SWARM_TIMEOUT": "seconds a model request may take [default: the backend's]",
    "SWARM_LOCAL_CTX": "local engine: each slot's context in tokens [default: sized from the model and memory]",
    "SWARM_LOCAL_SLOTS": "local engine: parallel slots [default: one per sub-agent of a stage, at most 16]",
    "SWARM_LOCAL_THREADS": "local engine: CPU threads [default: llama.cpp's]",
    "SWARM_LOCAL_KEEP_ALIVE": "local engine: seconds a background engine keeps the model loaded after a run "
    "[default: 300 in swarm run, 0 elsewhere]",
    "SWARM_DEMO_LATENCY": "scripted demo: seconds per model call [default: 0.05 in swarm run, 0 in rollout]",
    "SWARM_JAEGER_UI": "the Jaeger UI that swarm traces links to [default: port 16686 of the OTLP host]",
    "CI": "set (any value): swarm run shows no live view",
    "OTEL_EXPORTER_OTLP_*": "OpenTelemetry's standard exporter settings (endpoint, protocol, headers) for tracing",
}
"""Every variable :class:`Environment` reads, and what it sets (``swarm doctor`` and the docs list them)."""

BACKEND_OPTION_VARIABLES: dict[str, tuple[str, ...]] = {
    "slots": ("SWARM_LOCAL_SLOTS",),
    "ctx": ("SWARM_LOCAL_CTX",),
    "threads": ("SWARM_LOCAL_THREADS",),
    "keep_alive": ("SWARM_LOCAL_KEEP_ALIVE",),
    "timeout": ("SWARM_TIMEOUT",),
    "api_key": ("SWARM_API_KEY", "OPENAI_API_KEY"),
    "subagent_base_url": ("SWARM_SUBAGENT_BASE_URL",),
}
"""The backend options an environment variable gives when neither an argument nor ``[backend]`` does
(the first variable set wins): :meth:`Environment.backend_option` reads them."""


@dataclass(frozen=True, slots=True)
class Environment:
    """A snapshot of the environment variables, with typed readers. An empty value counts as unset."""

    values: Mapping[str, str]

    def text(self, name: str) -> str | None:
        value = self.values.get(name)
        return value if value else None

    def number(self, name: str) -> float | None:
        raw = self.text(name)
        if raw is None:
            return None
        try:
            return float(raw)
        except ValueError:
            raise ConfigError(f"environment variable {name}={raw!r} must be a number") from None

    def integer(self, name: str) -> int | None:
        value = self.number(name)
        return None if value is None else int(value)

    def _dir(self, explicit: str, xdg: str, fallback: Path, *parts: str) -> Path:
        given = self.text(explicit)
        if given:
            return Path(given).expanduser()
        return Path(self.text(xdg) or str(fallback)).joinpath(*parts)

    @property
    def config_dir(self) -> Path:
        """``$SWARM_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/swarm``, else ``~/.config/swarm``."""
        return self._dir("SWARM_CONFIG_DIR", "XDG_CONFIG_HOME", Path.home() / ".config", "swarm")

    @property
    def records_dir(self) -> Path:
        """``$SWARM_RECORDS_DIR``, else ``$XDG_DATA_HOME/swarm/records``, else ``~/.local/share/swarm/records``."""
        return self._dir("SWARM_RECORDS_DIR", "XDG_DATA_HOME", Path.home() / ".local" / "share", "swarm", "records")

    @property
    def backend(self) -> str | None:
        return self.text("SWARM_BACKEND")

    @property
    def subagent_base_url(self) -> str | None:
        return self.text("SWARM_SUBAGENT_BASE_URL")

    @property
    def api_key(self) -> str | None:
        return self.text("SWARM_API_KEY") or self.text("OPENAI_API_KEY")

    @property
    def timeout_s(self) -> float | None:
        return self.number("SWARM_TIMEOUT")

    @property
    def local_ctx(self) -> int | None:
        return self.integer("SWARM_LOCAL_CTX")

    @property
    def local_slots(self) -> int | None:
        return self.integer("SWARM_LOCAL_SLOTS")

    @property
    def local_threads(self) -> int | None:
        return self.integer("SWARM_LOCAL_THREADS")

    def backend_option(self, option: str) -> tuple[str, str | int | float] | None:
        """(the variable, its typed value) that gives backend ``option`` (:data:`BACKEND_OPTION_VARIABLES`),
        or ``None`` when none of its variables is set; parsed only here, so a malformed variable fails
        the backends that take its option and no other."""
        readers: dict[str, Callable[[], str | int | float | None]] = {
            "SWARM_LOCAL_SLOTS": lambda: self.local_slots,
            "SWARM_LOCAL_CTX": lambda: self.local_ctx,
            "SWARM_LOCAL_THREADS": lambda: self.local_threads,
            "SWARM_LOCAL_KEEP_ALIVE": lambda: self.number("SWARM_LOCAL_KEEP_ALIVE"),
            "SWARM_TIMEOUT": lambda: self.timeout_s,
            "SWARM_API_KEY": lambda: self.text("SWARM_API_KEY"),
            "OPENAI_API_KEY": lambda: self.text("OPENAI_API_KEY"),
            "SWARM_SUBAGENT_BASE_URL": lambda: self.subagent_base_url,
        }
        for variable in BACKEND_OPTION_VARIABLES.get(option, ()):
            value = readers[variable]()
            if value is not None:
                return variable, value
        return None

    def demo_latency_s(self, default: float) -> float:
        value = self.number("SWARM_DEMO_LATENCY")
        return default if value is None else value

    @property
    def jaeger_ui(self) -> str | None:
        return self.text("SWARM_JAEGER_UI")

    @property
    def ci(self) -> bool:
        return bool(self.text("CI"))


def environment(values: Mapping[str, str] | None = None) -> Environment:
    """The environment now (``values`` in tests)."""
    return Environment(dict(os.environ) if values is None else dict(values))
