"""The policy update: the optimizer steps and the loss over one rollout's training sequences.

:func:`update_policy` is the whole update as a function of its inputs — the model, its optimizers, the
sequences, the update settings (:class:`UpdateSpec`), the random source that orders minibatches and
draws PTX examples, and the PTX examples — with the update's figures as its output. It reads and writes
no files and knows nothing of serving: the trainer pauses the engine around it and pushes the weights.

π_old is the engine's sampling (behaviour) logprobs by default, so the K2.5 log-ratio mask and τ penalty
act on the engine/trainer mismatch they exist for; ``old_logprobs = "recompute"`` uses the trainer's
own pre-update logprobs. Either way the mismatch between the two is measured and returned.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from agent_swarm.orchestrator.rl.config import OptimConfig, PtxConfig, TrainConfig
from agent_swarm.orchestrator.rl.sequences import TrainingSequence
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.rl.losses import (
    LOSSES,
    LossFn,
    LossInputs,
    LossParams,
    masked_logprobs,
    pad_batch,
    ptx_loss,
)

__all__ = ["PtxExample", "UpdateSpec", "build_optimizers", "update_policy"]

PtxExample = tuple[list[int], list[int]]
"""(ids, mask) of an SFT conversation (:func:`agent_swarm.orchestrator.rl.sequences.sft_example`), for the PTX loss."""

_STATS = ("loss", "policy_loss", "ptx_loss", "grad_norm", "masked_token_frac", "ratio_mismatch")


@dataclass(frozen=True, slots=True)
class UpdateSpec:
    """What an update reads from the training config: the loss, its parameters, the optimizer and update
    shape, where π_old comes from, and the optional PTX loss."""

    loss: str = "k25"
    loss_params: LossParams = field(default_factory=LossParams)
    optim: OptimConfig = field(default_factory=OptimConfig)
    old_logprobs: Literal["behaviour", "recompute"] = "behaviour"
    ptx: PtxConfig | None = None

    @classmethod
    def of(cls, config: TrainConfig) -> UpdateSpec:
        return cls(config.loss, config.loss_params, config.optim, config.old_logprobs, config.ptx)


def build_optimizers(model: Any, cfg: OptimConfig) -> list[torch.optim.Optimizer]:
    """The optimizers of the trainable parameters: AdamW, or Muon on 2-D hidden weights plus AdamW on the
    rest (embeddings, norms, biases)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ConfigError("the policy model has no trainable parameters")
    if cfg.name == "adamw":
        return [torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)]
    muon_cls = getattr(torch.optim, "Muon", None)
    if muon_cls is None:
        raise ConfigError(f"optimizer 'muon' needs torch.optim.Muon, which torch {torch.__version__} lacks; use adamw")
    embeds = {id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
    out_emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if out_emb is not None:
        embeds |= {id(p) for p in out_emb.parameters()}
    hidden = [p for p in params if p.dim() == 2 and id(p) not in embeds]
    rest = [p for p in params if p.dim() != 2 or id(p) in embeds]
    opts: list[torch.optim.Optimizer] = [muon_cls(hidden, lr=cfg.lr, weight_decay=cfg.weight_decay)]
    if rest:
        opts.append(torch.optim.AdamW(rest, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay))
    return opts


def update_policy(
    model: Any,
    optimizers: Sequence[torch.optim.Optimizer],
    seqs: Sequence[TrainingSequence],
    spec: UpdateSpec,
    *,
    rng: random.Random,
    sft: Sequence[PtxExample] = (),
) -> dict[str, float]:
    """One update of ``model`` on a rollout's sequences: ``spec.optim.minibatches × epochs`` optimizer
    steps, gradients clipped (a non-finite gradient skips its step). Returns the means over minibatches
    of ``loss``, ``policy_loss``, ``ptx_loss`` (with PTX), ``grad_norm`` and ``masked_token_frac``, plus
    ``ratio_mismatch`` (mean |π_old − π_behaviour| before the update), ``tokens`` (sampled tokens trained
    on) and ``sequence_tokens`` (all tokens run through). Leaves the model in evaluation mode."""
    device = next(model.parameters()).device
    loss_fn = LOSSES.get(spec.loss)
    if not seqs:
        return {
            "loss": 0.0,
            "policy_loss": 0.0,
            "grad_norm": 0.0,
            "masked_token_frac": 0.0,
            "ratio_mismatch": 0.0,
            "tokens": 0,
        }
    run = _Update(model, optimizers, seqs, spec, loss_fn, device, rng, sft)
    run.old = run.recomputed() if spec.old_logprobs == "recompute" else run.behaviour()
    measured = spec.old_logprobs == "behaviour"  # measure the gap on the first minibatch's forward instead
    model.train()
    order = list(range(len(seqs)))
    total_tokens = sum(sum(s.mask[1:]) for s in seqs)
    for _ in range(spec.optim.epochs):
        rng.shuffle(order)
        per_mb = math.ceil(len(order) / spec.optim.minibatches)
        for mb in _chunks(order, per_mb):
            run.minibatch(mb, measure=measured)
            measured = False
    model.eval()
    res = {k: (sum(v) / len(v)) for k, v in run.stats.items() if v}
    res["ratio_mismatch"] = run.mismatch_num / max(run.mismatch_den, 1)
    res["tokens"] = float(total_tokens)
    res["sequence_tokens"] = float(sum(len(s.ids) for s in seqs) * spec.optim.epochs)
    return res


@dataclass(slots=True)
class _Update:
    """The state of one :func:`update_policy` call: its inputs, π_old per sequence, the figures so far."""

    model: Any
    optimizers: Sequence[torch.optim.Optimizer]
    seqs: Sequence[TrainingSequence]
    spec: UpdateSpec
    loss_fn: LossFn
    device: torch.device
    rng: random.Random
    sft: Sequence[PtxExample]
    old: list[torch.Tensor] = field(default_factory=list)
    mismatch_num: float = 0.0
    mismatch_den: int = 0
    stats: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in _STATS})

    def behaviour(self) -> list[torch.Tensor]:
        """π_old: the engine's sampling logprobs."""
        return [torch.tensor(s.behaviour_logprobs[1:], dtype=torch.float32, device=self.device) for s in self.seqs]

    def recomputed(self) -> list[torch.Tensor]:
        """π_old: the trainer's logprobs before any change (and their gap to the behaviour logprobs)."""
        old: list[torch.Tensor] = []
        self.model.eval()
        with torch.no_grad():
            for chunk in _chunks(list(range(len(self.seqs))), self.spec.optim.micro_batch):
                batch = [self.seqs[i] for i in chunk]
                ids, mask, beh, _, temps = _pad(batch, self.device)
                lp = masked_logprobs(self.model, ids, mask, temps)
                for j, s in enumerate(batch):
                    n = len(s.ids) - 1
                    old.append(lp[j, :n].detach().clone())
                    m = mask[j, :n]
                    self.mismatch_num += float(((lp[j, :n] - beh[j, :n]).abs() * m).sum())
                    self.mismatch_den += int(m.sum())
        return old

    def minibatch(self, mb: list[int], *, measure: bool) -> None:
        """One optimizer step on the sequences ``mb`` (in micro-batches), plus a PTX batch when configured."""
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)
        mb_tokens = sum(sum(self.seqs[i].mask[1:]) for i in mb)
        mb_loss = 0.0
        mb_policy = 0.0
        masked: list[float] = []
        for chunk in _chunks(mb, self.spec.optim.micro_batch):
            loss, frac = self.policy_loss(chunk, float(max(mb_tokens, 1)), measure=measure)
            mb_loss += loss
            mb_policy += loss
            masked.append(frac)
        ptx = self.spec.ptx
        if ptx is not None and self.sft:
            px = self.ptx_loss(ptx)
            mb_loss += px
            self.stats["ptx_loss"].append(px / ptx.coef if ptx.coef else 0.0)
        gn = self.step()
        self.stats["loss"].append(mb_loss)
        self.stats["policy_loss"].append(mb_policy)
        self.stats["grad_norm"].append(gn)
        self.stats["masked_token_frac"].append(sum(masked) / len(masked) if masked else 0.0)

    def policy_loss(self, chunk: list[int], tokens: float, *, measure: bool) -> tuple[float, float]:
        """Backward of the policy loss on one micro-batch; (its loss, its masked-token fraction)."""
        ids, mask, beh, adv, temps = _pad([self.seqs[i] for i in chunk], self.device)
        lp = masked_logprobs(self.model, ids, mask, temps)
        old_lp = torch.zeros_like(lp)
        for j, i in enumerate(chunk):
            old_lp[j, : self.old[i].shape[0]] = self.old[i]
        if measure:  # no optimizer step yet: these are the pre-update logprobs
            self.mismatch_num += float(((lp.detach() - beh).abs() * mask).sum())
            self.mismatch_den += int(mask.sum())
        out = self.loss_fn(LossInputs(lp, old_lp, adv, mask, tokens), self.spec.loss_params)
        out.loss.backward()  # type: ignore[no-untyped-call]
        return float(out.loss.item()), out.metrics["masked_token_frac"]

    def ptx_loss(self, ptx: PtxConfig) -> float:
        """Backward of ``coef · NLL`` on ``batch_size`` SFT examples drawn from ``rng``; its value."""
        picks = [self.sft[self.rng.randrange(len(self.sft))] for _ in range(ptx.batch_size)]
        ids, mask = pad_batch(picks, self.device)
        lp = masked_logprobs(self.model, ids, mask[:, 1:], torch.ones(ids.shape[0], device=self.device))
        px = ptx_loss(lp, mask[:, 1:]) * ptx.coef
        px.backward()  # type: ignore[no-untyped-call]
        return float(px.item())

    def step(self) -> float:
        """Clip the gradients and step (skipped on a non-finite norm); the norm before clipping."""
        params = [p for p in self.model.parameters() if p.grad is not None]
        # the total norm before clipping (max_norm=inf only measures); 0 when nothing has a gradient
        gn = float(torch.nn.utils.clip_grad_norm_(params, self.spec.optim.grad_clip or math.inf))
        if not math.isfinite(gn):
            for opt in self.optimizers:
                opt.zero_grad(set_to_none=True)  # a non-finite gradient must not reach the weights
        else:
            for opt in self.optimizers:
                opt.step()
        return gn


def _chunks(xs: list[int], n: int) -> list[list[int]]:
    return [xs[i : i + n] for i in range(0, len(xs), max(n, 1))]


def _pad(batch: Sequence[TrainingSequence], device: torch.device) -> tuple[torch.Tensor, ...]:
    """ids [B, L]; mask/behaviour logprobs shifted to next-token positions [B, L−1]; adv [B]; temps [B]."""
    width = max(len(s.ids) for s in batch)
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    mask = torch.zeros(len(batch), width - 1)
    beh = torch.zeros(len(batch), width - 1)
    for i, s in enumerate(batch):
        n = len(s.ids)
        ids[i, :n] = torch.tensor(s.ids)
        mask[i, : n - 1] = torch.tensor(s.mask[1:], dtype=torch.float32)
        beh[i, : n - 1] = torch.tensor(s.behaviour_logprobs[1:])
    adv = torch.tensor([s.advantage for s in batch])
    temps = torch.tensor([s.temperature for s in batch])
    return ids.to(device), mask.to(device), beh.to(device), adv.to(device), temps.to(device)
