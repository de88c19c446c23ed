"""The orchestrator's action tools (SPEC §2), its default prompt, and how results are shown to it."""

from __future__ import annotations

from collections.abc import Sequence

from swarm.backend import ToolSpec
from swarm.records import AgentStatus, SubagentResult
from tools.registry import truncate

__all__ = ["DEFAULT_SYSTEM_PROMPT", "action_specs", "format_subagent_result"]

DEFAULT_SYSTEM_PROMPT = """\
You are the orchestrator of a swarm of sub-agents. Solve the user's task in stages.
In each stage you may:
- call create_subagent(name, system_prompt, tools, model) to define a specialised sub-agent type;
- call assign_task(agent, task) to run an instance of a sub-agent on a self-contained subtask.
  All assign_task calls you emit in one message run IN PARALLEL as one stage, so split independent
  work into several assign_task calls in the same message;
- call any other tool you have directly.
Each sub-agent reports back with its status and a report. Sub-agents cannot see your conversation:
give each task everything it needs. Budgets are counted in critical steps (the longest chain of
steps), so parallel sub-agents are cheaper than doing the work one after another.
When you have what you need, answer the user in plain text without any tool call."""


def action_specs(grantable_tools: Sequence[str], models: Sequence[str]) -> tuple[ToolSpec, ToolSpec]:
    """Schemas of ``create_subagent`` and ``assign_task``.

    They depend only on the episode's configuration (never on agents created so far), so the
    rendered prompt prefix stays identical from turn to turn and token ids never drift.
    """
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
        description="Define a sub-agent type: a frozen model with its own system prompt and tool allow-list.",
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
        description=(
            "Run one instance of a sub-agent on a self-contained task. Several assign_task calls in one "
            "message run in parallel; each returns the sub-agent's status and report."
        ),
        parameters={
            "type": "object",
            "properties": {
                "agent": {"type": "string", "description": "name of a sub-agent created earlier"},
                "task": {"type": "string", "description": "the complete task for this instance"},
            },
            "required": ["agent", "task"],
        },
    )
    return create, assign


def format_subagent_result(result: SubagentResult, max_chars: int) -> str:
    """The observation the orchestrator gets for one ``assign_task`` call."""
    head = f"[{result.agent_id}] status: {result.status.value}, steps: {result.steps}"
    lines = [head]
    if result.status is not AgentStatus.COMPLETED and result.error:
        lines.append(f"error: {result.error}")
    if result.report:
        lines.append("report:")
        lines.append(truncate(result.report, max_chars))
    return "\n".join(lines)
