"""Coaching of one tool-using agent's steps: a policy object the loop calls, never flags it reads.

A :class:`StepCoach` answers three questions at fixed points of a sub-agent's loop
(:mod:`agent_swarm.subagents.loop`): which tool choice a step's request carries, which notices the model reads
before it, and which of the calls it proposed run (the others are answered "not run" and recorded).
:class:`NoStepCoach` is for capable models; :class:`SmallModelStepCoach` carries the tactics a
sub-3B model needs (tool first, an answer on its last step, one call per turn). The orchestrator's
coach (:mod:`agent_swarm.orchestrator.coach`) builds one for its sub-agents, and reuses the same tactics for a
single agent (the ``single`` arm), so every arm of a comparison gets the same coaching.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from agent_swarm.swarm.errors import ErrorType
from agent_swarm.swarm.messages import ToolCall

__all__ = [
    "LAST_STEP_NOTICE",
    "TASK_NOTICE",
    "NoStepCoach",
    "Refusal",
    "SmallModelStepCoach",
    "StepCoach",
    "StepView",
    "ToolChoice",
    "hold_after_first",
]

ToolChoice = Literal["auto", "none", "required"]
Refusal = tuple[str, str]
"""A call the coach holds back: (what the model is told, the ``ErrorType`` recorded)."""

LAST_STEP_NOTICE = (
    "No more tool calls: this is your last step. Answer your task now from the tool results above, "
    "in the form your instructions ask for."
)
"""Told to a tool-first sub-agent before its last step, after a tool result. Without it a small
model whose tools are withdrawn keeps writing calls as text, or reports NOT FOUND for an entity whose
document it has just opened (Qwen2.5-Coder-1.5B on the wide lookup)."""

TASK_NOTICE = 'If the results above answer your task "{task}", answer it now in plain text.'
"""Told a tool-first sub-agent on a one-part task after each tool result but its last: without it,
Qwen2.5-Coder-1.5B reported NOT FOUND right after a search, or an open, whose result held the answer
(controls, test split seed 1126: 6 of 10 look-ups). The wording "... answer it now in the form your
instructions ask for" still left researchers at NOT FOUND or an invented value (test seed 1127: 4 of 10
look-ups wrong); "in plain text", the words the single agent's notice uses, got 19 of 20 dev look-ups
right against 14 of 20 with it (dev seed 1, the same 20 tasks: 5 fixed, none broken;
``experiments/results/yardstick-dev/notice-dev-s1``)."""

_ONE_CALL = (
    "not run: call one tool per turn. It was written before the result of your {} call "
    "existed; if you still need it, call it again next turn with values from that result."
)


def hold_after_first(calls: Sequence[ToolCall]) -> dict[str, Refusal]:
    """One call per turn: every call after the first is held back, the model told to wait for the
    first one's result (a small model writes ``search`` and ``open`` in one turn, inventing the id
    ``open`` needs before the search result exists)."""
    if len(calls) < 2:
        return {}
    notice = _ONE_CALL.format(calls[0].name)
    return {c.id: (notice, ErrorType.ONE_CALL_PER_TURN) for c in calls[1:]}


@dataclass(slots=True)
class StepView:
    """What a step coach sees before a step: steps taken, the cap, whether the agent has tools, whether
    the last message is a tool result, and the agent's task."""

    steps: int
    step_cap: int
    has_tools: bool
    after_tool_result: bool
    task: str = ""  # the sub-agent's task


class StepCoach(Protocol):
    """The hooks a sub-agent's loop calls (see the module docstring)."""

    @property
    def parallel_tool_calls(self) -> bool:
        """Whether a step may propose several calls (the request's ``parallel_tool_calls``)."""
        ...

    def tool_choice(self, view: StepView) -> ToolChoice:
        """The tool choice of the step's request."""
        ...

    def notices(self, view: StepView, choice: ToolChoice) -> tuple[str, ...]:
        """Messages the model reads (as user turns) before the step."""
        ...

    def review(self, calls: Sequence[ToolCall]) -> dict[str, Refusal]:
        """The proposed calls that do not run (call id -> refusal); the rest run."""
        ...


@dataclass(frozen=True, slots=True)
class NoStepCoach:
    """A capable model's steps: every choice its own, every call run."""

    @property
    def parallel_tool_calls(self) -> bool:
        return True

    def tool_choice(self, view: StepView) -> ToolChoice:
        return "auto"

    def notices(self, view: StepView, choice: ToolChoice) -> tuple[str, ...]:
        return ()

    def review(self, calls: Sequence[ToolCall]) -> dict[str, Refusal]:
        return {}


@dataclass(frozen=True, slots=True)
class SmallModelStepCoach:
    """A small model's steps (Qwen2.5-Coder-0.5B/1.5B): with tools, its first step must call one (else
    it answers "NOT FOUND" from memory without a search) and its last step must answer (a tool call
    there would end it at its cap), told so by :data:`LAST_STEP_NOTICE`; on a one-part task (``one_part``)
    each other tool result is followed by its task again (:data:`TASK_NOTICE`); each turn runs its first call
    only (``one_call``), and its requests ask the backend for one (the local engine's grammar then
    admits one)."""

    tool_first: bool = True
    one_call: bool = True
    one_part: Callable[[str], bool] | None = None
    """Whether a task asks for one thing (then :data:`TASK_NOTICE` follows each tool result); ``None``: never."""

    @property
    def parallel_tool_calls(self) -> bool:
        return not self.one_call

    def tool_choice(self, view: StepView) -> ToolChoice:
        if not (self.tool_first and view.has_tools and view.step_cap > 1):
            return "auto"
        if view.steps == 0:
            return "required"
        return "none" if view.steps >= view.step_cap - 1 else "auto"

    def notices(self, view: StepView, choice: ToolChoice) -> tuple[str, ...]:
        if not view.after_tool_result:
            return ()
        if choice == "none":
            return (LAST_STEP_NOTICE,)
        if self.one_part is not None and view.task and self.one_part(view.task):
            return (TASK_NOTICE.format(task=" ".join(view.task.split())),)
        return ()

    def review(self, calls: Sequence[ToolCall]) -> dict[str, Refusal]:
        return hold_after_first(calls) if self.one_call else {}
