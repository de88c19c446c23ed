"""The live view says what the orchestrator is doing between stages, fits short terminals by folding
finished sub-agents, and lists rows in the order the final tree keeps."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from rich.console import Console

from agent_swarm.orchestrator.cli.live import LiveState, stages_from_record
from agent_swarm.orchestrator.demo import demo
from agent_swarm.orchestrator.engine import Orchestrator
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.events import EpisodeStarted, StageFinished, StageStarted, SubagentStarted, TurnFinished
from agent_swarm.tools.registry import ToolRegistry


def _render(obj: object, height: int = 100, width: int = 100) -> str:
    console = Console(record=True, width=width, height=height, force_terminal=False)
    console.print(obj)
    return console.export_text()


def test_the_status_line_says_thinking_with_turn_and_model_then_its_words() -> None:
    state = LiveState(budget=16, model="qwen2.5-coder-1.5b")
    state(EpisodeStarted(episode_id="e", task="t"))
    assert "orchestrator: thinking · turn 1 · model qwen2.5-coder-1.5b" in _render(state)
    state(TurnFinished(index=0, text="I will look up\nevery country.", tool_calls=("assign_task",)))
    state(StageStarted(index=0, kind="subagents", width=1, critical_so_far=1))
    text = _render(state)
    assert "orchestrator: waiting for stage 0 (subagents) · turn 1" in text
    assert "“I will look up every country.”" in text
    state(StageFinished(index=0, critical_steps=3, critical_so_far=4))
    assert "orchestrator: thinking · turn 2 · model qwen2.5-coder-1.5b" in _render(state)


def test_a_short_terminal_folds_finished_sub_agents() -> None:
    state = LiveState(budget=16, model="m")
    state(EpisodeStarted(episode_id="e", task="t"))
    state(TurnFinished(index=0, text="", tool_calls=("assign_task",) * 12))
    state(StageStarted(index=0, kind="subagents", width=12, critical_so_far=1))
    for i in range(12):
        state(SubagentStarted(agent_id=f"w-0-{i}", name="w", task=f"task {i}", step_cap=4))
    from agent_swarm.swarm.events import SubagentFinished
    from agent_swarm.swarm.records import AgentStatus, SubagentResult

    for i in range(10):
        r = SubagentResult(
            agent_id=f"w-0-{i}", name="w", task=f"task {i}", status=AgentStatus.COMPLETED, steps=2, step_cap=4
        )
        state(SubagentFinished(agent_id=f"w-0-{i}", status=AgentStatus.COMPLETED, result=r))
    tall = _render(state, height=60)
    assert "w-0-0  completed" in tall and "finished (" not in tall
    short = _render(state, height=12)
    assert "✓ 10 finished (10 completed)" in short and "w-0-0  completed" not in short
    assert "w-0-10  running" in short and "w-0-11  running" in short
    assert len(short.rstrip("\n").splitlines()) <= 12


@pytest.mark.parametrize("name", ["capitals", "budget"])
def test_rows_keep_their_order_from_the_live_view_to_the_final_tree(name: str) -> None:
    d = demo(name, latency_s=0)
    state = LiveState(budget=d.config.max_critical_steps)
    orch = Orchestrator(
        d.orchestrator_backend,
        d.config,
        tools=ToolRegistry(list(d.tools)),
        subagent_backend=d.subagent_backend,
        observers=[state],
    )
    record = orch.run_sync(d.task)
    final = {s.index: s for s in stages_from_record(record)}
    assert state.stages and any(s.actions for s in state.stages)
    for live in state.stages:  # (an answer-only stage has no StageStarted event: nothing to compare)
        done = final[live.index]
        assert [(a.kind, a.label) for a in live.ordered()] == [(a.kind, a.label) for a in done.ordered()]


def _pty_run(tmp_path: Path, rows: int) -> str:
    main, sub = pty.openpty()
    fcntl.ioctl(sub, termios.TIOCSWINSZ, struct.pack("HHHH", rows, 100, 0, 0))
    env = {**os.environ, "SWARM_DEMO_LATENCY": "0.4", "TERM": "xterm"}
    for key in ("CI", "COLUMNS", "LINES"):
        env.pop(key, None)
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
    assert proc.returncode == 0
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode("utf-8", "replace"))


@pytest.mark.slow
def test_in_a_short_terminal_the_live_view_shows_the_orchestrator_and_folds(tmp_path: Path) -> None:
    screen = _pty_run(tmp_path, rows=12)
    assert "orchestrator: thinking · turn 1" in screen
    assert "orchestrator: waiting for stage 0 (subagents)" in screen
    assert "finished (" in screen  # finished researchers folded while others still ran
    assert "stages (2)" in screen  # the final tree is printed in full afterwards


def test_a_refused_assignment_between_two_runs_keeps_its_row() -> None:
    from agent_swarm.swarm.backend import Completion
    from agent_swarm.swarm.testing import FunctionBackend, ScriptedBackend, call

    policy = ScriptedBackend(
        [
            [
                call("create_subagent", name="w", system_prompt="You answer."),
                call("assign_task", agent="w", task="first"),
                call("assign_task", agent="nobody", task="refused"),
                call("assign_task", agent="w", task="second"),
            ],
            "done",
        ]
    )
    workers = FunctionBackend(lambda request: Completion(text="ok"))
    state = LiveState(budget=8)
    record = Orchestrator(
        policy, SwarmConfig(max_critical_steps=8), subagent_backend=workers, observers=[state]
    ).run_sync("t")
    live = [(a.label, a.outcome) for a in state.stages[0].ordered()]
    assert [label for label, _ in live if _ == "rejected"] == ["nobody"]
    assert live == [(a.label, a.outcome) for a in stages_from_record(record)[0].ordered()]


def test_rows_do_not_move_when_a_sub_agent_finishes() -> None:
    from agent_swarm.swarm.events import SubagentFinished
    from agent_swarm.swarm.records import AgentStatus, SubagentResult

    state = LiveState(budget=8)
    state(StageStarted(index=0, kind="subagents", width=2, critical_so_far=1))
    for i in range(2):
        state(SubagentStarted(agent_id=f"w-0-{i}", name="w", task=f"task {i}", step_cap=4))
    done = SubagentResult(agent_id="w-0-0", name="w", task="task 0", status=AgentStatus.COMPLETED, steps=1, step_cap=4)
    state(SubagentFinished(agent_id="w-0-0", status=AgentStatus.COMPLETED, result=done))
    text = _render(state)
    assert text.index("w-0-0  completed") < text.index("w-0-1  running")


def test_direct_tool_calls_that_finish_out_of_order_keep_call_order_live_and_final() -> None:
    import anyio

    from agent_swarm.swarm.testing import ScriptedBackend, call
    from agent_swarm.tools.registry import tool

    @tool
    async def slow(x: str) -> str:
        """Answer late."""
        await anyio.sleep(0.2)
        return f"slow {x}"

    @tool
    def fast(x: str) -> str:
        """Answer at once."""
        return f"fast {x}"

    policy = ScriptedBackend(
        [
            [
                call("create_subagent", name="w", system_prompt="You answer."),
                call("slow", x="a"),
                call("w", x="b"),  # a sub-agent type called as a tool: refused before anything runs
                call("fast", x="c"),
                call("slow", x="d"),
            ],
            "done",
        ]
    )
    state = LiveState(budget=8)
    record = Orchestrator(
        policy, SwarmConfig(max_critical_steps=8), tools=ToolRegistry([slow, fast]), observers=[state]
    ).run_sync("t")
    live = [(a.label, a.outcome) for a in state.stages[0].ordered()]
    final = [(a.label, a.outcome) for a in stages_from_record(record)[0].ordered()]
    assert final == [("w", "created"), ("slow", "ok"), ("w", "failed"), ("fast", "ok"), ("slow", "ok")]
    assert live == final
    assert [a.detail for a in state.stages[0].ordered() if a.outcome == "ok"] == ["slow a", "fast c", "slow d"]
