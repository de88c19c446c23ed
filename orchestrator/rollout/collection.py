"""Rollout collection: K episodes per task, PARL rewards, group advantages, trajectories on disk.

The driver: it hands jobs to an executor (:mod:`agent_swarm.orchestrator.rollout.executors`), takes each outcome back
(:mod:`agent_swarm.orchestrator.rollout.episodes`), and alone writes the run's files and resumes it.

::

    summary = await collect_rollouts(
        tasks, orchestrator_factory(backend, tools=[...]), out_dir=Path("runs/r1"),
        config=RolloutConfig(group_size=8, max_concurrent_episodes=16),
        reward=PARLReward(RewardConfig(), step=trainer_step),
    )

Every (task, sample) pair runs once, concurrently under a global episode limit, each sample with
its own sampling seed (derived from the run seed, the task id and the sample index, so a resumed
run uses the same seeds). The output directory holds:

* ``episodes.jsonl`` — one :class:`~agent_swarm.orchestrator.rollout.episodes.EpisodeEntry` per finished episode
  (the full record, every ending included); a re-run into the same directory skips these (*resume*);
* ``trajectories.jsonl`` — one :class:`~agent_swarm.swarm.rl.trajectory.Trajectory` per episode, written when its
  whole group is in, with the advantage of ``RolloutConfig.advantage`` (default ``r − group mean``);
* ``failures.jsonl`` — episodes the runtime crashed on and episodes that failed from infrastructure
  (their model server was unreachable, kept answering errors or timing out — see
  :func:`~agent_swarm.orchestrator.rollout.episodes.infrastructure_failure`; the full record is kept), both
  retried on resume; and episodes that could not become trajectories (no token ids, drift: kept as
  episodes, not retried);
* ``manifest.json`` — group size and seed (a resume with different ones is refused);
* ``summary.json`` — :class:`RolloutSummary` over everything in the directory.

Writes are append-only and atomic per record, so an interrupted run loses at most the episodes that
were still running.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agent_swarm.orchestrator.engine import RewardFn
from agent_swarm.orchestrator.rollout.config import RolloutConfig
from agent_swarm.orchestrator.rollout.episodes import (
    EpisodeDigest,
    EpisodeEntry,
    EpisodeFactory,
    EpisodeJob,
    EpisodeOutcome,
    PreparedEpisode,
    RolloutFailure,
    episode_seed,
    infrastructure_failure,
    prepare_episode,
)
from agent_swarm.orchestrator.rollout.executors import EpisodeBatch, EpisodeRunner, LocalExecutor, RolloutExecutor
from agent_swarm.orchestrator.tasks import TaskProblem
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import ConfigError, ErrorType
from agent_swarm.swarm.records import EpisodeRecord, Task
from agent_swarm.swarm.rl.export import JsonlProblem, JsonlWriter, iter_jsonl
from agent_swarm.swarm.rl.rewards import ADVANTAGES, PARLReward
from agent_swarm.swarm.rl.trajectory import Trajectory

__all__ = [
    "EPISODES",
    "FAILURES",
    "MANIFEST",
    "SUMMARY",
    "TRAJECTORIES",
    "RolloutProgress",
    "RolloutSummary",
    "collect_rollouts",
]


EPISODES = "episodes.jsonl"
TRAJECTORIES = "trajectories.jsonl"
FAILURES = "failures.jsonl"
MANIFEST = "manifest.json"
SUMMARY = "summary.json"


class RolloutSummary(BaseModel):
    """Totals over every episode in the output directory (resumed ones included)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tasks: int = 0
    group_size: int = 0
    episodes: int = 0
    episodes_run: int = 0
    episodes_resumed: int = 0
    groups_complete: int = 0
    groups_incomplete: int = 0
    trajectories: int = 0
    mean_reward: float = 0.0
    mean_r_perf: float = 0.0
    mean_r_parallel: float = 0.0
    mean_r_finish: float = 0.0
    mean_critical_steps: float = 0.0
    mean_total_steps: float = 0.0
    mean_parallel_width: float = 0.0
    finish_rate: float = 0.0
    statuses: dict[str, int] = Field(default_factory=dict)
    crashed_episodes: int = 0
    infrastructure_failures: int = 0
    failure_reasons: dict[str, int] = Field(
        default_factory=dict, description="this run's crash and infrastructure errors, by message"
    )
    trajectory_failures: int = 0
    reward_errors: int = 0
    skipped_lines: tuple[TaskProblem, ...] = ()
    unreadable_records: int = 0
    subagent_cache: dict[str, int] = Field(
        default_factory=dict, description="the sub-agent replay cache's hits, misses and bypassed calls, summed"
    )
    wall_time_s: float = 0.0


@dataclass(frozen=True, slots=True)
class RolloutProgress:
    done: int
    total: int
    failed: int
    last: EpisodeRecord | None = None


def _atomic_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _differences(old: Any, new: Any, path: str = "") -> list[str]:
    """What changed between two settings trees, one ``key.path old → new`` per differing leaf."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted(set(old) | set(new), key=str):
            out += _differences(old.get(k), new.get(k), f"{path}.{k}" if path else str(k))
        return out
    if old == new:
        return []
    return [f"{path or 'settings'} {json.dumps(old)} → {json.dumps(new)}"]


def _check_manifest(out: Path, config: RolloutConfig) -> None:
    out.mkdir(parents=True, exist_ok=True)
    path = out / MANIFEST
    mine: dict[str, Any] = {"group_size": config.group_size, "seed": config.seed}
    if config.settings:
        mine["settings"] = config.settings
    if path.exists():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            old = None
        # Manifests written before the reward settings were recorded do not pin them.
        known = old.get("settings") if isinstance(old, dict) else None
        settings = dict(mine.get("settings", {}))
        if not (isinstance(known, dict) and "reward" in known):
            settings.pop("reward", None)
        mine_cmp = {k: v for k, v in mine.items() if k != "settings"} | ({"settings": settings} if settings else {})
        if isinstance(old, dict) and {k: old.get(k) for k in mine_cmp} != mine_cmp:
            changes = "; ".join(_differences({k: old.get(k) for k in mine_cmp}, mine_cmp))
            raise ConfigError(
                f"{out} holds a rollout made with other settings ({changes}). "
                "Resume with the same settings or write to a new --out directory"
            )
    _atomic_json(path, mine)


class _Run:
    """State of one collection: what is on disk, what runs, and the writers.

    Only digests of finished episodes are kept (for the summary), and the prepared trajectories of
    groups not yet exported: never whole records, so memory does not grow with the run.
    """

    def __init__(self, tasks: Sequence[Task], out: Path, config: RolloutConfig) -> None:
        self.tasks = {t.id: t for t in tasks}
        self.config = config
        self.problems: list[JsonlProblem] = []
        ep_path, tr_path = out / EPISODES, out / TRAJECTORIES
        # Open the writers first: they cut a half-written tail left by a crash before we read.
        self.episodes_w = JsonlWriter(ep_path)
        self.traj_w = JsonlWriter(tr_path)
        self.fail_w = JsonlWriter(out / FAILURES)
        # Earlier files are streamed, a record at a time: they hold every episode of the run (hundreds of
        # MB at a 1,000-way fan-out), and a resume must not need them all in memory at once.
        # Per sample, not per group: a run killed in the middle of a group's export resumes it.
        self.exported: set[tuple[str, int]] = set()
        self.trajectories = 0
        for t in iter_jsonl(tr_path, Trajectory, on_error="skip", problems=self.problems):
            self.exported.add((t.group_id, t.sample_index))
            self.trajectories += t.group_id in self.tasks
        prior_fail = iter_jsonl(out / FAILURES, RolloutFailure, on_error="skip", problems=self.problems)
        self.traj_failures = [f for f in prior_fail if f.kind == "trajectory" and f.group_id in self.tasks]
        self.exported |= {(f.group_id, f.sample_index) for f in self.traj_failures}
        self.entries: dict[tuple[str, int], EpisodeDigest] = {}
        self.unexported: dict[tuple[str, int], PreparedEpisode] = {}
        for e in iter_jsonl(ep_path, EpisodeEntry, on_error="skip", problems=self.problems):
            if e.group_id in self.tasks and e.sample_index < config.group_size:
                # Runs before infrastructure failures were told apart recorded them as episodes.
                if config.retry_infrastructure_failures and infrastructure_failure(e.record) is not None:
                    continue
                key = (e.group_id, e.sample_index)
                self.entries[key] = EpisodeDigest.of(e.record)
                if key not in self.exported:
                    self.unexported[key] = prepare_episode(
                        e, include_transcripts=config.include_transcripts, serialize=False
                    )
        self.resumed = len(self.entries)
        self.crashed: list[RolloutFailure] = []
        self.infra_failed: list[RolloutFailure] = []
        self.ran = 0

    def pending(self) -> list[tuple[Task, int]]:
        return [
            (t, j) for t in self.tasks.values() for j in range(self.config.group_size) if (t.id, j) not in self.entries
        ]

    def close(self) -> None:
        for w in (self.episodes_w, self.traj_w, self.fail_w):
            w.close()

    def record(self, episode: PreparedEpisode) -> None:
        key = (episode.group_id, episode.sample_index)
        self.episodes_w.write_line(episode.entry_json)
        self.entries[key] = episode.digest
        self.unexported[key] = episode
        self.ran += 1
        self.maybe_export(episode.group_id)

    @property
    def failed(self) -> int:
        """Episodes of this run that crashed or failed from infrastructure (kept ones included)."""
        return len(self.crashed) + len(self.infra_failed)

    def take(self, outcome: EpisodeOutcome) -> EpisodeRecord | None:
        """File one executor outcome; its finished record when the executor kept it (progress callbacks)."""
        if isinstance(outcome, RolloutFailure):
            if outcome.kind == "infrastructure":
                self.infra(outcome, keep=False)
            else:
                self.crash(outcome)
            return None
        if outcome.infrastructure is not None:  # failed from infrastructure, kept as an episode
            self.infra(outcome.infrastructure, keep=True)
        self.record(outcome)
        return outcome.record

    def crash(self, failure: RolloutFailure) -> None:
        self.crashed.append(failure)
        self.fail_w.write(failure)

    def infra(self, failure: RolloutFailure, *, keep: bool) -> None:
        """An episode that failed from infrastructure: to failures.jsonl (retried on resume), or, to
        ``keep`` it, only counted (the caller records it as a finished episode)."""
        self.infra_failed.append(failure)
        if not keep:
            self.fail_w.write(failure)

    def maybe_export(self, group_id: str) -> None:
        """Write the group's trajectories once all K episodes are in (not before: advantages need K)."""
        keys = [(group_id, j) for j in range(self.config.group_size)]
        if all(k in self.exported for k in keys) or any(k not in self.entries for k in keys):
            return
        rewards = [self.entries[k].reward for k in keys]
        advs = ADVANTAGES.get(self.config.advantage)(rewards, [group_id] * len(keys))
        for key, adv in zip(keys, advs, strict=True):
            if key in self.exported:
                continue
            self.exported.add(key)
            e = self.unexported.pop(key)
            if e.trajectory is None:
                message, kind = e.trajectory_error or ("no trajectory", ErrorType.TRAJECTORY)
                f = RolloutFailure(
                    kind="trajectory",
                    group_id=group_id,
                    sample_index=e.sample_index,
                    seed=e.seed,
                    episode_id=e.episode_id,
                    error=message,
                    error_type=kind,
                )
                self.traj_failures.append(f)
                self.fail_w.write(f)
                continue
            self.traj_w.write_line(e.trajectory.line(adv))
            self.trajectories += 1


async def collect_rollouts(
    tasks: Sequence[Task],
    factory: EpisodeFactory,
    *,
    out_dir: Path,
    config: RolloutConfig | None = None,
    swarm_config: SwarmConfig | None = None,
    reward: RewardFn | None = None,
    progress: Callable[[RolloutProgress], None] | None = None,
    skipped_lines: Iterable[TaskProblem] = (),
    executor: RolloutExecutor | None = None,
) -> RolloutSummary:
    """Run ``group_size`` episodes per task into ``out_dir`` (resuming what is there) and summarise.

    ``reward`` defaults to :class:`~agent_swarm.swarm.rl.rewards.PARLReward` with its default config. A runtime crash
    of one episode is recorded in ``failures.jsonl`` and does not stop the others; cancellation
    (Ctrl-C) stops the run with every finished episode already on disk.

    ``executor`` says where the episodes run: :class:`LocalExecutor` (default, this event loop) or
    :class:`agent_swarm.orchestrator.cluster.RayExecutor` (Ray actors; the factory must then be picklable, see
    :func:`agent_swarm.orchestrator.cluster.remote_factory`). Either way this function alone writes the files, in
    the same format, with the same resume and group rules. ``progress`` gets the finished record as
    ``last`` only from executors that run in this process.
    """
    cfg = config or RolloutConfig()
    base = swarm_config or SwarmConfig()
    reward_fn: RewardFn = reward or PARLReward()
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids) or not all(ids):
        raise ConfigError("rollout tasks need unique, non-empty ids (they name the groups)")
    where = executor or LocalExecutor()
    probe = tasks[0] if tasks else None
    runner = EpisodeRunner(factory, base, reward_fn, cfg, keep_records=progress is not None, probe=probe)
    where.check(runner)  # a factory/config mistake fails here, once, not in every episode
    out = Path(out_dir)
    _check_manifest(out, cfg)
    started = time.perf_counter()
    run = _Run(tasks, out, cfg)
    try:
        for group_id in run.tasks:  # groups completed before a crash in the middle of an export
            run.maybe_export(group_id)
        jobs = [EpisodeJob(task, j, episode_seed(cfg.seed, task.id, j)) for task, j in run.pending()]
        total = len(jobs)
        done = 0

        def deliver(outcome: EpisodeOutcome) -> None:
            nonlocal done
            last = run.take(outcome)
            done += 1
            if progress is not None:
                progress(RolloutProgress(done=done, total=total, failed=run.failed, last=last))

        if jobs:
            await where.run(EpisodeBatch(runner, jobs, deliver, cfg.max_concurrent_episodes))
    finally:
        run.close()
        summary = _summarise(run, cfg, list(skipped_lines), time.perf_counter() - started)
        _atomic_json(out / SUMMARY, summary.model_dump(mode="json"))
    return summary


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _cache_totals(digests: Sequence[EpisodeDigest]) -> dict[str, int]:
    totals = [sum(d.cache[i] for d in digests) for i in range(3)]
    return dict(zip(("hits", "misses", "bypassed"), totals, strict=True)) if any(totals) else {}


def _summarise(run: _Run, cfg: RolloutConfig, skipped: list[TaskProblem], wall: float) -> RolloutSummary:
    digests = list(run.entries.values())
    scored = [d for d in digests if d.scored]
    statuses: dict[str, int] = {}
    for d in digests:
        statuses[d.status] = statuses.get(d.status, 0) + 1
    completed = sum(d.subagents_completed for d in scored)
    assigned = sum(d.subagents_assigned for d in scored)
    widths = [d.mean_width for d in digests if d.mean_width]
    complete = sum(1 for g in run.tasks if all((g, j) in run.entries for j in range(cfg.group_size)))
    reasons: dict[str, int] = {}
    for f in [*run.crashed, *run.infra_failed]:
        text = " ".join(f.error.split())  # one line per reason, even for an HTML error page
        key = text if len(text) <= 300 else text[:300] + "…"
        reasons[key] = reasons.get(key, 0) + 1
    return RolloutSummary(
        tasks=len(run.tasks),
        group_size=cfg.group_size,
        episodes=len(digests),
        episodes_run=run.ran,
        episodes_resumed=run.resumed,
        groups_complete=complete,
        groups_incomplete=len(run.tasks) - complete,
        trajectories=run.trajectories,
        mean_reward=_mean([d.reward for d in scored]),
        mean_r_perf=_mean([d.r_perf for d in scored]),
        mean_r_parallel=_mean([d.r_parallel for d in scored]),
        mean_r_finish=_mean([d.r_finish for d in scored]),
        mean_critical_steps=_mean([d.critical_steps for d in digests]),
        mean_total_steps=_mean([d.total_steps for d in digests]),
        mean_parallel_width=_mean(widths),
        finish_rate=completed / assigned if assigned else 0.0,
        statuses=statuses,
        crashed_episodes=len(run.crashed),
        infrastructure_failures=len(run.infra_failed),
        failure_reasons=reasons,
        trajectory_failures=len(run.traj_failures),
        reward_errors=sum(1 for d in scored if d.reward_error),
        skipped_lines=tuple(skipped),
        unreadable_records=len(run.problems),
        subagent_cache=_cache_totals(digests),
        wall_time_s=wall,
    )
