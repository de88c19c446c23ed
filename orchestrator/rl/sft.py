"""Supervised warm start: fit a policy to conversations (mask = the assistant's tokens only).

Used to warm-start a tiny orchestrator on gold swarm transcripts before RL, and by tests that need
a model which deterministically emits a given output. ``examples`` come from
:func:`orchestrator.rl.trainer.sft_example` (ids, mask).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import torch

from orchestrator.rl.losses import gather_logprobs, ptx_loss
from swarm.errors import ConfigError

__all__ = ["sft_train"]


def sft_train(
    model: Any,
    examples: Sequence[tuple[list[int], list[int]]],
    *,
    steps: int,
    lr: float = 3e-3,
    batch_size: int = 8,
    seed: int = 0,
    stop_below: float | None = None,
    on_step: Callable[[int, float], None] | None = None,
) -> list[float]:
    """AdamW on the masked NLL for ``steps`` steps of ``batch_size`` random examples; returns the losses.

    With ``stop_below``, training stops early once the loss of a step falls below it.
    """
    if not examples:
        raise ConfigError("SFT needs at least one example")
    rng = random.Random(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.98))
    device = next(model.parameters()).device
    losses = []
    model.train()
    for step in range(steps):
        batch = [examples[rng.randrange(len(examples))] for _ in range(batch_size)]
        width = max(len(i) for i, _ in batch)
        ids = torch.zeros(len(batch), width, dtype=torch.long)
        mask = torch.zeros(len(batch), width)
        for k, (i, m) in enumerate(batch):
            ids[k, : len(i)] = torch.tensor(i)
            mask[k, : len(m)] = torch.tensor(m, dtype=torch.float32)
        ids, mask = ids.to(device), mask.to(device)
        lp = gather_logprobs(model(input_ids=ids).logits, ids)
        loss = ptx_loss(lp, mask[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(float(loss.item()))
        if on_step is not None:
            on_step(step, losses[-1])
        if stop_below is not None and losses[-1] < stop_below:
            break
    model.eval()
    return losses
