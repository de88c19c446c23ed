"""The ``python`` tool: run code in the kernel's process sandbox, in the episode workspace."""

from __future__ import annotations

import anyio

from agent_swarm.swarm.errors import ConfigError, ToolError
from agent_swarm.swarm.sandbox import SandboxLimits, SandboxResult, run_python
from agent_swarm.tools.registry import Tool, ToolContext

__all__ = ["format_result", "python_tool"]


def format_result(res: SandboxResult) -> str:
    """Render a sandbox result as the text the model reads."""
    parts = [f"status: {res.status}  exit_code: {res.exit_code}  duration: {res.duration_s:.2f}s"]
    if res.stdout:
        parts.append("stdout:\n" + res.stdout.rstrip("\n"))
    if res.stderr:
        parts.append("stderr:\n" + res.stderr.rstrip("\n"))
    if not res.stdout and not res.stderr:
        parts.append("(no output; print() what you want to see)")
    if res.status != "ok" or not res.network_isolated:
        parts.append("sandbox notes: " + "; ".join(res.notes))
    return "\n".join(parts)


def python_tool(
    limits: SandboxLimits = SandboxLimits(),  # noqa: B008 - frozen model, safe as a default
    *,
    name: str = "python",
    max_concurrent: int | None = None,
) -> Tool:
    """A tool that runs Python code in the sandbox with ``limits``.

    A non-zero exit, a timeout or a memory/process-limit kill comes back as an error result with the
    output and the reason, so the model can fix its code; a clean exit is a normal result.
    ``max_concurrent`` caps how many programs run at once across all agents sharing this tool (many
    sub-agents on few cores); callers beyond it wait their turn, and the sandbox's wall limit
    applies to each run once it starts.
    """
    if max_concurrent is not None and max_concurrent < 1:
        raise ConfigError(f"max_concurrent must be at least 1, got {max_concurrent}")
    limiter = anyio.CapacityLimiter(max_concurrent) if max_concurrent is not None else None

    async def python(ctx: ToolContext, code: str, stdin: str | None = None) -> str:
        """Run a Python 3 program in a sandbox (no network, limited CPU time and memory) and return
        its stdout and stderr. The working directory is the episode workspace: files written there
        persist between calls and are visible to the file tools. print() the values you need.

        Args:
            code: the complete program to run.
            stdin: text to feed to the program's standard input.
        """
        workspace = ctx.workspace_path()
        if limiter is None:
            res = await run_python(code, workspace=workspace, limits=limits, stdin=stdin)
        else:
            async with limiter:
                res = await run_python(code, workspace=workspace, limits=limits, stdin=stdin)
        text = format_result(res)
        if res.status != "ok":
            raise ToolError(text)
        return text

    # The sandbox enforces wall time itself; the registry timeout is only a backstop, dropped when
    # calls may queue behind the limiter (a queued call is not a slow call).
    timeout = limits.wall_s + 15 if limiter is None else None
    return Tool(python, name=name, timeout_s=timeout, max_output_chars=2 * limits.max_output_chars + 2000)
