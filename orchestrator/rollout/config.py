"""The settings of one rollout collection (:func:`~agent_swarm.orchestrator.rollout.collection.collect_rollouts`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent_swarm.swarm.rl.rewards import ADVANTAGES

__all__ = ["RolloutConfig"]


class RolloutConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    group_size: int = Field(4, ge=1, description="K: episodes per task (one GRPO group)")
    max_concurrent_episodes: int = Field(8, ge=1, description="episodes running at once, over all tasks")
    seed: int = Field(0, description="run seed; each sample's sampling seed derives from it")
    advantage: str = Field(
        "group_mean",
        description="advantage estimator, by name from agent_swarm.swarm.rl.rewards.ADVANTAGES (e.g. group_normalized)",
    )
    include_transcripts: bool = Field(True, description="keep sub-agent transcripts as side data")
    retry_infrastructure_failures: bool = Field(
        True,
        description="episodes that failed from infrastructure (see infrastructure_failure) go to failures.jsonl "
        "and run again on resume; False records them as finished episodes",
    )
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="what else a resume must match, e.g. the workload, mode, knobs and budgets (JSON values)",
    )

    @field_validator("advantage")
    @classmethod
    def _known_advantage(cls, v: str) -> str:
        ADVANTAGES.get(v)  # an unknown name fails when the config is read, listing the known ones
        return v
