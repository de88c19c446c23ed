"""One error hierarchy for the whole project.

Two audiences, so a caller can tell a bug in its own setup from a model's mistake:

* errors for the *developer* using the library (bad config, bad task file, unknown backend, a test
  double used wrongly) derive from :class:`UserError` and are raised;
* errors the *model* caused and can recover from (malformed tool-call JSON, a tool that raised, a
  model call that failed after retries) derive from :class:`AgentError`; the runtime catches them
  and records them as a step error or an agent status, it never lets them cancel siblings.

Every error is picklable (RL workers cross processes): state lives in ``args`` only, and
constructors never log. Messages name what failed, the value and what to do.

::

    SwarmError
    ├── UserError
    │   ├── ConfigError
    │   ├── TaskFileError
    │   ├── UnknownNameError
    │   └── ScriptError
    ├── ClusterError
    └── AgentError
        ├── BackendError
        │   ├── BackendRefusedError
        │   ├── BackendTimeoutError
        │   └── BackendUnavailableError
        ├── ModelOutputError
        ├── ToolError
        │   └── ToolTimeoutError
        └── BudgetExhaustedError

    SwarmWarning (UserWarning)
    └── LargeInputWarning
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = [
    "AgentError",
    "BackendError",
    "BackendRefusedError",
    "BackendTimeoutError",
    "BackendUnavailableError",
    "BudgetExhaustedError",
    "ClusterError",
    "ConfigError",
    "ErrorType",
    "LargeInputWarning",
    "ModelOutputError",
    "ScriptError",
    "SwarmError",
    "SwarmWarning",
    "TaskFileError",
    "ToolError",
    "ToolTimeoutError",
    "UnknownNameError",
    "UserError",
    "validation_problems",
]


class SwarmError(Exception):
    """Root of every error this project raises on purpose."""

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.__class__.__name__

    def __str__(self) -> str:
        return self.message


class UserError(SwarmError):
    """The developer or user must change something (config, input, API use)."""


class ConfigError(UserError):
    """A configuration value is invalid."""


class TaskFileError(UserError):
    """A task file is missing or malformed.

    ``args`` = (message, path, line) so the error survives pickling with its location.
    """

    def __init__(self, message: str, path: str | None = None, line: int | None = None) -> None:
        super().__init__(message, path, line)

    @property
    def path(self) -> str | None:
        return self.args[1]  # type: ignore[no-any-return]

    @property
    def line(self) -> int | None:
        return self.args[2]  # type: ignore[no-any-return]

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = f"{self.path}:{self.line}: " if self.line is not None else f"{self.path}: "
        return f"{where}{self.message}"


class UnknownNameError(UserError, KeyError):
    """A name looked up in a registry does not exist; the message lists the known names."""

    def __init__(self, kind: str, name: str, known: Iterable[str]) -> None:
        super().__init__(kind, name, sorted(known))

    @property
    def message(self) -> str:
        kind, name, known = self.args
        return f"unknown {kind} {name!r}; known: {', '.join(known) or '(none)'}"

    def __str__(self) -> str:  # KeyError would repr() the message otherwise
        return self.message


class ScriptError(UserError):
    """A scripted test backend was used wrongly (ran out of turns, or turns were left unconsumed)."""


class ClusterError(SwarmError):
    """The cluster running episodes or sub-agents failed (every actor died, the limit service is gone).

    Work that finished before it is kept; re-running resumes the rest."""


class AgentError(SwarmError):
    """Something went wrong *inside* an agent's run; recorded as a status, never fatal to siblings."""


class BackendError(AgentError):
    """A model call failed (after any retries)."""


class BackendRefusedError(BackendError):
    """The endpoint refused service in a way retries cannot fix: bad credentials (401), forbidden
    (403) or spent quota (402, or 429 with ``insufficient_quota``). The endpoint takes no more
    requests from this run; an episode it failed is retried on resume."""


class BackendTimeoutError(BackendError):
    """A model call exceeded its request timeout."""


class BackendUnavailableError(BackendError):
    """The model server could not be reached or kept answering 429/5xx."""


class ModelOutputError(AgentError):
    """The model emitted output the runtime cannot act on (e.g. broken tool-call JSON)."""


class ToolError(AgentError):
    """A tool call failed; the text goes back to the model as a tool error it can recover from."""


class ToolTimeoutError(ToolError):
    """A tool call exceeded its timeout."""


class BudgetExhaustedError(AgentError):
    """A step, token or critical-step budget was spent."""


class SwarmWarning(UserWarning):
    """Something works but will surprise the user (size, cost); the CLI prints it as one line."""


class LargeInputWarning(SwarmWarning):
    """An input is so large that records, trajectories or memory grow by a multiple of it."""


class ErrorType(StrEnum):
    """Why an action, a step, a sub-agent or an episode failed: the ``error_type`` of records, of
    ``failures.jsonl`` lines and of trace spans (``error.type``).

    The values are the strings records on disk already hold, so old records load unchanged and a
    member compares equal to its string (``ErrorType.WIDTH_LIMIT == "WidthLimit"``). Work failed by
    an exception records the exception's class name (:meth:`of`): one of the members below for the
    project's own errors, or the class name of whatever a tool raised (``KeyError``), which is kept
    as written so a tool's failure stays diagnosable.
    """

    # The orchestrator's actions the engine refused (agent_swarm.orchestrator.admission,
    # agent_swarm.orchestrator.engine).
    INVALID_ACTION = "InvalidAction"
    AGENT_CALLED_AS_TOOL = "AgentCalledAsTool"
    DUPLICATE_TASK = "DuplicateTask"
    ALREADY_DONE = "AlreadyDone"
    SPLIT_TASK = "SplitTask"
    TOOL_WITHHELD = "ToolWithheld"  # a call to a tool its coach withheld from the turn (agent_swarm.orchestrator.coach)
    WIDTH_LIMIT = "WidthLimit"
    BUDGET_EXHAUSTED = "BudgetExhausted"
    UNKNOWN_TOOL = "UnknownTool"
    ONE_CALL_PER_TURN = "OneCallPerTurn"  # a sub-agent's extra call, not run (agent_swarm.subagents.loop)
    # How work ended without an exception of its own.
    CANCELLED = "Cancelled"
    HEDGED = "Hedged"  # a straggler the stage stopped waiting for (agent_swarm.orchestrator.hedging)
    TIMEOUT = "TimeoutError"
    ACTION_LOOP = "ActionLoopError"
    PLACEMENT = "PlacementError"
    # The project's exceptions, by class name.
    AGENT = "AgentError"
    BACKEND = "BackendError"
    BACKEND_REFUSED = "BackendRefusedError"
    BACKEND_TIMEOUT = "BackendTimeoutError"
    BACKEND_UNAVAILABLE = "BackendUnavailableError"
    MODEL_OUTPUT = "ModelOutputError"
    TOOL = "ToolError"
    TOOL_TIMEOUT = "ToolTimeoutError"
    STEP_BUDGET = "BudgetExhaustedError"
    CONTEXT_EXHAUSTED = "ContextExhausted"  # the conversation outgrew the agent's context (agent_swarm.swarm.context)
    TRAJECTORY = "TrajectoryError"

    @classmethod
    def of(cls, exc: BaseException) -> str:
        """The ``error_type`` of work that ``exc`` failed: its class name (a member when it is one)."""
        name = type(exc).__name__
        member: ErrorType | None = cls._value2member_map_.get(name)  # type: ignore[assignment]
        return name if member is None else member


def validation_problems(exc: ValidationError, whole: str, prefix: str = "") -> str:
    """Pydantic's ``exc`` as one line for the message of the error it becomes: ``FIELD: why; …``, a nested
    field dotted and after ``prefix``, a problem of the value as a whole named ``whole``."""
    return "; ".join(
        f"{prefix + '.'.join(map(str, e['loc'])) if e['loc'] else whole}: {e['msg']}" for e in exc.errors()
    )
