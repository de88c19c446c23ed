"""Collapse monitors: pure functions of an :class:`~agent_swarm.swarm.records.EpisodeRecord` that catch a swarm
going wrong.

* **serial collapse**: a task that declares several independent parts (``metadata["parts"] >= 2``)
  done one sub-agent per stage, or with no fan-out at all;
* **spurious parallelism**: sub-tasks of a stage that repeat or only reword one another, completed
  sub-agents whose findings the answer never uses, stages wider than the task's parts;
* **finish rate**: completed sub-agents / sub-agents run;
* **straggler ratio**: per stage of two or more sub-agents, the slowest one's steps over the stage's
  median; the episode's is the largest.

The engine records them on every episode (``EpisodeRecord.monitors``) and on its span
(:func:`monitor_attributes`); a training step logs their means (:func:`summarise_monitors`); ``swarm
run``'s live view shows them after each stage (:func:`stage_monitors` over the stages so far).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Protocol

from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.records import AgentStatus, EpisodeRecord, MonitorReport, SubagentResult, Task
from agent_swarm.swarm.rl.rewards import task_parts
from agent_swarm.swarm.subtasks import content_words, task_content, words

__all__ = [
    "LOW_FINISH_RATE",
    "REPORTS_CHECKED",
    "STRAGGLER_RATIO",
    "StageLike",
    "declared_parts",
    "duplicate_tasks",
    "episode_monitors",
    "monitor_attributes",
    "stage_monitors",
    "straggler_ratio",
    "summarise_monitors",
    "unused_reports",
]

STRAGGLER_RATIO = 2.0
"""A stage whose slowest sub-agent took at least this many times the median steps has a straggler."""
LOW_FINISH_RATE = 0.5
"""Below this share of completed sub-agents, the episode's finish rate is flagged."""
REPORTS_CHECKED = 64
"""Reports read per episode for unused findings: all of them up to this many completed sub-agents, an
evenly spaced sample of this many above (the count scaled). Monitors run on every episode: reading
every report of a 1,000-wide episode cost 6 % of the runtime's CPU in bench_runtime's realistic workload."""


class StageLike(Protocol):
    """A stage as the monitors read it: its sub-agents' results (a :class:`~agent_swarm.swarm.records.StageRecord`,
    or the live view's stage of finished sub-agents)."""

    @property
    def subagents(self) -> Sequence[SubagentResult]: ...


def duplicate_tasks(stage: StageLike) -> int:
    """Sub-tasks of ``stage`` that repeat an earlier sub-task of it: the same content words (case,
    punctuation, word order and filler words aside)."""
    seen: set[frozenset[str]] = set()
    dup = 0
    for r in stage.subagents:
        key = task_content(r.task)
        if key and key in seen:
            dup += 1
        seen.add(key)
    return dup


def _findings(r: SubagentResult, prompt_words: frozenset[str]) -> frozenset[str]:
    """What a report says that its task and the episode's prompt did not: its new content words
    (numbers of any length, other words of three letters or more)."""
    new = content_words(r.report) - prompt_words - task_content(r.task)
    return frozenset(w for w in new if len(w) >= 3 or w.isdigit())


def unused_reports(record: EpisodeRecord, *, limit: int | None = REPORTS_CHECKED) -> tuple[int, int]:
    """(completed sub-agents none of whose findings (see :func:`_findings`) appear in the answer,
    completed sub-agents checked); (0, 0) when the episode has no answer.

    Above ``limit`` completed sub-agents, an evenly spaced sample of ``limit`` is checked and the
    count scaled to all of them (``None``: check every one)."""
    if not record.answer:
        return 0, 0
    done = [r for r in record.subagent_results if r.status is AgentStatus.COMPLETED]
    sample = done if limit is None or len(done) <= limit else [done[i * len(done) // limit] for i in range(limit)]
    if not sample:
        return 0, 0
    prompt = content_words(record.task.prompt)
    # The answer's words a finding could be, computed once; each report then costs one tokenisation.
    answer = frozenset(w for w in content_words(record.answer) - prompt if len(w) >= 3 or w.isdigit())
    unused = 0
    for r in sample:
        task = task_content(r.task)
        if not any(w in answer and w not in task for w in words(r.report)):
            unused += bool(_findings(r, prompt))
    return round(unused * len(done) / len(sample)), len(sample)


def straggler_ratio(stages: Iterable[StageLike]) -> float | None:
    """The largest slowest-over-median steps ratio over stages of two or more sub-agents (``None``
    when there is none); a median of 0 steps counts as 1."""
    best: float | None = None
    for s in stages:
        if len(s.subagents) < 2:
            continue
        steps = [r.steps for r in s.subagents]
        ratio = max(steps) / max(statistics.median(steps), 1.0)
        best = ratio if best is None else max(best, ratio)
    return best


def declared_parts(task: Task) -> int | None:
    """The independent parts ``task`` declares (``metadata["parts"]``), ``None`` when it declares none
    or a malformed number (the reward says so; monitors have nothing to judge against)."""
    try:
        return task_parts(task)
    except ConfigError:
        return None


def episode_monitors(record: EpisodeRecord) -> MonitorReport:
    """Every monitor of ``record`` (see the module docstring)."""
    unused, checked = unused_reports(record)
    return stage_monitors(record.stages, declared_parts(record.task), unused=unused, reports_checked=checked)


def stage_monitors(
    stages: Sequence[StageLike], parts: int | None, *, unused: int = 0, reports_checked: int = 0
) -> MonitorReport:
    """The monitors of ``stages`` on a task of ``parts`` parts. During a run (the stages finished so
    far, no answer yet: ``unused`` reports unknown, 0) ``serial_collapse`` means *so far*: a wider stage
    may still come. :func:`episode_monitors` calls this on the whole record."""
    widths = [len(s.subagents) for s in stages]
    subs = [r for s in stages for r in s.subagents]
    max_width = max(widths, default=0)
    serial = None if parts is None or parts < 2 else max_width <= 1
    dup = sum(duplicate_tasks(s) for s in stages)
    over = sum(1 for w in widths if parts is not None and w > parts)
    finish = sum(r.status is AgentStatus.COMPLETED for r in subs) / len(subs) if subs else None
    straggler = straggler_ratio(stages)
    spurious = bool(dup or unused or over)
    flags = [
        name
        for name, fired in (
            ("serial_collapse", serial is True),
            ("spurious_parallelism", spurious),
            ("stragglers", straggler is not None and straggler >= STRAGGLER_RATIO),
            ("low_finish_rate", finish is not None and finish < LOW_FINISH_RATE),
        )
        if fired
    ]
    return MonitorReport(
        parts=parts,
        subagents=len(subs),
        max_width=max_width,
        serial_collapse=serial,
        duplicate_tasks=dup,
        unused_reports=unused,
        reports_checked=reports_checked,
        over_width_stages=over,
        spurious_parallelism=spurious,
        finish_rate=finish,
        straggler_ratio=straggler,
        flags=tuple(flags),
    )


def monitor_attributes(m: MonitorReport) -> dict[str, bool | int | float | str]:
    """``m`` as span attributes (``swarm.monitor.*``; measures that do not apply are left out)."""
    out: dict[str, bool | int | float | str] = {
        "swarm.monitor.spurious_parallelism": m.spurious_parallelism,
        "swarm.monitor.duplicate_tasks": m.duplicate_tasks,
        "swarm.monitor.unused_reports": m.unused_reports,
        "swarm.monitor.over_width_stages": m.over_width_stages,
        "swarm.monitor.flags": ",".join(m.flags),
    }
    if m.serial_collapse is not None:
        out["swarm.monitor.serial_collapse"] = m.serial_collapse
    if m.finish_rate is not None:
        out["swarm.monitor.finish_rate"] = m.finish_rate
    if m.straggler_ratio is not None:
        out["swarm.monitor.straggler_ratio"] = m.straggler_ratio
    return out


def summarise_monitors(records: Sequence[EpisodeRecord]) -> dict[str, float]:
    """Means over ``records`` (a training or rollout step): the share of episodes each flag fired on
    (``serial_collapse`` over episodes with parts), mean finish rate and straggler ratio over the
    episodes where they apply, and the largest straggler ratio. Records without monitors are measured
    here."""
    reports = [r.monitors or episode_monitors(r) for r in records]
    out: dict[str, float] = {}
    judged = [m.serial_collapse for m in reports if m.serial_collapse is not None]
    if judged:
        out["serial_collapse"] = sum(judged) / len(judged)
    if reports:
        out["spurious_parallelism"] = sum(m.spurious_parallelism for m in reports) / len(reports)
        out["duplicate_tasks"] = sum(m.duplicate_tasks for m in reports) / len(reports)
        out["unused_reports"] = sum(m.unused_reports for m in reports) / len(reports)
    finish = [m.finish_rate for m in reports if m.finish_rate is not None]
    if finish:
        out["finish_rate"] = sum(finish) / len(finish)
    ratios = [m.straggler_ratio for m in reports if m.straggler_ratio is not None]
    if ratios:
        out["straggler_ratio"] = sum(ratios) / len(ratios)
        out["straggler_ratio_max"] = max(ratios)
    return out
