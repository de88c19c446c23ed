"""Aggregate decode throughput of a real engine with 1, 4 and 8 parallel sub-agent requests.

Reports generated tokens/s summed over concurrent requests, and each level's ratio to the single
stream on the same engine (the speed-up a parallel fan-out of sub-agents gets from batching)::

    python bench/bench_decode.py local                        # embedded llama.cpp, SmolLM2-135M
    python bench/bench_decode.py local --model qwen2.5-coder-0.5b
    python bench/bench_decode.py vllm --base-url http://127.0.0.1:18011 --model smol

Every request decodes exactly ``--tokens`` tokens (``ignore_eos``), so levels compare like for like.
Requests go through :class:`~agent_swarm.swarm.backends.openai_http.OpenAIBackend`, i.e. the path agents use.
The machine is shared: take the best of ``--repeats`` runs and treat figures as ±20 %.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import anyio

from agent_swarm.swarm.backend import ModelRequest, SamplingParams
from agent_swarm.swarm.backends.openai_http import Flavour, OpenAIBackend
from agent_swarm.swarm.messages import UserMessage

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
    await _level(backend, 1, 8)  # warm-up (first-request allocations, prompt cache)
    best: list[dict[str, float]] = []
    for n in levels:
        runs = [await _level(backend, n, tokens) for _ in range(repeats)]
        best.append(max(runs, key=lambda r: r["tok_s"]))
    single = next((r["tok_s"] for r in best if r["parallel"] == 1), best[0]["tok_s"])
    for r in best:
        r["ratio_vs_single"] = r["tok_s"] / single
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("engine", choices=["local", "vllm", "openai"])
    ap.add_argument("--model", default=None, help="local: smollm2-135m (default) or qwen2.5-coder-0.5b")
    ap.add_argument("--base-url", default=None, help="vllm/openai: the server URL")
    ap.add_argument("--levels", default="1,4,8")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    engine: Any = None
    flavour: Flavour
    if args.engine == "local":
        from agent_swarm.swarm.backends.local import LocalEngine

        engine = LocalEngine(args.model or "smollm2-135m", slots=max(levels), ctx_per_slot=1024, threads=args.threads)
        engine.start()
        url, flavour, name = engine.base_url, "llamacpp", engine.name
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
        results = anyio.run(go)
    finally:
        if engine is not None:
            engine.close()
    label = f"{args.engine}:{backend.model}"
    if args.json:
        print(json.dumps({"engine": label, "results": results}))
        return
    print(f"{label}  ({args.tokens} tokens per request, best of {args.repeats})")
    print(f"{'parallel':>8} {'agg tok/s':>10} {'x single':>9} {'wall s':>8}")
    for r in results:
        print(f"{r['parallel']:>8} {r['tok_s']:>10.1f} {r['ratio_vs_single']:>9.2f} {r['wall_s']:>8.2f}")


if __name__ == "__main__":
    main()
