"""The step DAG of an episode and its statistics (SPEC §4).

Nodes are steps (``"<agent_id>#<index>"``) carrying agent id, step index, kind, stage, start/end and
tokens. Edges: sequence within an agent; *fork* from the orchestrator step that opened a stage to the
first step of each sub-agent of that stage; *join* from each sub-agent's last step to the next
orchestrator step. Critical steps = the longest path counted in steps; the wall-clock critical path =
the longest path weighted by step duration.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import networkx as nx

from swarm.records import DagStats, StageRecord, StepRecord

__all__ = ["build_dag", "critical_steps_formula", "dag_stats"]


def _node(step: StepRecord) -> str:
    return f"{step.agent_id}#{step.index}"


def build_dag(stages: Sequence[StageRecord]) -> nx.DiGraph:
    """Build the step DAG from an episode's stages."""
    g = nx.DiGraph()
    prev_main: str | None = None
    pending_join: list[str] = []
    for stage in stages:
        for step in stage.orchestrator_steps:
            node = _node(step)
            g.add_node(
                node,
                agent_id=step.agent_id,
                index=step.index,
                kind=step.kind,
                stage=step.stage,
                started=step.started,
                ended=step.ended,
                tokens=step.prompt_tokens + step.completion_tokens,
            )
            if prev_main is not None:
                g.add_edge(prev_main, node, kind="sequence")
            for last in pending_join:
                g.add_edge(last, node, kind="join")
            pending_join = []
            prev_main = node
        for result in stage.subagents:
            prev: str | None = None
            for step in result.step_records:
                node = _node(step)
                g.add_node(
                    node,
                    agent_id=step.agent_id,
                    index=step.index,
                    kind=step.kind,
                    stage=step.stage,
                    started=step.started,
                    ended=step.ended,
                    tokens=step.prompt_tokens + step.completion_tokens,
                )
                if prev is None:
                    if prev_main is not None:
                        g.add_edge(prev_main, node, kind="fork")
                else:
                    g.add_edge(prev, node, kind="sequence")
                prev = node
            if prev is not None:
                pending_join.append(prev)
    return g


def _longest(g: nx.DiGraph, weight: str | None) -> tuple[float, list[str]]:
    """Longest path by node weight (1 per node when ``weight`` is None) in one topological pass."""
    best: dict[str, float] = {}
    back: dict[str, str | None] = {}
    for node in nx.topological_sort(g):
        data = g.nodes[node]
        w = 1.0 if weight is None else float(data["ended"] - data["started"])
        score, parent = 0.0, None
        for pred in g.predecessors(node):
            if best[pred] > score:
                score, parent = best[pred], pred
        best[node] = score + w
        back[node] = parent
    if not best:
        return 0.0, []
    end = max(best, key=best.__getitem__)
    path: list[str] = []
    cur: str | None = end
    while cur is not None:
        path.append(cur)
        cur = back[cur]
    path.reverse()
    return best[end], path


def dag_stats(stages: Sequence[StageRecord], graph: nx.DiGraph | None = None) -> DagStats:
    """Critical steps, wall-clock critical path, totals, widths and speed-up of an episode."""
    g = build_dag(stages) if graph is None else graph
    critical, path = _longest(g, None)
    wall, _ = _longest(g, "duration")
    main = sum(len(s.orchestrator_steps) for s in stages)
    sub = sum(r.steps for s in stages for r in s.subagents)
    total = main + sub
    crit = int(critical)
    return DagStats(
        critical_steps=crit,
        total_steps=total,
        main_steps=main,
        subagent_steps=sub,
        wall_critical_path_s=wall,
        critical_path=tuple(path),
        stage_widths=tuple(len(s.subagents) for s in stages),
        speedup=(total / crit) if crit else 1.0,
    )


def critical_steps_formula(stage_steps: Iterable[tuple[int, Sequence[int]]]) -> int:
    """The seed's formula: ``Σ_t (S_main(t) + max_i S_sub,i(t))`` over ``(S_main, [S_sub,i])`` pairs."""
    return sum(main + max(subs, default=0) for main, subs in stage_steps)
