"""The CLI's live view folds runtime events into what a user watches on stderr."""

from __future__ import annotations

from rich.console import Console

from agent_swarm.orchestrator import Orchestrator
from agent_swarm.orchestrator.cli.live import LiveState, summary_table
from agent_swarm.orchestrator.demo import demo


def render(obj: object) -> str:
    console = Console(record=True, width=140, force_terminal=False)
    console.print(obj)
    return console.export_text()


async def test_live_view_shows_stage_agents_steps_and_statuses() -> None:
    d = demo("capitals", latency_s=0.0)
    state = LiveState()
    snapshots: list[str] = []

    def observe(event: object) -> None:
        state(event)  # type: ignore[arg-type]
        if type(event).__name__ == "StageFinished":
            snapshots.append(render(state))

    record = await Orchestrator(
        d.orchestrator_backend, d.config, tools=d.tools, subagent_backend=d.subagent_backend, observers=[observe]
    ).run(d.task)
    text = snapshots[0]
    assert "stage 0 · subagents · 9 sub-agents" in text
    assert text.count("completed") == 8 and text.count("failed") == 1
    assert "researcher-0-8" in text and "2/6 steps" in text  # steps / step cap
    summary = render(summary_table(record, "traces/x/episode.json"))
    assert "SCRIPTED" in summary and "8 completed, 1 failed" in summary and "traces/x/episode.json" in summary


def test_wide_fanout_is_summarised_not_listed() -> None:
    from agent_swarm.swarm.events import StageStarted, SubagentStarted

    state = LiveState()
    state(StageStarted(index=0, kind="subagents", width=100, critical_so_far=1))
    for i in range(100):
        state(SubagentStarted(agent_id=f"w-0-{i}", name="w", task="t", step_cap=3))
    text = render(state)
    assert "… 84 more (100 actions: 100 running)" in text
