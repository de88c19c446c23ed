"""Orchestrator-only RL: advantages, policy losses, Toggle, schedules and the trainer.

The torch-free pieces are re-exported here; the losses (``orchestrator.rl.losses``), the tiny test
model (``orchestrator.rl.tiny``) and the trainer (``orchestrator.rl.trainer``) need the ``rl`` extra
(torch, transformers) and are imported from their modules.
"""

from orchestrator.rl.advantages import ADVANTAGES, group_mean_baseline, group_normalized
from orchestrator.rl.registry import Registry
from orchestrator.rl.schedules import SCHEDULES, Schedule
from orchestrator.rl.toggle import estimate_budgets, percentile, toggle_phase, toggle_rewards

__all__ = [
    "ADVANTAGES",
    "SCHEDULES",
    "Registry",
    "Schedule",
    "estimate_budgets",
    "group_mean_baseline",
    "group_normalized",
    "percentile",
    "toggle_phase",
    "toggle_rewards",
]
