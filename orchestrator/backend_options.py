"""The options each backend kind takes, typed, and resolved once with their environment fallbacks.

A ``[backend]`` table or :func:`~agent_swarm.orchestrator.backend_factory.build_backends`' keyword options are
checked against the model of the kind that uses them (``extra="forbid"``): a key the kind does not take,
or a bad value, fails with one :class:`~agent_swarm.swarm.errors.ConfigError` line naming the key, the value, the
kind and what it takes. An option neither given nor set in ``[backend]`` comes from its environment
variable (:data:`agent_swarm.orchestrator.environment.BACKEND_OPTION_VARIABLES`), validated the same way.

=========================  ====================================================================
``local``                  :class:`LocalOptions`: ``slots``, ``ctx``, ``threads``,
                           ``constrain_actions``, ``timeout``, ``stop_repeats``, ``resident``,
                           ``keep_alive``
``openai``, ``vllm`` + URL :class:`HTTPOptions`: ``api_key``, ``timeout``, ``max_concurrency``,
                           ``max_retries``, ``retry_base_delay``, ``launch_burst`` + ``launch_rate``,
                           ``flavour``, ``constrain_actions``
``vllm`` without a URL     :class:`VLLMEngineOptions`: none
``transformers``           :class:`TransformersOptions`: ``device``, ``dtype``
``scripted``               :class:`ScriptedOptions`: none
every kind                 :class:`SharedOptions`: ``subagent_base_url``, ``subagent_cache``,
                           ``orchestrator_adapter``
=========================  ====================================================================

A command's hints (:class:`BackendHints`: the widest stage, a progress callback) are not options: a
kind that has no use for them ignores them.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    model_validator,
)

from agent_swarm.orchestrator.environment import Environment
from agent_swarm.swarm.backends.openai_http import Flavour
from agent_swarm.swarm.errors import ConfigError

__all__ = [
    "BackendHints",
    "BackendOptions",
    "HTTPOptions",
    "LocalOptions",
    "ScriptedOptions",
    "SharedOptions",
    "TransformersOptions",
    "VLLMEngineOptions",
    "resolve_options",
    "unknown_option",
]

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class BackendHints:
    """What a command knows that may size a backend, never user config: ``fanout``, the widest stage
    (the local engine's slots when none are set), ``progress``, a callback for a loading bar, and
    ``keep_alive``, the command's seconds for a local engine to stay loaded after it where the
    ``keep_alive`` option is unset (``swarm run``: the next run is likely soon)."""

    fanout: int | None = None
    progress: Callable[..., Any] | None = None
    keep_alive: float = 0.0


class BackendOptions(BaseModel):
    """The options one backend kind takes (a subclass per kind), frozen and complete once resolved."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class LocalOptions(BackendOptions):
    """``local``: llama.cpp in this process."""

    slots: PositiveInt | None = Field(
        None, description="parallel slots; unset: one per sub-agent of a stage (at most 16), fewer for a full context"
    )
    ctx: PositiveInt | None = Field(None, description="each slot's context in tokens; unset: sized from the model")
    threads: PositiveInt | None = Field(None, description="CPU threads; unset: the idle cores")
    constrain_actions: bool = Field(True, description="grammar-constrained tool calls")
    timeout: PositiveFloat = Field(600.0, description="seconds a model request may take")
    stop_repeats: bool = Field(True, description="stop a generation that loops verbatim")
    resident: bool = Field(
        True, description="use a running `swarm serve` engine of the same model file and settings (docs/serve.md)"
    )
    keep_alive: NonNegativeFloat | None = Field(
        None,
        description="seconds a background engine keeps the model loaded after the run for the next one "
        "(0: none); unset: the command's (300 in swarm run, 0 elsewhere; docs/serve.md)",
    )


class HTTPOptions(BackendOptions):
    """``openai``, and ``vllm`` with a URL: an OpenAI-compatible server."""

    api_key: str | None = Field(None, description="the server's API key")
    timeout: PositiveFloat = Field(120.0, description="seconds a request may take")
    max_concurrency: PositiveInt = Field(8, description="requests in flight per endpoint")
    max_retries: NonNegativeInt = Field(4, description="retries of 429/5xx/connection errors/timeouts")
    retry_base_delay: NonNegativeFloat = Field(0.5, description="seconds before the first retry, doubled per retry")
    launch_burst: PositiveInt | None = Field(None, description="a launch ramp: requests sent at once")
    launch_rate: PositiveFloat | None = Field(None, description="a launch ramp: requests per second after the burst")
    flavour: Flavour | None = Field(None, description="the server's dialect; unset: vllm for vllm, else auto")
    constrain_actions: bool = Field(False, description="JSON schema-constrained tool calls")

    @model_validator(mode="after")
    def _ramp_takes_both(self) -> HTTPOptions:
        if (self.launch_burst is None) != (self.launch_rate is None):
            raise ValueError(
                f"a launch ramp needs both launch_burst and launch_rate (got burst={self.launch_burst}, "
                f"rate={self.launch_rate}); e.g. launch_burst = 5, launch_rate = 1.4 (requests per second)"
            )
        return self


class VLLMEngineOptions(BackendOptions):
    """``vllm`` without a URL: vLLM in this process on the model directory (takes no options)."""


class TransformersOptions(BackendOptions):
    """``transformers``: a local transformers model directory."""

    device: str = Field("cpu", description="the torch device")
    dtype: str = Field("float32", description="the torch dtype: float32, bfloat16 or float16")


class ScriptedOptions(BackendOptions):
    """``scripted``: the built-in demo policy (takes no options)."""


class SharedOptions(BackendOptions):
    """What :func:`~agent_swarm.orchestrator.backend_factory.build_backends` itself takes, whatever the kind."""

    subagent_base_url: str | None = Field(None, description="the sub-agents' server; unset: the orchestrator's")
    subagent_cache: Path | None = Field(None, description="a directory: the sub-agents' replay cache")
    orchestrator_adapter: str | None = Field(
        None, description="local: default, none, shipped or a LoRA .gguf path; other kinds: default or none"
    )


def resolve_options(model: type[M], given: Mapping[str, object], env: Environment, kind: str) -> M:
    """``model`` from ``given`` (``None`` or ``""`` counts as unset), each unset field that has an
    environment variable from it; a bad value raises one :class:`ConfigError` line naming the key (or
    the variable), the value and ``kind``."""
    data = {k: v for k, v in given.items() if v is not None and v != ""}
    sources: dict[str, str] = {}
    for name in model.model_fields:
        found = None if name in data else env.backend_option(name)
        if found is not None:
            sources[name], data[name] = f"environment variable {found[0]}={env.text(found[0])!r}", found[1]
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_problem(exc, model, data, sources, kind)) from None


def _problem(
    exc: ValidationError, model: type[BaseModel], data: Mapping[str, object], sources: Mapping[str, str], kind: str
) -> str:
    error = exc.errors()[0]
    why = str(error["msg"]).removeprefix("Value error, ")
    if not error["loc"]:
        return f"backend kind {kind!r}: {why}"
    key = str(error["loc"][0])
    if error["type"] == "extra_forbidden":
        return unknown_option(key, data[key], repr(kind), model.model_fields)
    value = data.get(key)
    where = f"{sources[key]} (backend option {key})" if key in sources else f"backend option {key} = {value!r}"
    return f"{where} is invalid for backend kind {kind!r}: {why[:1].lower()}{why[1:]}"


def unknown_option(key: str, value: object, kind: str, takes: Iterable[str], *, taken_by: Iterable[str] = ()) -> str:
    """The one line for option ``key`` that ``kind`` (``'local' (orchestrator) or …``) does not take:
    the kinds that do take it (``taken_by``), else the closest valid key, and the valid keys."""
    known = sorted(takes)
    others = list(taken_by)
    if others:
        head = (
            f"backend option {key} = {value!r} is not taken by backend kind {kind}, only by "
            f"{', '.join(others)}: remove it or change the kind"
        )
    else:
        close = difflib.get_close_matches(key, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        head = f"unknown backend option {key} = {value!r} for backend kind {kind}{hint}"
    return f"{head}; valid keys: {', '.join(known) or '(none)'}"
