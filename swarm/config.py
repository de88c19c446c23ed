"""Configuration of an orchestrator: budgets, widths, timeouts, sampling and tool allow-lists."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agent_swarm.swarm.backend import SamplingParams, Usage
from agent_swarm.swarm.errors import ConfigError

__all__ = ["Budgets", "Hedge", "Price", "SwarmConfig", "apply_overrides"]


class Price(BaseModel):
    """What one model costs, per million tokens: uncached input, cached input, output."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: float = Field(0.0, ge=0)
    cached: float | None = Field(None, ge=0, description="cached input (None: the input price)")
    output: float = Field(0.0, ge=0)

    def cost(self, usage: Usage) -> float:
        cached = self.input if self.cached is None else self.cached
        fresh = usage.prompt_tokens - usage.cached_tokens
        return (fresh * self.input + usage.cached_tokens * cached + usage.completion_tokens * self.output) / 1e6


class Budgets(BaseModel):
    """Limits on everything an episode's agents spend together (``None``: no limit)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_tokens: int | None = Field(None, ge=1, description="input + output tokens of every agent, every turn")
    max_input_tokens: int | None = Field(None, ge=1, description="uncached prompt tokens")
    max_cached_tokens: int | None = Field(None, ge=1, description="prompt tokens read from a server's cache")
    max_output_tokens: int | None = Field(None, ge=1, description="generated tokens")
    max_turns: int | None = Field(None, ge=2, description="model turns of every agent (orchestrator and sub-agents)")
    max_wall_s: float | None = Field(None, gt=0, description="wall time of the episode, seconds")
    max_cost: float | None = Field(None, gt=0, description="cost, in the prices' unit (needs a price per model)")
    prices: dict[str, Price] = Field(default_factory=dict, description="model name -> price per million tokens")

    @property
    def active(self) -> bool:
        """Whether any limit is set."""
        limits = (self.max_tokens, self.max_input_tokens, self.max_cached_tokens, self.max_output_tokens)
        return any(v is not None for v in (*limits, self.max_turns, self.max_wall_s, self.max_cost))

    def check_prices(self, models: Iterable[str]) -> None:
        """A cost limit needs a price for every model that may run; raise :class:`ConfigError` otherwise."""
        if self.max_cost is None:
            return
        missing = sorted(set(models) - set(self.prices))
        if missing:
            raise ConfigError(
                f"budgets.max_cost = {self.max_cost:g} needs a price for every model; none for {missing}. "
                'Add e.g. [swarm.budgets.prices."MODEL"] input = 0.15, output = 0.6 (per million tokens)'
            )


class Hedge(BaseModel):
    """When a stage stops waiting for its stragglers (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    quorum: float | None = Field(None, gt=0, le=1, description="end the stage once this share has finished")
    straggler_factor: float | None = Field(
        None, gt=1, description="cut (or back up) a sub-agent running longer than this many median wall times"
    )
    min_finished: float = Field(0.5, gt=0, le=1, description="share that must finish before the median is trusted")
    backup: bool = Field(False, description="launch a copy of a straggler instead of cutting it; first finisher wins")
    min_width: int = Field(2, ge=2, description="narrower stages are not hedged")

    def takes(self, width: int) -> bool:
        return width >= self.min_width and (self.quorum is not None or self.straggler_factor is not None)


class SwarmConfig(BaseModel):
    """Budgets are in *critical steps* (Kimi K2.5 report, arXiv 2602.02276 §3), not total steps.

    Before a stage starts, each sub-agent's step cap is
    ``min(max_subagent_steps, remaining critical budget - 1)``, so a stage can never overrun the
    episode's budget and the orchestrator always keeps one last turn (without tools) to answer.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_critical_steps: int = Field(32, ge=1, description="episode budget in critical steps")
    max_subagents_per_stage: int = Field(16, ge=1, description="assign_task calls admitted per stage")
    max_concurrency: int = Field(64, ge=1, description="sub-agents running at once, across episodes")
    max_subagent_steps: int = Field(8, ge=1, description="step cap of one sub-agent")
    subagent_timeout_s: float | None = Field(300.0, gt=0, description="wall-clock limit of one sub-agent")
    episode_timeout_s: float | None = Field(None, gt=0, description="wall-clock limit of the episode")
    max_malformed_retries: int = Field(2, ge=0, description="malformed outputs fed back before failing")
    max_subagent_completion_tokens: int | None = Field(None, ge=1)
    max_report_chars: int = Field(4000, ge=64, description="a sub-agent report is trimmed to this")
    context_tokens: int | None = Field(
        None,
        ge=256,
        description="each agent's context window in tokens; older tool results are shortened to fit it "
        "(None: what the backend says, e.g. the local engine's per-slot context; unknown: no fitting)",
    )
    orchestrator_sampling: SamplingParams = SamplingParams()
    subagent_sampling: SamplingParams = SamplingParams()
    system_prompt: str | None = Field(None, description="replaces the prompt profile's orchestrator prompt")
    extra_instructions: str | None = Field(
        None, description="appended to the orchestrator's system prompt (e.g. a workload's instructions)"
    )
    prompt_profile: str | None = Field(
        None,
        description="prompts for a model family: 'default' or 'small' (None: chosen from the backend's model name)",
    )
    coach: str | None = Field(
        None,
        description="coaching tactics: 'none' or 'small' (None: the prompt profile's; a swarm run with its own "
        "system_prompt gets 'none')",
    )
    parallel_tool_calls: bool | None = Field(
        None,
        description="a single agent (subagents=False) runs several direct tool calls per turn (True: the "
        "'single-parallel' arm) or its first only (False); None: the coach's choice (several; one for 'small')",
    )
    builtin_worker: bool = Field(
        True,
        description="offer the general-purpose sub-agent type 'worker' (all grantable tools) without create_subagent",
    )
    max_repeated_failures: int = Field(
        2,
        ge=1,
        description="turns in a row that only repeat earlier failed calls before the episode stops as 'stuck'",
    )
    orchestrator_tools: tuple[str, ...] | None = Field(
        None, description="tools/toolsets the orchestrator may call directly (None: all registered)"
    )
    subagent_tools: tuple[str, ...] | None = Field(
        None, description="tools/toolsets create_subagent may grant (None: all registered)"
    )
    workspace_root: Path | None = Field(None, description="per-episode workspaces are created below this")
    subagents: bool = Field(
        True,
        description="offer create_subagent/assign_task; False runs a single agent that only has direct tools",
    )
    max_subagents_per_episode: int | None = Field(
        None, ge=1, description="sub-agents one episode may run over its whole life (None: no cap)"
    )
    budgets: Budgets = Field(
        default_factory=Budgets, description="tree-wide budgets: tokens, turns, wall time, cost (docs/budgets.md)"
    )
    hedge: Hedge | None = Field(None, description="straggler hedging (None: every stage waits for all its sub-agents)")


def apply_overrides(data: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` (a dumped :class:`SwarmConfig`) with the CLI's ``overrides`` applied: a ``None`` value is
    not set; a dict merges into the table it names (``--budget tokens=N`` keeps the config file's other
    budgets and prices)."""
    for k, v in overrides.items():
        if v is None:
            continue
        old = data.get(k)
        data[k] = {**old, **v} if isinstance(v, dict) and isinstance(old, dict) else v
    return data
