"""The swarm as a verl agent loop, the K2.5 loss as a verl policy loss (needs verl 0.9: ``pip install verl``).

Importing this module registers, in verl's own registries:

* the agent loop ``swarm_agent`` (:class:`SwarmAgentLoop`): a dataset row whose ``agent_name`` is
  ``swarm_agent`` runs one :class:`~orchestrator.engine.Orchestrator` episode, its turns sampled by
  the policy's rollout servers (verl's server manager), its sub-agents on their own frozen server;
* the policy loss ``swarm_k25`` (:func:`k25_policy_loss`): K2.5's token-masked loss with the
  squared log-ratio penalty (:func:`swarm.rl.losses.k25_token_objective`), aggregated by verl;
* :class:`SwarmAgentLoopManager`: verl's agent loop manager plus the swarm's step metrics
  (critical steps, stage widths, reward components) in each step's metrics.

verl imports it in every process through the ``verl.plugins`` entry point this package declares
(``pyproject.toml``), so the names exist wherever verl looks them up (agent loop workers, actor
workers). The work itself is in :mod:`orchestrator.rl.verl_episode`, which does not import verl.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopManager,
    AgentLoopOutput,
    register,
)
from verl.trainer.ppo.core_algos import agg_loss, register_policy_loss

from orchestrator.rl.verl_episode import episode_metrics, run_verl_episode, runtime_for
from swarm.errors import ConfigError
from swarm.rl.losses import LossParams, k25_token_objective

__all__ = [
    "AGENT_NAME",
    "LOSS_NAME",
    "LOSS_PARAMS_ENV",
    "SwarmAgentLoop",
    "SwarmAgentLoopManager",
    "chat_stop_ids",
    "k25_policy_loss",
]

AGENT_NAME = "swarm_agent"
LOSS_NAME = "swarm_k25"
LOSS_PARAMS_ENV = "SWARM_K25_PARAMS"
"""JSON of :class:`~swarm.rl.losses.LossParams` fields (``alpha``, ``beta``, ``tau``) for ``swarm_k25``;
verl's actor config has no free fields, so the loss reads them here (set it in Ray's runtime env)."""


def chat_stop_ids(tokenizer: Any) -> list[int]:
    """End-of-turn ids besides the tokenizer's EOS: ChatML's ``<|im_end|>`` when the vocabulary has it
    (a base model's EOS is ``<|endoftext|>``, but its servers stop a chat turn at ``<|im_end|>`` too)."""
    if "<|im_end|>" not in tokenizer.get_vocab():
        return []
    return [int(tokenizer.convert_tokens_to_ids("<|im_end|>"))]


@register(AGENT_NAME)
class SwarmAgentLoop(AgentLoopBase):  # type: ignore[misc]
    """One swarm episode per sample (see :func:`orchestrator.rl.verl_episode.run_verl_episode`).

    ``swarm_config`` is the loop's config file (an agent loop YAML entry passes it as a key beside
    ``_target_``); without it ``$SWARM_VERL_CONFIG`` names it. verl builds one instance per sample,
    so everything shared (the sub-agents' client, the record files) lives in a per-process runtime.
    """

    def __init__(self, *args: Any, swarm_config: str | None = None, **kwargs: Any) -> None:
        kwargs.pop("tools", None)  # verl's own tool list: the swarm's tools come with each task
        super().__init__(*args, **kwargs)
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
    orchestrator.rl.verl_loop.SwarmAgentLoopManager``; verl logs what the manager returns under
    ``timing_s/`` (``timing_s/swarm/critical_steps/mean``, ``timing_s/swarm/r_perf/mean``, …).
    """

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

    ``old_log_prob`` is π_old: run verl in bypass mode (``algorithm.rollout_correction.bypass_mode=true``)
    and it is the rollout servers' own logprobs (the recorded ones), as ``swarm train`` uses them.
    ``advantages`` are verl's per-token advantages (GRPO's ``r − r̄`` with
    ``algorithm.norm_adv_by_std_in_grpo=false`` is PARL's group-mean baseline). The token mean is
    verl's (``loss_agg_mode``, global token count across data-parallel ranks).
    """
    params = _loss_params()
    log_ratio = log_prob - old_log_prob.detach()
    objective, keep = k25_token_objective(log_ratio, advantages.detach(), params)
    per_token = -objective
    if rollout_is_weights is not None:
        per_token = per_token * rollout_is_weights
    batch_info = dict(getattr(config, "global_batch_info", None) or {}) if config is not None else {}
    loss = agg_loss(loss_mat=per_token, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **batch_info)
    with torch.no_grad():
        mask = response_mask.to(log_ratio.dtype)
        tokens = max(float(mask.sum().item()), 1.0)
        metrics = {
            "actor/k25_masked_token_frac": float(((1.0 - keep) * mask).sum().item()) / tokens,
            "actor/ppo_kl": float((-log_ratio * mask).sum().item()) / tokens,
            "actor/k25_log_ratio_sq": float((log_ratio.square() * mask).sum().item()) / tokens,
        }
    return loss, metrics
