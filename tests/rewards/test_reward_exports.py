"""The public surface of the reward/trajectory/rollout modules: explicit, unique, resolvable."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize(
    "module",
    [
        "swarm.rl",
        "swarm.rl.rewards",
        "swarm.rl.toggle",
        "swarm.rl.trajectory",
        "swarm.rl.export",
        "swarm.verifiers",
        "orchestrator.rollout.collection",
        "orchestrator.rollout.config",
        "orchestrator.rollout.episodes",
        "orchestrator.rollout.executors",
        "orchestrator.rollout.trl",
    ],
)
def test_exports_resolve(module: str) -> None:
    mod = importlib.import_module(module)
    names = list(mod.__all__)
    assert len(names) == len(set(names))
    missing = [n for n in names if not hasattr(mod, n)]
    assert not missing, f"{module} exports missing names {missing}"


def test_orchestrator_exposes_rollouts_and_reward_configuration() -> None:
    import orchestrator

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
