"""The orchestrator's action tools (``create_subagent``, ``assign_task``), its prompts per model family,
and how results are shown to it.

A :class:`PromptProfile` is what a model family needs to follow the protocol: the orchestrator's
system prompt (built from the sub-agent types the episode offers), the built-in ``worker`` type's
prompt, and the tool descriptions. ``default`` suits capable models; ``small`` (sub-3B models such as
Qwen2.5-Coder-0.5B/1.5B and SmolLM2) is short — every prompt token costs prefill time on a CPU — and
carries one worked example of a parallel stage, because a small model copies the shape of an example
far more reliably than it follows a description. :func:`profile_for` picks one from the backend's
model name; ``SwarmConfig.prompt_profile`` overrides it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from agent_swarm.swarm.backend import SamplingParams, ToolSpec
from agent_swarm.swarm.backends.toolparse import clean_answer
from agent_swarm.swarm.errors import UnknownNameError
from agent_swarm.swarm.messages import AssistantMessage, Message, ToolCall, ToolMessage, UserMessage
from agent_swarm.swarm.records import AgentDefinition, AgentStatus, SubagentResult
from agent_swarm.tools.registry import truncate

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "PROFILES",
    "WORKER",
    "PromptProfile",
    "action_specs",
    "clean_answer",
    "format_subagent_result",
    "profile_for",
]

WORKER = "worker"
"""The built-in general-purpose sub-agent type: assignable without ``create_subagent``."""

DEFAULT_SYSTEM_PROMPT = """\
You are the orchestrator of a swarm of sub-agents. Solve the user's task in stages.
In each stage you may:
- call assign_task(agent, task) to run an instance of a sub-agent type on a self-contained subtask.
  All assign_task calls you emit in one message run IN PARALLEL as one stage, so split independent
  work into several assign_task calls in the same message;
- call create_subagent(name, system_prompt, tools, model) to define a specialised sub-agent type
  when none of the existing types fits;
- call any other tool you have directly.
Each sub-agent reports back with its status and a report. Sub-agents cannot see your conversation:
give each task everything it needs. Budgets are counted in critical steps (the longest chain of
steps), so parallel sub-agents are cheaper than doing the work one after another.
When you have what you need, answer the user in plain text without any tool call."""

_SMALL_SYSTEM_PROMPT = """\
You lead a team of sub-agents. Split the user's task into independent parts and give each part to \
its own sub-agent with assign_task, all calls in one message: they run in parallel. A sub-agent sees \
only its own task, so make each task complete. When the reports are back, answer the user in plain \
text, covering every part."""

# The worked example of a parallel stage, as real chat turns (a small model copies the shape of a
# turn it has seen rendered by its own template far more reliably than it follows a description).
_EXAMPLE_TASK = "What are the capitals of Italy and Spain?"
_EXAMPLE_PARTS = (("What is the capital of Italy?", "Rome"), ("What is the capital of Spain?", "Madrid"))
_EXAMPLE_ANSWER = "Italy: Rome. Spain: Madrid."
_EXAMPLE_DIRECT = ("How many days are in a leap year?", "366.")
"""A one-fact question answered in one step, before the list example: with the list example alone a
small model answered single-fact questions ("What is 77 - 61?") with that example's answer (dev split)."""


@dataclass(frozen=True)
class PromptProfile:
    """Prompts for one model family (see the module docstring). The sampling settings are what
    ``swarm run`` uses for the family when neither the config file nor flags set them."""

    name: str
    description: str
    system_prompt: str
    worker_prompt: str
    example: bool
    coach: str
    """The coach (:data:`agent_swarm.orchestrator.coach.COACHES`) whose tactics go with these prompts."""
    orchestrator_sampling: SamplingParams
    subagent_sampling: SamplingParams
    worker_tools_prompt: str
    create_description: str
    assign_description: str

    def orchestrator_prompt(self, agents: Sequence[AgentDefinition], extra: str | None = None) -> str:
        """The orchestrator's system prompt: the profile's text, the sub-agent types on offer (fixed
        for the episode, so the prompt prefix is identical across turns and episodes and llama.cpp
        reuses its cache), then ``extra`` (e.g. a workload's instructions)."""
        parts = [self.system_prompt]
        if agents:
            lines = [
                f"- {a.name}"
                + (f": {' '.join(a.description.split())}" if a.description else "")
                + (f" (tools: {', '.join(a.tools)})" if a.tools else "")
                for a in agents
            ]
            parts.append("Sub-agent types you can assign tasks to:\n" + "\n".join(lines))
        if extra:
            parts.append(extra)
        return "\n\n".join(parts)

    def example_messages(self, agent: str) -> tuple[Message, ...]:
        """The worked examples (a one-fact question answered directly; a list task: one parallel stage
        of ``agent`` sub-agents, their reports, the answer) as chat turns between the system prompt
        and the real task; empty when the profile has none."""
        if not self.example:
            return ()
        calls = tuple(
            ToolCall(id=f"example-{i}", name="assign_task", arguments={"agent": agent, "task": task})
            for i, (task, _) in enumerate(_EXAMPLE_PARTS)
        )
        reports = tuple(
            ToolMessage(
                tool_call_id=c.id,
                name=c.name,
                content=_observation(f"{agent}-0-{i}", "completed", 1, task, None, answer, 1_000),
            )
            for i, (c, (task, answer)) in enumerate(zip(calls, _EXAMPLE_PARTS, strict=True))
        )
        question, direct = _EXAMPLE_DIRECT
        return (
            UserMessage(content=question),
            AssistantMessage(content=direct),
            UserMessage(content=_EXAMPLE_TASK),
            AssistantMessage(content="", tool_calls=calls),
            *reports,
            AssistantMessage(content=_EXAMPLE_ANSWER),
        )

    def worker(self, tools: Sequence[str]) -> AgentDefinition:
        """The built-in general-purpose sub-agent type, with the tools it may use."""
        prompt = self.worker_tools_prompt if tools else self.worker_prompt
        return AgentDefinition(name=WORKER, system_prompt=prompt, tools=tuple(tools))


PROFILES: dict[str, PromptProfile] = {
    "default": PromptProfile(
        name="default",
        description="capable models: the full protocol description",
        system_prompt=DEFAULT_SYSTEM_PROMPT,
        example=False,
        coach="none",
        orchestrator_sampling=SamplingParams(),
        subagent_sampling=SamplingParams(),
        worker_prompt=(
            "You are a general-purpose assistant working on one task handed to you by an orchestrator. "
            "Do the task and reply with the result."
        ),
        worker_tools_prompt=(
            "You are a general-purpose assistant working on one task handed to you by an orchestrator. "
            "Use your tools when they help, then reply with the result."
        ),
        create_description=("Define a sub-agent type: a frozen model with its own system prompt and tool allow-list."),
        assign_description=(
            "Run one instance of a sub-agent on a self-contained task. Several assign_task calls in one "
            "message run in parallel; each returns the sub-agent's status and report."
        ),
    ),
    "small": PromptProfile(
        name="small",
        description="small models (< 3B): a short prompt with one worked example of a parallel stage",
        system_prompt=_SMALL_SYSTEM_PROMPT,
        example=True,
        # Act first on list tasks and with tools, one assign_task per list item, each task once per
        # turn, tool-first one-call sub-agents (agent_swarm.orchestrator.coach.SmallModelCoach).
        coach="small",
        # Near-greedy: at T = 1 a sub-1B model samples from its long tail (answers in the wrong
        # language, invented tools) and its greedy output loops (the local backend's RepeatGuard stops a verbatim
        # loop after 128 tokens). An orchestrator turn holds one assign_task per listed item (about 48
        # tokens each) or the answer's table: at 384 tokens a 16-entity task's first turn kept 7-8 calls
        # (dev) and 7 of 30 single and single-parallel 16-row tables were cut (test seed 2011); 1,280 fits both
        # with room for longer item tasks (16 calls of 60 tokens).
        orchestrator_sampling=SamplingParams(temperature=0.2, max_tokens=1280),
        subagent_sampling=SamplingParams(temperature=0.2, max_tokens=256),
        worker_prompt="Do the task you are given. Reply with the answer only, briefly.",
        worker_tools_prompt=(
            "Do the task you are given. Use a tool when the task needs it. Reply with the answer only, briefly."
        ),
        create_description="Define a new sub-agent type (only if no existing type fits).",
        assign_description="Run a sub-agent on one task. Calls in one message run in parallel.",
    ),
}

# "0.5b", "1.5B", "3b" ...: billions of parameters in the model name; "135m": millions.
_SIZE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*([bm])(?![a-z])", re.IGNORECASE)
_SMALL_BILLIONS = 3.0


def profile_for(model: str, override: str | None = None) -> PromptProfile:
    """The profile for a backend's model name, or ``override`` (a key of :data:`PROFILES`).

    A model whose name states fewer than 3 billion parameters (``qwen2.5-coder-0.5b``,
    ``SmolLM2-135M``) gets ``small``; every other model ``default``.
    """
    if override is not None:
        try:
            return PROFILES[override]
        except KeyError:
            raise UnknownNameError("prompt profile", override, PROFILES) from None
    for number, unit in _SIZE.findall(model):
        billions = float(number) / (1000.0 if unit.lower() == "m" else 1.0)
        return PROFILES["small" if billions < _SMALL_BILLIONS else "default"]
    return PROFILES["default"]


def action_specs(
    grantable_tools: Sequence[str], models: Sequence[str], profile: PromptProfile | None = None
) -> tuple[ToolSpec, ToolSpec]:
    """Schemas of ``create_subagent`` and ``assign_task``.

    They depend only on the episode's configuration (never on agents created so far), so the
    rendered prompt prefix stays identical from turn to turn and token ids never drift.
    """
    profile = profile or PROFILES["default"]
    tools_schema: dict[str, object] = {
        "type": "array",
        "items": {"type": "string"},
        "description": "tools the sub-agent may use",
    }
    if grantable_tools:
        tools_schema["items"] = {"type": "string", "enum": list(grantable_tools)}
    else:  # nothing may be granted: say so in the schema, so constrained decoding cannot invent names
        tools_schema["maxItems"] = 0
    model_schema: dict[str, object] = {"type": "string", "description": "frozen checkpoint to run it on"}
    if models:
        model_schema["enum"] = list(models)
    create = ToolSpec(
        name="create_subagent",
        description=profile.create_description,
        parameters={
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "unique name of the sub-agent type"},
                "system_prompt": {"type": "string", "description": "instructions every instance receives"},
                "tools": tools_schema,
                "model": model_schema,
            },
            "required": ["name", "system_prompt"],
        },
    )
    assign = ToolSpec(
        name="assign_task",
        description=profile.assign_description,
        parameters={
            "type": "object",
            "properties": {
                "agent": {"type": "string", "description": "name of a sub-agent type"},
                "task": {"type": "string", "description": "the complete task for this instance"},
            },
            "required": ["agent", "task"],
        },
    )
    return create, assign


def format_subagent_result(result: SubagentResult, max_chars: int) -> str:
    """The observation the orchestrator gets for one ``assign_task`` call."""
    r = result
    error = r.error if r.status is not AgentStatus.COMPLETED else None
    return _observation(r.agent_id, r.status.value, r.steps, r.task, error, r.report, max_chars)


_TASK_CHARS = 300
"""How much of the assigned task an observation repeats: enough to name the item it was about."""


def _observation(agent_id: str, status: str, steps: int, task: str, error: str | None, report: str, n: int) -> str:
    """``[id] status: …, steps: …``, the task it was given (so a report of a parallel stage can be told
    from its siblings: Qwen2.5-Coder-1.5B put one person's values on another's row when four reports
    came back without their names, wide research dev), an error, then the report."""
    task = " ".join(task.split())
    if len(task) > _TASK_CHARS:
        task = task[: _TASK_CHARS - 1] + "…"
    lines = [f"[{agent_id}] status: {status}, steps: {steps}", f"task: {task}"]
    if error:
        lines.append(f"error: {error}")
    if report:
        lines.append("report:")
        lines.append(truncate(report, n))
    return "\n".join(lines)
