"""Tools agents act through: typed registry (built-in tools and MCP servers build on it)."""

from agent_swarm.tools.registry import Tool, ToolContext, ToolRegistry, Toolset, execute_tool, tool, truncate

__all__ = ["Tool", "ToolContext", "ToolRegistry", "Toolset", "execute_tool", "tool", "truncate"]
