"""Sub-agents: frozen-checkpoint agents with their own prompt, tools and step budget."""

from subagents.loop import SubagentRun, SubagentRuntime
from subagents.turns import run_tool_calls
from swarm.records import AgentDefinition

__all__ = ["AgentDefinition", "SubagentRun", "SubagentRuntime", "run_tool_calls"]
