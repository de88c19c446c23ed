"""The public surface of the reward/trajectory/rollout modules: explicit, unique, resolvable."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize(
    "module",
    [
        "agent_swarm.swarm.rl",
        "agent_swarm.swarm.rl.rewards",
        "agent_swarm.swarm.rl.toggle",
        "agent_swarm.swarm.rl.trajectory",
        "agent_swarm.swarm.rl.export",
        "agent_swarm.swarm.verifiers",
        "agent_swarm.orchestrator.rollout.collection",
        "agent_swarm.orchestrator.rollout.config",
        "agent_swarm.orchestrator.rollout.episodes",
        "agent_swarm.orchestrator.rollout.executors",
        "agent_swarm.orchestrator.rollout.trl",
    ],
)
def test_exports_resolve(module: str) -> None:
    mod = importlib.import_module(module)
    names = list(mod.__all__)
    assert len(names) == len(set(names))
    missing = [n for n in names if not hasattr(mod, n)]
    assert not missing, f"{module} exports missing names {missing}"


def test_orchestrator_exposes_rollouts_and_reward_configuration() -> None:
    from agent_swarm import orchestrator

    wanted = {
        "PARLReward",
        "RewardConfig",
        "RolloutConfig",
        "collect_rollouts",
        "Schedule",
        "load_task_file",
        "orchestrator_factory",
        "trl_rollout_func",
    }
    assert wanted <= set(orchestrator.__all__)
