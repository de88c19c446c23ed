"""Where an episode's time went: engine start, prefill, decode, queueing and the runtime's own time.

A pure function of an :class:`~agent_swarm.swarm.records.EpisodeRecord`: each step's model call carries the
:class:`~agent_swarm.swarm.backend.Timings` its backend measured (``None`` for backends that measure nothing,
and in records written before they existed), and this module sums them per episode for
``swarm traces show`` and the benchmarks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from agent_swarm.swarm.backend import TimeParts, Timings
from agent_swarm.swarm.records import EpisodeRecord, StepRecord

__all__ = ["EpisodeTimings", "episode_timings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeTimings(TimeParts):
    """One episode's time, in seconds, and tokens.

    The model-call figures (the :class:`~agent_swarm.swarm.backend.TimeParts`, and ``model_s``, the calls'
    ``call_s``) are sums over every measured call (orchestrator and sub-agents: calls that ran in
    parallel add up, so ``prefill_s + decode_s`` can exceed ``wall_s``). ``startup_s``,
    ``hash_check_s`` and ``model_load_s`` are the longest engine start's (the first call's, in the
    process that started it). ``runtime_s`` is the part of the wall time in which no model call and
    no tool call was in flight: prompt building, admission, scheduling and records, the runtime's
    own time.
    """

    wall_s: float
    calls: int
    measured_calls: int
    model_s: float = 0.0
    runtime_s: float = 0.0

    @property
    def prefill_tok_s(self) -> float:
        return self.prefill_tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tok_s(self) -> float:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else 0.0


def _steps(record: EpisodeRecord) -> Iterator[StepRecord]:
    for stage in record.stages:
        yield from stage.orchestrator_steps
        for sub in stage.subagents:
            yield from sub.step_records


def _busy(record: EpisodeRecord) -> float:
    """Seconds of the episode covered by at least one step (a model call, and a sub-agent's tool
    calls) or one direct tool call."""
    spans = [(s.started, s.ended) for s in _steps(record)]
    spans += [(r.started, r.ended) for stage in record.stages for r in stage.tool_results]
    covered, reach = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= reach:
            continue
        covered += b - max(a, reach)
        reach = b
    return covered


def episode_timings(record: EpisodeRecord) -> EpisodeTimings:
    """The time breakdown of one episode (see :class:`EpisodeTimings`)."""
    steps = list(_steps(record))
    measured: list[Timings] = [s.timings for s in steps if s.timings is not None]
    return EpisodeTimings(
        wall_s=record.wall_time_s,
        calls=len(steps),
        measured_calls=len(measured),
        startup_s=max((t.startup_s for t in measured), default=0.0),
        hash_check_s=max((t.hash_check_s for t in measured), default=0.0),
        model_load_s=max((t.model_load_s for t in measured), default=0.0),
        queue_s=sum(t.queue_s for t in measured),
        prefill_tokens=sum(t.prefill_tokens for t in measured),
        cached_tokens=sum(t.cached_tokens for t in measured),
        restored_tokens=sum(t.restored_tokens for t in measured),
        prefill_s=sum(t.prefill_s for t in measured),
        decode_tokens=sum(t.decode_tokens for t in measured),
        decode_s=sum(t.decode_s for t in measured),
        model_s=sum(t.call_s for t in measured),
        runtime_s=max(0.0, record.wall_time_s - _busy(record)),
    )
