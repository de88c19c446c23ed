"""Aggregate decode throughput of a real engine with several parallel sub-agent requests.

Reports generated tokens/s summed over concurrent requests at each level (how many requests decode at
once), the median and range over every repetition, and each level's median over the single stream's
(the speed-up a parallel fan-out of sub-agents gets from batching)::

    python bench/bench_decode.py local                        # embedded llama.cpp, SmolLM2-135M
    python bench/bench_decode.py local --model qwen2.5-coder-1.5b --levels 1,4,8,16 --out FILE
    python bench/bench_decode.py vllm --base-url http://127.0.0.1:18011 --model smol
    python bench/bench_decode.py --report FILE                # the table of a results file, no runs

Every request decodes exactly ``--tokens`` tokens (``ignore_eos``), so levels compare like for like.
Requests go through :class:`~agent_swarm.swarm.backends.openai_http.OpenAIBackend`, i.e. the path agents
use. The levels take turns within each repetition (1, 4, 8, 1, 4, 8, ...), so drift in the machine's load
spreads over all of them. Every run is kept: ``--out`` writes them as JSON with the commit, the model and
its sha256, the threads, the engine's layout and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio

from agent_swarm.swarm.backend import ModelRequest, SamplingParams
from agent_swarm.swarm.backends.openai_http import Flavour, OpenAIBackend
from agent_swarm.swarm.messages import UserMessage

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = [
    "Write a long story about a lighthouse keeper.",
    "Explain in detail how bread is made.",
    "Describe a journey across the desert.",
    "Write a long letter to a friend about your garden.",
    "Explain how rivers shape valleys.",
    "Tell the history of a small mountain village.",
    "Describe a busy market in the morning.",
    "Write an essay about learning to swim.",
]


async def _level(backend: OpenAIBackend, n: int, tokens: int) -> dict[str, float]:
    sampling = SamplingParams(temperature=0.8, max_tokens=tokens, seed=0)
    done: list[int] = []

    async def one(i: int) -> None:
        req = ModelRequest(messages=(UserMessage(content=PROMPTS[i % len(PROMPTS)]),), sampling=sampling)
        c = await backend.complete(req)
        done.append(c.usage.completion_tokens)

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
    wall = time.perf_counter() - start
    return {"parallel": n, "tokens": sum(done), "wall_s": wall, "tok_s": sum(done) / wall}


async def run(backend: OpenAIBackend, levels: list[int], tokens: int, repeats: int) -> list[dict[str, float]]:
    """Every run: ``repeats`` rounds, each level once per round in order."""
    await _level(backend, 1, 8)  # warm-up (first-request allocations, prompt cache); not kept
    runs = []
    for r in range(repeats):
        for n in levels:
            runs.append({"round": r, **await _level(backend, n, tokens)})
    return runs


def summary(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per level: median and range of the aggregate tokens/s over its runs, and its median over the
    single stream's (the lowest level's, when 1 was not run)."""
    levels = sorted({int(r["parallel"]) for r in runs})
    rows = []
    for n in levels:
        rates = [float(r["tok_s"]) for r in runs if r["parallel"] == n]
        rows.append(
            {
                "parallel": n,
                "runs": len(rates),
                "median": statistics.median(rates),
                "min": min(rates),
                "max": max(rates),
            }
        )
    base = rows[0]["median"] if rows else 0.0
    for row in rows:
        row["ratio_vs_single"] = row["median"] / base if base else None
    return rows


def report(result: dict[str, Any]) -> str:
    lines = [
        f"{result['engine']} ({result.get('model_sha256') or 'sha256 unknown'}), {result['tokens']} tokens per "
        f"request, {result['repeats']} rounds, threads {result.get('threads')}, "
        f"commit {result.get('commit', '')[:10]}, "
        f"load {result['loadavg_before'][0]:.2f} -> {result['loadavg_after'][0]:.2f}",
        "",
        "| requests at once | runs | aggregate decode tok/s, median [range] | median over 1 request's |",
        "|---:|---:|---|---:|",
    ]
    for row in summary(result["runs"]):
        ratio = "-" if row["ratio_vs_single"] is None else f"{row['ratio_vs_single']:.2f}"
        spread = f"{row['median']:.1f} [{row['min']:.1f}, {row['max']:.1f}]"
        lines.append(f"| {row['parallel']} | {row['runs']} | {spread} | {ratio} |")
    return "\n".join(lines)


def _commit() -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return out.stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("engine", nargs="?", choices=["local", "vllm", "openai"])
    ap.add_argument("--model", default=None, help="local: smollm2-135m (default), qwen2.5-coder-0.5b or -1.5b")
    ap.add_argument("--base-url", default=None, help="vllm/openai: the server URL")
    ap.add_argument("--levels", default="1,4,8", help="requests at once, comma-separated")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3, help="rounds over the levels")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--ctx", type=int, default=1024, help="local: each slot's context")
    ap.add_argument("--out", type=Path, default=None, help="write every run as JSON here")
    ap.add_argument("--report", type=Path, default=None, help="print the table of a results file and exit")
    args = ap.parse_args()
    if args.report is not None:
        print(report(json.loads(args.report.read_text(encoding="utf-8"))))
        return
    if args.engine is None:
        ap.error("give an engine (local, vllm or openai), or --report FILE")
    levels = [int(x) for x in args.levels.split(",")]
    if not levels or min(levels) < 1:
        ap.error(f"--levels {args.levels!r}: give positive request counts, e.g. 1,4,8")
    engine: Any = None
    flavour: Flavour
    sha256 = None
    load_before = os.getloadavg()
    if args.engine == "local":
        from agent_swarm.swarm.backends.local import LOCAL_MODELS, LocalEngine

        model = args.model or "smollm2-135m"
        engine = LocalEngine(model, slots=max(levels), ctx_per_slot=args.ctx, threads=args.threads)
        engine.start()
        url, flavour, name = engine.base_url, "llamacpp", engine.name
        entry = LOCAL_MODELS.get(model)
        sha256 = entry.sha256 if entry else None
    else:
        if not args.base_url:
            ap.error("--base-url is required for vllm/openai")
        url, flavour, name = args.base_url, ("vllm" if args.engine == "vllm" else "auto"), args.model or ""
    backend = OpenAIBackend(
        url, name, flavour=flavour, timeout=900, max_concurrency=max(levels), extra_body={"ignore_eos": True}
    )

    async def go() -> list[dict[str, float]]:
        async with backend:
            return await run(backend, levels, args.tokens, args.repeats)

    try:
        runs = anyio.run(go)
    finally:
        if engine is not None:
            engine.close()
    result = {
        "bench": "decode",
        "engine": f"{args.engine}:{backend.model}",
        "model_sha256": sha256,
        "commit": _commit(),
        "threads": engine.threads if engine is not None else args.threads,
        "layout": {"slots": max(levels), "ctx_per_slot": args.ctx} if engine is not None else None,
        "cpus": os.cpu_count(),
        "tokens": args.tokens,
        "repeats": args.repeats,
        "levels": levels,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "runs": runs,
    }
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(report(result))


if __name__ == "__main__":
    main()
