"""The orchestrator: the trainable policy's episode engine, rollouts, trainer and the `swarm` CLI.

The names below are imported on first use (PEP 562), not with the package: every
``agent_swarm.orchestrator.*`` import, the ``swarm`` CLI's included, goes through this module, and
most of them (``swarm run``, ``swarm traces``) need none of the rollout machinery.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_EXPORTS = {
    "Orchestrator": "agent_swarm.orchestrator.engine",
    "PARLReward": "agent_swarm.swarm.rl.rewards",
    "ParallelReward": "agent_swarm.swarm.rl.rewards",
    "RecordWriter": "agent_swarm.orchestrator.recorder",
    "RewardConfig": "agent_swarm.swarm.rl.rewards",
    "RolloutConfig": "agent_swarm.orchestrator.rollout.config",
    "RolloutSummary": "agent_swarm.orchestrator.rollout.collection",
    "Schedule": "agent_swarm.swarm.rl.rewards",
    "SwarmConfig": "agent_swarm.swarm.config",
    "build_backends": "agent_swarm.orchestrator.backend_factory",
    "collect_rollouts": "agent_swarm.orchestrator.rollout.collection",
    "load_task_file": "agent_swarm.orchestrator.tasks",
    "orchestrator_factory": "agent_swarm.orchestrator.rollout.episodes",
    "trl_rollout_func": "agent_swarm.orchestrator.rollout.trl",
}

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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
