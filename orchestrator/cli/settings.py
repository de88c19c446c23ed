"""One settings model for ``swarm run``, ``eval``, ``rollout`` and ``train``: parse → settings → library call.

Each command declares its options once, as the fields of a frozen pydantic model (``RunOptions``,
``EvalOptions``, ``RolloutOptions``, ``TrainOptions``: every field is its typer option, so the model is
both what the CLI parses and what a caller builds, as TRL's ``GRPOConfig`` is). :func:`command_options`
gives the command function those fields as its parameters, so the command is a few lines: validate the
options, resolve them, call the library (vLLM's ``AsyncEngineArgs.from_cli_args(args)``).

:meth:`Settings.resolve` is the one place the options meet the config file and the environment:

- the config file (:func:`~agent_swarm.orchestrator.cli.discovery.resolve_config`: ``-c FILE``, else
  ``./swarm.toml``, else the user config directory's), read once with the tables the command takes
  (:data:`COMMANDS`);
- the episode flags as :class:`~agent_swarm.swarm.config.SwarmConfig` overrides (``--budget`` included);
- the flags that set ``[backend]`` keys (``--orchestrator-adapter``, ``--subagent-cache``,
  ``--no-subagent-cache``) put into the file's ``[backend]`` table, and the backend flags
  (:class:`BackendFlags`) that :class:`~agent_swarm.orchestrator.cli.backend_spec.BackendSpec` resolves over it;
- the sampling flags and the command's declared sampling start (:mod:`agent_swarm.orchestrator.cli.sampling`).

Environment variables: the ones that stand in for a flag (``SWARM_BACKEND``, ``SWARM_MODEL``, …:
:data:`agent_swarm.orchestrator.environment.FLAG_VARIABLES`) are read by the options that declare them; every other
one through :func:`agent_swarm.orchestrator.environment.environment`. ``tests/core/test_cli_drift.py`` checks that
the commands resolve the same flags, config file and environment to the same config and sampling.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar, get_type_hints

from pydantic import BaseModel, ValidationError

from agent_swarm.orchestrator.cli.backend_spec import BackendSpec
from agent_swarm.orchestrator.cli.discovery import resolve_config
from agent_swarm.orchestrator.cli.options import SubagentCacheOptions, episode_overrides, is_scripted
from agent_swarm.orchestrator.cli.sampling import SamplingStart, resolve_sampling, with_sampling
from agent_swarm.orchestrator.tasks import CONFIG_TABLES, load_config
from agent_swarm.swarm.backend import SamplingParams
from agent_swarm.swarm.config import SwarmConfig, apply_overrides
from agent_swarm.swarm.errors import UserError, validation_problems

__all__ = [
    "COMMANDS",
    "BackendFlags",
    "Command",
    "CommandRules",
    "ModelOptions",
    "Settings",
    "command_options",
    "config_from",
]

F = TypeVar("F", bound=Callable[..., Any])
Command = Literal["run", "run -w", "eval", "rollout"]


@dataclass(frozen=True, slots=True)
class CommandRules:
    """What a command reads of the config file, where its sampling starts (:mod:`.sampling`), and how
    long its local engine stays loaded after it where ``[backend] keep_alive`` is unset."""

    tables: tuple[str, ...]
    start: SamplingStart
    keep_alive: float = 0.0


RUN_KEEP_ALIVE_S = 300.0
"""``swarm run``'s model stays loaded this long after it (a person runs the next task soon; Ollama keeps
a model five minutes): the next run attaches instead of loading it (docs/serve.md)."""

COMMANDS: dict[Command, CommandRules] = {
    "run": CommandRules(tuple(CONFIG_TABLES), "family", RUN_KEEP_ALIVE_S),
    # the workload's scorer is the reward
    "run -w": CommandRules(("swarm", "backend", "tools"), "family", RUN_KEEP_ALIVE_S),
    "eval": CommandRules(("swarm", "backend"), "greedy"),  # a workload's own verifier scores its episodes
    "rollout": CommandRules(("swarm", "backend", "reward"), "config"),
}
"""Each command's config tables, sampling start and keep-alive; a scripted policy starts from the config in all."""


def command_options(options: type[BaseModel]) -> Callable[[F], F]:
    """Make the fields of ``options`` the parameters of ``def command([ctx,] **given)``, in their order and
    with their typer declarations (``Annotated[type, typer.Option(...)]``) and defaults, so typer parses
    them and passes them as ``given``; the command's other parameters (``ctx``) stay first."""
    hints = get_type_hints(options, include_extras=True)
    fields = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty if info.is_required() else info.default,
            annotation=hints[name],
        )
        for name, info in options.model_fields.items()
    ]

    def wrap(command: F) -> F:
        own = inspect.signature(command, eval_str=True).parameters.values()
        kept = [p for p in own if p.kind is not inspect.Parameter.VAR_KEYWORD]
        command.__signature__ = inspect.Signature([*kept, *fields])  # type: ignore[attr-defined]
        return command

    return wrap


class ModelOptions(Protocol):
    """The options every model command (``run``, ``eval``, ``rollout``) takes, one meaning each."""

    @property
    def backend(self) -> str: ...
    @property
    def model(self) -> str | None: ...
    @property
    def base_url(self) -> str | None: ...
    @property
    def subagent_backend(self) -> str | None: ...
    @property
    def subagent_model(self) -> str | None: ...
    @property
    def config_file(self) -> Path | None: ...
    @property
    def max_critical_steps(self) -> int | None: ...
    @property
    def budget(self) -> list[str] | None: ...
    @property
    def max_subagent_steps(self) -> int | None: ...
    @property
    def max_concurrency(self) -> int | None: ...
    @property
    def episode_timeout(self) -> float | None: ...
    @property
    def temperature(self) -> float | None: ...
    @property
    def max_tokens(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class BackendFlags:
    """The backend flags as given (``None``: not given); the config's ``[backend]`` fills the rest."""

    kind: str = "local"
    model: str | None = None
    base_url: str | None = None
    subagent_kind: str | None = None
    subagent_model: str | None = None

    @property
    def scripted(self) -> bool:
        return is_scripted(self.kind)


@dataclass(frozen=True, slots=True)
class Settings:
    """What a command resolved from its config file, flags and environment, once (:meth:`resolve`)."""

    command: Command
    config_file: Path | None = None
    """The config file used (given or found), or ``None``."""
    base: SwarmConfig | None = None
    """The file's ``[swarm]`` table (``None`` without a file)."""
    extras: dict[str, Any] = field(default_factory=dict)
    """The file's other tables, with the ``[backend]`` keys flags set."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """:class:`SwarmConfig` fields the flags set (``None``: not given, the config's value stands)."""
    sampling_flags: Mapping[str, Any] = field(default_factory=dict)
    """``--temperature``, ``--max-tokens`` and the sampling ``--seed`` (``None``: not given)."""
    backend: BackendFlags = field(default_factory=BackendFlags)
    greedy_seed: int | None = None
    """The ``greedy`` start's sampling seed (``swarm eval``'s run seed)."""

    @classmethod
    def resolve(
        cls,
        options: ModelOptions,
        command: Command,
        *,
        quiet: bool = False,
        seed: int | None = None,
        greedy_seed: int | None = None,
        adapter: str | None = None,
        cache: SubagentCacheOptions | None = None,
        **more: Any,
    ) -> Settings:
        """Resolve ``options`` for ``command``: ``seed`` is the sampling seed as given, ``adapter`` and
        ``cache`` (the command's :class:`SubagentCacheOptions`) the flags that set ``[backend]`` keys, ``more``
        the command's own config overrides (by field). A config file found rather than given is named on stderr
        unless ``quiet``; anything a user must fix raises :class:`UserError`."""
        overrides = episode_overrides(
            options.budget,
            max_critical_steps=options.max_critical_steps,
            max_subagent_steps=options.max_subagent_steps,
            max_concurrency=options.max_concurrency,
            episode_timeout=options.episode_timeout,
            **more,
        )
        choice = None if cache is None else cache.cache_choice()
        path = resolve_config(options.config_file, quiet=quiet)
        tables = COMMANDS[command].tables
        base, extras = (None, {}) if path is None else load_config(path, tables=tables, command=_name(command))
        extras = _with_backend_flags(extras, adapter, choice)
        flags = {"temperature": options.temperature, "max_tokens": options.max_tokens, "seed": seed}
        backend = BackendFlags(
            options.backend, options.model, options.base_url, options.subagent_backend, options.subagent_model
        )
        return cls(command, path, base, extras, overrides, flags, backend, greedy_seed)

    @property
    def start(self) -> SamplingStart:
        """Where a role the config file does not set starts: the command's, or the config for a script."""
        return "config" if self.backend.scripted else COMMANDS[self.command].start

    @property
    def keep_alive(self) -> float:
        """The command's keep-alive hint (:class:`CommandRules`)."""
        return COMMANDS[self.command].keep_alive

    def spec(self) -> BackendSpec:
        """The backends to build: the flags over the file's ``[backend]`` table."""
        b = self.backend
        return BackendSpec.resolve(
            self.extras.get("backend", {}),
            kind=b.kind,
            model=b.model,
            base_url=b.base_url,
            subagent_kind=b.subagent_kind,
            subagent_model=b.subagent_model,
        )

    def config(self, start: SwarmConfig | None = None) -> SwarmConfig:
        """``start`` (else the file's ``[swarm]``, else the defaults) with the flags' overrides."""
        return config_from(start or self.base or SwarmConfig(), self.overrides)

    def sampling(self, config: SwarmConfig, model: str | None = None) -> dict[str, SamplingParams]:
        """Both roles' sampling on ``config``: the file's where it sets a role, else :attr:`start`'s
        (``model`` picks the family), with the sampling flags on top."""
        given = self.base.model_fields_set if self.base is not None else set()
        return resolve_sampling(
            config, file_sets=given, start=self.start, flags=self.sampling_flags, model=model, seed=self.greedy_seed
        )

    def with_sampling(self, config: SwarmConfig, model: str | None = None) -> SwarmConfig:
        """``config`` with :meth:`sampling`."""
        return with_sampling(config, self.sampling(config, model))


def _with_backend_flags(
    extras: dict[str, Any], adapter: str | None, cache: Path | Literal["off"] | None
) -> dict[str, Any]:
    """``extras`` (a config's tables) with the ``[backend]`` keys flags set: ``orchestrator_adapter`` by
    ``--orchestrator-adapter``, ``subagent_cache`` by ``--subagent-cache DIR`` or removed by
    ``--no-subagent-cache``; the backend resolver reads them there, whichever command runs."""
    table = dict(extras.get("backend", {}))
    if adapter is not None:
        table["orchestrator_adapter"] = adapter
    if cache == "off":
        table.pop("subagent_cache", None)
    elif cache is not None:
        table["subagent_cache"] = str(cache)
    return extras if table == extras.get("backend", {}) else {**extras, "backend": table}


def config_from(base: SwarmConfig, overrides: Mapping[str, Any]) -> SwarmConfig:
    """``base`` with the command's option ``overrides`` (:func:`~agent_swarm.swarm.config.apply_overrides`); a value
    the config refuses is a one-line :class:`UserError` naming the field."""
    data = apply_overrides(base.model_dump(), overrides)
    try:
        return SwarmConfig.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"invalid option value: {validation_problems(exc, 'config')}") from None


def _name(command: Command) -> str:
    return "swarm " + command.split()[0]
