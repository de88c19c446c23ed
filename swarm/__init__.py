"""The swarm kernel: messages, the model backend protocol, records, the step DAG, errors, tracing."""

from importlib.metadata import PackageNotFoundError, version

from agent_swarm.swarm.backend import Completion, ModelBackend, ModelRequest, SamplingParams, ToolSpec, Usage
from agent_swarm.swarm.dag import build_dag, critical_steps_formula, dag_stats
from agent_swarm.swarm.errors import (
    AgentError,
    BackendError,
    BackendTimeoutError,
    BackendUnavailableError,
    BudgetExhaustedError,
    ClusterError,
    ConfigError,
    ErrorType,
    ModelOutputError,
    ScriptError,
    SwarmError,
    TaskFileError,
    ToolError,
    ToolTimeoutError,
    UnknownNameError,
    UserError,
)
from agent_swarm.swarm.messages import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, UserMessage
from agent_swarm.swarm.records import (
    AgentDefinition,
    AgentStatus,
    DagStats,
    EpisodeRecord,
    EpisodeStatus,
    OrchestratorTurn,
    RewardRecord,
    StageRecord,
    StepRecord,
    SubagentResult,
    Task,
    ToolResult,
)
from agent_swarm.swarm.tracing import Telemetry

try:  # the one place the version is read: pyproject.toml via the installed distribution's metadata
    __version__ = version("agent-swarm")
except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "AgentDefinition",
    "AgentError",
    "AgentStatus",
    "AssistantMessage",
    "BackendError",
    "BackendTimeoutError",
    "BackendUnavailableError",
    "BudgetExhaustedError",
    "ClusterError",
    "Completion",
    "ConfigError",
    "DagStats",
    "EpisodeRecord",
    "EpisodeStatus",
    "ErrorType",
    "Message",
    "ModelBackend",
    "ModelOutputError",
    "ModelRequest",
    "OrchestratorTurn",
    "RewardRecord",
    "SamplingParams",
    "ScriptError",
    "StageRecord",
    "StepRecord",
    "SubagentResult",
    "SwarmError",
    "SystemMessage",
    "Task",
    "TaskFileError",
    "Telemetry",
    "ToolCall",
    "ToolError",
    "ToolMessage",
    "ToolResult",
    "ToolSpec",
    "ToolTimeoutError",
    "UnknownNameError",
    "Usage",
    "UserError",
    "UserMessage",
    "__version__",
    "build_dag",
    "critical_steps_formula",
    "dag_stats",
]
