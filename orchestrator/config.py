"""Configuration of an orchestrator: budgets, widths, timeouts, sampling and tool allow-lists."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from swarm.backend import SamplingParams

__all__ = ["SwarmConfig"]


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
