"""What `swarm run` shows of the swarm at work: the tree of stages left on the terminal, the live
view in a terminal, and one line per event on stderr without one."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.cli.live import LiveState
from agent_swarm.swarm.events import (
    ActionResolved,
    StageFinished,
    StageStarted,
    SubagentFinished,
    SubagentStarted,
    SubagentStep,
)
from agent_swarm.swarm.records import AgentStatus, SubagentResult

runner = CliRunner()


def _orchestrating(body: dict[str, Any]) -> bool:
    return any(t["function"]["name"] == "assign_task" for t in body.get("tools") or [])


def _results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "tool"]


def _mixed_policy(body: dict[str, Any]) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """Stage 0: create a type, assign two tasks, one to a type that does not exist; then answer."""
    if not _orchestrating(body):
        task = next(m["content"] for m in body["messages"] if m["role"] == "user")
        return f"done: {task}", []
    if _results(body):
        return "**Both** parts are done.", []
    return "", [
        ("create_subagent", {"name": "reader", "system_prompt": "Read and report."}),
        ("assign_task", {"agent": "reader", "task": "read chapter one"}),
        ("assign_task", {"agent": "ghost", "task": "read chapter two"}),
    ]


def _run(url: str, out: Path, *extra: str) -> Any:
    return runner.invoke(
        app, ["run", "-b", "openai", "--base-url", url, "-m", "m", "-o", str(out), "--no-trace-file", *extra, "go"]
    )


def test_the_final_tree_names_each_action_its_outcome_steps_and_budget(tmp_path: Path) -> None:
    r = runner.invoke(app, ["run", "--demo", "capitals", "-o", str(tmp_path), "-q", "--no-trace-file"])
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "stage 0 · subagents · 9 sub-agents · critical steps +4 → 4/16" in out
    assert "create researcher  created  tools: lookup_capital" in out
    assert "researcher-0-3  completed  2/6 steps  Find the capital of Brazil." in out
    assert "researcher-0-8  failed (ModelOutputError)  3/6 steps" in out
    assert "model output stayed malformed" in out  # why it failed, under it
    assert "stage 1 · answer · critical steps +1 → 5/16" in out


def test_rejected_actions_say_why_in_the_tree_and_on_stderr(tmp_path: Path, openai_script: Callable[..., Any]) -> None:
    with openai_script(_mixed_policy) as srv:
        r = _run(srv.url, tmp_path)
    assert r.exit_code == 0, r.output
    tree = " ".join(r.stdout.split())
    assert "→ ghost rejected (InvalidAction) read chapter two" in tree
    assert "unknown sub-agent 'ghost'" in tree
    assert "→ reader-0-0 completed 1/" in tree
    # Without a terminal: one line per event, as it happens, on stderr (not stdout).
    err = r.stderr
    assert "stage 0 started (subagents, 1 sub-agent; critical steps 1/32)" in err
    assert "created sub-agent reader" in err
    assert "assign_task ghost rejected (InvalidAction): unknown sub-agent 'ghost'" in err
    assert "reader-0-0 completed after 1/" in err
    assert "stage 0 finished: critical steps +2 → 2/32" in err
    assert "episode" in err.splitlines()[-1] and "completed" in err.splitlines()[-1]
    assert "stage 0 started" not in r.stdout


def test_quiet_prints_no_event_lines(tmp_path: Path, openai_script: Callable[..., Any]) -> None:
    with openai_script(_mixed_policy) as srv:
        r = _run(srv.url, tmp_path, "--quiet")
    assert r.exit_code == 0
    assert "stage 0 started" not in r.stderr and "created sub-agent" not in r.stderr


def test_the_answer_is_rendered_as_markdown_in_the_summary(tmp_path: Path, openai_script: Callable[..., Any]) -> None:
    with openai_script(_mixed_policy) as srv:
        r = _run(srv.url, tmp_path, "-q")
    assert "Both parts are done." in r.stdout and "**Both**" not in r.stdout


def test_the_live_view_shows_running_agents_their_tools_and_errors() -> None:
    state = LiveState(budget=10)
    state(StageStarted(index=0, kind="subagents", width=2, critical_so_far=1))
    state(
        ActionResolved(
            stage=0,
            call_id="c0",
            name="assign_task",
            target="x",
            ok=False,
            detail="unknown sub-agent 'x'",
            error_type="InvalidAction",
        )
    )
    state(SubagentStarted(agent_id="w-0-0", name="w", task="task A", step_cap=4))
    state(SubagentStarted(agent_id="w-0-1", name="w", task="task B", step_cap=4))
    state(SubagentStep(agent_id="w-0-0", step=1, tools=("python",), error="NameError: name 'y' is not defined"))
    text = _render(state)
    assert "stage 0 · subagents · 2 sub-agents · critical steps 1/10" in text
    assert "w-0-0  running  1/4 steps  python  task A" in text
    assert "last error: NameError" in text
    assert "→ x  rejected (InvalidAction)" in text and "unknown sub-agent 'x'" in text
    result = SubagentResult(
        agent_id="w-0-0", name="w", task="task A", status=AgentStatus.COMPLETED, steps=2, step_cap=4
    )
    state(SubagentFinished(agent_id="w-0-0", status=AgentStatus.COMPLETED, result=result))
    state(StageFinished(index=0, critical_steps=3, critical_so_far=4))
    text = _render(state)
    assert "critical steps +3 → 4/10" in text and "w-0-0  completed  2/4 steps" in text


def _render(obj: object) -> str:
    console = Console(record=True, width=140, force_terminal=False)
    console.print(obj)
    return console.export_text()


def test_in_a_terminal_the_live_view_runs_and_the_tree_stays(tmp_path: Path) -> None:
    """`swarm run` on a pseudo-terminal: the live view draws while the stage runs; afterwards the
    final tree of stages is what is left on the screen."""
    main, sub = pty.openpty()
    env = {**os.environ, "SWARM_DEMO_LATENCY": "0.4", "COLUMNS": "120", "TERM": "xterm"}
    env.pop("CI", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", "--demo", "capitals", "-o", str(tmp_path), "--no-trace-file"],
        stdin=sub,
        stdout=sub,
        stderr=sub,
        env=env,
        close_fds=True,
    )
    os.close(sub)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 0.5)
        if ready:
            try:
                data = os.read(main, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(main)
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode("utf-8", "replace"))
    assert proc.returncode == 0, screen
    assert "running" in screen  # the live view drew sub-agents while they ran
    assert "swarm critical steps" in screen
    final = screen[screen.rindex("stages (2)") :]
    assert "researcher-0-8" in final and "failed" in final and "critical steps +1 → 5/16" in final
    assert "stage 0 started" not in screen  # a terminal gets the live view, not log lines
