"""Where a stage's sub-agents run: in the episode's event loop, or — for very wide stages — elsewhere.

The engine admits a stage's ``assign_task`` calls as always (width limit, step caps from the critical
budget, timeouts), then hands the admitted runs to its *placement*. Without one (the default), or when
the placement does not take a stage that wide, they run in the episode's own task group. A placement
that takes the stage gets a :class:`StageBatch` — everything the runs need except their backends and
tools, which exist where they run — and reports each :class:`~agent_swarm.swarm.records.SubagentResult` as it
comes back. Results are the same records, timed on the episode's clock, so the DAG, the critical
steps and every observation the orchestrator sees are the same as in-process.

``agent_swarm.orchestrator.cluster.RayPlacement`` places batches on Ray actors; :func:`run_batch` is what runs a
batch where it lands.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from agent_swarm.subagents.loop import SubagentRun, SubagentRuntime, run_subagents
from agent_swarm.swarm.backend import ModelBackend, SamplingParams
from agent_swarm.swarm.errors import ErrorType
from agent_swarm.swarm.limits import ConcurrencyLimit
from agent_swarm.swarm.records import AgentDefinition, AgentStatus, SubagentResult
from agent_swarm.swarm.tracing import Telemetry
from agent_swarm.tools.registry import Tool, ToolRegistry

__all__ = [
    "PlacedRun",
    "StageBatch",
    "SubagentKit",
    "SubagentPlacement",
    "placement_failure",
    "run_batch",
]

SubagentKit = tuple[Mapping[str, ModelBackend], ToolRegistry | Iterable[Tool]]
"""What sub-agents need where they run: backends by model name, and the tools they may be granted."""


@dataclass(frozen=True, slots=True)
class PlacedRun:
    """One admitted sub-agent: its type, task, id and budgets (step cap, timeout, the episode-clock
    time its wall-time budget share ends)."""

    agent_id: str
    definition: AgentDefinition
    task: str
    step_cap: int
    timeout_s: float | None
    wall_deadline: float | None = None


@dataclass(frozen=True, slots=True)
class StageBatch:
    """A stage's admitted sub-agents, to run elsewhere.

    ``epoch`` is the wall-clock time of the episode's start: where the batch runs, steps are timed as
    ``time.time() - epoch``, which is the episode's clock (exactly on one machine; across machines up to
    their clock skew). ``max_concurrency`` is the sub-agent cap's width, of the limit the batch runs under there.
    """

    episode_id: str
    stage: int
    runs: tuple[PlacedRun, ...]
    default_model: str
    sampling: SamplingParams
    epoch: float
    max_concurrency: int
    max_malformed: int
    max_completion_tokens: int | None
    workspace: Path | None

    def part(self, runs: tuple[PlacedRun, ...]) -> StageBatch:
        """The same batch with only ``runs``."""
        return StageBatch(
            self.episode_id,
            self.stage,
            runs,
            self.default_model,
            self.sampling,
            self.epoch,
            self.max_concurrency,
            self.max_malformed,
            self.max_completion_tokens,
            self.workspace,
        )


Finished = Callable[[str, SubagentResult], None]
"""Called with (agent id, result) as each placed sub-agent's result arrives."""


class SubagentPlacement(Protocol):
    """Runs the sub-agents of stages it takes (see the module docstring)."""

    def takes(self, width: int) -> bool:
        """Whether a stage of ``width`` admitted sub-agents runs here rather than in the episode's loop."""
        ...

    async def run(self, batch: StageBatch, finished: Finished) -> None:
        """Run every sub-agent of ``batch`` and report each result once (one that could not run at all
        gets a ``failed`` result saying why). Cancellation stops the runs and propagates."""
        ...


def placement_failure(batch: StageBatch, run: PlacedRun, error: str, error_type: str) -> SubagentResult:
    """The result of a placed sub-agent that could not run (or finish) where it was placed."""
    now = time.time() - batch.epoch
    return SubagentResult(
        agent_id=run.agent_id,
        name=run.definition.name,
        task=run.task,
        status=AgentStatus.FAILED,
        error=error,
        error_type=error_type,
        started=now,
        ended=now,
        model=run.definition.model or batch.default_model,
        step_cap=run.step_cap,
    )


async def run_batch(
    batch: StageBatch,
    backends: Mapping[str, ModelBackend],
    tools: ToolRegistry,
    finished: Finished,
    *,
    limit: ConcurrencyLimit,
    telemetry: Telemetry | None = None,
) -> None:
    """Run a placed batch in this process: the same sub-agent loop and fan-out as the engine's, under
    ``limit`` (the sub-agent cap every batch placed here shares, ``batch.max_concurrency`` wide; a
    cluster's leases its slots from the cluster's pool). A run whose model or granted tools do not exist
    here fails with that reason."""
    epoch = batch.epoch

    def clock() -> float:
        return time.time() - epoch

    tel = telemetry or Telemetry()
    available = tools.resolve(tools.names)
    runtimes: dict[str, SubagentRuntime] = {}
    runs: list[SubagentRun] = []
    for p in batch.runs:
        model = p.definition.model or batch.default_model
        backend = backends.get(model)
        missing = [t for t in p.definition.tools if t not in available]
        if backend is None or missing:
            why = (
                f"model {model!r} has no backend where the sub-agent was placed (there: {sorted(backends)})"
                if backend is None
                else f"tools {missing} do not exist where the sub-agent was placed; give the placement's kit them"
            )
            finished(p.agent_id, placement_failure(batch, p, why, ErrorType.PLACEMENT))
            continue
        rt = runtimes.get(model)
        if rt is None:
            rt = runtimes[model] = SubagentRuntime(
                backend=backend,
                tools=available,
                telemetry=tel,
                episode_id=batch.episode_id,
                sampling=batch.sampling,
                clock=clock,
                workspace=batch.workspace,
                max_malformed=batch.max_malformed,
                max_completion_tokens=batch.max_completion_tokens,
            )
        runs.append(
            SubagentRun(
                p.definition,
                p.task,
                p.agent_id,
                batch.stage,
                p.step_cap,
                p.timeout_s,
                rt,
                wall_deadline=p.wall_deadline,
            )
        )
    await run_subagents(runs, limit.limiter(batch.max_concurrency), lambda r, res: finished(r.agent_id, res))


def kit_registry(kit: SubagentKit) -> tuple[dict[str, ModelBackend], ToolRegistry]:
    """Backends by model name and a tool registry from a kit."""
    backends, tools = kit
    return dict(backends), tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
