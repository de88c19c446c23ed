"""Build verl's Parquet dataset from a workload's split: one row per task, routed to the swarm agent loop.

    python examples/verl/build_dataset.py -w starter -n 256 --split train --seed 0 -o data/starter-train.parquet
    python examples/verl/build_dataset.py -w starter -n 32 --split test --seed 1 -o data/starter-test.parquet

Each row has verl's RLHFDataset columns (``prompt``, ``data_source``, ``reward_model``, ``extra_info``)
plus ``agent_name = "swarm_agent"``; ``extra_info["swarm"]`` is the task itself and the workload
reference it was generated from (``agent_swarm.orchestrator.rl.verl_episode.VerlTaskSpec``). Free tasks with a
verifier come from a JSONL task file instead (``--tasks FILE``, the format ``swarm rollout`` reads).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agent_swarm.orchestrator.rl.verl_episode import dataset_rows
from agent_swarm.orchestrator.tasks import load_task_file
from agent_swarm.workloads import get_workload, workload_names


def _knobs(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--knob takes NAME=VALUE, got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("-w", "--workload", choices=workload_names())
    src.add_argument("--tasks", type=Path, help="a JSONL task file (free tasks with their verifiers)")
    ap.add_argument("-n", type=int, default=64, help="workload tasks to generate")
    ap.add_argument("--split", default="train", help="train (development) or test (held out)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--knob", action="append", default=[], help="workload knob NAME=VALUE (repeatable)")
    ap.add_argument("--mode", choices=["swarm", "single"], default=None, help="default: the loop config's mode")
    ap.add_argument("-o", "--out", type=Path, required=True, help="the .parquet file to write")
    args = ap.parse_args(argv)

    import pyarrow as pa
    import pyarrow.parquet as pq

    if args.workload is not None:
        knobs = _knobs(args.knob)
        tasks = get_workload(args.workload).tasks(args.n, seed=args.seed, split=args.split, **knobs)
        ref = {"workload": args.workload, "split": args.split, "seed": args.seed, "knobs": knobs}
        rows = dataset_rows(tasks, reference=ref, mode=args.mode)
    else:
        rows = dataset_rows(load_task_file(args.tasks, on_malformed="fail")[0], mode=args.mode)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), args.out)
    print(f"wrote {len(rows)} rows to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
