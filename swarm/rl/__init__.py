"""The RL maths and data formats, one implementation each: the PARL reward and its λ schedules,
group advantages, Toggle, trajectories and their exports (JSONL, Parquet, verl, TRL, Agent Lightning).
The policy losses (:mod:`agent_swarm.swarm.rl.losses`) need the ``rl`` extra (torch) and are imported from their
module. Verifiers (``r_perf``) live beside this package in :mod:`agent_swarm.swarm.verifiers`; the training loop that
drives the orchestrator lives in :mod:`agent_swarm.orchestrator.rl`.

Everything here is a pure function of records, so workloads (which may not import the orchestrator)
can build rewards, and the trainer, rollouts and the CLI share one copy.
"""

from agent_swarm.swarm.rl.rewards import (
    ADVANTAGES,
    SCHEDULES,
    ParallelReward,
    PARLReward,
    RewardConfig,
    Schedule,
    group_mean,
    group_normalized,
)
from agent_swarm.swarm.rl.toggle import estimate_budgets, percentile, toggle_phase, toggle_rewards, update_budgets
from agent_swarm.swarm.rl.trajectory import Trajectory, TrajectoryError, TrajectoryTurn, build_trajectory

__all__ = [
    "ADVANTAGES",
    "SCHEDULES",
    "PARLReward",
    "ParallelReward",
    "RewardConfig",
    "Schedule",
    "Trajectory",
    "TrajectoryError",
    "TrajectoryTurn",
    "build_trajectory",
    "estimate_budgets",
    "group_mean",
    "group_normalized",
    "percentile",
    "toggle_phase",
    "toggle_rewards",
    "update_budgets",
]
