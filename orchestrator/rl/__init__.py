"""Orchestrator-only RL: policy losses, Toggle and the trainer.

Advantages and schedules have one home, :mod:`swarm.rewards` (``ADVANTAGES``, ``SCHEDULES``,
``Schedule``), shared with rollout collection. Toggle is re-exported here; the losses
(``orchestrator.rl.losses``), the tiny test model (``orchestrator.rl.tiny``) and the trainer
(``orchestrator.rl.trainer``) need the ``rl`` extra (torch, transformers) and are imported from their
modules.
"""

from orchestrator.rl.toggle import estimate_budgets, percentile, toggle_phase, toggle_rewards, update_budgets

__all__ = [
    "estimate_budgets",
    "percentile",
    "toggle_phase",
    "toggle_rewards",
    "update_budgets",
]
