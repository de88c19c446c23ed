"""The answers a coach sent back once, scored before and after, from one eval run's raw files.

    python experiments/answer_review.py RUN_DIR [RUN_DIR ...]

Each directory is a ``swarm eval`` run: ``episodes.jsonl.gz``, ``tasks.jsonl.gz`` (or ``tasks.jsonl``) and
the per-episode traces (``traces.tar.gz``, or an ``episodes/`` folder). An episode's *first* answer is the
text of its first orchestrator turn with no tool call and no parse error; its *final* answer is the
recorded one. Where the coach sent no answer back the two are the same turn, so one run measures the
rule: every other episode is what it would have been without it (greedy, same prompts up to the
answer). Both answers are scored with the task's own verifier (the final score must equal the recorded
metric: checked). Prints, per arm, how many answers went back and the paired comparison final − first
over every episode of the arm (bootstrap CI, sign and Wilcoxon tests), plus the sent-back rows.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Any

import anyio

from agent_swarm.orchestrator.eval_raw import RawEpisode, read_raw, read_records
from agent_swarm.orchestrator.eval_stats import paired
from agent_swarm.swarm.verifiers.registry import verify


def _tasks(run: Path) -> dict[str, dict[str, Any]]:
    path = run / "tasks.jsonl.gz"
    text = gzip.decompress(path.read_bytes()).decode() if path.exists() else (run / "tasks.jsonl").read_text()
    return {t["id"]: t for t in map(json.loads, text.splitlines())}


def _first_answer(record: dict[str, Any]) -> str | None:
    for turn in record["turns"]:
        if not turn["tool_calls"] and turn["parse_error"] is None:
            return str(turn["text"])
    return None


async def _score(task: dict[str, Any], answer: str) -> float:
    verdict = await verify(task["verifier"], answer, task.get("verifier_args") or {})
    return float(verdict.score)


async def _arm_rows(run: Path) -> dict[str, list[tuple[RawEpisode, float, float, str]]]:
    tasks = _tasks(run)
    rows, _ = read_raw(run / "episodes.jsonl.gz")
    by_id = {r.episode_id: r for r in rows}
    out: dict[str, list[tuple[RawEpisode, float, float, str]]] = {}
    for record in read_records(run):
        raw = by_id.get(record["episode_id"])
        if raw is None:
            continue
        first = _first_answer(record)
        task = tasks[raw.task_id]
        final = await _score(task, raw.answer or "")
        if abs(final - raw.metric) > 1e-9:
            raise SystemExit(f"{raw.episode_id}: the final answer scores {final}, the record says {raw.metric}")
        before = final if first is None or first == raw.answer else await _score(task, first)
        out.setdefault(raw.arm, []).append((raw, before, final, first or ""))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, nargs="+")
    args = ap.parse_args()
    print("| run | arm | n | sent back | first | final | final − first [95 % CI] | W/L/T | sign p | Wilcoxon p |")
    print("|---|---|---:|---:|---:|---:|---|---|---:|---:|")
    back: list[str] = []
    for run in args.runs:
        for arm, rows in sorted(anyio.run(_arm_rows, run).items()):
            sent = [r for r in rows if r[3] != (r[0].answer or "")]
            p = paired([b for _, b, _, _ in rows], [f for _, _, f, _ in rows])
            print(f"| {run.name} | {arm} | {p.n} | {len(sent)} | {p.cells()} |")
            back += [
                f"- {run.name} {arm} {r.task_id}: {b:.2f} → {f:.2f}"
                for r, b, f, _ in sorted(sent, key=lambda s: s[0].task_id)
            ]
    print("\nSent back (first → final score):" if back else "\nNo answer was sent back.")
    print("\n".join(back))


if __name__ == "__main__":
    main()
