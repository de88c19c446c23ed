"""The swarm as a verl agent loop, the K2.5 loss as a verl policy loss (needs verl 0.9: ``pip install verl``).

Importing this module registers, in verl's own registries:

* the agent loop ``swarm_agent`` (:class:`SwarmAgentLoop`): a dataset row whose ``agent_name`` is
  ``swarm_agent`` runs one :class:`~agent_swarm.orchestrator.engine.Orchestrator` episode, its turns sampled by
  the policy's rollout servers (verl's server manager), its sub-agents on their own frozen server;
* the policy loss ``swarm_k25`` (:func:`k25_policy_loss`): K2.5's token-masked loss with the
  squared log-ratio penalty (:func:`agent_swarm.swarm.rl.losses.k25_token_objective`), aggregated by verl, its
  π_old the rollout servers' logprobs (verl's config for that: :data:`K25_VERL_OVERRIDES`);
* :class:`SwarmAgentLoopManager`: verl's agent loop manager plus the swarm's step metrics
  (critical steps, stage widths, reward components) in each step's metrics.

verl imports it in every process through the ``verl.plugins`` entry point this package declares
(``pyproject.toml``), so the names exist wherever verl looks them up (agent loop workers, actor
workers). The work itself is in :mod:`agent_swarm.orchestrator.rl.verl_episode`, which does not import verl.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopManager,
    AgentLoopOutput,
    register,
)
from verl.trainer.ppo.core_algos import agg_loss, register_policy_loss
from verl.trainer.ppo.rollout_corr_helper import SAFETY_BOUND

from agent_swarm.orchestrator.rl.verl_episode import episode_metrics, run_verl_episode, runtime_for
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.rl.losses import LossParams, k25_token_objective

__all__ = [
    "AGENT_NAME",
    "K25_VERL_OVERRIDES",
    "LOSS_NAME",
    "LOSS_PARAMS_ENV",
    "UNTRUNCATED_IS_THRESHOLD",
    "SwarmAgentLoop",
    "SwarmAgentLoopManager",
    "chat_stop_ids",
    "check_k25_config",
    "k25_policy_loss",
    "rollout_log_prob",
]

AGENT_NAME = "swarm_agent"
LOSS_NAME = "swarm_k25"
LOSS_PARAMS_ENV = "SWARM_K25_PARAMS"
"""JSON of :class:`~agent_swarm.swarm.rl.losses.LossParams` fields (``alpha``, ``beta``, ``tau``) for ``swarm_k25``;
verl's actor config has no free fields, so the loss reads them here (set it in Ray's runtime env)."""
UNTRUNCATED_IS_THRESHOLD = 1e9
"""``rollout_is_threshold`` for ``swarm_k25``: above ``e^20`` (≈ 4.9e8), the largest token IS weight verl
computes (it clamps log-ratios at ±20), so verl truncates no weight and the rollout's logprob is
recoverable from it exactly (:func:`rollout_log_prob`)."""
K25_VERL_OVERRIDES = (
    f"actor_rollout_ref.actor.policy_loss.loss_mode={LOSS_NAME}",
    "actor_rollout_ref.rollout.calculate_log_probs=True",
    "algorithm.rollout_correction.rollout_is=token",
    "algorithm.rollout_correction.rollout_is_threshold=1e9",
    "algorithm.rollout_correction.bypass_mode=False",
    "algorithm.rollout_correction.rollout_is_batch_normalize=False",
    "algorithm.rollout_correction.rollout_rs=null",
)
"""verl's settings under which ``swarm_k25``'s π_old is the rollout servers' logprobs (the last three are
verl's defaults). Decoupled mode: verl recomputes ``old_log_prob`` with the actor and passes the loss
``rollout_is_weights = exp(old_log_prob − rollout_log_prob)`` per token, untruncated at this threshold;
the loss recovers the rollout's logprobs from the two. (verl 0.9.1's bypass mode would hand the rollout's
logprobs over directly, but its legacy trainer then asks for its own ``bypass_mode`` loss, and no weights
reach the loss, so ``swarm_k25`` could not tell it from plain decoupled mode: it refuses both.)"""


def chat_stop_ids(tokenizer: Any) -> list[int]:
    """End-of-turn ids besides the tokenizer's EOS: ChatML's ``<|im_end|>`` when the vocabulary has it
    (a base model's EOS is ``<|endoftext|>``, but its servers stop a chat turn at ``<|im_end|>`` too)."""
    if "<|im_end|>" not in tokenizer.get_vocab():
        return []
    return [int(tokenizer.convert_tokens_to_ids("<|im_end|>"))]


@register(AGENT_NAME)
class SwarmAgentLoop(AgentLoopBase):  # type: ignore[misc]
    """One swarm episode per sample (see :func:`agent_swarm.orchestrator.rl.verl_episode.run_verl_episode`).

    ``swarm_config`` is the loop's config file (an agent loop YAML entry passes it as a key beside
    ``_target_``); without it ``$SWARM_VERL_CONFIG`` names it. verl builds one instance per sample,
    so everything shared (the sub-agents' client, the record files) lives in a per-process runtime.
    """

    def __init__(self, *args: Any, swarm_config: str | None = None, **kwargs: Any) -> None:
        kwargs.pop("tools", None)  # verl's own tool list: the swarm's tools come with each task
        super().__init__(*args, **kwargs)
        check_k25_config(self.config)
        self.runtime = runtime_for(swarm_config)
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)
        model_path = str(self.config.actor_rollout_ref.model.path).rstrip("/")
        self.policy_name = model_path.rsplit("/", 1)[-1]
        max_len = self.rollout_config.get("max_model_len", None)
        self.max_context = int(max_len) if max_len else self.prompt_length + self.response_length

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        episode = await run_verl_episode(
            self.runtime,
            self.server_manager,
            self.tokenizer,
            kwargs,
            sampling_params=sampling_params,
            prompt_length=self.prompt_length,
            response_length=self.response_length,
            policy_name=self.policy_name,
            stop_ids=chat_stop_ids(self.tokenizer),
            max_context=self.max_context,
        )
        return AgentLoopOutput(**episode.output)


class SwarmAgentLoopManager(AgentLoopManager):  # type: ignore[misc]
    """verl's agent loop manager, plus ``swarm/...`` step metrics from the episodes' reward info.

    Select it with ``actor_rollout_ref.rollout.agent.agent_loop_manager_class=
    agent_swarm.orchestrator.rl.verl_loop.SwarmAgentLoopManager``; verl logs what the manager returns under
    ``timing_s/`` (``timing_s/swarm/critical_steps/mean``, ``timing_s/swarm/r_perf/mean``, …).
    It is verl's legacy-trainer manager (``trainer.use_v1=False``: verl 0.9.1's v1 trainer needs a
    TransferQueue manager and logs no manager metrics); it checks the config at start
    (:func:`check_k25_config`), before any rollout.
    """

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        if OmegaConf.select(config, "trainer.use_v1"):
            raise ConfigError(
                "SwarmAgentLoopManager is verl's legacy-trainer agent loop manager (it returns a DataProto, the "
                "v1 trainer expects outputs in TransferQueue): run verl with trainer.use_v1=False, or drop "
                "actor_rollout_ref.rollout.agent.agent_loop_manager_class"
            )
        check_k25_config(config)
        super().__init__(config, *args, **kwargs)

    def _performance_metrics(self, metrics: list[list[dict[str, Any]]], output: Any) -> dict[str, float]:
        timing: dict[str, float] = super()._performance_metrics(metrics, output)
        columns = {k: list(v) for k, v in output.non_tensor_batch.items() if k.startswith("swarm_")}
        timing.update(episode_metrics(columns))
        return timing


def _loss_params() -> LossParams:
    raw = os.environ.get(LOSS_PARAMS_ENV)
    if not raw:
        return LossParams()
    try:
        return LossParams.model_validate(json.loads(raw))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{LOSS_PARAMS_ENV}={raw!r} is not a JSON object of LossParams fields: {exc}") from None


def _untruncated(threshold: Any) -> bool:
    try:
        return float(str(threshold)) >= UNTRUNCATED_IS_THRESHOLD  # verl takes a float or a float-like string
    except ValueError:
        return False  # "lower_upper": IcePop zeroes the weights outside the band


def check_k25_config(config: Any) -> None:
    """Refuse a verl config under which ``swarm_k25`` would not get the rollout's logprobs as π_old.

    A no-op unless ``actor_rollout_ref.actor.policy_loss.loss_mode`` is ``swarm_k25``; otherwise every
    override of :data:`K25_VERL_OVERRIDES` must hold (verl's defaults satisfy the last three), or a
    :class:`~agent_swarm.swarm.errors.ConfigError` names what is wrong and the overrides that fix it.
    """
    if OmegaConf.select(config, "actor_rollout_ref.actor.policy_loss.loss_mode") != LOSS_NAME:
        return
    corr = OmegaConf.select(config, "algorithm.rollout_correction") or {}
    wrong = [
        name
        for name, ok in (
            (
                "actor_rollout_ref.rollout.calculate_log_probs",
                OmegaConf.select(config, "actor_rollout_ref.rollout.calculate_log_probs"),
            ),
            ("algorithm.rollout_correction.rollout_is", corr.get("rollout_is") == "token"),
            ("algorithm.rollout_correction.rollout_is_threshold", _untruncated(corr.get("rollout_is_threshold", 2.0))),
            ("algorithm.rollout_correction.bypass_mode", not corr.get("bypass_mode", False)),
            (
                "algorithm.rollout_correction.rollout_is_batch_normalize",
                not corr.get("rollout_is_batch_normalize", False),
            ),
            ("algorithm.rollout_correction.rollout_rs", corr.get("rollout_rs") is None),
        )
        if not ok
    ]
    if wrong:
        values = ", ".join(f"{k}={OmegaConf.select(config, k)!r}" for k in wrong)
        raise ConfigError(
            f"loss_mode={LOSS_NAME} takes π_old from the rollout's logprobs, recovered from verl's untruncated "
            f"token IS weights; this config has {values}: run verl with {' '.join(K25_VERL_OVERRIDES)}"
        )


def rollout_log_prob(
    old_log_prob: torch.Tensor, rollout_is_weights: torch.Tensor | None, response_mask: torch.Tensor
) -> torch.Tensor:
    """The rollout servers' logprobs, from what verl hands a policy loss in decoupled mode.

    verl passes ``old_log_prob`` (the actor's recomputation) and, with :data:`K25_VERL_OVERRIDES`, the
    token IS weights ``w = exp(old_log_prob − rollout_log_prob)`` untruncated, so ``old_log_prob − log w``
    is the rollout's logprob (to float32 rounding; verl clamps ``|log w|`` at 20, beyond which a token's
    log-ratio is far outside K2.5's band either way). Off the response mask ``w`` is 0 and
    ``old_log_prob`` is kept.
    """
    if rollout_is_weights is None:
        raise ConfigError(
            f"loss_mode={LOSS_NAME} got no rollout_is_weights from verl, so it cannot use the rollout's "
            f"logprobs as π_old: run verl with {' '.join(K25_VERL_OVERRIDES)}"
        )
    mask = response_mask.bool()
    w = rollout_is_weights.detach().double()
    bad = mask & ~(torch.isfinite(w) & (w > 0))
    if bool(bad.any()):
        raise ConfigError(
            f"loss_mode={LOSS_NAME}: {int(bad.sum())} response tokens have an IS weight of "
            f"{float(w[bad][0])} (IcePop bounds or batch normalisation changed verl's weights): run verl with "
            f"{' '.join(K25_VERL_OVERRIDES)}"
        )
    old = old_log_prob.detach()
    recovered = (old.double() - torch.log(torch.where(mask, w, torch.ones_like(w)))).to(old.dtype)
    return torch.where(mask, recovered, old)


@register_policy_loss(LOSS_NAME)  # type: ignore[untyped-decorator]
def k25_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """K2.5's loss as a verl policy loss: ``−agg(1{α ≤ log r ≤ β}·r·A − τ·(log r)²)`` over the response mask.

    ``r = π_θ / π_rollout``: π_old is the rollout servers' own logprobs (the recorded ones), as ``swarm
    train`` uses them, recovered by :func:`rollout_log_prob` from verl's ``old_log_prob`` and its token
    IS weights (verl's config: :data:`K25_VERL_OVERRIDES`; without the weights the loss refuses to run).
    The weights are not applied on top: the ratio is already taken against the rollout policy.
    ``advantages`` are verl's per-token advantages (GRPO's ``r − r̄`` with
    ``algorithm.norm_adv_by_std_in_grpo=false`` is PARL's group-mean baseline). The token mean is
    verl's (``loss_agg_mode``, global token count across data-parallel ranks).
    """
    params = _loss_params()
    pi_old = rollout_log_prob(old_log_prob, rollout_is_weights, response_mask)
    log_ratio = log_prob - pi_old
    objective, keep = k25_token_objective(log_ratio, advantages.detach(), params)
    batch_info = dict(getattr(config, "global_batch_info", None) or {}) if config is not None else {}
    loss = agg_loss(loss_mat=-objective, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **batch_info)
    with torch.no_grad():
        mask = response_mask.to(log_ratio.dtype)
        tokens = max(float(mask.sum().item()), 1.0)
        gap = (old_log_prob.detach() - pi_old).abs()
        metrics = {
            "actor/k25_masked_token_frac": float(((1.0 - keep) * mask).sum().item()) / tokens,
            "actor/ppo_kl": float((-log_ratio * mask).sum().item()) / tokens,
            "actor/k25_log_ratio_sq": float((log_ratio.square() * mask).sum().item()) / tokens,
            "actor/k25_pi_old_gap": float((gap * mask).sum().item()) / tokens,
            "actor/k25_is_clamped_frac": float(((gap >= SAFETY_BOUND - 1e-3) * mask).sum().item()) / tokens,
        }
    return loss, metrics
