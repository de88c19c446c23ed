"""Critical steps must equal the seed formula on every episode (hand-built and random structures)."""

from __future__ import annotations

import itertools
import random

import pytest

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.dag import build_dag, critical_steps_formula, dag_stats
from agent_swarm.swarm.messages import ToolMessage
from agent_swarm.swarm.records import AgentStatus, StageRecord, StepRecord, SubagentResult
from agent_swarm.swarm.testing import FunctionBackend, call


def _stage(index: int, sub_steps: list[int], t: float = 0.0) -> StageRecord:
    orch = StepRecord(agent_id="orchestrator", index=index, kind="orchestrator", stage=index, started=t, ended=t + 1)
    subs = []
    for k, n in enumerate(sub_steps):
        steps = tuple(
            StepRecord(
                agent_id=f"a{index}-{k}", index=i, kind="subagent", stage=index, started=t + 1 + i, ended=t + 2 + i
            )
            for i in range(n)
        )
        subs.append(
            SubagentResult(
                agent_id=f"a{index}-{k}", name="a", task="t", status=AgentStatus.COMPLETED, steps=n, step_records=steps
            )
        )
    return StageRecord(
        index=index,
        kind="subagents" if subs else "answer",
        started=t,
        ended=t + 1,
        orchestrator_steps=(orch,),
        subagents=tuple(subs),
    )


def test_hand_built_structure() -> None:
    # stage 0: widths 3 with 2, 5, 1 steps; stage 1: no sub-agents; stage 2: one sub-agent with 4 steps; answer
    stages = [_stage(0, [2, 5, 1]), _stage(1, []), _stage(2, [4]), _stage(3, [])]
    stats = dag_stats(stages)
    assert stats.critical_steps == critical_steps_formula([(1, [2, 5, 1]), (1, []), (1, [4]), (1, [])]) == 13
    assert stats.total_steps == 4 + 8 + 4 == 16
    assert stats.stage_widths == (3, 0, 1, 0)
    assert stats.speedup == pytest.approx(16 / 13)
    # The critical path goes through the longest sub-agent of each stage.
    assert "a0-1#4" in stats.critical_path and "a0-0#1" not in stats.critical_path
    g = build_dag(stages)
    kinds = {d["kind"] for _, _, d in g.edges(data=True)}
    assert kinds == {"sequence", "fork", "join"}
    assert g.has_edge("orchestrator#0", "a0-2#0") and g.has_edge("a0-2#0", "orchestrator#1")


def test_wall_clock_critical_path_is_weighted_by_duration() -> None:
    # Two sub-agents: one with 3 quick steps, one with 1 very slow step.
    orch0 = StepRecord(agent_id="orchestrator", index=0, kind="orchestrator", stage=0, started=0, ended=1)
    quick = tuple(
        StepRecord(agent_id="q", index=i, kind="subagent", stage=0, started=1 + i, ended=2 + i) for i in range(3)
    )
    slow = (StepRecord(agent_id="s", index=0, kind="subagent", stage=0, started=1, ended=11),)
    stage0 = StageRecord(
        index=0,
        kind="subagents",
        started=0,
        ended=11,
        orchestrator_steps=(orch0,),
        subagents=(
            SubagentResult(agent_id="q", name="q", task="", status=AgentStatus.COMPLETED, steps=3, step_records=quick),
            SubagentResult(agent_id="s", name="s", task="", status=AgentStatus.COMPLETED, steps=1, step_records=slow),
        ),
    )
    orch1 = StepRecord(agent_id="orchestrator", index=1, kind="orchestrator", stage=1, started=11, ended=12)
    stage1 = StageRecord(index=1, kind="answer", started=11, ended=12, orchestrator_steps=(orch1,))
    stats = dag_stats([stage0, stage1])
    assert stats.critical_steps == 5  # counted in steps: through the 3-step agent
    assert stats.wall_critical_path_s == pytest.approx(12.0)  # weighted by time: through the slow agent


@pytest.mark.parametrize("seed", range(25))
async def test_random_episodes_match_the_formula(seed: int) -> None:
    """Random stage structures run through the real engine: DAG critical steps == formula == plan."""
    rng = random.Random(seed)
    plan = [[rng.randint(1, 5) for _ in range(rng.randint(0, 6))] for _ in range(rng.randint(1, 5))]

    def orch(request: ModelRequest) -> Completion:
        turn = sum(1 for m in request.messages if m.role == "assistant")
        if turn >= len(plan):
            return Completion(text="done")
        calls = [call("create_subagent", name="w", system_prompt="p")] if turn == 0 else []
        # Tasks differ from turn to turn (a completed task is not run again).
        calls += [call("assign_task", agent="w", task=f"{n} t{turn}") for n in plan[turn]]
        if not calls:  # a stage with a (failing, never repeated) direct tool call and no sub-agents
            calls = [call("nope", turn=turn)]
        return Completion(tool_calls=tuple(calls))

    def worker(request: ModelRequest) -> Completion:
        need = int(next(m.content for m in request.messages if m.role == "user").split()[0])
        done = sum(isinstance(m, ToolMessage) for m in request.messages)
        return Completion(text="ok") if done + 1 >= need else Completion(tool_calls=(call("nope"),))

    cfg = SwarmConfig(max_critical_steps=1000, max_subagent_steps=10)
    record = await Orchestrator(FunctionBackend(orch), cfg, subagent_backend=FunctionBackend(worker)).run("x")
    expected = sum(1 + max(p, default=0) for p in plan) + 1  # + the answering turn
    structure = [(len(s.orchestrator_steps), [r.steps for r in s.subagents]) for s in record.stages]
    assert record.dag.critical_steps == critical_steps_formula(structure) == expected
    assert record.dag.total_steps == len(plan) + 1 + sum(sum(p) for p in plan)
    assert all(r.status is AgentStatus.COMPLETED for r in record.subagent_results)


def _is_path(g: object, path: tuple[str, ...]) -> bool:
    return all(g.has_edge(a, b) for a, b in itertools.pairwise(path))  # type: ignore[attr-defined]


@pytest.mark.parametrize("seed", range(40))
def test_record_statistics_equal_the_networkx_graphs(seed: int) -> None:
    """The episode record's statistics come from one pass over the stages; they must equal the longest
    paths of the networkx DAG on arbitrary structures: random widths, step counts and durations, ties,
    stages with no orchestrator step and sub-agents with no steps."""
    from agent_swarm.swarm.messages import ToolCall
    from agent_swarm.swarm.records import ToolResult

    rng = random.Random(seed)

    def tools(at: float) -> tuple[ToolResult, ...]:  # direct tool calls, some outlasting the sub-agents
        return tuple(
            ToolResult(call=ToolCall(id=f"t{i}", name="x"), content="", started=at, ended=at + rng.random() * 4)
            for i in range(rng.choice([0, 0, 1, 2]))
        )

    stages, t = [], 0.0
    for index in range(rng.randint(1, 6)):
        orch = tuple(
            StepRecord(
                agent_id="orchestrator",
                index=index * 10 + j,
                kind="orchestrator",
                stage=index,
                started=t,
                ended=t + (gen := rng.random()),
                tool_results=tools(t + gen),
            )
            for j in range(rng.choice([0, 1, 1, 1, 2]))
        )
        subs = []
        for k in range(rng.randint(0, 5)):
            n = rng.randint(0, 4)
            steps = tuple(
                StepRecord(
                    agent_id=f"a{index}-{k}",
                    index=i,
                    kind="subagent",
                    stage=index,
                    started=t + i,
                    ended=t + i + rng.choice([0.0, 0.5, 1.0, rng.random() * 3]),
                )
                for i in range(n)
            )
            subs.append(
                SubagentResult(
                    agent_id=f"a{index}-{k}",
                    name="a",
                    task="t",
                    status=AgentStatus.COMPLETED,
                    steps=n,
                    step_records=steps,
                )
            )
        stages.append(
            StageRecord(
                index=index, kind="subagents", started=t, ended=t + 1, orchestrator_steps=orch, subagents=tuple(subs)
            )
        )
        t += 5
    g = build_dag(stages)
    direct, graph = dag_stats(stages), dag_stats(stages, graph=g)
    assert direct.critical_steps == graph.critical_steps
    assert direct.wall_critical_path_s == pytest.approx(graph.wall_critical_path_s)
    skip = {"critical_path"}
    assert direct.model_dump(exclude=skip) == graph.model_dump(exclude=skip)
    # Both paths are longest paths of the graph (ties may pick different but equally long ones).
    for path in (direct.critical_path, graph.critical_path):
        assert len(path) == direct.critical_steps and _is_path(g, path)


@pytest.mark.parametrize("seed", range(12))
async def test_wall_critical_path_never_exceeds_the_episode_wall_time(seed: int) -> None:
    """Regression: a stage with direct tool calls beside sub-agents stretched the
    orchestrator step to the tools' end and then started the sub-agents' branch after it, counting
    the overlap twice (up to 1.9× the episode's wall time)."""
    import anyio

    from agent_swarm.tools import tool

    rng = random.Random(seed)
    plan = [(rng.uniform(0.0, 0.06), [rng.uniform(0.0, 0.06) for _ in range(rng.randint(0, 3))]) for _ in range(3)]

    @tool
    async def wait(seconds: float) -> str:
        """Sleeps."""
        await anyio.sleep(seconds)
        return "waited"

    def orch(request: ModelRequest) -> Completion:
        turn = sum(1 for m in request.messages if m.role == "assistant")
        if turn >= len(plan):
            return Completion(text="done")
        tool_s, subs = plan[turn]
        calls = [call("create_subagent", name=f"w{turn}", system_prompt="p")] if subs else []
        calls += [call("assign_task", agent=f"w{turn}", task=f"{s}") for s in subs]
        return Completion(tool_calls=(*calls, call("wait", seconds=tool_s)))

    async def worker(request: ModelRequest) -> Completion:
        await anyio.sleep(float(next(m.content for m in request.messages if m.role == "user")))
        return Completion(text="ok")

    cfg = SwarmConfig(max_critical_steps=100)
    o = Orchestrator(FunctionBackend(orch), cfg, tools=[wait], subagent_backend=FunctionBackend(worker))
    record = await o.run("x")
    assert record.status.value == "completed"
    assert record.dag.wall_critical_path_s <= record.wall_time_s + 1e-6
    # Still the longest branch of each stage: at least the slower of tools and sub-agents, per stage.
    assert record.dag.wall_critical_path_s >= sum(max([t, *subs]) for t, subs in plan) * 0.99


def test_a_mixed_stage_counts_the_tools_and_the_subagents_as_parallel_branches() -> None:
    from agent_swarm.swarm.messages import ToolCall
    from agent_swarm.swarm.records import ToolResult

    tool = ToolResult(call=ToolCall(id="t", name="wait"), content="", started=1.0, ended=4.0)
    orch0 = StepRecord(
        agent_id="orchestrator", index=0, kind="orchestrator", stage=0, started=0, ended=1, tool_results=(tool,)
    )
    sub = (StepRecord(agent_id="s", index=0, kind="subagent", stage=0, started=1, ended=3),)
    stage0 = StageRecord(
        index=0,
        kind="mixed",
        started=0,
        ended=4,
        orchestrator_steps=(orch0,),
        tool_results=(tool,),
        subagents=(
            SubagentResult(agent_id="s", name="s", task="", status=AgentStatus.COMPLETED, steps=1, step_records=sub),
        ),
    )
    orch1 = StepRecord(agent_id="orchestrator", index=1, kind="orchestrator", stage=1, started=4, ended=5)
    stages = [stage0, StageRecord(index=1, kind="answer", started=4, ended=5, orchestrator_steps=(orch1,))]
    for stats in (dag_stats(stages), dag_stats(stages, graph=build_dag(stages))):
        assert stats.wall_critical_path_s == pytest.approx(5.0)  # 1 generation + 3 of tools + 1; not 1+3+2+1
        assert stats.critical_steps == 3
