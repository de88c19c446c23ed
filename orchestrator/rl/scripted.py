"""Workload tasks whose sub-agents are each task's scripted researcher: RL for a policy too small to be one.

``environment = "agent_swarm.orchestrator.rl.scripted:scripted_subagent_environment"`` in a training config (the
training environment of ``experiments/train_smoke.toml``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_swarm.orchestrator.eval import workload_orchestrator_factory
from agent_swarm.orchestrator.rl.config import TrainConfig
from agent_swarm.orchestrator.rl.environment import Environment, workload_environment
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.workloads import get_workload

if TYPE_CHECKING:
    from agent_swarm.orchestrator.rollout.episodes import EpisodeFactory
    from agent_swarm.swarm.backend import ModelBackend
    from agent_swarm.swarm.records import Task
    from agent_swarm.workloads import Mode

__all__ = ["scripted_subagent_environment"]


def scripted_subagent_environment(config: TrainConfig, tokenizer: Any) -> Environment:
    """The tasks of ``config.workloads`` (each episode in its task's fresh workload environment, scored
    by the workload with the PARL terms on top, as
    :func:`~agent_swarm.orchestrator.rl.environment.workload_environment`),
    with the sub-agents played by each task's scripted gold sub-agent
    (:meth:`agent_swarm.workloads.base.Workload.gold_policy`) instead of a frozen model.

    The scripted sub-agent is a frozen rule-based policy that calls the episode's real tools (for the
    lookup workloads: ``search``, then ``open`` on the hit that is the entity its task names, over the
    offline corpus) and reports what it read, or that it found nothing. A policy too small to be a
    useful sub-agent (the tiny Qwen2) thus gets real reports back when it fans out, and its reward
    depends on what it assigned. ``tokenizer`` is unused (the environment hook's signature).
    """
    if not config.workloads:
        raise ConfigError(f"environment {__name__}:scripted_subagent_environment needs [[workloads]] in the config")
    env = workload_environment(config)
    mode = config.workloads[0].mode

    def factory(engine: ModelBackend, _frozen: ModelBackend | None) -> EpisodeFactory:
        def resolve(task: Task, task_mode: Mode) -> tuple[ModelBackend, ModelBackend]:
            gold = get_workload(str(task.metadata["workload"])).gold_policy(task, task_mode)
            return engine, gold.subagent

        return workload_orchestrator_factory(resolve, mode=mode)

    env.factory = factory
    return env
