"""The orchestrator: the trainable policy's episode engine, rollouts, trainer and the `swarm` CLI."""

from orchestrator.config import SwarmConfig
from orchestrator.engine import Orchestrator
from orchestrator.rollout import (
    RolloutConfig,
    RolloutSummary,
    collect_rollouts,
    load_task_file,
    orchestrator_factory,
    trl_rollout_func,
)
from swarm.rl.rewards import ParallelReward, PARLReward, RewardConfig, Schedule

__all__ = [
    "Orchestrator",
    "PARLReward",
    "ParallelReward",
    "RewardConfig",
    "RolloutConfig",
    "RolloutSummary",
    "Schedule",
    "SwarmConfig",
    "collect_rollouts",
    "load_task_file",
    "orchestrator_factory",
    "trl_rollout_func",
]
