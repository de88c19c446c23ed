"""What an episode leaves behind: tasks, step/stage/sub-agent records and the episode record.

All frozen pydantic models; the episode record is the single source of truth that the CLI writes as
JSON, the DAG is computed from, and trajectories/rewards are derived from.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agent_swarm.swarm.backend import Timings, Usage
from agent_swarm.swarm.messages import Message, ToolCall

__all__ = [
    "AgentDefinition",
    "AgentStatus",
    "BudgetLine",
    "ContextCut",
    "DagStats",
    "EpisodeRecord",
    "EpisodeStatus",
    "MonitorReport",
    "OrchestratorTurn",
    "RewardRecord",
    "StageRecord",
    "StepRecord",
    "SubagentResult",
    "Task",
    "ToolResult",
    "dump_record",
]

SCHEMA_VERSION = 1


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Task(_Frozen):
    """A unit of work: the prompt, and optionally a verifier (by registry name) with its arguments."""

    id: str = ""
    prompt: str = Field(min_length=1)
    verifier: str | None = None
    verifier_args: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)


class AgentStatus(StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    TIMEOUT = "timeout"
    BUDGET_EXHAUSTED = "budget_exhausted"
    CANCELLED = "cancelled"
    CONTEXT_EXHAUSTED = "context_exhausted"  # its conversation no longer fit its context; report is its last turn


class EpisodeStatus(StrEnum):
    COMPLETED = "completed"  # the orchestrator answered
    BUDGET_EXHAUSTED = "budget_exhausted"  # critical-step budget spent; answer is the forced last turn
    TIMEOUT = "timeout"  # the episode deadline passed
    CANCELLED = "cancelled"  # the caller cancelled (Ctrl-C)
    FAILED = "failed"  # the orchestrator's model failed or output stayed malformed
    STUCK = "stuck"  # the orchestrator kept repeating failed calls; answer is the forced last turn
    CONTEXT_EXHAUSTED = "context_exhausted"  # the conversation no longer fit the context; answer is the last turn


class AgentDefinition(_Frozen):
    """A sub-agent type created by ``create_subagent``: frozen checkpoint + prompt + tool allow-list."""

    name: str
    system_prompt: str
    tools: tuple[str, ...] = ()
    model: str | None = None
    description: str = ""
    """When to use this type; the orchestrator's prompt lists it beside the name."""


# ToolResult, StepRecord and SubagentResult are built on the runtime's hot path (one per tool call,
# step and sub-agent) from values that are already validated, and they are the most numerous objects
# of a big episode: plain slotted dataclasses, as pydantic-ai's messages are (no per-instance
# __dict__ or fields-set, no validation per construction). Not frozen: a frozen dataclass's __init__
# sets every field through object.__setattr__, the largest part of building one; the runtime never
# changes a record once built. Pydantic validates them where they enter (an EpisodeRecord read
# from JSON or built from dicts) and checks them where they leave (:func:`dump_record`).
_RECORD_CONFIG = ConfigDict(extra="forbid")
_NO_USAGE = Usage()  # frozen: one shared default


@dataclass(slots=True, kw_only=True)
class ToolResult:
    """One executed tool call as the agent saw it."""

    __pydantic_config__ = _RECORD_CONFIG
    call: ToolCall
    content: str
    is_error: bool = False
    error_type: str | None = None
    started: float = 0.0
    ended: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextCut:
    """One message of an agent's conversation shortened to fit its context (:mod:`agent_swarm.swarm.context`):
    before the agent's turn ``turn``, message ``message`` (its index in the conversation, a tool
    result or a sub-agent report named ``name``) went from ``chars`` to a head/tail excerpt of
    ``kept`` characters, about ``tokens_cut`` tokens fewer."""

    __pydantic_config__ = _RECORD_CONFIG
    turn: int
    message: int
    name: str
    chars: int
    kept: int
    tokens_cut: int


StepKind = Literal["orchestrator", "subagent"]


@dataclass(slots=True, kw_only=True)
class StepRecord:
    """One LLM generation of one agent plus the tool calls it emitted.

    Times are seconds on the episode's monotonic clock (0 = episode start). A sub-agent step ends
    after its tool calls; an orchestrator step ends with its generation, because its direct tool
    calls run beside the sub-agents of its stage (each ``tool_results`` entry has its own times).
    ``error`` holds a recoverable problem seen in this step (malformed output, model failure).
    """

    __pydantic_config__ = _RECORD_CONFIG
    agent_id: str
    index: int
    kind: StepKind
    stage: int
    started: float
    ended: float
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tool_results: tuple[ToolResult, ...] = ()
    error: str | None = None
    timings: Timings | None = None
    """Where the step's model call spent its time (:class:`~agent_swarm.swarm.backend.Timings`), when the
    backend measured it; records written before it existed load with ``None``."""

    @property
    def duration(self) -> float:
        return self.ended - self.started


@dataclass(slots=True, kw_only=True)
class SubagentResult:
    """What a sub-agent returns to the orchestrator, plus its transcript as side data."""

    __pydantic_config__ = _RECORD_CONFIG
    agent_id: str
    name: str
    task: str
    status: AgentStatus
    steps: int = 0
    report: str = ""
    error: str | None = None
    error_type: str | None = None
    started: float = 0.0
    ended: float = 0.0
    usage: Usage = _NO_USAGE
    model: str = ""
    step_cap: int = 0
    step_records: tuple[StepRecord, ...] = ()
    transcript: tuple[Message, ...] = ()
    # where it ran when placed on another process ("pid N on HOST"; empty in the episode's own process),
    # and how many times it was started (> 1: its actor died before its result came back, and it ran again)
    ran_in: str = ""
    attempts: int = 1
    # messages shortened to fit its context (agent_swarm.swarm.context), in the order they were cut
    context_cuts: tuple[ContextCut, ...] = ()


class OrchestratorTurn(_Frozen):
    """One orchestrator generation with its exact tokens (RL needs them as sampled)."""

    index: int
    stage: int
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str = "stop"
    usage: Usage = Usage()
    prompt_token_ids: tuple[int, ...] | None = None
    response_token_ids: tuple[int, ...] | None = None
    response_logprobs: tuple[float, ...] | None = None
    parse_error: str | None = None
    drift: bool = False
    context_cut: bool = False
    """Messages were shortened to fit the context before this turn: its prompt is a re-rendered
    conversation, never an exact continuation of the previous turn (``drift`` is set too)."""
    tools_enabled: bool = True
    weight_version: str | None = None


StageKind = Literal["tools", "subagents", "mixed", "answer", "retry"]


class StageRecord(_Frozen):
    """One orchestrator turn and everything it started."""

    index: int
    kind: StageKind
    started: float
    ended: float
    orchestrator_steps: tuple[StepRecord, ...]
    tool_results: tuple[ToolResult, ...] = ()
    subagents: tuple[SubagentResult, ...] = ()
    critical_steps: int = 0

    @property
    def width(self) -> int:
        return len(self.subagents)


class DagStats(_Frozen):
    critical_steps: int = 0
    total_steps: int = 0
    main_steps: int = 0
    subagent_steps: int = 0
    wall_critical_path_s: float = 0.0
    critical_path: tuple[str, ...] = ()
    stage_widths: tuple[int, ...] = ()
    speedup: float = 1.0

    @property
    def mean_width(self) -> float:
        widths = [w for w in self.stage_widths if w]
        return sum(widths) / len(widths) if widths else 0.0


class RewardRecord(_Frozen):
    """The PARL reward of one episode with everything needed to recompute it.

    ``total = lambda1 * r_parallel + lambda2 * r_finish + r_perf``; ``step`` is the trainer step the
    λ schedules were read at; ``details`` holds verifier-specific metrics (F1, pass counts, ...).
    """

    total: float
    r_perf: float
    r_parallel: float = 0.0
    r_finish: float = 0.0
    lambda1: float = 0.0
    lambda2: float = 0.0
    step: int = 0
    verifier: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None


class MonitorReport(_Frozen):
    """How an episode used its swarm, from :func:`agent_swarm.swarm.monitors.episode_monitors` (pure functions
    of the record; ``None`` where a measure does not apply, e.g. no task parts, no sub-agents)."""

    parts: int | None = None
    """The independent parts the task declares (``metadata["parts"]``)."""
    subagents: int = 0
    max_width: int = 0
    serial_collapse: bool | None = None
    """A task of several parts done one sub-agent per stage, or with no fan-out at all."""
    duplicate_tasks: int = 0
    """Sub-tasks that repeat (or only reword) another sub-task of the same stage."""
    unused_reports: int = 0
    """Completed sub-agents whose findings the answer never uses (scaled from a sample when
    ``reports_checked`` is below the completed sub-agents)."""
    reports_checked: int = 0
    """Completed sub-agents' reports read for ``unused_reports``."""
    over_width_stages: int = 0
    """Stages wider than the task's parts."""
    spurious_parallelism: bool = False
    finish_rate: float | None = None
    """Completed sub-agents / sub-agents run."""
    straggler_ratio: float | None = None
    """The largest, over stages of two or more sub-agents, of slowest steps / median steps."""
    flags: tuple[str, ...] = ()
    """The monitors that fired: ``serial_collapse``, ``spurious_parallelism``, ``stragglers``, ``low_finish_rate``."""


class BudgetLine(_Frozen):
    """One tree-wide budget of an episode (``agent_swarm.orchestrator.budgets``): its limit, what the agents
    used, what is reserved for sub-agents still running, and what is left."""

    limit: float
    used: float
    reserved: float = 0.0
    left: float


class EpisodeRecord(_Frozen):
    """Everything one episode did. Every ending (answer, budget, timeout, cancel, error) produces one."""

    schema_version: int = SCHEMA_VERSION
    episode_id: str
    task: Task
    status: EpisodeStatus
    answer: str | None = None
    error: str | None = None
    error_type: str | None = None
    model: str = ""
    started_at: float = 0.0  # wall-clock epoch seconds
    wall_time_s: float = 0.0
    stages: tuple[StageRecord, ...] = ()
    turns: tuple[OrchestratorTurn, ...] = ()
    agents: tuple[AgentDefinition, ...] = ()
    dag: DagStats = DagStats()
    usage: Usage = Usage()  # orchestrator
    subagent_usage: Usage = Usage()
    drift_count: int = 0
    context_tokens: int | None = None  # the orchestrator's context window, when known
    context_cuts: tuple[ContextCut, ...] = ()  # the orchestrator's messages shortened to fit it
    trace_id: str | None = None
    reward: RewardRecord | None = None
    monitors: MonitorReport | None = None
    budgets: dict[str, BudgetLine] = Field(default_factory=dict)
    """The tree-wide budgets that were set (``tokens``, ``turns``, ``wall_s``, ``cost``, ``subagents``, ...)."""
    config: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def subagent_results(self) -> tuple[SubagentResult, ...]:
        return tuple(r for s in self.stages for r in s.subagents)


def dump_record(record: BaseModel, **kwargs: Any) -> str:
    """``record`` as JSON, checked on the way out: a field holding a value of the wrong type (the
    hot path's dataclasses are not validated when built) raises instead of being written."""
    return record.model_dump_json(warnings="error", **kwargs)
