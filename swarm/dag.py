"""The step DAG of an episode and its statistics (critical steps: ARCHITECTURE.md, the episode's data path).

Nodes are steps (``"<agent_id>#<index>"``) carrying agent id, step index, kind, stage, start/end and
tokens. Edges: sequence within an agent; *fork* from the orchestrator step that opened a stage to the
first step of each sub-agent of that stage; *join* from each sub-agent's last step to the next
orchestrator step. Critical steps = the longest path counted in steps; the wall-clock critical path =
the longest path weighted by step duration.

An orchestrator step's direct tool calls run beside the sub-agents it started: the step's duration is
its generation, and the time its tool calls took after it (their ``tool_results``) is a parallel
branch that only the *sequence* edge to the next orchestrator step carries. The sub-agents' branch
forks at the end of the generation, so the two overlap in time and neither is counted twice: the
wall-clock critical path never exceeds the episode's wall time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from agent_swarm.swarm.errors import ErrorType
from agent_swarm.swarm.records import DagStats, StageRecord, StepRecord, SubagentResult

if TYPE_CHECKING:  # networkx costs a quarter of a second at import; only build_dag needs it
    import networkx as nx

__all__ = ["build_dag", "critical_steps_formula", "dag_stats"]


def _node(step: StepRecord) -> str:
    return f"{step.agent_id}#{step.index}"


def _tools_tail(step: StepRecord) -> float:
    """Seconds an orchestrator step's tool calls ran past its generation (0 for sub-agent steps,
    whose tool calls are inside the step)."""
    if step.kind != "orchestrator" or not step.tool_results:
        return 0.0
    end = max(r.ended for r in step.tool_results)
    return end - step.ended if end > step.ended else 0.0


def _attrs(step: StepRecord) -> dict[str, object]:
    return {
        "agent_id": step.agent_id,
        "index": step.index,
        "kind": step.kind,
        "stage": step.stage,
        "started": step.started,
        "ended": step.ended,
        "tools_tail": _tools_tail(step),
        "tokens": step.prompt_tokens + step.completion_tokens,
    }


def _hedged(result: SubagentResult) -> bool:
    """A straggler its stage stopped waiting for (``agent_swarm.orchestrator.hedging``): off the longest path."""
    return result.error_type == ErrorType.HEDGED


def build_dag(stages: Sequence[StageRecord]) -> nx.DiGraph:
    """Build the step DAG from an episode's stages (nodes and edges added in bulk)."""
    nodes: list[tuple[str, dict[str, object]]] = []
    edges: list[tuple[str, str, dict[str, str]]] = []
    seq, fork, join = {"kind": "sequence"}, {"kind": "fork"}, {"kind": "join"}
    prev_main: str | None = None
    pending_join: list[str] = []
    for stage in stages:
        for step in stage.orchestrator_steps:
            node = _node(step)
            nodes.append((node, _attrs(step)))
            if prev_main is not None:
                edges.append((prev_main, node, seq))
            edges.extend((last, node, join) for last in pending_join)
            pending_join = []
            prev_main = node
        for result in stage.subagents:
            prev: str | None = None
            waited = not _hedged(result)
            for step in result.step_records:
                node = _node(step)
                nodes.append((node, {**_attrs(step), "waited": waited} if not waited else _attrs(step)))
                if prev is not None:
                    edges.append((prev, node, seq))
                elif prev_main is not None:
                    edges.append((prev_main, node, fork))
                prev = node
            if prev is not None and waited:
                pending_join.append(prev)
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    g.add_edges_from(edges)
    return g


def _longest(g: nx.DiGraph) -> tuple[int, list[str], float]:
    """Longest path in steps (with the path) and longest path in seconds, in one topological pass."""
    import networkx as nx

    steps: dict[str, int] = {}
    secs: dict[str, float] = {}
    back: dict[str, str | None] = {}
    nodes = g.nodes
    pred = g.pred
    wall = 0.0
    for node in nx.topological_sort(g):
        data = nodes[node]
        best_n, best_s, parent = 0, 0.0, None
        for p, edge in pred[node].items():
            if steps[p] > best_n:
                best_n, parent = steps[p], p
            ps = secs[p] + (nodes[p]["tools_tail"] if edge["kind"] == "sequence" else 0.0)
            if ps > best_s:
                best_s = ps
        steps[node] = best_n + 1
        secs[node] = best_s + (data["ended"] - data["started"])
        back[node] = parent
        if data.get("waited", True):  # a hedged straggler's steps were not waited for
            wall = max(wall, secs[node] + data["tools_tail"])
    ends = [n for n in steps if nodes[n].get("waited", True)]
    if not ends:
        return 0, [], 0.0
    end = max(ends, key=steps.__getitem__)
    path: list[str] = []
    cur: str | None = end
    while cur is not None:
        path.append(cur)
        cur = back[cur]
    path.reverse()
    return steps[end], path, wall


def _longest_direct(stages: Sequence[StageRecord]) -> tuple[int, list[str], float]:
    """:func:`_longest` over the same implicit graph, without building it.

    :func:`build_dag` adds nodes in a topological order and gives every node its predecessors in a
    fixed order (sequence edge first, then joins), so one pass in that order with the same strict
    comparisons yields the same lengths and the same path as the networkx pass, in O(steps) with no
    graph objects: the episode record's statistics cost little even at a 1,000-way fan-out.

    A sub-agent's steps form a chain with one entry (the fork) and one exit (the join), so a chain is
    handled whole: its exit's length is the entry's plus the chain's, and only exits are remembered.
    """
    Node = tuple[str, int]
    best_n = 0  # the longest path so far, in steps
    best_secs = 0.0
    end: Node | None = None
    back: dict[Node, Node | None] = {}  # orchestrator nodes and chain exits -> predecessor on the path
    chains: dict[Node, SubagentResult] = {}  # chain exit -> its sub-agent (to list the chain's nodes)
    main: tuple[Node, int, float] | None = None  # last orchestrator node, its steps, its seconds
    main_tail = 0.0  # its tool calls' time past its generation (carried by the sequence edge only)
    joins: list[tuple[Node, int, float]] = []
    for stage in stages:
        for step in stage.orchestrator_steps:
            node = (step.agent_id, step.index)
            n, secs, parent = 0, 0.0, None
            preds = [(main[0], main[1], main[2] + main_tail)] if main is not None else []
            for p, pn, ps in preds + joins:
                if pn > n:
                    n, parent = pn, p
                if ps > secs:
                    secs = ps
            n += 1
            secs += step.ended - step.started
            back[node] = parent
            joins = []
            main, main_tail = (node, n, secs), _tools_tail(step)
            if n > best_n:
                best_n, end = n, node
            if secs + main_tail > best_secs:
                best_secs = secs + main_tail
        for result in stage.subagents:
            records = result.step_records
            if not records or _hedged(result):
                continue
            n, secs, parent = (main[1], main[2], main[0]) if main is not None else (0, 0.0, None)
            for step in records:
                secs = (secs if secs > 0.0 else 0.0) + (step.ended - step.started)
                if secs > best_secs:
                    best_secs = secs
            n += len(records)
            last = records[-1]
            node = (last.agent_id, last.index)
            back[node] = parent
            chains[node] = result
            joins.append((node, n, secs))
            if n > best_n:
                best_n, end = n, node
    if end is None:
        return 0, [], 0.0
    return best_n, _walk_back(end, back, chains), best_secs


def _walk_back(
    end: tuple[str, int],
    back: dict[tuple[str, int], tuple[str, int] | None],
    chains: dict[tuple[str, int], SubagentResult],
) -> list[str]:
    """The critical path's node names, first to last: from ``end`` along ``back``, a chain exit
    standing for all of its sub-agent's steps."""
    path: list[str] = []
    cur: tuple[str, int] | None = end
    while cur is not None:
        chain = chains.get(cur)
        if chain is None:
            path.append(f"{cur[0]}#{cur[1]}")
        else:
            path.extend(f"{r.agent_id}#{r.index}" for r in reversed(chain.step_records))
        cur = back[cur]
    path.reverse()
    return path


def dag_stats(stages: Sequence[StageRecord], graph: nx.DiGraph | None = None) -> DagStats:
    """Critical steps, wall-clock critical path, totals, widths and speed-up of an episode.

    Without ``graph`` the longest paths are computed in one pass over the stages (the same result as
    over :func:`build_dag`'s graph, which the tests check); with it, over the given graph.
    """
    crit, path, wall = _longest(graph) if graph is not None else _longest_direct(stages)
    main = sum(len(s.orchestrator_steps) for s in stages)
    sub = sum(r.steps for s in stages for r in s.subagents)
    total = main + sub
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
