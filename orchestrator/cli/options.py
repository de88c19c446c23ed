"""Option declarations shared by ``swarm run``, ``swarm eval`` and ``swarm rollout``: one name,
one meaning, one help line (with its default and unit) for each.

Across the three commands: ``-n/--num-tasks`` is a number of tasks, ``-t/--tasks`` a task file,
``-k/--group-size`` episodes per task (rollout), ``--knob`` a workload knob, ``--max-concurrency``
sub-agents running at once, ``--concurrent-episodes`` episodes running at once, ``-b scripted`` a
scripted policy (no model: the built-in demo, or a workload's gold policy; ``gold`` is the same).

Options that travel together are declared once, as groups (frozen pydantic models whose fields are typer
options): :class:`ModelChoiceOptions` (the models after ``--backend``), :class:`BackendChoiceOptions`
(``--backend`` and those), :class:`EpisodeLimitOptions` and :class:`SubagentCacheOptions`. A command's
options model takes a group by inheriting it: pydantic lists the fields of the bases last one first, then
the class's own, so ``class Options(Group, FirstOptions)`` puts the group after ``FirstOptions``' fields and
before its own, in ``--help`` as in the model (:func:`~agent_swarm.orchestrator.cli.settings.command_options`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from pydantic import BaseModel, ConfigDict
from rich.console import Console

from agent_swarm.orchestrator.budgets import budget_overrides
from agent_swarm.swarm.backend import SamplingParams
from agent_swarm.swarm.errors import UserError

__all__ = [
    "SCRIPTED",
    "AdapterOpt",
    "BackendChoiceOptions",
    "BackendOpt",
    "BaseUrlOpt",
    "ConfigOpt",
    "EpisodeLimitOptions",
    "EpisodeTimeoutOpt",
    "JsonOpt",
    "KnobOpt",
    "LatencyOpt",
    "MaxConcurrencyOpt",
    "MaxCriticalStepsOpt",
    "MaxSubagentStepsOpt",
    "MaxTokensOpt",
    "ModelChoiceOptions",
    "ModelOpt",
    "NoSubagentCacheOpt",
    "SubagentBackendOpt",
    "SubagentCacheOpt",
    "SubagentCacheOptions",
    "SubagentModelOpt",
    "SubagentTimeoutOpt",
    "TemperatureOpt",
    "WorkloadOpt",
    "episode_overrides",
    "is_scripted",
    "parse_knobs",
    "warn_cache_bypass",
]

SCRIPTED = ("scripted", "gold")
"""Backend names of a scripted policy (no model); ``gold`` is the workload spelling of ``scripted``."""


def is_scripted(backend: str) -> bool:
    return backend in SCRIPTED


BackendOpt = Annotated[
    str,
    typer.Option(
        "--backend",
        "-b",
        envvar="SWARM_BACKEND",
        metavar="KIND",
        help="local (packaged GGUF model, llama.cpp), openai (any OpenAI-compatible server), vllm, transformers, "
        "or scripted (no model: the built-in demo, or a workload's gold policy; alias: gold)",
    ),
]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        envvar="SWARM_MODEL",
        metavar="MODEL",
        help="model name or path: a packaged model, path/to/file.gguf (local), or the server's model name "
        "(openai) [default: the backend's default model]",
    ),
]
BaseUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        metavar="URL",
        envvar="SWARM_BASE_URL",
        help="OpenAI-compatible server URL, e.g. http://localhost:8000/v1 (API key: OPENAI_API_KEY)",
    ),
]
SubagentBackendOpt = Annotated[
    str | None,
    typer.Option(
        "--subagent-backend",
        metavar="KIND",
        envvar="SWARM_SUBAGENT_BACKEND",
        help="sub-agents' backend [default: --backend]",
    ),
]
SubagentModelOpt = Annotated[
    str | None,
    typer.Option(
        "--subagent-model", metavar="MODEL", envvar="SWARM_SUBAGENT_MODEL", help="sub-agents' model [default: --model]"
    ),
]
SubagentCacheOpt = Annotated[
    Path | None,
    typer.Option(
        "--subagent-cache",
        metavar="DIR",
        help="answer the frozen sub-agents' repeated deterministic model calls from the replay cache in DIR "
        "(hits and misses in each record and the summary; docs/replay-cache.md) "
        "[default: off, or the config's subagent_cache: under [backend] for rollout and eval]",
    ),
]
NoSubagentCacheOpt = Annotated[
    bool,
    typer.Option("--no-subagent-cache", help="turn the sub-agent replay cache off (a config's subagent_cache too)"),
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        metavar="FILE",
        help="TOML/JSON config: [swarm] budgets and sampling, [backend], [reward], [tools] "
        "[default: ./swarm.toml, else the user config directory's swarm.toml]",
    ),
]
MaxCriticalStepsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-critical-steps",
        min=1,
        metavar="N",
        help="episode budget in critical steps [default: 32, or the config's]",
    ),
]
BudgetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--budget",
        metavar="KEY=VALUE",
        help="a tree-wide budget KEY=VALUE, repeatable: tokens, input_tokens, cached_tokens, output_tokens, turns, "
        "wall_s, cost, subagents (per episode; docs/budgets.md) [default: none, or the config's]",
    ),
]
MaxSubagentStepsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-subagent-steps", min=1, metavar="N", help="step cap of one sub-agent [default: 8, or the config's]"
    ),
]
MaxConcurrencyOpt = Annotated[
    int | None,
    typer.Option(
        "--max-concurrency",
        min=1,
        metavar="N",
        help="sub-agents running at once, over all episodes of the command [default: 64, or the config's]",
    ),
]
SubagentTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--subagent-timeout",
        min=0.001,
        metavar="SECONDS",
        help="seconds one sub-agent may run [default: 300, or the config's]",
    ),
]
EpisodeTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--episode-timeout", min=0.001, metavar="SECONDS", help="seconds one episode may run [default: no limit]"
    ),
]
TemperatureOpt = Annotated[
    float | None,
    typer.Option(
        "--temperature",
        min=0.0,
        metavar="T",
        help="sampling temperature (0: greedy) [default: the model family's, or the config's]",
    ),
]
MaxTokensOpt = Annotated[
    int | None,
    typer.Option(
        "--max-tokens",
        min=1,
        metavar="N",
        help="completion tokens per model turn [default: the model family's, or the config's]",
    ),
]
WorkloadOpt = Annotated[
    str | None,
    typer.Option(
        "--workload",
        "-w",
        metavar="NAME",
        help="a built-in workload: its tasks, tools and verifier (swarm eval --list)",
    ),
]
AdapterOpt = Annotated[
    str | None,
    typer.Option(
        "--orchestrator-adapter",
        metavar="ADAPTER",
        envvar="SWARM_ORCHESTRATOR_ADAPTER",
        help="local backend: the orchestrator's LoRA adapter: default (the shipped trained adapter where it is "
        "the default for the model), none (the base model), shipped, or a .gguf path; sub-agents run the base model",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable JSON on stdout")]
LatencyOpt = Annotated[
    float, typer.Option("--latency", min=0.0, metavar="SECONDS", help="scripted: simulated seconds per model call")
]
KnobOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--knob",
        metavar="NAME=VALUE",
        help="a workload knob, repeatable; values are JSON (k=8) or text; a list knob also takes a,b "
        "(categories=parallel,multiple; swarm eval --list shows the knobs)",
    ),
]


class ModelChoiceOptions(BaseModel):
    """The models a model command runs, after its ``--backend``: ``--model``, ``--base-url``,
    ``--subagent-backend`` and ``--subagent-model`` (``swarm eval`` lists its ``--backend`` with the task
    options, so it takes this group alone; ``run`` and ``rollout`` take :class:`BackendChoiceOptions`)."""

    model_config = ConfigDict(frozen=True)

    model: ModelOpt = None
    base_url: BaseUrlOpt = None
    subagent_backend: SubagentBackendOpt = None
    subagent_model: SubagentModelOpt = None


class _BackendKind(BaseModel):
    model_config = ConfigDict(frozen=True)

    backend: BackendOpt = "local"


class BackendChoiceOptions(ModelChoiceOptions, _BackendKind):
    """``--backend`` and then :class:`ModelChoiceOptions`: the backend flags
    (:class:`~agent_swarm.orchestrator.cli.settings.BackendFlags`) in the order ``run`` and ``rollout`` list them."""


class EpisodeLimitOptions(BaseModel):
    """The episode limits ``swarm eval`` and ``swarm rollout`` take, in this ``--help`` order."""

    model_config = ConfigDict(frozen=True)

    max_critical_steps: MaxCriticalStepsOpt = None
    budget: BudgetOpt = None
    max_subagent_steps: MaxSubagentStepsOpt = None
    max_concurrency: MaxConcurrencyOpt = None
    episode_timeout: EpisodeTimeoutOpt = None


class SubagentCacheOptions(BaseModel):
    """``--subagent-cache DIR`` and ``--no-subagent-cache``, as ``eval``, ``rollout`` and ``train`` take them:
    one choice (:meth:`cache_choice`) that :meth:`Settings.resolve
    <agent_swarm.orchestrator.cli.settings.Settings.resolve>` puts in the config's ``[backend]`` table."""

    model_config = ConfigDict(frozen=True)

    subagent_cache: SubagentCacheOpt = None
    no_subagent_cache: NoSubagentCacheOpt = False

    def cache_choice(self) -> Path | Literal["off"] | None:
        """The directory, ``"off"``, or ``None`` (neither given: the config's stands); both given is a
        :class:`UserError`."""
        if self.subagent_cache is not None and self.no_subagent_cache:
            raise UserError("--subagent-cache DIR and --no-subagent-cache contradict each other; give one")
        return "off" if self.no_subagent_cache else self.subagent_cache


def episode_overrides(
    budget: list[str] | None,
    *,
    max_critical_steps: int | None,
    max_subagent_steps: int | None,
    max_concurrency: int | None,
    episode_timeout: float | None,
    **more: Any,
) -> dict[str, Any]:
    """:class:`~agent_swarm.swarm.config.SwarmConfig` overrides from the episode flags every model command takes
    (``None``: not given, the config's value stands), ``more`` of a command's own (by config field), and
    ``--budget`` flags (:func:`~agent_swarm.orchestrator.budgets.budget_overrides`)."""
    return {
        "max_critical_steps": max_critical_steps,
        "max_subagent_steps": max_subagent_steps,
        "max_concurrency": max_concurrency,
        "episode_timeout_s": episode_timeout,
        **more,
        **budget_overrides(budget),
    }


def parse_knobs(items: list[str]) -> dict[str, Any]:
    """``["k=8", "categories=[\\"parallel\\"]"]`` → ``{"k": 8, "categories": ["parallel"]}`` (JSON values,
    else plain strings)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--knob takes NAME=VALUE, got {item!r}")
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw
    return out


def warn_cache_bypass(console: Console, extras: dict[str, Any], sampling: SamplingParams) -> None:
    """Tell a user whose sub-agent cache is on that every sub-agent call would pass it by, if so."""
    if not extras.get("backend", {}).get("subagent_cache"):
        return
    from agent_swarm.swarm.backends.replay_cache import deterministic_sampling  # only with the cache on

    if deterministic_sampling(sampling):
        return
    console.print(
        "[yellow]warning:[/yellow] the sub-agent cache keeps deterministic calls only, and sub-agents sample at "
        f"temperature {sampling.temperature} without a seed: every call will pass it by. Set "
        "\\[swarm.subagent_sampling] temperature = 0 (or a seed) in the config",
        soft_wrap=True,
    )
