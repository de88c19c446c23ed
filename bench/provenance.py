"""What every engine bench records beside its rows, and how it saves them (``bench_decode_path.py``,
``bench_context_decode.py``): the commit, the model and its pinned sha256, the threads and the load
average before and after, so that a results file says what it measured."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def facts(bench: str, model: str, threads: int) -> dict[str, Any]:
    """The run's provenance, taken before it measures anything."""
    from agent_swarm.swarm.backends.local import LOCAL_MODELS

    entry = LOCAL_MODELS.get(model)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    return {
        "bench": bench,
        "commit": commit.strip(),
        "model": model,
        "model_sha256": entry.sha256 if entry else None,
        "threads": threads,
        "loadavg_before": os.getloadavg(),
    }


def header(result: dict[str, Any]) -> str:
    """The first line of a report: model, commit, threads and load."""
    return (
        f"model {result['model']} ({result['model_sha256']}), commit {result['commit'][:10]}, "
        f"{result['threads']} threads, load {result['loadavg_before'][0]:.2f} -> {result['loadavg_after'][0]:.2f}"
    )


def save(result: dict[str, Any], out: Path, report: Callable[[dict[str, Any]], str]) -> None:
    """Add the load after, write ``out`` and print the report."""
    result["loadavg_after"] = os.getloadavg()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(report(result))
    print(f"raw: {out}")


def parser(doc: str | None, out: str) -> argparse.ArgumentParser:
    """The options every engine bench takes: ``--report FILE``, ``--model``, ``--threads``, ``--out``
    (default ``bench/results/OUT``); the bench adds its own."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", type=Path, help="print the table of a results file and exit (no runs)")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--threads", type=int, default=None, help="decode threads (default: the free cores now)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / out)
    return ap


def reported(args: argparse.Namespace, report: Callable[[dict[str, Any]], str]) -> bool:
    """With ``--report FILE``: print its table and say so (the bench then runs nothing)."""
    if args.report is None:
        return False
    print(report(json.loads(args.report.read_text(encoding="utf-8"))))
    return True
