"""A real MCP server for the tests: stdio by default, streamable HTTP with --http PORT.

Tools: add (structured int), greet (text), divide (raises on zero -> is_error), crash (the process
dies mid-call), hang (never answers). Logs go to stderr only; stdout is the JSON-RPC channel.
"""

from __future__ import annotations

import os
import sys

import anyio
from mcp.server.mcpserver import MCPServer

app = MCPServer("calc")


@app.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@app.tool()
def greet(name: str) -> str:
    """Say hello to someone."""
    return f"Hello, {name}!"


@app.tool()
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    if b == 0:
        raise ValueError("division by zero is undefined")
    return a / b


@app.tool()
def crash() -> str:
    """Kill the server process in the middle of the call."""
    sys.stderr.write("calc server: crashing on purpose\n")
    sys.stderr.flush()
    os._exit(3)


@app.tool()
async def hang() -> str:
    """Never return."""
    await anyio.sleep(3600)
    return "unreachable"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        app.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()
