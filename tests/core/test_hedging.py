"""Straggler hedging through the public API: a stage that stops at a quorum or at a multiple of the
median wall time, stragglers recorded cancelled with their partial reports, backups whose first
finisher wins, and critical steps counting only the sub-agents the stage waited for."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.orchestrator.tasks import load_config
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.config import Hedge
from agent_swarm.swarm.dag import build_dag, dag_stats
from agent_swarm.swarm.errors import ConfigError, ErrorType
from agent_swarm.swarm.messages import ToolMessage
from agent_swarm.swarm.records import AgentStatus, EpisodeRecord
from agent_swarm.swarm.testing import FunctionBackend, ScriptedBackend, call
from agent_swarm.tools import tool


@tool
def probe(n: int) -> str:
    """Probe item n."""
    return f"probe {n} ok"


async def _worker(request: ModelRequest) -> Completion:
    """Three quick probes then an answer; a task saying 'slow' sleeps 0.6 s per step after its first
    (its backup, an agent id ending in -b, does not)."""
    task = next(m.content for m in request.messages if m.role == "user")
    looked = sum(isinstance(m, ToolMessage) for m in request.messages)
    if "slow" in task and looked >= 1 and not request.agent_id.endswith("-b"):
        await anyio.sleep(0.6)
    else:
        await anyio.sleep(0.01)
    if looked < 3:
        return Completion(text=f"{task}: {looked} probes so far", tool_calls=(call("probe", n=looked),))
    return Completion(text=f"{task}: done")


TASKS = ["item a", "item b", "item c", "slow item d"]


async def _run(hedge: Hedge | None) -> EpisodeRecord:
    policy = ScriptedBackend([[call("assign_task", agent="worker", task=t) for t in TASKS], "answer"])
    cfg = SwarmConfig(hedge=hedge, max_subagent_steps=10)
    return await Orchestrator(policy, cfg, tools=[probe], subagent_backend=FunctionBackend(_worker)).run("go")


def _by_task(record: EpisodeRecord) -> dict[str, list[AgentStatus]]:
    out: dict[str, list[AgentStatus]] = {}
    for r in record.stages[0].subagents:
        out.setdefault(r.task, []).append(r.status)
    return out


async def test_without_hedging_the_stage_waits_for_the_straggler() -> None:
    t0 = time.monotonic()
    record = await _run(None)
    assert time.monotonic() - t0 > 1.7  # 3 steps of 0.6 s
    assert all(r.status is AgentStatus.COMPLETED for r in record.subagent_results)
    assert record.stages[0].critical_steps == 1 + 4


async def test_a_quorum_ends_the_stage_and_the_straggler_is_cancelled_with_its_partial_report() -> None:
    t0 = time.monotonic()
    record = await _run(Hedge(quorum=0.75))
    assert time.monotonic() - t0 < 1.5
    slow = next(r for r in record.stages[0].subagents if r.task == "slow item d")
    assert slow.status is AgentStatus.CANCELLED and slow.error_type == ErrorType.HEDGED
    assert "quorum of 0.75" in (slow.error or "") and slow.report.startswith("slow item d:")
    assert record.answer == "answer"
    # Critical steps are those of the sub-agents the stage waited for (4 steps each), however many
    # steps the cut one had made.
    assert record.stages[0].critical_steps == 1 + 4
    assert record.dag.critical_steps == sum(s.critical_steps for s in record.stages)
    assert dag_stats(record.stages, build_dag(record.stages)) == record.dag


async def test_a_straggler_past_the_median_multiple_is_cut() -> None:
    t0 = time.monotonic()
    record = await _run(Hedge(straggler_factor=2.0, min_finished=0.5))
    assert time.monotonic() - t0 < 1.5
    assert _by_task(record)["slow item d"] == [AgentStatus.CANCELLED]
    slow = next(r for r in record.stages[0].subagents if r.task == "slow item d")
    assert "2x the median wall time" in (slow.error or "")
    assert record.dag.critical_steps == sum(s.critical_steps for s in record.stages)


async def test_a_backup_copy_of_a_straggler_wins_and_the_original_is_recorded_cancelled() -> None:
    t0 = time.monotonic()
    record = await _run(Hedge(straggler_factor=2.0, backup=True))
    assert time.monotonic() - t0 < 1.8
    runs = [r for r in record.stages[0].subagents if r.task == "slow item d"]
    winner = next(r for r in runs if r.status is AgentStatus.COMPLETED)
    loser = next(r for r in runs if r.status is AgentStatus.CANCELLED)
    assert winner.agent_id.endswith("-b") and winner.report == "slow item d: done"
    assert loser.error_type == ErrorType.HEDGED and "a copy of it finished first" in (loser.error or "")
    # the call's result is the backup's: what the orchestrator was shown
    tool_msgs = [m for m in record.stages[0].subagents if m.status is AgentStatus.COMPLETED]
    assert len(tool_msgs) == 4 and len(record.stages[0].subagents) == 5
    assert record.stages[0].critical_steps == 1 + max(r.steps for r in record.stages[0].subagents if r is not loser)
    assert record.dag.critical_steps == sum(s.critical_steps for s in record.stages)
    assert dag_stats(record.stages, build_dag(record.stages)) == record.dag


async def test_narrow_stages_are_not_hedged() -> None:
    policy = ScriptedBackend([[call("assign_task", agent="worker", task="slow item d")], "answer"])
    cfg = SwarmConfig(hedge=Hedge(quorum=0.5), max_subagent_steps=10)
    record = await Orchestrator(policy, cfg, tools=[probe], subagent_backend=FunctionBackend(_worker)).run("go")
    assert record.subagent_results[0].status is AgentStatus.COMPLETED


def test_hedging_from_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[swarm.hedge]\nquorum = 0.75\nstraggler_factor = 3.0\nbackup = true\n")
    cfg, _ = load_config(path)
    assert cfg.hedge == Hedge(quorum=0.75, straggler_factor=3.0, backup=True)
    path.write_text("[swarm.hedge]\nquorum = 1.5\n")
    with pytest.raises(ConfigError, match="quorum"):
        load_config(path)


async def test_a_backup_spends_from_its_originals_budget_share() -> None:
    """18 turns: 1 for the first turn, 1 kept for the answer, 16 shared by 4 sub-agents (4 each). The
    slow one's backup needs 4 steps on top of the original's 1: with one share for both it runs out."""
    from agent_swarm.swarm.config import Budgets

    policy = ScriptedBackend([[call("assign_task", agent="worker", task=t) for t in TASKS], "answer"])
    hedge = Hedge(straggler_factor=2.0, backup=True)
    cfg = SwarmConfig(hedge=hedge, max_subagent_steps=10, budgets=Budgets(max_turns=18))
    record = await Orchestrator(policy, cfg, tools=[probe], subagent_backend=FunctionBackend(_worker)).run("go")
    runs = {r.agent_id: r for r in record.stages[0].subagents if r.task == "slow item d"}
    backup = runs["worker-0-3-b"]
    assert backup.step_cap == 4 and backup.status is AgentStatus.BUDGET_EXHAUSTED and "share" in (backup.error or "")
    assert sum(r.steps for r in runs.values()) <= 4
