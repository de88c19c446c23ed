"""Straggler hedging (opt-in, ``SwarmConfig.hedge``): a stage need not wait for its slowest sub-agents.

* ``quorum``: the stage ends once ``ceil(quorum * n)`` of its ``n`` sub-agents have finished;
* ``straggler_factor``: once ``min_finished`` of them have finished, a sub-agent still running after
  ``straggler_factor`` times their median wall time is a straggler, and is cut;
* ``backup``: a straggler is not cut but copied: a backup of it (same type, task, step cap and share;
  frozen sub-agents make the copy safe) starts beside it, the first of the two to finish is the
  call's result and the other is cancelled.

A cut sub-agent is recorded ``cancelled`` with its partial report and ``error_type`` ``Hedged``; the
orchestrator sees that report like any unfinished sub-agent's. The stage did not wait for it, so its
steps are not among the stage's critical steps (the engine and :mod:`agent_swarm.swarm.dag` leave hedged
sub-agents out of the longest path): a stage's critical steps are those of the sub-agents it waited for.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskGroup

from agent_swarm.subagents.loop import SubagentRun, run_subagents
from agent_swarm.swarm.config import Hedge
from agent_swarm.swarm.errors import ErrorType
from agent_swarm.swarm.limits import Limiter
from agent_swarm.swarm.records import AgentStatus, SubagentResult

__all__ = ["run_hedged"]

Finished = Callable[[SubagentRun, SubagentResult], None]


@dataclass(slots=True)
class _Stage:
    """One hedged stage: each call's runs (the original, then its backup) until one of them wins."""

    hedge: Hedge
    finished: Finished
    discarded: Finished
    clock: Callable[[], float]
    n: int
    pending: dict[str, list[SubagentRun]] = field(default_factory=dict)  # original agent id -> its runs
    owner: dict[str, str] = field(default_factory=dict)  # any run's agent id -> its original's
    durations: list[float] = field(default_factory=list)
    reported: set[str] = field(default_factory=set)
    backed: set[str] = field(default_factory=set)
    wake: anyio.Event = field(default_factory=anyio.Event)

    def done(self, run: SubagentRun, result: SubagentResult) -> None:
        """A run ended on its own: the first of its call wins, a sibling still running is cancelled."""
        if run.agent_id in self.reported:
            return  # it was cut (or lost) while finishing: already recorded
        self.reported.add(run.agent_id)
        key = self.owner[run.agent_id]
        group = self.pending.pop(key, None)
        if group is None:
            self.discarded(run, result)
            return
        self.durations.append(max(result.ended - result.started, 0.0))
        self.finished(group[0], result)
        for other in group:
            if other is not run:
                self._cut(other, "a copy of it finished first", self.discarded)
        self.wake.set()

    def _cut(self, run: SubagentRun, why: str, report: Finished) -> None:
        if run.agent_id in self.reported:
            return
        self.reported.add(run.agent_id)
        report(run, run.result(AgentStatus.CANCELLED, error=f"cut by hedging: {why}", error_type=ErrorType.HEDGED))
        run.cut()

    def cut_group(self, key: str, why: str) -> None:
        """End a call's runs unfinished: the original is the call's result, its backup a discarded run."""
        group = self.pending.pop(key)
        self._cut(group[0], why, self.finished)
        for other in group[1:]:
            self._cut(other, why, self.discarded)

    def quorum_met(self) -> bool:
        q = self.hedge.quorum
        return q is not None and self.n - len(self.pending) >= math.ceil(q * self.n)

    def stragglers(self) -> tuple[list[str], float]:
        """The calls whose runs are stragglers now, and how long until the next one becomes one."""
        factor = self.hedge.straggler_factor
        if factor is None or len(self.durations) < max(1, math.ceil(self.hedge.min_finished * self.n)):
            return [], math.inf
        limit = factor * max(statistics.median(self.durations), 1e-3)
        now, due, soonest = self.clock(), [], math.inf
        for key, group in self.pending.items():
            run = group[0]
            if not run.started:
                continue  # still waiting for a slot: not slow yet
            left = run.started + limit - now
            if left <= 0:
                due.append(key)
            else:
                soonest = min(soonest, left)
        return due, soonest


async def run_hedged(
    runs: Sequence[SubagentRun],
    limiter: Limiter,
    finished: Finished,
    started: Callable[[SubagentRun], None] | None,
    hedge: Hedge,
    *,
    discarded: Finished,
    clock: Callable[[], float],
) -> None:
    """:func:`agent_swarm.subagents.loop.run_subagents` for a stage that may stop waiting for stragglers.

    ``finished`` gets exactly one result per run of ``runs`` (passed with the original run, also when
    its backup won); ``discarded`` gets the losing or cut backups. ``clock``: the clock of the runs'
    ``started``/``ended`` times (the episode's).
    """
    st = _Stage(hedge=hedge, finished=finished, discarded=discarded, clock=clock, n=len(runs))
    for run in runs:
        run.scope = anyio.CancelScope()  # what SubagentRun.cut cancels
        st.pending[run.agent_id] = [run]
        st.owner[run.agent_id] = run.agent_id
    backups: list[SubagentRun] = []
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_watch, st, tg, limiter, started, backups)
            await run_subagents(runs, limiter, st.done, started)
    except anyio.get_cancelled_exc_class():
        for b in backups:  # the engine records the originals; the backups are recorded here
            if b.agent_id not in st.reported:
                st.reported.add(b.agent_id)
                discarded(b, b.result(AgentStatus.CANCELLED, error="cancelled with the episode"))
        raise


async def _watch(
    st: _Stage,
    tg: TaskGroup,
    limiter: Limiter,
    started: Callable[[SubagentRun], None] | None,
    backups: list[SubagentRun],
) -> None:
    """Cut or back up stragglers as the stage's runs finish, until every call has a result."""
    while st.pending:
        if st.quorum_met():
            for key in list(st.pending):
                st.cut_group(key, f"the stage's quorum of {st.hedge.quorum:g} had finished")
            return
        due, wait = st.stragglers()
        for key in due:
            if st.hedge.backup and key not in st.backed:
                st.backed.add(key)
                backup = _copy(st.pending[key][0])
                st.pending[key].append(backup)
                st.owner[backup.agent_id] = key
                backups.append(backup)
                tg.start_soon(run_subagents, [backup], limiter, st.done, started)
            elif not st.hedge.backup:
                st.cut_group(key, f"it ran past {st.hedge.straggler_factor:g}x the median wall time of its stage")
        if not st.pending:
            return
        with anyio.move_on_after(wait if math.isfinite(wait) else None):
            await st.wake.wait()
        st.wake = anyio.Event()


def _copy(run: SubagentRun) -> SubagentRun:
    """A fresh run of the same sub-agent on the same task (a backup)."""
    copy = SubagentRun(
        definition=run.definition,
        task=run.task,
        agent_id=f"{run.agent_id}-b",
        stage=run.stage,
        step_cap=run.step_cap,
        timeout_s=run.timeout_s,
        rt=run.rt,
        index=run.index,
        width=run.width,
        budget=run.budget,  # the copy spends from the same share: together they stay within it
        wall_deadline=run.wall_deadline,
    )
    copy.scope = anyio.CancelScope()  # what SubagentRun.cut cancels
    return copy
