"""Every episode of committed eval runs scored again with today's scorers, from the runs' raw files.

    python experiments/rescore.py RUN_DIR [RUN_DIR ...] [--out DIR]

Each directory is a ``swarm eval`` run: ``episodes.jsonl.gz`` and ``tasks.jsonl.gz`` (or ``tasks.jsonl``).
Each recorded answer is scored again by its task's own verifier (the table scorer of the wide
workloads), or, for a task without one (starter, controls), by its workload's scorer on the episode's
full record from the run's traces (``traces.tar.gz`` or ``episodes/``): the scorer that gives ``r_perf``.
Run at the commit that made a run it gives the recorded metric, so a scorer change is measured on the
answers models already gave, paired by episode, without running a model. Prints per run and arm: n,
the recorded mean metric, the rescored mean and the paired comparison (bootstrap CI, sign and Wilcoxon
tests), then every episode whose score changed. ``--out DIR`` writes
each run again under ``DIR/<run name>`` (raw rows with the new metric, success, items and scores; the
manifest, tasks and traces copied; ``rescored.json`` says by which commit), which ``swarm eval
--report`` and ``experiments/paired_runs.py`` read like any run. A crashed episode, or a task
without a verifier whose record is not in the traces or that this code can no longer build (a task of an
older corpus generator), keeps its row.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import anyio

from agent_swarm.orchestrator.eval_raw import RawEpisode, code_state, read_raw, read_records, write_raw
from agent_swarm.orchestrator.eval_stats import paired
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.records import EpisodeRecord, Task
from agent_swarm.swarm.verifiers.registry import Verdict, verify
from agent_swarm.workloads.base import Mode, episode_for


def _tasks(run: Path) -> dict[str, Task]:
    path = run / "tasks.jsonl.gz"
    text = gzip.decompress(path.read_bytes()).decode() if path.exists() else (run / "tasks.jsonl").read_text()
    return {t.id: t for t in (Task.model_validate_json(line) for line in text.splitlines() if line.strip())}


def _rescored(raw: RawEpisode, verdict: Verdict) -> RawEpisode:
    details = json.loads(json.dumps(verdict.details, default=str))  # as read back from a raw file
    items = details.pop("items", None)
    return raw.model_copy(
        update={
            "metric": verdict.score,
            "success": verdict.passed,
            "items": {str(k): float(v) for k, v in items.items()} if isinstance(items, dict) else None,
            "scores": details,
        }
    )


def _by_workload(raw: RawEpisode, task: Task, records: dict[str, dict[str, Any]]) -> RawEpisode:
    """``raw`` scored by its task's workload (tasks without a verifier: starter, controls), from the
    episode's full record in the run's traces; unchanged where the record is missing."""
    record = records.get(raw.episode_id)
    if record is None or not task.metadata.get("workload"):
        return raw
    mode: Mode = "single" if raw.mode == "single" else "swarm"
    try:
        episode = episode_for(task, mode)
    except ConfigError:  # a task this code can no longer build (an older corpus generator's)
        return raw
    score = episode.score(EpisodeRecord.model_validate(record))
    details = json.loads(json.dumps(score.details, default=str))
    per_item = details.get("per_item")
    items = {str(k): float(v) for k, v in per_item.items()} if isinstance(per_item, dict) else raw.items
    return raw.model_copy(update={"metric": score.metric, "success": score.success, "items": items, "scores": details})


async def _rescore(run: Path) -> list[tuple[RawEpisode, RawEpisode]]:
    tasks = _tasks(run)
    rows, _ = read_raw(run / "episodes.jsonl.gz")
    records: dict[str, dict[str, Any]] = {}
    if any(tasks[r.task_id].verifier is None for r in rows):
        records = {r["episode_id"]: r for r in read_records(run)}
    out: list[tuple[RawEpisode, RawEpisode]] = []
    for raw in rows:
        task = tasks[raw.task_id]
        if raw.status == "crashed":
            out.append((raw, raw))
        elif task.verifier is None:
            out.append((raw, _by_workload(raw, task, records)))
        else:
            verdict = await verify(task.verifier, raw.answer or "", task.verifier_args or {})
            out.append((raw, _rescored(raw, verdict)))
    return out


def rescore(run: Path) -> list[tuple[RawEpisode, RawEpisode]]:
    """(recorded row, rescored row) for every episode of ``run``, in the raw file's order."""
    return anyio.run(_rescore, run)


def check_out(runs: list[Path], out: Path) -> None:
    """Refuse (one line, before anything is read or written) an ``--out`` that would write a run over
    itself: ``out/<run name>`` is the run's own folder."""
    for run in runs:
        if (out / run.name).resolve() == run.resolve():
            raise SystemExit(
                f"rescore: --out {out} would overwrite the run {run} with its rescored copy; give another folder"
            )


def _write(run: Path, pairs: list[tuple[RawEpisode, RawEpisode]], out: Path) -> Path:
    dest = out / run.name
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("manifest.json", "tasks.jsonl.gz", "tasks.jsonl", "traces.tar.gz", "README.md"):
        if (run / name).exists():
            shutil.copy2(run / name, dest / name)
    if (run / "episodes").is_dir():
        shutil.copytree(run / "episodes", dest / "episodes", dirs_exist_ok=True)
    write_raw(dest / "episodes.jsonl.gz", [new for _, new in pairs])
    commit, dirty = code_state()
    note = {"rescored_from": str(run), "commit": commit, "dirty": dirty, "by": "experiments/rescore.py"}
    (dest / "rescored.json").write_text(json.dumps(note, indent=2) + "\n", encoding="utf-8")
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("--out", type=Path, help="write each run, rescored, under this folder")
    args = ap.parse_args()
    if args.out is not None:
        check_out(args.runs, args.out)
    print("| run | arm | n | recorded | rescored | rescored − recorded [95 % CI] | W/L/T | sign p | Wilcoxon p |")
    print("|---|---|---:|---:|---:|---|---|---:|---:|")
    changed: list[str] = []
    for run in args.runs:
        if not (run / "episodes.jsonl.gz").exists():
            print(f"| {run.name} | (no episodes.jsonl.gz: not a run, not rescored) | | | | | | | |")
            continue
        if not (run / "tasks.jsonl.gz").exists() and not (run / "tasks.jsonl").exists():
            print(f"| {run.name} | (no tasks file: not rescored) | | | | | | | |")
            continue
        pairs = rescore(run)
        for arm in sorted({old.arm for old, _ in pairs}):
            mine = [(old, new) for old, new in pairs if old.arm == arm]
            p = paired([old.metric for old, _ in mine], [new.metric for _, new in mine])
            print(f"| {run.name} | {arm} | {p.n} | {p.cells()} |")
        changed += [
            f"- {run.name} {old.episode_id}: {old.metric:.3f} → {new.metric:.3f}"
            for old, new in pairs
            if abs(old.metric - new.metric) > 1e-9
        ]
        if args.out is not None:
            print(f"  written: {_write(run, pairs, args.out)}")
    print("\nChanged (recorded → rescored):" if changed else "\nNo episode's score changed.")
    print("\n".join(changed))


if __name__ == "__main__":
    main()
