"""The ``python`` tool: run code in the kernel's process sandbox, in the episode workspace."""

from __future__ import annotations

from swarm.errors import ToolError
from swarm.sandbox import SandboxLimits, SandboxResult, run_python
from tools.registry import Tool, ToolContext

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


def python_tool(limits: SandboxLimits = SandboxLimits(), *, name: str = "python") -> Tool:  # noqa: B008
    """A tool that runs Python code in the sandbox with ``limits``.

    A non-zero exit, a timeout or a memory/process-limit kill comes back as an error result with the
    output and the reason, so the model can fix its code; a clean exit is a normal result.
    """

    async def python(ctx: ToolContext, code: str, stdin: str | None = None) -> str:
        """Run a Python 3 program in a sandbox (no network, limited CPU time and memory) and return
        its stdout and stderr. The working directory is the episode workspace: files written there
        persist between calls and are visible to the file tools. print() the values you need.

        Args:
            code: the complete program to run.
            stdin: text to feed to the program's standard input.
        """
        res = await run_python(code, workspace=ctx.workspace_path(), limits=limits, stdin=stdin)
        text = format_result(res)
        if res.status != "ok":
            raise ToolError(text)
        return text

    # The sandbox enforces wall time itself; the registry timeout is only a backstop.
    return Tool(python, name=name, timeout_s=limits.wall_s + 15, max_output_chars=2 * limits.max_output_chars + 2000)
