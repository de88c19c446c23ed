"""Batched vs one-at-a-time decoding in the transformers RL engine (tiny Qwen2 or any local model dir).

Runs N concurrent requests (the shape of K rollouts or a sub-agent fan-out) through
``TransformersBackend`` twice: one after another, then all at once (decoded as one batch). Prints the
tokens/s of each and their ratio. Usage::

    python bench/bench_transformers_decode.py [--n 8] [--tokens 64] [--model DIR]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import anyio

from agent_swarm.orchestrator.rl.tiny import build_tiny_model
from agent_swarm.swarm.backend import Completion, ModelRequest, SamplingParams
from agent_swarm.swarm.backends.transformers_backend import TransformersBackend
from agent_swarm.swarm.messages import UserMessage


async def _run(backend: TransformersBackend, reqs: list[ModelRequest], concurrent: bool) -> tuple[float, int]:
    out: list[Completion] = []

    async def one(r: ModelRequest) -> None:
        out.append(await backend.complete(r))

    t = time.perf_counter()
    if concurrent:
        async with anyio.create_task_group() as tg:
            for r in reqs:
                tg.start_soon(one, r)
    else:
        for r in reqs:
            await one(r)
    return time.perf_counter() - t, sum(len(c.token_ids or ()) for c in out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=8, help="concurrent requests")
    ap.add_argument("--tokens", type=int, default=64, help="max new tokens per request")
    ap.add_argument("--model", type=Path, default=None, help="a transformers model dir (default: tiny Qwen2)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or build_tiny_model(Path(tmp) / "tiny")
        backend = TransformersBackend.from_pretrained(path, name="bench")
        sampling = SamplingParams(temperature=1.0, max_tokens=args.tokens)
        reqs = [
            ModelRequest(
                messages=(UserMessage(content=f"request {i}"),), sampling=sampling.model_copy(update={"seed": i})
            )
            for i in range(args.n)
        ]
        anyio.run(_run, backend, reqs[:1], False)  # warm-up
        seq_s, seq_tok = anyio.run(_run, backend, reqs, False)
        bat_s, bat_tok = anyio.run(_run, backend, reqs, True)
    print("| mode | requests | tokens | seconds | tokens/s |\n|---|---|---|---|---|")
    print(f"| one at a time | {args.n} | {seq_tok} | {seq_s:.2f} | {seq_tok / seq_s:.0f} |")
    print(f"| concurrent (batched) | {args.n} | {bat_tok} | {bat_s:.2f} | {bat_tok / bat_s:.0f} |")
    print(f"\nbatched / one-at-a-time throughput: {(bat_tok / bat_s) / (seq_tok / seq_s):.1f}x")


if __name__ == "__main__":
    main()
