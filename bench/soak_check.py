"""The soak's checks (``bench/soak.py --check``), as functions of what the run left on disk.

Each check compares two records that do not depend on each other: the fault server's own request log
(one line per request, with the episode's seed, the worker's item, the fault drawn) against what the
rollout wrote (episodes.jsonl, failures.jsonl) and what the probe sampled inside the rollout process.
Nothing is excused by a time window: an exception is excused only by a named cause, and the excuse is
reported with it (``kill -9 #2 at +57s``, ``the final SIGINT at +120s``, ``its sub-agent timed out``).

* **Episodes, per id.** Every episode the server saw is recorded exactly once (episodes.jsonl, or
  failures.jsonl with a reason), or its last request came in a process that a kill or the final
  SIGINT stopped. A resumed process starts the unrecorded episodes in task-file order, at most
  ``concurrent`` at a time: an unrecorded episode that a later process overtook (it started
  ``concurrent`` or more episodes after it in the file, and never this one) was dropped on resume.
  A recorded episode the server never saw is a problem too.
* **Retries, per fault.** A retryable fault (500, 429, non-JSON body, hang) whose request body never
  came again is excused only when that body had come ``max_retries + 1`` times (the retries ran out),
  when the process that got the fault stopped before recording its episode (the stop is named; which
  process recorded an episode is read from its record's start time), or when the record says the agent
  that made the call was cut (its sub-agent timed out or was cancelled, or the episode did).
* **Statuses.** Episodes that did not complete, and sub-agents that failed, are at most what the
  planted fault rates allow: a call fails only when every attempt drew a retryable fault
  (``q ** (max_retries + 1)``), an episode when one of its orchestrator calls did; the bound is that
  expectation plus three standard deviations, plus one.
* **Flat resources.** In each process, after ``settle_s``: no task kind and no fd count whose floor in
  the last third of the samples is above its peak in the first third by more than what in-flight work
  explains (``concurrent`` episodes for a task kind, ``FD_SLACK`` for fds, judged in processes with
  ``FD_MIN_THIRD`` samples per third), and no task kind that never fell and rose by ``RISE`` or more: a
  leak grows the floor. A kind that fell by more than half a
  stage's width (``fanout``) between two samples of the run is a stage's sub-agents (one task each,
  ending as they finish): its count is where a stage stood when sampled, 0 to ``concurrent`` × ``fanout``,
  and says nothing of a leak (three samples in a stage's tail, then three in the next stage's middle,
  would read as growth); such a kind is named in the report, not judged. A leaked task of that kind
  would hold its stage's task group, and so its episode, open: the episode check sees that. RSS's
  least-squares slope after ``warmup_s`` is at most ``rss_slope_max`` MB/min, in processes that ran at
  least ``rss_min_minutes`` after warm-up (shorter ones are reported as unchecked).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

Key = tuple[str, int]
RETRYABLE = ("500", "429", "body", "hang")
FD_SLACK = 4
FD_MIN_THIRD = 5
"""Settled samples per third a process needs before its fds are judged: they follow the connections in
flight and swing by 10-20 between two samples of a 1,024-wide soak (2026-11-28: 16-50 in one process), so
three samples against three, FD_SLACK apart, are a coin with a few percent of false alarms per process."""
RISE = 2


@dataclass
class Lives:
    """The rollout processes on the server's clock: which one a request came in, and what stopped each."""

    starts: list[float]
    ends: list[float]
    how: list[str]
    names: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, start: float, lifetimes: list[dict[str, Any]]) -> Lives:
        lives = cls([start + x["started"] for x in lifetimes], [start + x["ended"] for x in lifetimes], [])
        kills = 0
        for x in lifetimes:
            lives.how.append(x["stopped_by"])
            if x["stopped_by"].startswith("kill -9"):
                kills += 1
                lives.names.append(f"kill -9 #{kills} at +{x['ended']:.0f}s")
            elif x["stopped_by"].startswith("SIGINT"):
                lives.names.append(f"the final SIGINT at +{x['ended']:.0f}s")
            else:
                lives.names.append(f"its own exit at +{x['ended']:.0f}s")
        return lives

    def at(self, t: float) -> int:
        return max(0, bisect.bisect_right(self.starts, t) - 1)

    def stopped(self, i: int) -> bool:
        return self.how[i].startswith(("kill -9", "SIGINT"))


@dataclass
class Ledger:
    """Per episode (task id, sample index): the processes its requests came in, and its file order."""

    order: dict[Key, int]
    lives_of: dict[Key, set[int]]
    seed_of: dict[int, Key]

    @classmethod
    def of(cls, reqs: list[dict[str, Any]], seed_of: dict[int, Key], order: dict[Key, int], lives: Lives) -> Ledger:
        lives_of: dict[Key, set[int]] = defaultdict(set)
        for r in reqs:
            key = seed_of.get(r.get("seed"))  # type: ignore[arg-type]
            if key is not None:
                lives_of[key].add(lives.at(r["t"]))
        return cls(order, dict(lives_of), seed_of)


def check_episodes(
    ledger: Ledger, lives: Lives, entries: list[Key], failed: set[Key], concurrent: int
) -> tuple[list[str], list[dict[str, Any]]]:
    """Lost, dropped-on-resume, duplicated and phantom episodes; the excused ones with their stop."""
    problems: list[str] = []
    excused: list[dict[str, Any]] = []
    counts = Counter(entries)
    dupes = sorted(k for k, n in counts.items() if n > 1)
    if dupes:
        problems.append(f"{len(dupes)} episodes were written twice, e.g. {dupes[:3]}")
    recorded = set(counts) | failed
    phantom = sorted(k for k in recorded if k not in ledger.lives_of)
    if phantom:
        problems.append(f"{len(phantom)} recorded episodes never reached the server, e.g. {phantom[:3]}")
    started_in: dict[int, list[int]] = defaultdict(list)  # process -> file positions of episodes it ran
    for key, ls in ledger.lives_of.items():
        for i in ls:
            started_in[i].append(ledger.order[key])
    dropped, lost = [], []
    for key, pos in sorted(ledger.order.items(), key=lambda kv: kv[1]):
        if key in recorded:
            continue
        ls = ledger.lives_of.get(key, set())
        last = max(ls, default=-1)
        overtaken = [i for i in range(last + 1, len(lives.how)) if sum(p > pos for p in started_in[i]) >= concurrent]
        if overtaken:
            dropped.append((key, lives.names[overtaken[0]]))
        elif last >= 0 and not lives.stopped(last):
            lost.append(key)
        elif last >= 0:
            excused.append({"episode": list(key), "cut_by": lives.names[last]})
    if dropped:
        problems.append(
            f"{len(dropped)} unrecorded episodes were skipped by a later process that ran episodes after them "
            f"(dropped on resume), e.g. {dropped[:3]}"
        )
    if lost:
        problems.append(
            f"{len(lost)} episodes started in a process that exited by itself were never recorded: {lost[:3]}"
        )
    return problems, excused


def _cut_agent(record: Any, req: dict[str, Any]) -> str | None:
    """Why the record excuses a call of this request's agent that was never retried, if it does."""
    cut = {"timeout", "cancelled"}
    if record.status.value in cut:
        return f"its episode ended {record.status.value}"
    if req["k"] == "s" and req.get("i") is not None:
        mine = [s for s in record.subagent_results if s.task.startswith(f"item {req['i']}:")]
        if mine and all(s.status.value in cut for s in mine):
            return f"its sub-agent (item {req['i']}) ended {mine[-1].status.value}"
    return None


def check_retries(
    reqs: list[dict[str, Any]], ledger: Ledger, lives: Lives, recorded_by: dict[tuple[Key, int], Any], retries: int
) -> tuple[list[str], list[dict[str, Any]], dict[str, Any]]:
    """Retryable faults never retried, and the named cause of each excused one. ``recorded_by``: the
    record of each episode by the process that wrote it (episodes.jsonl, or failures.jsonl with one)."""
    by_hash: dict[str, list[float]] = defaultdict(list)
    for r in reqs:
        by_hash[r["h"]].append(r["t"])
    unretried = [r for r in reqs if r["f"] in RETRYABLE and not any(t > r["t"] for t in by_hash[r["h"]])]
    excused: list[dict[str, Any]] = []
    bad: list[dict[str, Any]] = []
    for r in unretried:
        key = ledger.seed_of.get(r.get("seed"))  # type: ignore[arg-type]
        life = lives.at(r["t"])
        why: str | None = None
        if len(by_hash[r["h"]]) > retries:
            why = f"its call gave up after {len(by_hash[r['h']])} attempts (the retries ran out)"
        elif key is not None and (key, life) in recorded_by:
            why = _cut_agent(recorded_by[key, life], r)
        elif key is not None and lives.stopped(life):
            why = lives.names[life]  # the process stopped before it recorded the episode
        (excused if why else bad).append({**r, "excused_by": why} if why else r)
    problems = [f"{len(bad)} retryable faults were never retried (e.g. {bad[0]})"] if bad else []
    kinds = Counter(r["f"] for r in reqs if r["f"] in RETRYABLE)
    gone = Counter(r["f"] for r in unretried)
    figures = {
        "retryable_faults": sum(kinds.values()),
        "retried": sum(kinds.values()) - len(unretried),
        "by_kind": {k: {"injected": kinds.get(k, 0), "retried": kinds.get(k, 0) - gone.get(k, 0)} for k in RETRYABLE},
        "unretried_excused_by": dict(Counter(str(e["excused_by"]).split(" at +")[0] for e in excused)),
    }
    return problems, excused, figures


def status_bound(n: int, calls_each: int, q: float, retries: int) -> int:
    """How many of ``n`` agents making ``calls_each`` model calls may fail when each attempt draws a
    retryable fault with probability ``q`` and a call gives up after ``retries`` retries: the
    expectation plus three standard deviations, plus one."""
    p = 1 - (1 - q ** (retries + 1)) ** calls_each
    mean = n * p
    return math.floor(mean + 3 * math.sqrt(mean * (1 - p)) + 1)


def check_statuses(
    records: list[Any], q: float, retries: int, orchestrator_calls: int, subagent_calls: int
) -> tuple[list[str], dict[str, Any]]:
    """Episodes not completed and sub-agents failed, against what the fault rates allow."""
    problems: list[str] = []
    statuses = Counter(r.status.value for r in records)
    not_done = len(records) - statuses.get("completed", 0)
    allowed = status_bound(len(records), orchestrator_calls, q, retries)
    if not_done > allowed:
        problems.append(
            f"{not_done} of {len(records)} episodes did not complete ({dict(statuses)}); "
            f"the fault rates allow {allowed}"
        )
    subs = [s for r in records for s in r.subagent_results]
    failed = sum(1 for s in subs if s.status.value == "failed")
    allowed_subs = status_bound(len(subs), subagent_calls, q, retries)
    if failed > allowed_subs:
        problems.append(f"{failed} of {len(subs)} sub-agents failed; the fault rates allow {allowed_subs}")
    return problems, {
        "episodes_not_completed": not_done,
        "allowed": allowed,
        "subagents_failed": failed,
        "subagents_allowed": allowed_subs,
    }


def _grows(values: list[float], slack: float, monotone: bool = True) -> tuple[float, float] | None:
    """(before, after) when the series grew: its floor in the last third is more than ``slack`` above its
    peak in the first third, or it never fell and rose by ``RISE`` or more (what one task left behind per
    episode looks like in a process that runs only a few episodes)."""
    third = len(values) // 3
    if third < 2:
        return None
    early, late = max(values[:third]), min(values[-third:])
    if late > early + slack:
        return early, late
    never_fell = monotone and all(b >= a for a, b in itertools.pairwise(values))
    return (values[0], values[-1]) if never_fell and values[-1] - values[0] >= RISE else None


def fan_out_kinds(per_life: list[list[dict[str, Any]]], fanout: int) -> set[str]:
    """Task kinds that fell by more than ``fanout / 2`` between two consecutive samples of one process:
    a stage's sub-agents finishing. A leaked kind never falls that far, its tasks do not end."""
    kinds: set[str] = set()
    for samples in per_life:
        for a, b in itertools.pairwise(samples):
            kinds |= {k for k, v in a["by_kind"].items() if v - b["by_kind"].get(k, 0) > fanout / 2}
    return kinds


def check_resources(
    per_life: list[list[dict[str, Any]]],
    settle_s: float,
    warmup_s: float,
    rss_slope_max: float,
    rss_min_minutes: float,
    slope: Any,
    concurrent: int,
    fanout: int,
) -> tuple[list[str], list[dict[str, Any]]]:
    """Tasks by kind and fds flat per process after ``settle_s`` (a kind one per episode may differ by
    ``concurrent`` between two moments; fds by ``FD_SLACK``, connections opening and closing; a stage's
    sub-agents, :func:`fan_out_kinds`, are not judged); RSS slope bounded after ``warmup_s``."""
    problems: list[str] = []
    rows: list[dict[str, Any]] = []
    fan_out = fan_out_kinds(per_life, fanout)
    for n, samples in enumerate(per_life):
        settled = [s for s in samples if s["up_s"] >= settle_s]
        kinds = sorted({k for s in settled for k in s["by_kind"]} - fan_out)
        grew = {k: g for k in kinds if (g := _grows([s["by_kind"].get(k, 0) for s in settled], concurrent))}
        if grew:
            problems.append(f"process {n}: tasks kept growing (kind: first-third peak, last-third floor): {grew}")
        fds_judged = len(settled) // 3 >= FD_MIN_THIRD
        fds = _grows([s["fds"] for s in settled], FD_SLACK, monotone=False) if fds_judged else None  # connections
        if fds:
            problems.append(f"process {n}: open fds kept growing (first-third peak, last-third floor): {fds}")
        warm = [(s["up_s"], s["rss_mb"]) for s in samples if s["up_s"] >= warmup_s]
        span = (warm[-1][0] - warm[0][0]) / 60 if len(warm) > 1 else 0.0
        rss = slope(warm) if span >= rss_min_minutes else None
        if rss is not None and rss > rss_slope_max:
            problems.append(
                f"process {n}: RSS grew {rss:.2f} MB/min over {span:.1f} min after warm-up (bound {rss_slope_max})"
            )
        rows.append(
            {
                "process": n,
                "settled_samples": len(settled),
                "fan_out_kinds_not_judged": sorted(fan_out & {k for s in settled for k in s["by_kind"]}),
                "fds_judged": fds_judged,
                "rss_slope_checked_over_min": round(span, 1) if rss is not None else None,
            }
        )
    return problems, rows
