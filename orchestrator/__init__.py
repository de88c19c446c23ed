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
from swarm.rewards import (
    LambdaSchedule,
    ParallelReward,
    PARLReward,
    RewardConfig,
    group_advantages,
    make_schedule,
)

__all__ = [
    "LambdaSchedule",
    "Orchestrator",
    "PARLReward",
    "ParallelReward",
    "RewardConfig",
    "RolloutConfig",
    "RolloutSummary",
    "SwarmConfig",
    "collect_rollouts",
    "group_advantages",
    "load_task_file",
    "make_schedule",
    "orchestrator_factory",
    "trl_rollout_func",
]
