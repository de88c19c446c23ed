"""Progress events the runtime emits to observers (the CLI's live view, loggers, monitors).

Observers are plain callables ``(event) -> None`` called synchronously in the emitting task; they
must be cheap and must not raise (an observer that raises is a bug and propagates). Events are only
built when at least one observer is registered, so they cost nothing on the benchmark's hot path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from swarm.records import AgentStatus, EpisodeRecord, SubagentResult

__all__ = [
    "EpisodeFinished",
    "EpisodeStarted",
    "Event",
    "Observer",
    "StageFinished",
    "StageStarted",
    "SubagentFinished",
    "SubagentStarted",
    "SubagentStep",
    "TurnFinished",
]


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)


class EpisodeStarted(_Event):
    type: Literal["episode_started"] = "episode_started"
    episode_id: str
    task: str


class TurnFinished(_Event):
    type: Literal["turn_finished"] = "turn_finished"
    index: int
    text: str
    tool_calls: tuple[str, ...]


class StageStarted(_Event):
    type: Literal["stage_started"] = "stage_started"
    index: int
    kind: str
    width: int
    critical_so_far: int


class SubagentStarted(_Event):
    type: Literal["subagent_started"] = "subagent_started"
    agent_id: str
    name: str
    task: str
    step_cap: int


class SubagentStep(_Event):
    type: Literal["subagent_step"] = "subagent_step"
    agent_id: str
    step: int


class SubagentFinished(_Event):
    type: Literal["subagent_finished"] = "subagent_finished"
    agent_id: str
    status: AgentStatus
    result: SubagentResult


class StageFinished(_Event):
    type: Literal["stage_finished"] = "stage_finished"
    index: int
    critical_steps: int
    critical_so_far: int


class EpisodeFinished(_Event):
    type: Literal["episode_finished"] = "episode_finished"
    record: EpisodeRecord


Event = Annotated[
    EpisodeStarted
    | TurnFinished
    | StageStarted
    | SubagentStarted
    | SubagentStep
    | SubagentFinished
    | StageFinished
    | EpisodeFinished,
    Field(discriminator="type"),
]
Observer = Callable[[Event], None]
