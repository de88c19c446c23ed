"""The step DAG's details that the formula tests (test_dag.py) do not reach, found by mutation testing
(bench/mutation.py, issue 29): node attributes, a direct tool call's tail, and hedged stragglers, on
both the graph path and the direct pass."""

from __future__ import annotations

import pytest

from agent_swarm.swarm.dag import build_dag, dag_stats
from agent_swarm.swarm.errors import ErrorType
from agent_swarm.swarm.messages import ToolCall
from agent_swarm.swarm.records import AgentStatus, StageRecord, StepRecord, SubagentResult, ToolResult


def _step(agent: str, index: int, stage: int, started: float, ended: float, **kw: object) -> StepRecord:
    kind = "orchestrator" if agent == "orchestrator" else "subagent"
    return StepRecord(agent_id=agent, index=index, kind=kind, stage=stage, started=started, ended=ended, **kw)  # type: ignore[arg-type]


def _sub(agent: str, stage: int, spans: list[tuple[float, float]], hedged: bool = False) -> SubagentResult:
    steps = tuple(_step(agent, i, stage, a, b) for i, (a, b) in enumerate(spans))
    return SubagentResult(
        agent_id=agent,
        name="w",
        task="t",
        status=AgentStatus.CANCELLED if hedged else AgentStatus.COMPLETED,
        error_type=ErrorType.HEDGED if hedged else None,
        steps=len(steps),
        step_records=steps,
    )


def _tool(started: float, ended: float) -> ToolResult:
    return ToolResult(call=ToolCall(id="c", name="t", arguments={}), content="x", started=started, ended=ended)


def _episode(hedged_long: bool) -> list[StageRecord]:
    """Stage 0: the orchestrator (0-1 s) starts a 2-step sub-agent (1-3 s) and a 6-step straggler
    (1-13 s, hedged or not); stage 1: the orchestrator answers (3-4 s)."""
    subs = (_sub("a", 0, [(1, 2), (2, 3)]), _sub("slow", 0, [(1 + 2 * i, 3 + 2 * i) for i in range(6)], hedged_long))
    o0 = _step("orchestrator", 0, 0, 0.0, 1.0, prompt_tokens=7, completion_tokens=3)
    o1 = _step("orchestrator", 1, 1, 3.0, 4.0)
    return [
        StageRecord(index=0, kind="subagents", started=0, ended=3, orchestrator_steps=(o0,), subagents=subs),
        StageRecord(index=1, kind="answer", started=3, ended=4, orchestrator_steps=(o1,)),
    ]


def test_every_node_carries_its_steps_attributes() -> None:
    g = build_dag(_episode(hedged_long=False))
    assert g.nodes["orchestrator#0"] == {
        "agent_id": "orchestrator",
        "index": 0,
        "kind": "orchestrator",
        "stage": 0,
        "started": 0.0,
        "ended": 1.0,
        "tools_tail": 0.0,
        "tokens": 10,
    }
    assert "waited" not in g.nodes["slow#5"]


def test_a_hedged_stragglers_steps_are_marked_and_left_off_both_longest_paths() -> None:
    stages = _episode(hedged_long=True)
    g = build_dag(stages)
    assert all(g.nodes[f"slow#{i}"]["waited"] is False for i in range(6)) and "waited" not in g.nodes["a#1"]
    assert not g.has_edge("slow#5", "orchestrator#1")
    for stats in (dag_stats(stages), dag_stats(stages, build_dag(stages))):
        assert stats.critical_steps == 4  # orchestrator, a#0, a#1, orchestrator
        assert stats.critical_path == ("orchestrator#0", "a#0", "a#1", "orchestrator#1")
        assert stats.wall_critical_path_s == 4.0  # not the straggler's 13 s
    waited = _episode(hedged_long=False)
    for stats in (dag_stats(waited), dag_stats(waited, build_dag(waited))):
        assert stats.critical_steps == 8 and stats.wall_critical_path_s == 14.0


@pytest.mark.parametrize("graph", [False, True])
def test_a_direct_tool_calls_tail_runs_beside_the_subagents_and_counts_only_past_them(graph: bool) -> None:
    stages = _episode(hedged_long=False)

    def with_tools(*tools: ToolResult) -> list[StageRecord]:
        o0 = stages[0].orchestrator_steps[0]
        step = StepRecord(
            **{
                **{f: getattr(o0, f) for f in ("agent_id", "index", "kind", "stage", "started", "ended")},
                "tool_results": tools,
            }
        )
        return [stages[0].model_copy(update={"orchestrator_steps": (step,)}), stages[1]]

    def wall(s: list[StageRecord]) -> float:
        return (dag_stats(s, build_dag(s)) if graph else dag_stats(s)).wall_critical_path_s

    # a tool call that ended inside the generation adds nothing (not a negative or a constant)
    early = with_tools(_tool(0.2, 0.5))
    assert build_dag(early).nodes["orchestrator#0"]["tools_tail"] == 0.0 and wall(early) == 14.0
    # one that runs 20 s past it is on the critical path: 1 + 20 + the answer's 1 s
    late = with_tools(_tool(0.5, 21.0), _tool(0.5, 2.0))
    assert build_dag(late).nodes["orchestrator#0"]["tools_tail"] == 20.0 and wall(late) == 22.0


def test_equal_sub_agents_at_the_end_give_the_first_ones_path_on_both_passes() -> None:
    # An episode cut during its last stage: two 2-step sub-agents tie; both passes name the first.
    o0 = _step("orchestrator", 0, 0, 0.0, 1.0)
    subs = (_sub("a", 0, [(1, 2), (2, 3)]), _sub("b", 0, [(1, 2), (2, 4)]))
    stages = [StageRecord(index=0, kind="subagents", started=0, ended=4, orchestrator_steps=(o0,), subagents=subs)]
    for stats in (dag_stats(stages), dag_stats(stages, build_dag(stages))):
        assert stats.critical_path == ("orchestrator#0", "a#0", "a#1")
        assert (stats.critical_steps, stats.wall_critical_path_s) == (3, 4.0)
        assert (stats.total_steps, stats.main_steps, stats.subagent_steps) == (5, 1, 4)


def test_a_step_whose_clock_went_backwards_adds_no_negative_time_on_both_passes() -> None:
    # The orchestrator's first step ends 4 s before it started (a record with a skewed clock): the
    # sub-agent's branch starts from 0 s, not -4 s, as a longest path over durations does.
    stages = [
        StageRecord(
            index=0,
            kind="subagents",
            started=0,
            ended=2,
            orchestrator_steps=(_step("orchestrator", 0, 0, 5.0, 1.0),),
            subagents=(_sub("a", 0, [(1, 2)]),),
        ),
        StageRecord(
            index=1, kind="answer", started=3, ended=4, orchestrator_steps=(_step("orchestrator", 1, 1, 3.0, 4.0),)
        ),
    ]
    assert dag_stats(stages).wall_critical_path_s == dag_stats(stages, build_dag(stages)).wall_critical_path_s == 2.0


def test_an_empty_episode_and_a_given_graph() -> None:
    empty = dag_stats([])
    assert (empty.critical_steps, empty.total_steps, empty.critical_path, empty.speedup) == (0, 0, (), 1.0)
    # with a graph, the longest paths are the graph's (here another episode's); the totals are the stages'
    stages = _episode(hedged_long=False)
    other = [stages[1].model_copy(update={"index": 0})]
    stats = dag_stats(stages, build_dag(other))
    assert (stats.critical_steps, stats.critical_path, stats.total_steps) == (1, ("orchestrator#1",), 10)
