"""Supervised warm start: fit a policy to conversations (mask = the orchestrator's tokens only).

:func:`sft_train` is the loop (masked NLL, AdamW, micro-batches, resumable by step). :func:`run_sft`
is the ``swarm train sft`` stage: it regenerates gold swarm transcripts of the config's workloads
through the current engine (:mod:`agent_swarm.orchestrator.rl.gold`), trains the policy of the training config
on them (for a GGUF policy: its LoRA adapter only), and writes ``run_dir/sft/policy``, from which
``swarm train`` then starts. Layout of ``run_dir/sft``:

* ``gold/<workload>/`` — the gold episodes (a rollout directory), ``data.jsonl`` — the examples
  (exact ids + mask), ``summary.json`` — counts per workload;
* ``checkpoint/`` — the latest checkpoint (weights, optimizer, step; written atomically), resumed
  after an interruption
  (the data is then reused, not regenerated, so the run stays one run);
* ``log.jsonl`` — loss per step; ``policy/`` — the result (``adapter.gguf`` too, for llama.cpp).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import torch

from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.rl.losses import masked_logprobs, pad_batch, ptx_loss

if TYPE_CHECKING:
    from agent_swarm.orchestrator.rl.config import TrainConfig
    from agent_swarm.orchestrator.rl.gold import SftExample
    from agent_swarm.swarm.backends.transformers_backend import TransformersBackend

__all__ = ["run_sft", "sft_train"]


def sft_train(
    model: Any,
    examples: Sequence[tuple[list[int], list[int]]],
    *,
    steps: int,
    lr: float = 3e-3,
    batch_size: int = 8,
    micro_batch: int | None = None,
    seed: int = 0,
    stop_below: float | None = None,
    on_step: Callable[[int, float], None] | None = None,
    start_step: int = 0,
    optimizer: torch.optim.Optimizer | None = None,
) -> list[float]:
    """AdamW on the masked NLL from ``start_step`` to ``steps``; returns the losses of the steps run.

    Each step draws ``batch_size`` examples (seeded by ``seed`` and the step, so a resumed run draws
    the same batches) and accumulates gradients over ``micro_batch`` sequences at a time; the loss
    is the mean NLL over all masked tokens of the batch. With ``stop_below``, training stops once a
    step's loss falls below it. Pass ``optimizer`` to continue from a checkpoint's optimizer.
    """
    if not examples:
        raise ConfigError("SFT needs at least one example")
    params = [p for p in model.parameters() if p.requires_grad]
    opt = optimizer or torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.98))
    device = next(model.parameters()).device
    mb = micro_batch or batch_size
    losses = []
    model.train()
    for step in range(start_step, steps):
        rng = random.Random(seed * 1_000_003 + step)
        batch = [examples[rng.randrange(len(examples))] for _ in range(batch_size)]
        n_tokens = max(sum(sum(m[1:]) for _, m in batch), 1)
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for i in range(0, len(batch), mb):
            ids, mask = pad_batch(batch[i : i + mb], device)
            lp = masked_logprobs(model, ids, mask[:, 1:], torch.ones(ids.shape[0], device=device))
            part = ptx_loss(lp, mask[:, 1:]) * (float(mask[:, 1:].sum().item()) / n_tokens)
            part.backward()  # type: ignore[no-untyped-call]
            total += float(part.item())
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(total)
        if on_step is not None:
            on_step(step, total)
        if stop_below is not None and total < stop_below:
            break
    model.eval()
    return losses


def _save(model: Any, tokenizer: Any, out: Path, base_gguf: Path | None, extra: Callable[[Path], None]) -> None:
    """Write ``out`` atomically: the adapter (PEFT) or the whole model, plus ``extra(tmp)``."""
    from agent_swarm.orchestrator.rl.lora import ADAPTER_GGUF, export_adapter, is_peft_model

    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    if is_peft_model(model):
        model.save_pretrained(tmp, save_embedding_layers=False)
        if base_gguf is not None:
            export_adapter(model, base_gguf, tmp / ADAPTER_GGUF, version="sft")
    else:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    extra(tmp)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)


def serving_renderer(config: Any) -> Any:
    """For the llama.cpp engine, a backend on the base model that renders prompts as rollouts will
    (``None`` for the transformers engine, whose tokenizer template is already the serving path)."""
    if config.engine != "llamacpp" or config.policy_gguf is None:
        return None
    from agent_swarm.swarm.backends.local import LocalBackend

    lc = config.llamacpp
    return LocalBackend(
        config.policy_gguf,
        slots=1,
        ctx_per_slot=lc.ctx_per_slot,
        threads=lc.threads,
        constrain_actions=lc.constrain_actions,
    )


def run_sft(config: TrainConfig, *, on_step: Callable[[int, float], None] | None = None) -> dict[str, Any]:
    """The SFT stage of ``config``; returns its summary."""
    from agent_swarm.orchestrator.rl.policy import build_policy

    cfg = config.sft
    root: Path = config.run_dir / "sft"
    ckpt = root / "checkpoint"
    data = root / "data.jsonl"
    specs = cfg.workloads or config.workloads
    if not specs:
        raise ConfigError("the SFT stage needs workloads (set [[sft.workloads]] or [[workloads]] in the config)")
    policy, _, gguf = build_policy(config, warm_start=False)
    model = policy.hf_model
    torch.manual_seed(cfg.seed)
    resuming = (ckpt / "state.json").is_file() and data.is_file()
    examples, summary = _gold_data(config, policy, root, resuming=resuming)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.98))
    start = _resume(model, opt, ckpt) if resuming else 0
    step_done = _step_logger(config, model, policy.tokenizer, opt, root, on_step)
    t0 = time.perf_counter()
    losses = sft_train(
        model,
        [e.pair for e in examples],
        steps=cfg.steps,
        lr=cfg.lr,
        batch_size=cfg.batch_size,
        micro_batch=cfg.micro_batch,
        seed=cfg.seed,
        stop_below=cfg.stop_below,
        on_step=step_done,
        start_step=start,
        optimizer=opt,
    )
    summary = {**summary, "steps_run": len(losses), "resumed_at": start, "train_s": time.perf_counter() - t0}
    if losses:
        summary["final_loss"] = losses[-1]

    def write_summary(tmp: Path) -> None:
        (tmp / "sft_summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")

    _save(model, policy.tokenizer, root / "policy", gguf, write_summary)
    shutil.rmtree(ckpt, ignore_errors=True)
    return summary


def _gold_data(
    config: TrainConfig, policy: TransformersBackend, root: Path, *, resuming: bool
) -> tuple[list[SftExample], dict[str, Any]]:
    """(examples, summary): read back when resuming, else the gold episodes generated afresh into ``root``."""
    from agent_swarm.orchestrator.rl.gold import gold_examples, read_examples, write_examples
    from agent_swarm.orchestrator.rl.policy import subagent_model_name

    cfg = config.sft
    data = root / "data.jsonl"
    if resuming:
        return read_examples(data), json.loads((root / "summary.json").read_text(encoding="utf-8"))
    shutil.rmtree(root, ignore_errors=True)
    t0 = time.perf_counter()

    async def generate() -> tuple[list[SftExample], dict[str, Any]]:
        renderer = serving_renderer(config)
        try:
            return await gold_examples(
                cfg.workloads or config.workloads,
                policy.tokenizer,
                config.swarm,
                root / "gold",
                min_r_perf=cfg.min_r_perf,
                subagent_model=subagent_model_name(config, policy),
                renderer=renderer,
                policy_model=renderer.model if renderer is not None else policy.model,
            )
        finally:
            if renderer is not None:
                await renderer.aclose()

    examples, per_workload = anyio.run(generate)
    if not examples:
        raise ConfigError(f"no gold episode reached r_perf >= {cfg.min_r_perf}; see {root / 'gold'}")
    write_examples(examples, data)
    summary = {
        "workloads": per_workload,
        "examples": len(examples),
        "tokens": sum(len(e.ids) for e in examples),
        "trained_tokens": sum(sum(e.mask) for e in examples),
        "generate_s": time.perf_counter() - t0,
    }
    (root / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return examples, summary


def _resume(model: Any, opt: torch.optim.Optimizer, ckpt: Path) -> int:
    """Load the SFT checkpoint's weights (or adapter) and optimizer moments; the step it resumes at."""
    from agent_swarm.orchestrator.rl.lora import is_peft_model, load_adapter

    state = json.loads((ckpt / "state.json").read_text(encoding="utf-8"))
    if is_peft_model(model):
        load_adapter(model, ckpt)
    else:
        from safetensors.torch import load_file

        for f in sorted(ckpt.glob("*.safetensors")):
            model.load_state_dict(load_file(f), strict=False)
    opt.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=True))
    return int(state["step"])


def _step_logger(
    config: TrainConfig,
    model: Any,
    tokenizer: Any,
    opt: torch.optim.Optimizer,
    root: Path,
    on_step: Callable[[int, float], None] | None,
) -> Callable[[int, float], None]:
    """The per-step hook of :func:`sft_train`: a log line, a checkpoint every ``checkpoint_every`` steps,
    then the caller's ``on_step``."""
    cfg = config.sft
    log = root / "log.jsonl"
    ckpt = root / "checkpoint"

    def step_done(step: int, loss: float) -> None:
        with log.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"step": step, "loss": loss, "time": time.time()}) + "\n")
        if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < cfg.steps:

            def state(tmp: Path) -> None:  # state.json names the step these weights and moments belong to
                torch.save(opt.state_dict(), tmp / "optimizer.pt")
                (tmp / "state.json").write_text(json.dumps({"step": step + 1}), encoding="utf-8")

            _save(model, tokenizer, ckpt, None, state)
        if on_step is not None:
            on_step(step, loss)

    return step_done
