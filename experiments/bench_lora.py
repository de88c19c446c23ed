"""What training the real orchestrator costs on this machine: LoRA updates and both rollout samplers.

Measures, on the packaged Qwen2.5-Coder-0.5B-Instruct (or ``--model smollm2-135m``):

* loading the GGUF into transformers and wrapping it in a PEFT LoRA adapter;
* one forward + backward + AdamW step (adapter only) per sequence length, and a forward alone;
* exporting the adapter to llama.cpp's LoRA GGUF and restarting the engine with it (one weight push);
* sampling: transformers + peft (``TransformersBackend``, batched decoding) against llama.cpp with the
  adapter applied per request (``LocalBackend(lora_scale=1)``), one stream and ``--concurrency`` streams,
  and llama.cpp's base model (no adapter) for reference.

Writes ``--out`` (JSON) and prints a table. Run it niced on a shared machine and note the load:

    nice -n 10 python experiments/bench_lora.py --out experiments/results/bench_lora.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio

from agent_swarm.swarm.backend import ModelRequest, SamplingParams
from agent_swarm.swarm.messages import SystemMessage, UserMessage

PROMPT = (
    "You are the orchestrator of a swarm of sub-agents. Split the user's task into independent subtasks and "
    "assign each to a sub-agent in parallel; answer when you have the results."
)
TASKS = [
    "Find the population of Paris, Berlin, Madrid and Rome and report them in a table.",
    "Look up the capitals of Peru, Chile, Bolivia and Ecuador.",
    "Summarise the opening hours of the four city libraries.",
    "Check the weather in Oslo, Bergen, Tromso and Stavanger.",
]


def _load() -> float:
    return os.getloadavg()[0]


def _request(i: int, max_tokens: int) -> ModelRequest:
    return ModelRequest(
        messages=(SystemMessage(content=PROMPT), UserMessage(content=TASKS[i % len(TASKS)])),
        sampling=SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=100 + i),
    )


async def _sample(backend: Any, n: int, max_tokens: int) -> dict[str, float]:
    """``n`` concurrent requests; generated tokens per wall second over all of them (and the CPU
    seconds of this process, which include llama.cpp's threads: it runs in-process)."""
    outs: list[Any] = []
    c0 = time.process_time()

    async def one(i: int) -> None:
        outs.append(await backend.complete(_request(i, max_tokens)))

    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    tokens = sum(len(c.token_ids or ()) for c in outs)
    prompt = sum(len(c.prompt_token_ids or ()) for c in outs)
    return {
        "streams": n,
        "tokens": tokens,
        "prompt_tokens": prompt,
        "wall_s": wall,
        "cpu_s": cpu,
        "tok_per_s": tokens / wall,
        "tok_per_cpu_s": tokens / cpu if cpu else float("nan"),
    }


def bench_update(model: Any, lengths: list[int], repeats: int, train_frac: float) -> dict[str, Any]:
    """The trainer's own path: logprobs of the last ``train_frac`` of the tokens (the orchestrator's
    response; the prompt is context only), masked NLL, backward, AdamW on the adapter."""
    import torch

    from agent_swarm.swarm.rl.losses import masked_logprobs, ptx_loss

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5)
    vocab = model.config.vocab_size if hasattr(model, "config") else 32000
    out: dict[str, Any] = {}
    for n in lengths:
        ids = torch.randint(0, min(vocab, 150000), (1, n))
        mask = torch.zeros(1, n - 1)
        mask[:, int((n - 1) * (1 - train_frac)) :] = 1.0
        one = torch.ones(1)
        times, fwd, cpu = [], [], []
        for r in range(repeats + 1):  # the first call warms up (allocations, kernels)
            model.train()
            c0 = time.process_time()
            t0 = time.perf_counter()
            loss = ptx_loss(masked_logprobs(model, ids, mask, one), mask)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            dt = time.perf_counter() - t0
            dc = time.process_time() - c0
            model.eval()
            t1 = time.perf_counter()
            with torch.no_grad():
                masked_logprobs(model, ids, mask, one)
            df = time.perf_counter() - t1
            if r > 0:
                times.append(dt)
                fwd.append(df)
                cpu.append(dc)
        out[str(n)] = {
            "step_s": statistics.median(times),
            "step_s_all": times,
            "forward_s": statistics.median(fwd),
            "step_s_per_1k_tokens": statistics.median(times) * 1000 / n,
            "step_cpu_s": statistics.median(cpu),
            "step_cpu_s_per_1k_tokens": statistics.median(cpu) * 1000 / n,
            "trained_tokens": int(mask.sum()),
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "load": _load(),
        }
        o = out[str(n)]
        print(
            f"  {n} tokens: fwd+bwd+AdamW {o['step_s']:.2f} s wall ({o['step_cpu_s']:.2f} CPU-s), "
            f"forward {o['forward_s']:.2f} s, load {o['load']:.1f}, peak RSS {o['peak_rss_gb']:.1f} GB"
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--targets", default="q_proj,k_proj,v_proj,o_proj")
    ap.add_argument("--lengths", default="512,1024")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--train-frac", type=float, default=0.25, help="share of each sequence that is trained on")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-checkpointing", action="store_true", help="keep every activation (more memory)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    import torch

    from agent_swarm.orchestrator.rl.lora import LoraSpec, export_adapter, load_lora_policy
    from agent_swarm.swarm.backends.local import LocalBackend, LocalEngine, resolve_model

    torch.set_num_threads(args.threads)
    name, gguf = resolve_model(args.model)
    res: dict[str, Any] = {
        "model": name,
        "torch_threads": args.threads,
        "lora": {"r": args.rank, "targets": args.targets},
        "cpu_count": os.cpu_count(),
        "load_at_start": _load(),
    }
    print(f"{name}: load average {_load():.2f}")
    t0 = time.perf_counter()
    spec = LoraSpec(
        r=args.rank,
        alpha=2 * args.rank,
        target_modules=tuple(args.targets.split(",")),
        gradient_checkpointing=not args.no_checkpointing,
    )
    policy = load_lora_policy(gguf, spec)
    res["load_policy_s"] = time.perf_counter() - t0
    trainable = sum(p.numel() for p in policy.hf_model.parameters() if p.requires_grad)
    res["trainable_params"] = trainable
    print(f"policy loaded in {res['load_policy_s']:.1f} s, {trainable / 1e6:.2f} M trainable parameters")

    print("LoRA update (batch 1):")
    lengths = [int(x) for x in args.lengths.split(",")]
    res["update"] = bench_update(policy.hf_model, lengths, args.repeats, args.train_frac)
    res["train_frac"] = args.train_frac

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = export_adapter(policy.hf_model, gguf, Path(tmp) / "a.gguf", version="0")
        res["export_s"] = time.perf_counter() - t0
        engine = LocalEngine(
            name,
            slots=2 * args.concurrency,
            ctx_per_slot=2048,
            threads=args.threads,
            lora_adapters=[path],
            adapter_slots=args.concurrency,
        )
        t0 = time.perf_counter()
        engine.start()
        res["engine_start_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        engine.restart(lora_adapters=[path], adapter_version="0")
        res["engine_restart_s"] = time.perf_counter() - t0
        e, st, rs = res["export_s"], res["engine_start_s"], res["engine_restart_s"]
        print(f"export {e:.2f} s, engine start {st:.2f} s, restart {rs:.2f} s")

        async def samplers() -> dict[str, Any]:
            out: dict[str, Any] = {}
            async with LocalBackend(engine=engine, lora_scale=1.0) as lb, LocalBackend(engine=engine) as base:
                await lb.complete(_request(0, 4))  # warm-up
                for n in (1, args.concurrency):
                    out[f"llamacpp_adapter_x{n}"] = {**await _sample(lb, n, args.max_tokens), "load": _load()}
                    out[f"llamacpp_base_x{n}"] = {**await _sample(base, n, args.max_tokens), "load": _load()}
            policy.memory = type(policy.memory)()
            await policy.complete(_request(0, 4))
            for n in (1, args.concurrency):
                out[f"transformers_peft_x{n}"] = {**await _sample(policy, n, args.max_tokens), "load": _load()}
            return out

        res["sampling"] = anyio.run(samplers)
        engine.close()
    for k, v in res["sampling"].items():
        print(
            f"  {k}: {v['tok_per_s']:.1f} tok/s, {v['tok_per_cpu_s']:.1f} tok/CPU-s "
            f"({v['tokens']} tokens + {v['prompt_tokens']} prompt in {v['wall_s']:.1f} s, load {v['load']:.1f})"
        )
    res["load_at_end"] = _load()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
