"""The orchestrator: the trainable policy's episode engine, rollouts, trainer and the `swarm` CLI."""

from orchestrator.backend_factory import build_backends
from orchestrator.engine import Orchestrator
from orchestrator.recorder import RecordWriter
from orchestrator.rollout.collection import RolloutSummary, collect_rollouts
from orchestrator.rollout.config import RolloutConfig
from orchestrator.rollout.episodes import orchestrator_factory
from orchestrator.rollout.trl import trl_rollout_func
from orchestrator.tasks import load_task_file
from swarm.config import SwarmConfig
from swarm.rl.rewards import ParallelReward, PARLReward, RewardConfig, Schedule

__all__ = [
    "Orchestrator",
    "PARLReward",
    "ParallelReward",
    "RecordWriter",
    "RewardConfig",
    "RolloutConfig",
    "RolloutSummary",
    "Schedule",
    "SwarmConfig",
    "build_backends",
    "collect_rollouts",
    "load_task_file",
    "orchestrator_factory",
    "trl_rollout_func",
]
