"""The orchestrator: the trainable policy's episode engine, rollouts, trainer and the `swarm` CLI."""

from agent_swarm.orchestrator.backend_factory import build_backends
from agent_swarm.orchestrator.engine import Orchestrator
from agent_swarm.orchestrator.recorder import RecordWriter
from agent_swarm.orchestrator.rollout.collection import RolloutSummary, collect_rollouts
from agent_swarm.orchestrator.rollout.config import RolloutConfig
from agent_swarm.orchestrator.rollout.episodes import orchestrator_factory
from agent_swarm.orchestrator.rollout.trl import trl_rollout_func
from agent_swarm.orchestrator.tasks import load_task_file
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.rl.rewards import ParallelReward, PARLReward, RewardConfig, Schedule

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
