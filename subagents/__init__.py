"""Sub-agents: frozen-checkpoint agents with their own prompt, tools and step budget."""

from agent_swarm.subagents.loop import SubagentRun, SubagentRuntime
from agent_swarm.subagents.turns import run_tool_calls
from agent_swarm.swarm.records import AgentDefinition

__all__ = ["AgentDefinition", "SubagentRun", "SubagentRuntime", "run_tool_calls"]
