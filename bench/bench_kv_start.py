"""Where the local engine's start goes: the KV cache layout against the time to a ready server.

Each arm starts llama.cpp's server (``xllamacpp.Server``) in a new process on the default 1.5B at
2 threads with one KV layout, times the constructor (model load, KV cache allocation and clearing,
warmup) and samples the process's resident memory every 0.25 s (a cache that llama.cpp clears is
resident at once: its pages are touched). Arms:

* ``split16x32k``: 16 slots with their own 32,768-token caches (the default plan of issue 29);
* ``split16x32k_nowarmup`` / ``_nofit``: the same without llama.cpp's warmup decode / memory fitting;
* ``split16x8k``: 16 own caches of 8,192 (the default before issue 29);
* ``pool32k`` / ``pool64k`` / ``pool128k``: 16 slots sharing one cache of that size, each capped
  at 32,768 (``kv_unified``, ``kv_unified_per_slot``: the plan of ``sizing.POOL_CONTEXT``);
* ``split1x8k``: one small slot (the model load's floor).

Raw results (every arm's time, memory timeline, load average before and after, commit): ``--out``::

    flock /work/heavy.lock python bench/bench_kv_start.py --out bench/results/kv_start.json
    python bench/bench_kv_start.py --report bench/results/kv_start.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FULL = 32768
ARMS: dict[str, dict[str, Any]] = {
    "split16x32k": {"n_parallel": 16, "n_ctx": 16 * FULL},
    "split16x32k_nowarmup": {"n_parallel": 16, "n_ctx": 16 * FULL, "warmup": False},
    "split16x32k_nofit": {"n_parallel": 16, "n_ctx": 16 * FULL, "fit_params": False},
    "split16x8k": {"n_parallel": 16, "n_ctx": 16 * 8192},
    "pool32k": {"n_parallel": 16, "n_ctx": FULL, "kv_unified": True, "kv_unified_per_slot": FULL},
    "pool64k": {"n_parallel": 16, "n_ctx": 2 * FULL, "kv_unified": True, "kv_unified_per_slot": FULL},
    "pool128k": {"n_parallel": 16, "n_ctx": 4 * FULL, "kv_unified": True, "kv_unified_per_slot": FULL},
    "split1x8k": {"n_parallel": 1, "n_ctx": 8192},
}
CHILD = """
import json, sys, threading, time
import xllamacpp

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0

model, threads, cfg = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
samples, done = [], threading.Event()
t0 = time.perf_counter()
def sample():
    while not done.is_set():
        samples.append([round(time.perf_counter() - t0, 2), round(rss() / 2**30, 2)])
        time.sleep(0.25)
threading.Thread(target=sample, daemon=True).start()
p = xllamacpp.CommonParams()
p.model.path = model
p.cpuparams.n_threads = p.cpuparams_batch.n_threads = threads
p.use_jinja = True
p.verbosity = -1
for k, v in cfg.items():
    setattr(p, k, v)
t1 = time.perf_counter()
server = xllamacpp.Server(p)
t2 = time.perf_counter()
done.set()
print(json.dumps({"server_s": t2 - t1, "rss_gib": rss() / 2**30, "rss_timeline": samples}), flush=True)
del server
"""


def _model() -> Path:
    from agent_swarm.swarm.backends.local.catalogue import resolve_model

    return resolve_model("qwen2.5-coder-1.5b", None)[1]


def _arm(name: str, model: Path, threads: int) -> dict[str, Any]:
    began = time.perf_counter()
    cmd = [sys.executable, "-c", CHILD, str(model), str(threads), json.dumps(ARMS[name])]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
    row: dict[str, Any] = {"arm": name, "config": ARMS[name], "returncode": out.returncode}
    lines = out.stdout.strip().splitlines()
    if out.returncode == 0 and lines:
        row.update(json.loads(lines[-1]))
    else:
        row["stderr_tail"] = out.stderr[-2000:]
    row["process_s"] = time.perf_counter() - began
    return row


def _report(path: Path) -> None:
    data = json.loads(path.read_text())
    print(
        f"commit {data['commit'][:10]}, load {data['load_before']} -> {data['load_after']}, {data['threads']} threads"
    )
    print("| arm | server start (s), each run | resident memory after (GiB) |\n|---|---|---:|")
    by: dict[str, list[dict[str, Any]]] = {}
    for row in data["runs"]:
        by.setdefault(row["arm"], []).append(row)
    for name, rows in by.items():
        times = ", ".join(f"{r['server_s']:.2f}" if "server_s" in r else "failed" for r in rows)
        rss = max((r.get("rss_gib", 0.0) for r in rows), default=0.0)
        print(f"| {name} | {times} | {rss:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", type=Path, help="print the table of a results file and exit (no runs)")
    ap.add_argument("--arms", nargs="*", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--rounds", type=int, default=2, help="runs of every arm, the arms taking turns")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "kv_start.json")
    args = ap.parse_args()
    if args.report is not None:
        _report(args.report)
        return
    model = _model()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    data: dict[str, Any] = {"commit": commit.strip(), "model": str(model), "threads": args.threads}
    data["load_before"] = os.getloadavg()[0]
    data["runs"] = []
    for r in range(args.rounds):
        for name in args.arms:
            row = {"round": r, **_arm(name, model, args.threads)}
            data["runs"].append(row)
            print(name, round(row.get("server_s", -1), 2), round(row.get("rss_gib", -1), 2), flush=True)
    data["load_after"] = os.getloadavg()[0]
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    _report(args.out)


if __name__ == "__main__":
    main()
