"""Does llama.cpp with the exported adapter compute what transformers + peft computes?

Builds the policy (packaged GGUF in transformers + a LoRA adapter whose B matrices are random, so the
adapter visibly changes the model), exports the adapter to llama.cpp's LoRA GGUF, samples with
llama.cpp at T = 1 with and without the adapter, and recomputes the sampled tokens' logprobs in
transformers. Reports the mean / max absolute logprob gap of: llama.cpp + adapter vs peft (the
export), llama.cpp base vs transformers base (the quantisation gap alone), and llama.cpp + adapter vs
transformers base (how far the adapter moved the model: the export must land far below this).

    python experiments/lora_parity.py --model qwen2.5-coder-0.5b --out experiments/results/lora_parity_qwen05b.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio

from agent_swarm.swarm.backend import ModelRequest, SamplingParams
from agent_swarm.swarm.messages import UserMessage

PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome.",
    "List four capitals of European countries and one fact about each.",
    "Explain in three sentences what a hash map is.",
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--b-std", type=float, default=0.02, help="std of the random lora_B entries")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    import torch

    from agent_swarm.orchestrator.rl.lora import LoraSpec, export_adapter, load_lora_policy
    from agent_swarm.swarm.backends.local import LocalBackend, LocalEngine, resolve_model

    torch.set_num_threads(2)
    name, gguf = resolve_model(args.model)
    policy = load_lora_policy(gguf, LoraSpec(r=args.rank, alpha=2 * args.rank))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for n, p in policy.hf_model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=gen) * args.b_std)

    def logprobs(prompt: tuple[int, ...], ids: tuple[int, ...], adapter: bool) -> list[float]:
        full = torch.tensor([list(prompt) + list(ids)])
        with torch.no_grad():
            if adapter:
                logits = policy.hf_model(input_ids=full).logits
            else:
                with policy.hf_model.disable_adapter():
                    logits = policy.hf_model(input_ids=full).logits
        lp = torch.log_softmax(logits[0, len(prompt) - 1 : -1].float(), -1)
        return lp.gather(-1, torch.tensor(ids)[:, None]).squeeze(-1).tolist()

    def gap(a: list[float], b: tuple[float, ...]) -> list[float]:
        return [abs(x - y) for x, y in zip(a, b, strict=True)]

    gaps: dict[str, list[float]] = {"adapter_vs_peft": [], "base_vs_base": [], "adapter_vs_base": []}
    with tempfile.TemporaryDirectory() as tmp:
        path = export_adapter(policy.hf_model, gguf, Path(tmp) / "a.gguf")
        engine = LocalEngine(name, slots=2, ctx_per_slot=1024, threads=2, lora_adapters=[path], adapter_slots=1)
        engine.start()

        async def sample() -> list[tuple[Any, Any]]:
            out = []
            async with LocalBackend(engine=engine, lora_scale=1.0) as lb, LocalBackend(engine=engine) as base:
                for i, text in enumerate(PROMPTS):
                    req = ModelRequest(
                        messages=(UserMessage(content=text),),
                        sampling=SamplingParams(temperature=1.0, max_tokens=args.tokens, seed=i),
                    )
                    out.append((await lb.complete(req), await base.complete(req)))
            return out

        pairs = anyio.run(sample)
        engine.close()
    for a, b in pairs:
        gaps["adapter_vs_peft"] += gap(logprobs(a.prompt_token_ids, a.token_ids, True), a.logprobs)
        gaps["adapter_vs_base"] += gap(logprobs(a.prompt_token_ids, a.token_ids, False), a.logprobs)
        gaps["base_vs_base"] += gap(logprobs(b.prompt_token_ids, b.token_ids, False), b.logprobs)
    res: dict[str, Any] = {"model": name, "rank": args.rank, "b_std": args.b_std, "load": os.getloadavg()[0]}
    for k, v in gaps.items():
        res[k] = {"mean": sum(v) / len(v), "max": max(v), "tokens": len(v)}
        print(f"{k}: mean |Δ logprob| {res[k]['mean']:.4f} nats, max {res[k]['max']:.3f} over {len(v)} tokens")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
